// End-to-end tests of the client commands (`tessera tenants|instances|nodes`) against a real
// server: tables, JSON output, and the server's message on error.
#include <yaml-cpp/yaml.h>

#include <future>
#include <regex>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using testing::RunTessera;

class ClientCliTest : public ServerTest {
 protected:
  testing::CommandResult Cli(std::vector<std::string> args, const std::string& token) {
    args.insert(args.end(), {"--url", server_->url(), "--token", token});
    return RunTessera(args);
  }
};

TEST_F(ClientCliTest, TenantAndInstanceLifecycle) {
  auto created = Cli({"tenants", "create", "acme", "--quota-gpus", "4", "-o", "json"}, kAdminToken);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string token = json::parse(created.out)["token"];

  auto listed = Cli({"tenants", "list"}, kAdminToken);
  ASSERT_EQ(listed.exit_code, 0);
  EXPECT_NE(listed.out.find("tenant-000001  acme  4"), std::string::npos) << listed.out;

  auto inst = Cli({"instances", "create", "--type", "gpu.1xh100", "--billing", "spot", "--name",
                   "train", "-o", "json"},
                  token);
  ASSERT_EQ(inst.exit_code, 0) << inst.err;
  const json j = json::parse(inst.out);
  EXPECT_EQ(j["name"], "train");
  EXPECT_EQ(j["billing"], "spot");
  const std::string id = j["id"];
  ASSERT_EQ(AwaitState(token, id, "running"), "running");

  auto table = Cli({"instances", "list"}, token);
  ASSERT_EQ(table.exit_code, 0);
  EXPECT_EQ(table.out.rfind("ID ", 0), 0u) << table.out;
  EXPECT_TRUE(std::regex_search(
      table.out, std::regex(id + " +train +running +spot +gpu\\.1xh100 +node-h100-01 +1 ")))
      << table.out;

  auto custom = Cli({"instances", "create", "--gpu-model", "L40S-48GB", "--milli-gpu", "250",
                     "--vcpus", "2", "--memory-mib", "4096", "--migratable", "-o", "json"},
                    token);
  ASSERT_EQ(custom.exit_code, 0) << custom.err;
  EXPECT_EQ(json::parse(custom.out)["gpus"][0]["milli_gpu"], 250);
  EXPECT_EQ(json::parse(custom.out)["migratable"], true);

  // The GPUS column counts as people do: a whole GPU is 1, a quarter share 0.25.
  const std::string share = json::parse(custom.out)["id"];
  auto both = Cli({"instances", "list"}, token);
  EXPECT_TRUE(std::regex_search(both.out, std::regex(share + " .* 0\\.25 "))) << both.out;
  // The shape as people say it, not "L40S-48GB 250m".
  EXPECT_TRUE(std::regex_search(both.out, std::regex(share + " .* 0\\.25 x L40S-48GB ")))
      << both.out;
  EXPECT_EQ(both.out.find("TENANT"), std::string::npos) << "a tenant sees only its own";
  // The admin's listing names each instance's tenant.
  auto admin = Cli({"instances", "list"}, kAdminToken);
  EXPECT_EQ(admin.out.rfind("ID ", 0), 0u) << admin.out;
  EXPECT_NE(admin.out.find("TENANT"), std::string::npos) << admin.out;
  EXPECT_TRUE(std::regex_search(admin.out, std::regex(id + " +acme +train "))) << admin.out;
  // By name as well as by id.
  auto by_name = Cli({"instances", "get", "train", "-o", "json"}, token);
  ASSERT_EQ(by_name.exit_code, 0) << by_name.err;
  EXPECT_EQ(json::parse(by_name.out)["id"], id);
  auto no_name = Cli({"instances", "get", "no-such-name"}, token);
  EXPECT_EQ(no_name.exit_code, 1);
  EXPECT_NE(no_name.err.find("no instance is named or has the id 'no-such-name'"),
            std::string::npos)
      << no_name.err;

  auto got = Cli({"instances", "get", id, "-o", "json"}, token);
  EXPECT_EQ(json::parse(got.out)["state"], "running");
  auto deleted = Cli({"instances", "delete", "train"}, token);
  EXPECT_EQ(deleted.exit_code, 0);
  ASSERT_EQ(AwaitState(token, id, "terminated"), "terminated");
  EXPECT_EQ(json::parse(Cli({"instances", "get", id, "-o", "json"}, token).out)["state"],
            "terminated");
}

