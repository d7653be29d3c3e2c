// End-to-end tests of instances with an OCI image (docs/api.md, "Images"): a real server on an
// empty fleet, and the test itself as a node's agent speaking the agent protocol with the node's
// token. The registry password reaches that agent's desired state and nothing else: no answer,
// list, group, audit row, error message or line of the server's log; a restart keeps it. A pull
// the agent reports shows as "pulling" in the API and the CLI, and a failed pull fails the
// instance with the agent's reason.
#include <fmt/format.h>
#include <signal.h>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

constexpr const char* kPassword = "pw-3f9a1c7e-never-shown";
constexpr const char* kImage = "registry.example.com:5000/team/train:1.4";

class ImagesTest : public ServerTest {
 protected:
  void SetUp() override {
    StartServer({}, /*with_fleet=*/false);
    tenant_ = NewTenant("acme", 16);
    auto node = Post("/v1/nodes", kAdminToken, {{"name", "gpu-01"}, {"sharing", "exclusive"}});
    ASSERT_EQ(node.status, 201) << node.raw;
    node_token_ = node.body.value("token", "");
    Register();
  }

  // Registers a new run of the node's agent: what a restarted agent does.
  void Register() {
    agent_id_ = fmt::format("agent-run-{}", ++runs_);
    seq_ = 0;
    json gpus = json::array();
    for (int i = 0; i < 2; ++i) {
      gpus.push_back({{"index", i}, {"uuid", fmt::format("GPU-{}", i)}, {"model", "H100-80GB"}});
    }
    auto r = Post("/v1/agent/register", node_token_,
                  {{"protocol", 1},
                   {"agent_id", agent_id_},
                   {"inventory", {{"cpu_milli", 64000}, {"memory_mib", 524288}, {"gpus", gpus}}}});
    ASSERT_EQ(r.status, 200) << r.raw;
  }

  // One report of the node's agent; returns the desired state it is answered with.
  json Sync(json workloads = json::array()) {
    auto r = Post("/v1/agent/sync", node_token_,
                  {{"protocol", 1},
                   {"agent_id", agent_id_},
                   {"seq", ++seq_},
                   {"generation", 0},
                   {"wait_ms", 0},
                   {"workloads", std::move(workloads)}});
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body;
  }

  // The instance as the node's agent is told of it (null when it is not listed).
  json Workload(const std::string& id) {
    const json desired = Sync();
    for (const json& w : desired.value("workloads", json::array())) {
      if (w.value("id", "") == id) return w;
    }
    return nullptr;
  }

  static json WithImage(json body) {
    body["image"] = kImage;
    body["registry_auth"] = {{"username", "robot"}, {"password", kPassword}};
    return body;
  }

  // Everything a tenant or the admin can read back: the instance, the lists, the groups and the
  // audit log. None of it may hold the password.
  std::string EverythingShown(const std::string& id) {
    std::string all;
    for (const std::string& token : {tenant_, std::string(kAdminToken)}) {
      for (const std::string& path :
           {"/v1/instances/" + id, std::string("/v1/instances"),
            std::string("/v1/instances?state=pulling"), std::string("/v1/groups"),
            std::string("/v1/metrics/instances")}) {
        all += Get(path, token).raw;
      }
    }
    all += Get("/v1/audit?limit=1000", kAdminToken).raw;
    return all;
  }

  std::string tenant_;
  std::string node_token_;
  std::string agent_id_;
  int runs_ = 0;
  int64_t seq_ = 0;
};

TEST_F(ImagesTest, TheRegistryPasswordReachesOnlyTheNodesAgentAndSurvivesARestart) {
  auto created = Post("/v1/instances", tenant_, WithImage(H100(1, "on_demand")));
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  EXPECT_EQ(created.raw.find(kPassword), std::string::npos) << created.raw;
  EXPECT_EQ(created.body["image"], kImage);
  EXPECT_EQ(created.body["pull_policy"], "if_not_present");
  EXPECT_EQ(created.body["registry_auth"], json({{"username", "robot"}}));
  EXPECT_EQ(created.body["command"], "") << "no command: the image's entrypoint runs";

  // Refusals neither: their messages and audit rows name the field, never the value.
  json bad = WithImage(H100(1, "on_demand"));
  bad["pull_policy"] = "sometimes";
  auto refused = Post("/v1/instances", tenant_, bad);
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.body["error"]["message"],
            "field 'pull_policy': 'sometimes' is not if_not_present, always or never");
  bad = H100(1, "on_demand");
  bad["image"] = kImage;
  bad["registry_auth"] = {{"username", "robot"}, {"password", std::string(1025, 'p')}};
  refused = Post("/v1/instances", tenant_, bad);
  EXPECT_EQ(refused.body["error"]["message"],
            "field 'registry_auth.password': is 1025 bytes; at most 1024");
  bad = H100(1, "on_demand");
  bad["registry_auth"] = {{"username", "robot"}, {"password", kPassword}};
  refused = Post("/v1/instances", tenant_, bad);
  EXPECT_EQ(refused.body["error"]["message"], "field 'registry_auth': applies only with an image");
  EXPECT_EQ(refused.raw.find(kPassword), std::string::npos);

  // A group's template carries them to every member, and shows only the username.
  auto group =
      Post("/v1/groups", tenant_,
           {{"name", "train"}, {"size", 1}, {"template", WithImage(H100(1, "on_demand"))}});
  ASSERT_EQ(group.status, 201) << group.raw;
  EXPECT_EQ(group.raw.find(kPassword), std::string::npos) << group.raw;
  EXPECT_EQ(group.body["template"]["registry_auth"], json({{"username", "robot"}}));
  const std::string member = group.body["members"][0]["instance"];

  for (const std::string& which : {id, member}) {
    const json w = Workload(which);
    ASSERT_TRUE(w.is_object()) << which;
    EXPECT_EQ(w["image"], kImage);
    EXPECT_EQ(w["pull_policy"], "if_not_present");
    EXPECT_EQ(w["registry_auth"], json({{"username", "robot"}, {"password", kPassword}}))
        << "the node's own agent is told the credentials";
  }
  const std::string shown = EverythingShown(id);
  EXPECT_EQ(shown.find(kPassword), std::string::npos) << shown;
  EXPECT_NE(shown.find(kImage), std::string::npos) << "the test reads what it means to";
  EXPECT_NE(shown.find("field 'registry_auth.password': is 1025 bytes"), std::string::npos)
      << "the audit log holds the refusals, naming the field";
  EXPECT_EQ(server_->output().find(kPassword), std::string::npos) << server_->output();

  // After a restart the credentials come from the store: the agent is told them again.
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  StartServer({}, /*with_fleet=*/false);
  Register();
  for (const std::string& which : {id, member}) {
    const json w = Workload(which);
    ASSERT_TRUE(w.is_object()) << which;
    EXPECT_EQ(w["image"], kImage);
    EXPECT_EQ(w["registry_auth"], json({{"username", "robot"}, {"password", kPassword}}));
  }
  const json after = Get("/v1/instances/" + id, tenant_).body;
  EXPECT_EQ(after["image"], kImage);
  EXPECT_EQ(after["registry_auth"], json({{"username", "robot"}}));
  const std::string shown_after = EverythingShown(id);
  EXPECT_EQ(shown_after.find(kPassword), std::string::npos) << shown_after;
  EXPECT_EQ(server_->output().find(kPassword), std::string::npos) << server_->output();
}

