// POST /v1/nodes/{id}/gpus/{index}/mode through the API's routes, token checks and codecs (the
// server's in-process Dispatch, without a socket) on a real core: who may call it, the errors that
// name the field, 200 for a change applied at once and 202 for a request its agent is sent, the
// agent's result in its sync, and what GET /v1/nodes/{id} and the audit log show.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>

#include "api/server.h"
#include "catalog/catalog.h"
#include "common/auth.h"
#include "core/core.h"
#include "store/memory_store.h"

namespace tessera::api {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const catalog::Catalog& TestCatalog() {
  static const catalog::Catalog c = std::move(catalog::Catalog::LoadEmbedded()).value();
  return c;
}

json Inventory(int gpus, const std::string& model, const std::string& uuid_prefix) {
  json list = json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back({{"index", i}, {"uuid", uuid_prefix + std::to_string(i)}, {"model", model}});
  }
  return {{"cpu_milli", 64000}, {"memory_mib", 524288}, {"gpus", list}};
}

class GpuModeRouteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    core::CoreOptions options;
    options.catalog = &TestCatalog();
    options.clock = &clock_;
    options.empty_fleet = true;
    auto core = core::Core::Start(options, store::NewMemoryStore());
    ASSERT_TRUE(core.ok()) << core.status().message();
    core_ = std::move(*core);
    auto set_up = core_->Run<bool>([](core::State& s, store::Batch& b) -> Result<bool> {
      s.tenants().SetAdminTokenHash(HashToken("admin-token"), b);
      TESSERA_RETURN_IF_ERROR(
          s.tenants().Create("acme", 8000, HashToken("acme-token"), b).status());
      for (const auto& [name, model] : {std::pair{"gpu-1", "H100-80GB"}, {"l4-1", "L4-24GB"}}) {
        TESSERA_RETURN_IF_ERROR(s.agent_hub()
                                    .CreateNode(name, {}, catalog::SharingMode::kExclusive,
                                                HashToken(std::string("token-") + name), b)
                                    .status());
        core::AgentRegistration reg;
        reg.agent_id = "a1";
        reg.inventory = Inventory(2, model, std::string(name) + "-");
        TESSERA_RETURN_IF_ERROR(s.agent_hub().Register(name, reg, b));
      }
      TESSERA_RETURN_IF_ERROR(s.agent_hub()
                                  .CreateNode("waiting", {}, catalog::SharingMode::kExclusive,
                                              HashToken("token-waiting"), b)
                                  .status());
      return true;
    });
    ASSERT_TRUE(set_up.ok()) << set_up.status().message();
    ServerOptions server;
    server.http.port = 0;
    server.http.threads = 1;
    server.clock = &clock_;
    server_ = std::make_unique<ApiServer>(&TestCatalog(), server);
    ASSERT_TRUE(server_->Bind().ok());
    server_->Start(core_.get());
  }

  void TearDown() override {
    if (server_) server_->Stop();
  }

  // The answer's status and body.
  std::pair<int, json> Call(const std::string& method, const std::string& target,
                            const std::string& token, const json& body = nullptr) {
    std::promise<HttpResponse> answer;
    auto got = answer.get_future();
    server_->Dispatch(method, target, token, body.is_null() ? "" : body.dump(),
                      [&answer](HttpResponse r) { answer.set_value(std::move(r)); });
    HttpResponse r = got.get();
    return {r.status, r.body.empty() ? json() : json::parse(r.body)};
  }

  std::pair<int, json> SetMode(const std::string& node, const std::string& gpu, const json& body,
                               const std::string& token = "admin-token") {
    return Call("POST", "/v1/nodes/" + node + "/gpus/" + gpu + "/mode", token, body);
  }

  static std::string Message(const json& error) { return error["error"].value("message", ""); }

  FakeClock clock_;
  std::unique_ptr<core::Core> core_;
  std::unique_ptr<ApiServer> server_;
};

TEST_F(GpuModeRouteTest, OnlyTheAdminMayAndEveryErrorNamesTheField) {
  struct Case {
    std::string node, gpu;
    json body;
    int status;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"nowhere", "0", {{"mode", "shared"}}, 404, "node 'nowhere' not found"},
      {"waiting", "0", {{"mode", "shared"}}, 409, "node 'waiting' has no registered agent"},
      {"gpu-1", "x", {{"mode", "shared"}}, 400, "field 'index': 'x' is not a GPU index"},
      {"gpu-1", "-1", {{"mode", "shared"}}, 400, "field 'index'"},
      {"gpu-1", "2", {{"mode", "shared"}}, 400, "field 'index': node 'gpu-1' has no GPU 2"},
      {"gpu-1", "0", {{"mode", "tiny"}}, 400, "field 'mode': 'tiny' is not mig, exclusive or"},
      {"gpu-1", "0", json::object(), 400, "field 'mode'"},
      {"gpu-1", "0", {{"mode", "mig"}, {"allow_reset", "yes"}}, 400, "field 'allow_reset'"},
      {"gpu-1", "0", {{"mode", "mig"}, {"force", true}}, 400, "field 'force'"},
      {"l4-1", "0", {{"mode", "mig"}}, 400, "the L4-24GB has no MIG mode"},
  };
  for (const Case& c : cases) {
    const auto [status, body] = SetMode(c.node, c.gpu, c.body);
    EXPECT_EQ(status, c.status) << c.node << " " << c.gpu << " " << c.body;
    EXPECT_THAT(Message(body), HasSubstr(c.message)) << c.node << " " << c.gpu << " " << c.body;
  }
  EXPECT_EQ(SetMode("gpu-1", "0", {{"mode", "shared"}}, "acme-token").first, 403);
  EXPECT_EQ(SetMode("gpu-1", "0", {{"mode", "shared"}}, "no-such-token").first, 401);
  const auto [status, node] = Call("GET", "/v1/nodes/gpu-1", "admin-token");
  ASSERT_EQ(status, 200);
  EXPECT_EQ(node["gpus"][0]["mode"], "exclusive") << "no refusal changed anything";
}