TEST_F(ClientCliTest, BillingCommandsAndTheRecommender) {
  auto created = Cli({"tenants", "create", "acme", "--quota-gpus", "4", "-o", "json"}, kAdminToken);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const std::string token = json::parse(created.out)["token"];
  const std::string tenant = json::parse(created.out)["id"];
  auto inst = Cli({"instances", "create", "--type", "gpu.1xh100", "-o", "json"}, token);
  ASSERT_EQ(inst.exit_code, 0) << inst.err;
  const std::string id = json::parse(inst.out)["id"];
  ASSERT_EQ(AwaitState(token, id, "running"), "running");
  ASSERT_EQ(Cli({"instances", "delete", id}, token).exit_code, 0);

  auto usage = Cli({"usage"}, token);
  ASSERT_EQ(usage.exit_code, 0) << usage.err;
  EXPECT_TRUE(std::regex_search(
      usage.out, std::regex(id + " +gpu\\.1xh100 +on_demand +user-[0-9]+ +[0-9.]+ +60 ")))
      << usage.out;
  EXPECT_NE(usage.out.find("TOTAL"), std::string::npos);
  auto csv = Cli({"usage", "--group-by", "billing", "-o", "csv"}, token);
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("billing,seconds,reserved_unit_seconds,amount_usd\non_demand,60,0,", 0),
            0u)
      << csv.out;
  // A reservation is a commitment: its count and term are never assumed, and it can be priced.
  auto vague = Cli({"reservations", "create", "--type", "gpu.1xh100", "--term", "3y"}, token);
  EXPECT_NE(vague.exit_code, 0);
  EXPECT_NE(vague.err.find("--count"), std::string::npos) << vague.err;
  auto priced = Cli({"reservations", "create", "--type", "gpu.1xh100", "--count", "2", "--term",
                     "3y", "--dry-run"},
                    token);
  ASSERT_EQ(priced.exit_code, 0) << priced.err;
  EXPECT_NE(priced.out.find("(dry run)"), std::string::npos) << priced.out;
  EXPECT_NE(priced.out.find("COMMITMENT (USD)"), std::string::npos) << priced.out;
  auto listed = Cli({"reservations", "list", "-o", "json"}, token);
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_EQ(json::parse(listed.out)["reservations"].size(), 0u) << "a dry run reserves nothing";

  auto budget = Cli({"budgets", "set", tenant, "--monthly-usd", "250.50", "--hard-stop"}, token);
  ASSERT_EQ(budget.exit_code, 0) << budget.err;
  EXPECT_NE(budget.out.find("250.50"), std::string::npos) << budget.out;

  auto offers = Cli({"recommend", "--workload", "inference", "--gpu-memory-gib", "20"}, token);
  ASSERT_EQ(offers.exit_code, 0) << offers.err;
  EXPECT_NE(offers.out.find("fits on"), std::string::npos) << offers.out;
  auto none = Cli(
      {"recommend", "--workload", "inference", "--gpu-memory-gib", "500", "--gpus", "1"}, token);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_NE(none.err.find("nothing fits"), std::string::npos) << none.err;
}