TEST_F(ImagesTest, APullShowsInTheApiAndTheCliAndAFailedPullFailsTheInstance) {
  const std::string password_file = dir_.Write("registry-password", std::string(kPassword) + "\n");
  auto cli = testing::RunTessera({"instances",
                                  "create",
                                  "--url",
                                  server_->url(),
                                  "--token",
                                  tenant_,
                                  "--gpu-model",
                                  "H100-80GB",
                                  "--gpus",
                                  "1",
                                  "--vcpus",
                                  "4",
                                  "--memory-mib",
                                  "16384",
                                  "--image",
                                  kImage,
                                  "--pull-policy",
                                  "always",
                                  "--registry-username",
                                  "robot",
                                  "--registry-password-file",
                                  password_file,
                                  "-o",
                                  "json"});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out.find(kPassword), std::string::npos) << cli.out;
  const std::string id = json::parse(cli.out)["id"];
  EXPECT_EQ(Workload(id)["registry_auth"]["password"], kPassword)
      << "the CLI sent the password from its file";
  EXPECT_EQ(Workload(id)["pull_policy"], "always");

  Sync({{{"id", id},
         {"attempt", 0},
         {"state", "pulling"},
         {"pull", {{"bytes", 44040192}, {"total_bytes", 104857600}, {"percent", 42}}}}});
  json inst = Get("/v1/instances/" + id, tenant_).body;
  EXPECT_EQ(inst["state"], "pulling") << inst.dump();
  EXPECT_EQ(
      inst["pull"],
      json({{"bytes", 44040192}, {"total_bytes", 104857600}, {"percent", 42}, {"image", kImage}}));
  EXPECT_FALSE(inst.contains("started_at")) << "it has not started";
  auto listed = Get("/v1/instances?state=pulling", tenant_).body["instances"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["id"], id);
  EXPECT_TRUE(Get("/v1/instances?state=scheduled", tenant_).body["instances"].empty());
  auto list =
      testing::RunTessera({"instances", "list", "--url", server_->url(), "--token", tenant_});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("pulling 42%"), std::string::npos) << list.out;
  auto get =
      testing::RunTessera({"instances", "get", id, "--url", server_->url(), "--token", tenant_});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_NE(get.out.find("pulling 42%"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find("42% (44040192 of 104857600 bytes)"), std::string::npos) << get.out;
  EXPECT_NE(get.out.find("robot"), std::string::npos) << get.out;
  EXPECT_EQ(get.out.find(kPassword), std::string::npos) << get.out;

  // The pull fails: the agent reports the workload ended with no exit code and why.
  const std::string why = fmt::format("image {}: unauthorized: authentication required", kImage);
  Sync({{{"id", id}, {"attempt", 0}, {"state", "exited"}, {"reason", why}}});
  inst = Get("/v1/instances/" + id, tenant_).body;
  EXPECT_EQ(inst["state"], "failed") << inst.dump();
  EXPECT_EQ(inst["reason"], "its workload ended: " + why);
  EXPECT_FALSE(inst.contains("pull"));
  EXPECT_FALSE(inst.contains("exit_code"));
  auto usage = Get("/v1/usage?group_by=instance", tenant_);
  ASSERT_EQ(usage.status, 200) << usage.raw;
  EXPECT_EQ(usage.raw.find(id), std::string::npos) << "nothing is billed for a pull: " << usage.raw;
  EXPECT_EQ(server_->output().find(kPassword), std::string::npos) << server_->output();
}

}  // namespace
}  // namespace tessera
