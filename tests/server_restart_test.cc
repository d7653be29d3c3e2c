// Restarts after the operator changed something: a drained node, a fleet file with a node
// removed, renamed or shrunk, a catalog with a MIG profile renamed. The server always comes
// back; what can no longer run is failed with the reason and releases its quota. And one server
// per data directory.
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

class RestartTest : public ServerTest {
 protected:
  json Instance(const std::string& token, const std::string& id) {
    return Get("/v1/instances/" + id, token).body;
  }
  std::string Create(const std::string& token, const json& body) {
    auto r = Post("/v1/instances", token, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", "");
  }
  // Restarts the server on `fleet` (default: the test's) with `extra` arguments.
  void Restart(const std::string& fleet = "", std::vector<std::string> extra = {"--sim-agents"}) {
    ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
    if (!fleet.empty()) fleet_path_ = dir_.Write("fleet-changed.json", fleet);
    StartServer(std::move(extra));
  }
  double UsedGpus(const std::string& token, const std::string& tenant_id) {
    return Get("/v1/tenants/" + tenant_id, token).body["usage"]["gpus"].get<double>();
  }
};

TEST_F(RestartTest, WorkOnADrainedNodeComesBackOnIt) {
  auto t = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 4}}}});
  const std::string token = t.body["token"];
  const std::string id = Create(token, H100(1, "on_demand"));
  ASSERT_EQ(Post("/v1/nodes/node-h100-01/drain", kAdminToken, json::object()).status, 200);
  for (const int signal : {SIGTERM, SIGKILL}) {
    if (signal == SIGKILL) {
      server_->Stop(SIGKILL);
      StartServer();
    } else {
      Restart();
    }
    EXPECT_EQ(AwaitState(token, id, "running"), "running");
    const json i = Instance(token, id);
    EXPECT_EQ(i["node"], "node-h100-01");
    auto nodes = Get("/v1/nodes", kAdminToken).body["nodes"];
    EXPECT_EQ(nodes[0]["state"], "draining");
    EXPECT_EQ(nodes[0]["workloads"], 1) << "the drained node still books the instance";
  }
  EXPECT_NE(server_->output().find("restored 1 tenant(s) and 1 instance(s): 1 holding capacity"),
            std::string::npos)
      << server_->output();
}

TEST_F(RestartTest, AChangedFleetFailsOnlyWhatLostItsCapacityAndReleasesItsQuota) {
  auto t = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 8}}}});
  const std::string token = t.body["token"];
  const std::string tenant = t.body["id"];
  const std::string h100_a = Create(token, H100(1, "on_demand"));
  const std::string h100_b = Create(token, H100(1, "on_demand"));
  const std::string mig =
      Create(token, {{"billing", "on_demand"}, {"instance_type", "mig.a100-40gb.3g.20gb"}});
  const std::string share =
      Create(token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
  // GPU 1 of the H100 node is gone (a GPU fell off the bus), and the L40S node was renamed.
  std::string fleet = kSmallFleet;
  fleet = std::regex_replace(fleet, std::regex("\"gpus\": 2"), "\"gpus\": 1");
  fleet = std::regex_replace(fleet, std::regex("\"name\": \"l40s\""), "\"name\": \"l40s-new\"");
  Restart(fleet);
  std::map<std::string, json> after;
  for (const std::string& id : {h100_a, h100_b, mig, share}) {
    Settle(token, id);
    after[id] = Instance(token, id);
  }
  // Which H100 instance held GPU 1 is the scheduler's choice; exactly one must have lost it.
  int kept = 0, lost = 0;
  for (const std::string& id : {h100_a, h100_b}) {
    if (after[id]["state"] == "running") {
      ++kept;
      EXPECT_EQ(after[id]["gpus"][0]["index"], 0);
    } else {
      ++lost;
      EXPECT_EQ(after[id]["state"], "failed");
      EXPECT_EQ(after[id]["reason"],
                "failed at restart: node 'node-h100-01' has 1 GPU(s) now; the instance held "
                "GPU 1");
      EXPECT_EQ(after[id]["gpus"].size(), 0u);
    }
  }
  EXPECT_EQ(kept, 1);
  EXPECT_EQ(lost, 1);
  EXPECT_EQ(after[mig]["state"], "running") << after[mig];
  EXPECT_EQ(after[share]["state"], "failed");
  EXPECT_EQ(after[share]["reason"], "failed at restart: node 'node-l40s-01' left the fleet");
  EXPECT_NEAR(UsedGpus(token, tenant), 1 + 3.0 / 7, 0.001) << "only what still runs holds quota";
  EXPECT_NE(server_->output().find("reconciled at restart"), std::string::npos);
  // The new L40S node takes new work.
  auto again =
      Post("/v1/instances", token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.body["node"], "node-l40s-new-01");
  // And a second restart on the same fleet changes nothing more.
  Restart();
  EXPECT_EQ(AwaitState(token, mig, "running"), "running");
  EXPECT_EQ(Instance(token, share)["state"], "failed");
}

TEST_F(RestartTest, AMigProfileRenamedInTheCatalogFailsItsSlicesClosed) {
  auto t = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 4}}}});
  const std::string token = t.body["token"];
  const std::string slice =
      Create(token, {{"billing", "on_demand"}, {"instance_type", "mig.a100-40gb.3g.20gb"}});
  const std::string whole = Create(token, H100(1, "on_demand"));
  // The operator's catalog renames the profile (and the instance type that names it).
  const std::string catalog_dir = dir_.File("catalog");
  fs::create_directories(catalog_dir);
  for (const auto& entry : fs::directory_iterator(testing::SourceDir() + "/catalog")) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    dir_.Write("catalog/" + entry.path().filename().string(),
               std::regex_replace(text.str(), std::regex("\"3g\\.20gb\""), "\"3g.20gb-v2\""));
  }
  Restart("", {"--sim-agents", "--catalog", catalog_dir});
  const json s = Instance(token, slice);
  EXPECT_EQ(s["state"], "failed");
  EXPECT_EQ(s["reason"],
            "failed at restart: MIG profile '3g.20gb' is not in the A100-40GB table any more");
  EXPECT_EQ(AwaitState(token, whole, "running"), "running");
}

TEST_F(RestartTest, OneServerPerDataDirectory) {
  testing::ServerProcess second;
  EXPECT_FALSE(second.Start({"--data", dir_.File("data"), "--fleet", fleet_path_}, kAdminToken));
  EXPECT_TRUE(std::regex_search(
      second.output(),
      std::regex("data directory .*/data is in use by another tessera server \\(pid \\d+\\)")))
      << second.output();
  EXPECT_EQ(second.Stop(SIGKILL), 1) << "it exited with status 1 on its own";
  EXPECT_EQ(Get("/healthz", "").status, 200);
}

}  // namespace
}  // namespace tessera