TEST_F(ClientCliTest, ErrorsPrintTheServersMessage) {
  const std::string token = NewTenant("acme", 1);
  auto over = Cli({"instances", "create", "--gpu-model", "H100-80GB", "--gpus", "2", "--vcpus", "4",
                   "--memory-mib", "1024"},
                  token);
  EXPECT_EQ(over.exit_code, 1);
  EXPECT_NE(over.err.find("quota exceeded by 1 GPUs"), std::string::npos) << over.err;
  auto never = Cli({"instances", "create", "--type", "gpu.8xh100"}, token);
  EXPECT_EQ(never.exit_code, 1);
  EXPECT_NE(never.err.find("the largest H100-80GB node has 2 GPUs; 8 asked (HTTP 400)"),
            std::string::npos)
      << never.err;
  auto missing = Cli({"instances", "get", "inst-000404"}, token);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("instance 'inst-000404' not found (HTTP 404)"), std::string::npos)
      << missing.err;
  auto forbidden = Cli({"nodes", "list"}, token);
  EXPECT_EQ(forbidden.exit_code, 1);
  EXPECT_NE(forbidden.err.find("admin token"), std::string::npos);
  auto usage = Cli({"instances", "create", "--billing", "free"}, token);
  EXPECT_EQ(usage.exit_code, 2);
  auto unreachable = RunTessera({"nodes", "list", "--url", "http://127.0.0.1:1", "--token", "x"});
  EXPECT_EQ(unreachable.exit_code, 1);
  // The system's reason in full, not the client library's one word.
  EXPECT_NE(unreachable.err.find("cannot reach http://127.0.0.1:1: Connection refused"),
            std::string::npos)
      << unreachable.err;
  auto unknown_host =
      RunTessera({"nodes", "list", "--url", "http://no-such-host.invalid:8080", "--token", "x"});
  EXPECT_EQ(unknown_host.exit_code, 1);
  EXPECT_NE(unknown_host.err.find("cannot resolve no-such-host.invalid"), std::string::npos)
      << unknown_host.err;
  // A duration the flag cannot read is a usage error naming it.
  auto bad_for = Cli({"alerts", "rules", "create", "--name", "hot", "--metric", "m", "--op", ">",
                      "--threshold", "1", "--for", "5x"},
                     token);
  EXPECT_EQ(bad_for.exit_code, 2);
  EXPECT_NE(bad_for.err.find("--for: '5x'"), std::string::npos) << bad_for.err;
}

// -o yaml: what JSON says, read back the same by a YAML parser, with strings that would read as
// numbers or booleans quoted and nothing that could drive a terminal left raw.
TEST_F(ClientCliTest, YamlOutputReadsBackAsTheJsonDoes) {
  const std::string token = NewTenant("acme", 4);
  json body = H100(1, "on_demand");
  body["labels"] = {{"env", "123"}, {"team", "true"}};
  body["annotations"] = {{"note", "two\nlines \u202e\x1b[31mred"}};
  auto created = Post("/v1/instances", token, body);
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body.value("id", "");
  auto r = Cli({"instances", "get", id, "-o", "yaml"}, token);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "an escape reached the terminal";
  EXPECT_EQ(r.out.find("\u202e"), std::string::npos) << r.out;  // U+202E as UTF-8 bytes.
  const YAML::Node doc = YAML::Load(r.out);
  EXPECT_EQ(doc["id"].as<std::string>(), id);
  EXPECT_EQ(doc["labels"]["env"].as<std::string>(), "123");
  EXPECT_NE(r.out.find("env: \"123\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("team: \"true\""), std::string::npos) << r.out;
  EXPECT_EQ(doc["annotations"]["note"].as<std::string>(), "two\nlines \u202e\x1b[31mred");
  EXPECT_EQ(doc["shape"]["gpus"].as<int>(), 1);
  auto list = Cli({"instances", "list", "-o", "yaml"}, token);
  EXPECT_EQ(YAML::Load(list.out)["instances"][0]["id"].as<std::string>(), id) << list.out;
  EXPECT_EQ(Cli({"instances", "list", "-o", "xml"}, token).exit_code, 2);
}