TEST_F(GpuModeRouteTest, AppliedAtOnceIs200ARequestIs202AndItsResultShowsBesideTheGpu) {
  const auto [applied, shared] = SetMode("gpu-1", "0", {{"mode", "shared"}});
  EXPECT_EQ(applied, 200) << shared;
  EXPECT_EQ(shared, json::parse(R"({"id": "gpu-1", "gpu": 0, "mode": "shared",
                                    "state": "applied"})"));

  const auto [accepted, request] = SetMode("gpu-1", "1", {{"mode", "mig"}});
  ASSERT_EQ(accepted, 202) << request;
  EXPECT_EQ(request["state"], "requested");
  EXPECT_EQ(request["request"]["id"], 1);
  EXPECT_EQ(request["request"]["allow_reset"], false);

  auto [got, node] = Call("GET", "/v1/nodes/gpu-1", "admin-token");
  ASSERT_EQ(got, 200);
  EXPECT_EQ(node["gpus"][0]["mode"], "shared");
  EXPECT_FALSE(node["gpus"][0].contains("mode_change"));
  EXPECT_EQ(node["gpus"][1]["mode_change"]["state"], "requested");
  EXPECT_EQ(node["gpus"][1]["mode_change"]["mode"], "mig");
  EXPECT_FALSE(node["agent"].contains("gpu_mode_changes")) << "shown beside the GPU only";

  // Its agent is asked, and answers; a result it cannot mean is refused naming the field.
  auto [registered, desired] = Call(
      "POST", "/v1/agent/register", "token-gpu-1",
      {{"protocol", 1}, {"agent_id", "a2"}, {"inventory", Inventory(2, "H100-80GB", "gpu-1-")}});
  ASSERT_EQ(registered, 200) << desired;
  EXPECT_EQ(desired["gpu_mode_requests"],
            json::parse(R"([{"id": 1, "gpu": 1, "mode": "mig", "allow_reset": false}])"));
  json sync = {{"protocol", 1},
               {"agent_id", "a2"},
               {"seq", 1},
               {"generation", desired["generation"]},
               {"gpu_mode_results", {{{"id", 1}, {"gpu", 1}, {"state", "done"}}}}};
  auto [bad, refusal] = Call("POST", "/v1/agent/sync", "token-gpu-1", sync);
  EXPECT_EQ(bad, 400);
  EXPECT_THAT(Message(refusal), HasSubstr("gpu_mode_results[0]: field 'state': 'done' is not"));
  sync["gpu_mode_results"][0]["state"] = "refused";
  sync["gpu_mode_results"][0]["reason"] = "1 process(es) use GPU 1";
  auto [synced, answer] = Call("POST", "/v1/agent/sync", "token-gpu-1", sync);
  ASSERT_EQ(synced, 200) << answer;
  EXPECT_TRUE(answer["gpu_mode_requests"].empty());

  std::tie(got, node) = Call("GET", "/v1/nodes", "admin-token");
  ASSERT_EQ(got, 200);
  const json& gpu = node["nodes"][0]["gpus"][1];
  EXPECT_EQ(gpu["mode"], "exclusive");
  EXPECT_EQ(gpu["mode_change"]["state"], "refused");
  EXPECT_EQ(gpu["mode_change"]["reason"], "1 process(es) use GPU 1");

  // The request and its outcome are in the audit log.
  auto [listed, audit] = Call("GET", "/v1/audit?limit=1000", "admin-token");
  ASSERT_EQ(listed, 200);
  std::vector<std::string> rows;
  for (const json& e : audit["entries"]) {
    if (e["target"] != "gpu-1") continue;
    rows.push_back(fmt::format("{} {} {} {}", e["actor"].get<std::string>(),
                               e["action"].get<std::string>(), e["status"].get<int>(),
                               e["detail"].get<std::string>()));
  }
  EXPECT_THAT(rows, ::testing::Contains("admin POST /v1/nodes/gpu-1/gpus/0/mode 200 "));
  EXPECT_THAT(rows, ::testing::Contains("admin POST /v1/nodes/gpu-1/gpus/1/mode 202 "));
  EXPECT_THAT(rows, ::testing::Contains(HasSubstr("agent gpu mode change 200")));
}

}  // namespace
}  // namespace tessera::api
