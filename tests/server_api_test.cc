// End-to-end tests of the REST API: every route, every error case, tenant isolation.
#include <algorithm>
#include <regex>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

TEST_F(ServerTest, HealthAndReadiness) {
  EXPECT_EQ(Get("/healthz", "").status, 200);
  auto ready = Get("/readyz", "");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body["status"], "ready");
}

TEST_F(ServerTest, TokensAreRequiredAndChecked) {
  auto none = Get("/v1/instances", "");
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.body["error"]["code"], "unauthenticated");
  auto bad = Get("/v1/instances", "tsr_not_a_real_token");
  EXPECT_EQ(bad.status, 401);
  EXPECT_EQ(bad.body["error"]["message"], "invalid token");
}

TEST_F(ServerTest, AdminCreatesTenantsAndTenantsCannotUseAdminRoutes) {
  auto created = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 4}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_TRUE(std::regex_match(created.body["id"].get<std::string>(), std::regex("tenant-\\d{6}")));
  EXPECT_EQ(created.body["name"], "acme");
  const std::string token = created.body["token"];
  EXPECT_TRUE(std::regex_match(token, std::regex("tsr_[0-9a-f]{64}")));

  auto list = Get("/v1/tenants", kAdminToken);
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body["tenants"].size(), 1u);
  EXPECT_FALSE(list.body["tenants"][0].contains("token")) << "a token is shown only once";

  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/tenants"},
                                                        {"GET", "/v1/nodes"},
                                                        {"GET", "/v1/audit"},
                                                        {"POST", "/v1/nodes/node-h100-01/drain"}}) {
    const json empty = json::object();
    auto r = Call(method, path, token, method == "POST" ? &empty : nullptr);
    EXPECT_EQ(r.status, 403) << method << " " << path;
    EXPECT_EQ(r.body["error"]["code"], "forbidden");
  }
  auto dup = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 1}}}});
  EXPECT_EQ(dup.status, 409);
}