TEST_F(ClientCliTest, SeveralInstancesAreDeletedAtOnceAndOneUnknownIsSaidWithoutStoppingTheRest) {
  const std::string token = NewTenant("acme", 4);
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    auto made = Cli({"instances", "create", "--type", "gpu.1xh100", "-o", "json"}, token);
    ASSERT_EQ(made.exit_code, 0) << made.err;
    ids.push_back(json::parse(made.out)["id"]);
  }
  auto r = Cli({"instances", "delete", ids[0], "inst-000404", ids[1]}, token);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("instance 'inst-000404' not found"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find(ids[0]), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(ids[1]), std::string::npos) << r.out;
  for (const std::string& id : ids) EXPECT_EQ(AwaitState(token, id, "terminated"), "terminated");
}

TEST_F(ClientCliTest, AlertRuleDurationsReadAsPeopleWriteThemAndABudgetIsDeleted) {
  const std::string token = NewTenant("acme", 4);
  auto rule =
      Cli({"alerts", "rules", "create", "--name", "hot", "--metric", "DCGM_FI_DEV_GPU_TEMP", "--op",
           ">", "--threshold", "85", "--for", "2m", "--keep-firing-for", "90", "-o", "json"},
          token);
  ASSERT_EQ(rule.exit_code, 0) << rule.err;
  const json made = json::parse(rule.out);
  EXPECT_EQ(made["for_seconds"], 120) << made.dump();
  EXPECT_EQ(made["keep_firing_for_seconds"], 90) << made.dump();
  const std::string tenant = Get("/v1/tenants", kAdminToken).body["tenants"][0].value("id", "");
  ASSERT_EQ(Cli({"budgets", "set", tenant, "--monthly-usd", "100"}, kAdminToken).exit_code, 0);
  auto removed = Cli({"budgets", "delete", tenant}, kAdminToken);
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_NE(removed.out.find("removed"), std::string::npos) << removed.out;
  auto again = Cli({"budgets", "delete", tenant}, kAdminToken);
  EXPECT_EQ(again.exit_code, 1);
  // A month with nothing billed says so rather than print an empty table.
  auto empty = Cli({"invoices", "show", "2020-01"}, token);
  EXPECT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(empty.out, "nothing was billed in 2020-01 (total 0.000000 USD)\n");
}

// A running group's autoscale is set, shown, refused where its elastic range cannot hold it, and
// removed, from the CLI.
TEST_F(ClientCliTest, GroupsAutoscaleSetsChangesAndRemovesIt) {
  const std::string token = NewTenant("acme", 4);
  auto made = Cli({"groups", "create", "--type", "gpu.1xh100", "--size", "1", "--elastic", "1:2",
                   "--name", "serve", "-o", "json"},
                  token);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string id = json::parse(made.out)["id"];
  auto set = Cli({"groups", "autoscale", id, "--min", "1", "--max", "2", "--metric", "pending",
                  "--target", "5", "--scale-down-window", "90s", "--schedule", "0 8 * * 1-5=2"},
                 token);
  ASSERT_EQ(set.exit_code, 0) << set.err;
  EXPECT_NE(set.out.find("autoscale: pending target 5 within [1, 2], scale-down window 90 s"),
            std::string::npos)
      << set.out;
  const json got = json::parse(Cli({"groups", "get", id, "-o", "json"}, token).out);
  EXPECT_EQ(got["autoscale"]["scale_down_stabilization_seconds"], 90) << got.dump();
  EXPECT_EQ(got["autoscale"]["schedule"][0]["cron"], "0 8 * * 1-5") << got.dump();
  EXPECT_EQ(got["autoscale"]["schedule"][0]["min"], 2) << got.dump();

  auto wider =
      Cli({"groups", "autoscale", id, "--min", "1", "--max", "4", "--target", "50"}, token);
  EXPECT_EQ(wider.exit_code, 1);
  EXPECT_NE(wider.err.find("outside the group's elastic [min, max] = [1, 2]"), std::string::npos)
      << wider.err;
  auto no_target = Cli({"groups", "autoscale", id, "--min", "1", "--max", "2"}, token);
  EXPECT_EQ(no_target.exit_code, 2);
  EXPECT_NE(no_target.err.find("--target: is required"), std::string::npos) << no_target.err;
  auto bad_schedule = Cli({"groups", "autoscale", id, "--min", "1", "--max", "2", "--target", "5",
                           "--schedule", "0 8 * * *"},
                          token);
  EXPECT_EQ(bad_schedule.exit_code, 2);
  EXPECT_NE(bad_schedule.err.find("is not 'CRON=MIN'"), std::string::npos) << bad_schedule.err;
  auto bad_cron = Cli({"groups", "autoscale", id, "--min", "1", "--max", "2", "--target", "5",
                       "--schedule", "0 25 * * *=1"},
                      token);
  EXPECT_EQ(bad_cron.exit_code, 1);
  EXPECT_NE(bad_cron.err.find("autoscale.schedule[0].cron"), std::string::npos) << bad_cron.err;

  auto off = Cli({"groups", "autoscale", id, "--off", "-o", "json"}, token);
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_FALSE(json::parse(off.out).contains("autoscale")) << off.out;
  EXPECT_EQ(json::parse(off.out)["size"], 1);
  // The API says what a PATCH without a field lacks.
  auto nothing = Patch("/v1/groups/" + id, token, json::object());
  EXPECT_EQ(nothing.status, 400);
  EXPECT_NE(nothing.body.dump().find("give a size, an autoscale, or both"), std::string::npos)
      << nothing.body.dump();
}

// `tessera reports cost`: the admin's report names tenants and shows the idle GPUs; a tenant's
// has its own lines only.
TEST_F(ClientCliTest, TheCostReportNamesTenantsAndTheAdminSeesIdleGpus) {
  const std::string token = NewTenant("acme", 4);
  const std::string id = Post("/v1/instances", token, H100(1, "on_demand")).body.value("id", "");
  ASSERT_EQ(AwaitState(token, id, "running"), "running");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto admin = Cli({"reports", "cost"}, kAdminToken);
  ASSERT_EQ(admin.exit_code, 0) << admin.err;
  EXPECT_EQ(admin.out.rfind("cost report from ", 0), 0u) << admin.out;
  EXPECT_TRUE(std::regex_search(admin.out, std::regex("\nacme +[0-9.]+ +[0-9.]+ "))) << admin.out;
  EXPECT_TRUE(std::regex_search(admin.out, std::regex("\ncustom:H100-80GB +[0-9.]+ ")))
      << admin.out;
  EXPECT_NE(admin.out.find("idle capacity"), std::string::npos) << admin.out;
  EXPECT_TRUE(std::regex_search(admin.out, std::regex("\nH100-80GB +[0-9.]+ "))) << admin.out;
  auto own = Cli({"reports", "cost", "-o", "json"}, token);
  ASSERT_EQ(own.exit_code, 0) << own.err;
  const json report = json::parse(own.out);
  ASSERT_EQ(report["tenants"].size(), 1u) << own.out;
  EXPECT_FALSE(report.contains("idle")) << "a tenant does not see the fleet's idle capacity";
  auto bad = Cli({"reports", "cost", "--from", "yesterday"}, token);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("from"), std::string::npos) << bad.err;
}