TEST_F(ServerTest, InstanceTypesCarryPricesForEveryBillingMode) {
  const std::string token = NewTenant("acme", 4);
  auto r = Get("/v1/instance-types", token);
  ASSERT_EQ(r.status, 200);
  bool found = false;
  for (const auto& t : r.body["instance_types"]) {
    // The test's fleet has H100s, A100-40GBs and L40Ss, and no T4.
    if (t["id"] == "gpu.1xt4") {
      EXPECT_EQ(t["offered_here"], false) << t.dump();
    }
    if (t["id"] != "gpu.1xh100") continue;
    EXPECT_EQ(t["offered_here"], true) << t.dump();
    found = true;
    for (const char* mode : {"on_demand", "reserved_1y", "reserved_3y", "spot"}) {
      EXPECT_TRUE(std::regex_match(t["price_per_hour_usd"][mode].get<std::string>(),
                                   std::regex("\\d+\\.\\d{2,6}")))
          << mode;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(Get("/v1/instance-types", "").status, 401);
}

TEST_F(ServerTest, CreateGetListDeleteAnInstance) {
  const std::string token = NewTenant("acme", 4);
  auto created =
      Post("/v1/instances", token,
           {{"billing", "on_demand"}, {"instance_type", "gpu.1xh100"}, {"name", "train"}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const json& i = created.body;
  const std::string id = i["id"];
  EXPECT_TRUE(std::regex_match(id, std::regex("inst-\\d{6}")));
  EXPECT_EQ(i["state"], "scheduled");
  EXPECT_EQ(i["billing"], "on_demand");
  EXPECT_EQ(i["node"], "node-h100-01");
  ASSERT_EQ(i["gpus"].size(), 1u);
  EXPECT_TRUE(
      std::regex_match(i["gpus"][0]["uuid"].get<std::string>(),
                       std::regex("GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-"
                                  "[0-9a-f]{12}")));
  EXPECT_EQ(i["gpus"][0]["model"], "H100-80GB");
  EXPECT_TRUE(i["price_per_hour_usd"].is_string());
  EXPECT_TRUE(std::regex_match(i["created_at"].get<std::string>(),
                               std::regex("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?Z")));
  EXPECT_EQ(i["restarts"], 0);

  EXPECT_EQ(AwaitState(token, id, "running"), "running") << "the simulated agent starts it";
  auto got = Get("/v1/instances/" + id, token);
  ASSERT_EQ(got.status, 200);
  auto running = Get("/v1/instances?state=running", token);
  ASSERT_EQ(running.body["instances"].size(), 1u);
  EXPECT_EQ(Get("/v1/instances?state=pending", token).body["instances"].size(), 0u);
  EXPECT_EQ(Get("/v1/instances?state=bogus", token).status, 400);

  auto deleted = Call("DELETE", "/v1/instances/" + id, token);
  ASSERT_EQ(deleted.status, 200);
  EXPECT_EQ(deleted.body["state"], "stopping");
  EXPECT_EQ(AwaitState(token, id, "terminated"), "terminated");
  EXPECT_EQ(Call("DELETE", "/v1/instances/inst-999999", token).status, 404);
}

TEST_F(ServerTest, MigAndSharedShapesGetTheirKindOfGpu) {
  const std::string token = NewTenant("acme", 4);
  auto mig = Post("/v1/instances", token,
                  {{"billing", "on_demand"},
                   {"gpu_model", "A100-40GB"},
                   {"mig_profile", "3g.20gb"},
                   {"vcpus", 4},
                   {"memory_mib", 8192}});
  ASSERT_EQ(mig.status, 201) << mig.raw;
  EXPECT_EQ(mig.body["gpus"][0]["mig_profile"], "3g.20gb");
  EXPECT_EQ(mig.body["gpus"][0]["uuid"].get<std::string>().substr(0, 4), "MIG-");
  auto share =
      Post("/v1/instances", token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
  ASSERT_EQ(share.status, 201) << share.raw;
  EXPECT_EQ(share.body["gpus"][0]["milli_gpu"], 500);
  EXPECT_EQ(share.body["node"], "node-l40s-01");
  EXPECT_EQ(share.body["migratable"], false);
  auto movable =
      Post("/v1/instances", token,
           {{"billing", "on_demand"}, {"instance_type", "shared.l40s.half"}, {"migratable", true}});
  ASSERT_EQ(movable.status, 201) << movable.raw;
  EXPECT_EQ(movable.body["migratable"], true);
  EXPECT_EQ(Get("/v1/instances/" + movable.body["id"].get<std::string>(), token).body["migratable"],
            true);
  auto bad_profile = Post("/v1/instances", token,
                          {{"billing", "spot"},
                           {"gpu_model", "A100-40GB"},
                           {"mig_profile", "9g.99gb"},
                           {"vcpus", 1},
                           {"memory_mib", 1}});
  EXPECT_EQ(bad_profile.status, 400);
  EXPECT_NE(bad_profile.body["error"]["message"].get<std::string>().find("mig_profile"),
            std::string::npos);
}

TEST_F(ServerTest, BadRequestsNameTheFieldAndChangeNothing) {
  const std::string token = NewTenant("acme", 4);
  struct Case {
    std::string body;
    std::string content_type;
    int status;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"{\"billing\": ", "application/json", 400, "malformed JSON"},
      {R"({"billing":"on_demand","instance_type":"gpu.1xh100","colour":"red"})", "application/json",
       400, "'colour'"},
      {R"({"billing":"on_demand","instance_type":7})", "application/json", 400,
       "field 'instance_type': expected a string"},
      {R"({"billing":"free","instance_type":"gpu.1xh100"})", "application/json", 400, "billing"},
      {R"({"billing":"on_demand","instance_type":"gpu.nope"})", "application/json", 400,
       "unknown instance type 'gpu.nope'"},
      {R"({"billing":"on_demand","gpu_model":"H100-80GB","gpus":1,"vcpus":"4","memory_mib":1})",
       "application/json", 400, "field 'vcpus'"},
      {R"({"billing":"on_demand","gpu_model":"H100-80GB","gpus":1,"milli_gpu":5,"vcpus":4,"memory_mib":1})",
       "application/json", 400, "exactly one of"},
      {R"({"billing":"on_demand","instance_type":"gpu.1xh100"})", "text/plain", 415,
       "application/json"},
      {"[1,2,3]", "application/json", 400, "expected an object"},
      {R"({"billing":"on_demand","instance_type":"shared.l40s.half","migratable":"yes"})",
       "application/json", 400, "field 'migratable'"},
      {R"({"billing":"on_demand","instance_type":"gpu.1xh100","migratable":true})",
       "application/json", 400, "migratable: only a milli_gpu share moves"},
  };
  for (const auto& c : cases) {
    auto r = Call("POST", "/v1/instances", token, nullptr, c.content_type, &c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.raw;
    EXPECT_NE(r.raw.find(c.needle), std::string::npos) << c.body << " -> " << r.raw;
    EXPECT_TRUE(r.body["error"]["code"].is_string()) << r.raw;
  }
  const std::string huge = R"({"billing":"on_demand","name":")" + std::string(2 << 20, 'x') + "\"}";
  EXPECT_EQ(Call("POST", "/v1/instances", token, nullptr, "application/json", &huge).status, 413);
  EXPECT_EQ(Get("/v1/instances", token).body["instances"].size(), 0u);
  EXPECT_EQ(Get("/v1/nodes", kAdminToken).body["nodes"][0]["workloads"], 0);
}

TEST_F(ServerTest, QuotaIsEnforcedWithTheExcess) {
  const std::string token = NewTenant("small", 1.5);
  ASSERT_EQ(Post("/v1/instances", token, H100(1, "on_demand")).status, 201);
  auto over = Post("/v1/instances", token, H100(1, "on_demand"));
  EXPECT_EQ(over.status, 403);
  EXPECT_EQ(over.body["error"]["code"], "quota_exceeded");
  EXPECT_NE(over.body["error"]["message"].get<std::string>().find("quota exceeded by 0.5 GPUs"),
            std::string::npos)
      << over.raw;
  auto share =
      Post("/v1/instances", token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
  EXPECT_EQ(share.status, 201) << "half a GPU still fits in the quota";
}

TEST_F(ServerTest, TenantsCannotSeeEachOthersInstances) {
  const std::string a = NewTenant("alpha", 4);
  const std::string b = NewTenant("beta", 4);
  auto mine = Post("/v1/instances", a, H100(1, "on_demand"));
  ASSERT_EQ(mine.status, 201);
  const std::string id = mine.body["id"];
  auto peek = Get("/v1/instances/" + id, b);
  EXPECT_EQ(peek.status, 404);
  auto unknown = Get("/v1/instances/inst-424242", b);
  EXPECT_EQ(peek.body["error"]["code"], unknown.body["error"]["code"]);
  EXPECT_EQ(
      peek.body["error"]["message"].get<std::string>().find(id) != std::string::npos,
      unknown.body["error"]["message"].get<std::string>().find("inst-424242") != std::string::npos)
      << "the two 404s must read alike";
  EXPECT_EQ(Call("DELETE", "/v1/instances/" + id, b).status, 404);
  EXPECT_EQ(Get("/v1/instances", b).body["instances"].size(), 0u);
  EXPECT_EQ(AwaitState(a, id, "running"), "running") << "beta's delete did nothing";
  EXPECT_EQ(Get("/v1/instances", kAdminToken).body["instances"].size(), 1u) << "admin sees all";
}

TEST_F(ServerTest, NodesDrainAndUndrain) {
  const std::string token = NewTenant("acme", 8);
  auto nodes = Get("/v1/nodes", kAdminToken);
  ASSERT_EQ(nodes.status, 200);
  ASSERT_EQ(nodes.body["nodes"].size(), 3u);
  ASSERT_EQ(Post("/v1/nodes/node-h100-01/drain", kAdminToken, json::object()).status, 200);
  auto queued = Post("/v1/instances", token, H100(1, "on_demand"));
  ASSERT_EQ(queued.status, 201);
  EXPECT_EQ(queued.body["state"], "pending") << "a draining node takes no new work";
  ASSERT_EQ(Post("/v1/nodes/node-h100-01/undrain", kAdminToken, json::object()).status, 200);
  EXPECT_EQ(AwaitState(token, queued.body["id"].get<std::string>(), "running"), "running");
  EXPECT_EQ(Post("/v1/nodes/node-nope/drain", kAdminToken, json::object()).status, 404);
}

// Each --sim-agents node's agent runs real processes and says how it keeps tenants apart; what
// it says depends on the machine (root or not), so the test asserts the shape, not the mode.
TEST_F(ServerTest, NodesSayHowTheirAgentIsolatesWorkloads) {
  const std::string not_yet = "its agent has not reported";
  json nodes;
  for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);;) {
    nodes = Get("/v1/nodes", kAdminToken).body["nodes"];
    const bool reported = std::all_of(nodes.begin(), nodes.end(), [&](const json& n) {
      return n.value("isolation_note", not_yet).find(not_yet) == std::string::npos;
    });
    if (reported || std::chrono::steady_clock::now() >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(nodes.size(), 3u);
  for (const json& n : nodes) {
    const std::string id = n["id"];
    ASSERT_TRUE(n.contains("isolation")) << n.dump();
    const std::string mode = n["isolation"];
    EXPECT_TRUE(mode == "uid" || mode == "none") << n.dump();
    const std::string note = n.value("isolation_note", "");
    EXPECT_FALSE(note.empty()) << "the note says why, whichever the mode: " << n.dump();
    EXPECT_EQ(note.find(not_yet), std::string::npos) << "every agent reported: " << n.dump();
    EXPECT_FALSE(n["agent"].contains("isolation")) << "shown once, at the node's top level";
    auto one = Get("/v1/nodes/" + id, kAdminToken);
    ASSERT_EQ(one.status, 200) << one.raw;
    EXPECT_EQ(one.body["isolation"], mode) << one.raw;
    EXPECT_EQ(one.body["isolation_note"], note) << one.raw;
  }
}

TEST_F(ServerTest, AuditLogRecordsEveryAuthenticatedMutationWithItsResult) {
  const std::string token = NewTenant("acme", 1);
  (void)Post("/v1/instances", token, H100(1, "on_demand"));
  (void)Post("/v1/instances", token, H100(1, "on_demand"));  // Over quota.
  // A request without a valid token costs no durable write: it is counted, not audited.
  (void)Post("/v1/instances", "tsr_wrong", H100(1, "on_demand"));
  auto audit = Get("/v1/audit", kAdminToken);
  ASSERT_EQ(audit.status, 200);
  const json& e = audit.body["entries"];
  ASSERT_EQ(e.size(), 3u) << audit.raw;
  EXPECT_EQ(e[0]["action"], "POST /v1/tenants");
  EXPECT_EQ(e[0]["actor"], "admin");
  EXPECT_EQ(e[0]["status"], 201);
  EXPECT_EQ(e[1]["status"], 201);
  EXPECT_TRUE(std::regex_match(e[1]["target"].get<std::string>(), std::regex("inst-\\d{6}")));
  EXPECT_EQ(e[2]["status"], 403);
  EXPECT_NE(e[2]["detail"].get<std::string>().find("quota exceeded"), std::string::npos);
  EXPECT_EQ(Get("/v1/audit?after=2", kAdminToken).body["entries"].size(), 1u);
  EXPECT_EQ(Get("/v1/audit?limit=x", kAdminToken).status, 400);
  auto metrics = Get("/metrics", kAdminToken);
  EXPECT_NE(metrics.raw.find("tessera_api_refused_total{reason=\"unauthenticated\"} 1"),
            std::string::npos)
      << metrics.raw;
}

TEST_F(ServerTest, MetricsExposeInstancesGpusLatencyAndRequests) {
  const std::string token = NewTenant("acme", 4);
  auto created = Post("/v1/instances", token, H100(1, "on_demand"));
  ASSERT_EQ(created.status, 201);
  // Its agent starts it on its own time: running a few milliseconds after the answer.
  ASSERT_EQ(AwaitState(token, created.body.value("id", ""), "running"), "running");
  EXPECT_EQ(Get("/metrics", "").status, 401);
  EXPECT_EQ(Get("/metrics", token).status, 403) << "metrics name every tenant: operator only";
  auto m = Get("/metrics", kAdminToken);
  ASSERT_EQ(m.status, 200);
  for (const char* needle :
       {"tessera_instances{state=\"running\",billing=\"on_demand\",tenant=\"tenant-000001\"} 1",
        "tessera_gpus{model=\"H100-80GB\",mode=\"exclusive\",status=\"allocated\"} 1",
        "tessera_gpus{model=\"H100-80GB\",mode=\"exclusive\",status=\"free\"} 1",
        "# TYPE tessera_scheduling_latency_seconds histogram",
        "tessera_scheduling_latency_seconds_count 1",
        "tessera_api_requests_total{method=\"POST\",route=\"/v1/instances\",code=\"201\"} 1"}) {
    EXPECT_NE(m.raw.find(needle), std::string::npos) << needle << "\n" << m.raw;
  }
}

TEST_F(ServerTest, ListsComeInStablePages) {
  const std::string token = NewTenant("acme", 8);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto r =
        Post("/v1/instances", token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
    ids.push_back(r.body.value("id", ""));
  }
  std::vector<std::string> seen;
  std::string path = "/v1/instances?limit=2";
  for (int page = 0; page < 5; ++page) {
    auto r = Get(path, token);
    ASSERT_EQ(r.status, 200) << r.raw;
    for (const auto& i : r.body["instances"]) seen.push_back(i["id"]);
    if (!r.body.contains("next_page_token")) break;
    path = "/v1/instances?limit=2&page_token=" + r.body["next_page_token"].get<std::string>();
  }
  EXPECT_EQ(seen, ids);
  EXPECT_EQ(Get("/v1/instances?limit=0", token).status, 400);
  EXPECT_EQ(Get("/v1/instances?limit=1001", token).status, 400);
  auto bad = Get("/v1/instances?page_token=xyz", token);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("query parameter 'page_token'"), std::string::npos);
  auto nodes = Get("/v1/nodes?limit=1", kAdminToken);
  ASSERT_EQ(nodes.body["nodes"].size(), 1u);
  auto rest =
      Get("/v1/nodes?limit=5&page_token=" + nodes.body["next_page_token"].get<std::string>(),
          kAdminToken);
  EXPECT_EQ(rest.body["nodes"].size(), 2u);
  EXPECT_FALSE(rest.body.contains("next_page_token"));
  EXPECT_EQ(testing::RunTessera(
                {"instances", "list", "--url", server_->url(), "--token", token, "-o", "json"})
                    .out.find(ids.back()) != std::string::npos,
            true)
      << "the client follows every page";
}

TEST_F(ServerTest, UnknownQueryParametersAreRefusedNamingThem) {
  const std::string token = NewTenant("acme", 4);
  auto created = Post("/v1/instances", token, H100(1, "on_demand"));
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  ASSERT_EQ(AwaitState(token, id, "running"), "running");

  struct Case {
    std::string method, path, message;
  };
  const std::vector<Case> cases = {
      {"GET", "/v1/instances?foo=bar",
       "query parameter 'foo' is not known here; GET /v1/instances takes limit, page_token, "
       "state, label_selector"},
      {"GET", "/v1/instances?state=running&limt=5",
       "query parameter 'limt' is not known here; GET /v1/instances takes limit, page_token, "
       "state, label_selector"},
      {"GET", "/v1/instances/" + id + "?verbose=1",
       "query parameter 'verbose' is not known here; GET /v1/instances/{id} takes no query "
       "parameters"},
      {"DELETE", "/v1/instances/" + id + "?force=true",
       "query parameter 'force' is not known here; DELETE /v1/instances/{id} takes no query "
       "parameters"},
      {"POST", "/v1/instances?dry_run=true&x=1",
       "query parameter 'dry_run' is not known here; POST /v1/instances takes no query "
       "parameters (1 more unknown)"},
      {"GET", "/v1/usage?group_by=day&form=2024-01-01",
       "query parameter 'form' is not known here; GET /v1/usage takes from, to, group_by, tenant, "
       "limit, page_token"},
      {"GET", "/healthz?probe=1",
       "query parameter 'probe' is not known here; GET /healthz takes no query parameters"},
  };
  const json body = H100(1, "on_demand");
  for (const Case& c : cases) {
    auto r = Call(c.method, c.path, c.path == "/healthz?probe=1" ? "" : token,
                  c.method == "POST" ? &body : nullptr);
    EXPECT_EQ(r.status, 400) << c.method << " " << c.path << " -> " << r.raw;
    EXPECT_EQ(r.body["error"]["code"], "invalid_argument") << r.raw;
    EXPECT_EQ(r.body["error"]["message"], c.message) << r.raw;
  }
  // The token comes first, as for an unknown body field: a stranger learns nothing more.
  EXPECT_EQ(Get("/v1/instances?foo=bar", "").status, 401);
  // A refused request changes nothing, and a refused mutation is audited like any other.
  EXPECT_EQ(Get("/v1/instances/" + id, token).body["state"], "running");
  EXPECT_EQ(Get("/v1/instances", token).body["instances"].size(), 1u);
  const json entries = Get("/v1/audit", kAdminToken).body["entries"];
  ASSERT_FALSE(entries.empty());
  const json& last = entries.back();
  EXPECT_EQ(last["action"], "POST /v1/instances") << entries.dump();
  EXPECT_EQ(last["status"], 400);
  EXPECT_NE(last["detail"].get<std::string>().find("'dry_run'"), std::string::npos);
  EXPECT_EQ(entries[entries.size() - 2]["action"], "DELETE /v1/instances/" + id);
  EXPECT_EQ(entries[entries.size() - 2]["status"], 400);
  // The console's files take any query (links and cache-busters carry them).
  EXPECT_EQ(Get("/?utm_source=mail", "").status, 200);
  EXPECT_EQ(Get("/console/app.js?v=2", "").status, 200);
  // Counted under the route's pattern, without its query.
  EXPECT_NE(Get("/metrics", kAdminToken)
                .raw.find("tessera_api_requests_total{method=\"GET\",route=\"/v1/instances\","
                          "code=\"400\"} 2"),
            std::string::npos);
}

TEST_F(ServerTest, EveryQueryParameterARouteDeclaresIsTaken) {
  const std::string token = NewTenant("acme", 4);
  const std::string tenant = Get("/v1/whoami", token).body["tenant"]["id"];
  auto created = Post(
      "/v1/instances", token,
      {{"billing", "on_demand"}, {"instance_type", "gpu.1xh100"}, {"labels", {{"team", "ml"}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  ASSERT_EQ(AwaitState(token, id, "running"), "running");
  // What the CLI and the console send, and every other parameter each route reads.
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"/v1/instances?limit=5&page_token=p0&state=running&label_selector=team%3Dml", token},
      {"/v1/instances/" + id + "/logs?tail=10", token},
      {"/v1/instances/" + id + "/logs?after=0", token},
      {"/v1/instances/" + id + "/metrics?window=15m", token},
      {"/v1/tenants?limit=5&page_token=p0", kAdminToken},
      {"/v1/nodes?limit=1&page_token=p0", kAdminToken},
      {"/v1/nodes/node-h100-01?window=1h", kAdminToken},
      {"/v1/audit?after=0&limit=5", kAdminToken},
      {"/v1/alerts?state=firing", token},
      {"/v1/usage?from=2024-01-01&to=2024-12-31&group_by=day&tenant=" + tenant +
           "&limit=5&page_token=p0",
       kAdminToken},
      {"/v1/usage?group_by=instance&tenant=" + tenant, token},
      {"/v1/reports/cost?from=2024-01-01&to=2024-02-01", token},
      {"/v1/recommend?workload=training&gpu_memory_gib=40&gpus=1&hours_per_month=100&months=1&"
       "budget_usd=100000&interruptible=false&nvlink=false",
       token},
      {"/v1/recommend?workload=inference&model_params_b=7", token},
      {"/v1/invoices/2024-01?tenant=" + tenant, kAdminToken},
  };
  for (const auto& [path, who] : calls) {
    auto r = Get(path, who);
    EXPECT_EQ(r.status, 200) << path << " -> " << r.raw;
  }
}

TEST_F(ServerTest, UnknownRoutesAnswerJson404) {
  auto r = Get("/v1/nope", kAdminToken);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body["error"]["code"], "not_found");
}

}  // namespace
}  // namespace tessera