TEST_F(ClientCliTest, NodesListDrainUndrain) {
  auto list = Cli({"nodes", "list"}, kAdminToken);
  ASSERT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find("node-h100-01  ready  H100-80GB  2"), std::string::npos) << list.out;
  auto drain = Cli({"nodes", "drain", "node-h100-01"}, kAdminToken);
  EXPECT_EQ(drain.out, "node-h100-01: draining\n");
  auto json_list = Cli({"nodes", "list", "-o", "json"}, kAdminToken);
  EXPECT_EQ(json::parse(json_list.out)["nodes"][0]["state"], "draining");
  EXPECT_EQ(Cli({"nodes", "undrain", "node-h100-01"}, kAdminToken).out, "node-h100-01: ready\n");
  // A node added whose agent has not joined yet is listed as such.
  ASSERT_EQ(Cli({"nodes", "add", "gpu-07"}, kAdminToken).exit_code, 0);
  auto waiting = Cli({"nodes", "list"}, kAdminToken);
  EXPECT_TRUE(std::regex_search(waiting.out, std::regex("gpu-07 +waiting_for_agent ")))
      << waiting.out;
  EXPECT_EQ(
      json::parse(
          Cli({"nodes", "list", "-o", "json"}, kAdminToken).out)["waiting_for_agent"][0]["id"],
      "gpu-07");
  // Removed: its token no longer works and it is listed nowhere; a fleet file's node is not.
  auto removed = Cli({"nodes", "remove", "gpu-07"}, kAdminToken);
  EXPECT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_EQ(removed.out, "gpu-07: removed\n");
  EXPECT_EQ(Cli({"nodes", "list"}, kAdminToken).out.find("gpu-07"), std::string::npos);
  auto fleet_node = Cli({"nodes", "remove", "node-h100-01", "--force"}, kAdminToken);
  EXPECT_EQ(fleet_node.exit_code, 1);
  EXPECT_NE(fleet_node.err.find("comes from the fleet file"), std::string::npos) << fleet_node.err;
  auto bad = Call("DELETE", "/v1/nodes/gpu-07?force=yes", kAdminToken);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("query parameter 'force'"), std::string::npos) << bad.raw;
}

// `nodes set-gpu-mode` on a node joined over HTTP, its agent played by the test: exclusive to
// shared at once; into MIG a request, a reset it waits for (and the hint to allow it), and with
// --allow-reset --wait the agent's result, exit 0 once applied.
TEST_F(ClientCliTest, NodesSetGpuModeAppliesOrWaitsForTheAgent) {
  auto added = Post("/v1/nodes", kAdminToken, {{"name", "gpu-x"}});
  ASSERT_EQ(added.status, 201) << added.raw;
  const std::string node_token = added.body["token"];
  json gpus = json::array();
  for (int i = 0; i < 2; ++i) {
    gpus.push_back({{"index", i}, {"uuid", "gpu-x-u" + std::to_string(i)}, {"model", "H100-80GB"}});
  }
  auto registered =
      Post("/v1/agent/register", node_token,
           {{"protocol", 1},
            {"agent_id", "t1"},
            {"inventory", {{"cpu_milli", 8000}, {"memory_mib", 65536}, {"gpus", gpus}}}});
  ASSERT_EQ(registered.status, 200) << registered.raw;
  int64_t seq = 0;
  auto report = [&](const std::string& state, const std::string& reason) {
    auto r = Post(
        "/v1/agent/sync", node_token,
        {{"protocol", 1},
         {"agent_id", "t1"},
         {"seq", ++seq},
         {"generation", 0},
         {"gpu_mode_results", {{{"id", 1}, {"gpu", 1}, {"state", state}, {"reason", reason}}}}});
    ASSERT_EQ(r.status, 200) << r.raw;
  };

  auto shared = Cli({"nodes", "set-gpu-mode", "gpu-x", "0", "shared"}, kAdminToken);
  EXPECT_EQ(shared.exit_code, 0) << shared.err;
  EXPECT_EQ(shared.out, "gpu-x GPU 0: shared mode applied\n");
  auto requested = Cli({"nodes", "set-gpu-mode", "gpu-x", "1", "mig"}, kAdminToken);
  EXPECT_EQ(requested.exit_code, 0) << requested.err;
  EXPECT_EQ(requested.out, "gpu-x GPU 1: mig mode requested (request 1), waiting for its agent\n");
  auto bad = Cli({"nodes", "set-gpu-mode", "gpu-x", "7", "shared"}, kAdminToken);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("field 'index'"), std::string::npos) << bad.err;

  report("pending_reset", "the driver applies it at the next reset");
  auto pending = Cli({"nodes", "set-gpu-mode", "gpu-x", "1", "mig"}, kAdminToken);
  EXPECT_NE(pending.out.find("mig mode waits for a reset of the GPU: the driver applies it"),
            std::string::npos)
      << pending.out;
  EXPECT_NE(pending.out.find("tessera nodes set-gpu-mode gpu-x 1 mig --allow-reset"),
            std::string::npos)
      << pending.out;

  auto waited = std::async(std::launch::async, [&] {
    return Cli({"nodes", "set-gpu-mode", "gpu-x", "1", "mig", "--allow-reset", "--wait"},
               kAdminToken);
  });
  // Once the operator allowed it, the agent resets the GPU and answers.
  ASSERT_TRUE(WaitFor(
      [&] {
        const json n = Get("/v1/nodes/gpu-x", kAdminToken).body;
        return n["gpus"][1]["mode_change"].value("allow_reset", false);
      },
      std::chrono::seconds(10)));
  report("applied", "");
  const testing::CommandResult done = waited.get();
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_EQ(done.out, "gpu-x GPU 1: mig mode applied\n");
  EXPECT_EQ(Get("/v1/nodes/gpu-x", kAdminToken).body["gpus"][1]["mode"], "mig");
}

// Volumes from the command line (docs/volumes.md): made, mounted by an instance on the fleet's
// node it names, listed with their state, refused while mounted, deleted after.
TEST_F(ClientCliTest, VolumesAreMadeMountedListedAndDeleted) {
  const std::string token = NewTenant("acme", 4);
  auto made =
      Cli({"volumes", "create", "ckpt", "--size-gib", "20", "--node", "node-h100-01"}, token);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_TRUE(std::regex_search(made.out, std::regex("ckpt +vol-000001 +20 GiB +- +node-h100-01 "
                                                     "+false +available")))
      << made.out;
  auto inst = Cli({"instances", "create", "--type", "gpu.1xh100", "--volume", "ckpt:/ckpt",
                   "--port", "8000", "-o", "json"},
                  token);
  ASSERT_EQ(inst.exit_code, 0) << inst.err;
  const json j = json::parse(inst.out);
  EXPECT_EQ(j["node"], "node-h100-01");
  EXPECT_EQ(j["volumes"], json::parse(R"([{"name":"ckpt","path":"/ckpt"}])"));
  EXPECT_EQ(j["ports"], json::array({8000}));
  auto listed = Cli({"volumes", "list"}, token);
  EXPECT_TRUE(
      std::regex_search(listed.out, std::regex("ckpt .* attached +" + j["id"].get<std::string>())))
      << listed.out;
  auto refused = Cli({"volumes", "delete", "ckpt"}, token);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("is attached to " + j["id"].get<std::string>()), std::string::npos)
      << refused.err;
  auto malformed = Cli({"instances", "create", "--type", "gpu.1xh100", "--volume", "ckpt"}, token);
  EXPECT_NE(malformed.exit_code, 0);
  EXPECT_NE(malformed.err.find("--volume: 'ckpt' is not NAME:PATH"), std::string::npos)
      << malformed.err;
  ASSERT_EQ(Cli({"instances", "delete", j["id"]}, token).exit_code, 0);
  ASSERT_EQ(AwaitState(token, j["id"], "terminated"), "terminated");
  auto deleted = Cli({"volumes", "delete", "ckpt", "-o", "json"}, token);
  ASSERT_EQ(deleted.exit_code, 0) << deleted.err;
  EXPECT_EQ(json::parse(deleted.out)["state"], "deleted") << "no agent of ours made its data";
  auto none = Cli({"volumes", "get", "ckpt"}, token);
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("volume 'ckpt' not found"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace tessera
