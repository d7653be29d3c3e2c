// Groups through a real server process with its simulated agents: a gang's members run as real
// processes with their rank environment, a gang that does not fit waits holding nothing, errors
// name the template's field, and another tenant sees none of it. The CLI drives the same API.
#include <fmt/format.h>

#include <cctype>
#include <csignal>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

class ServerGroupsTest : public ServerTest {
 protected:
  // The instance's log once it holds `want`, or what it holds after 10 s.
  std::string AwaitLog(const std::string& token, const std::string& id, const std::string& want) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      const std::string log = Call("GET", "/v1/instances/" + id + "/logs", token).raw;
      if (log.find(want) != std::string::npos || std::chrono::steady_clock::now() >= end) {
        return log;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  static json Gang(int size, int gpus, const std::string& command) {
    json member = H100(gpus, "on_demand");
    member["command"] = command;
    return {{"name", "ddp"}, {"size", size}, {"topology", "nvlink"}, {"template", member}};
  }
};

// The port in a member's log line "... master=ADDR:PORT"; 0 when absent.
int MasterPort(const std::string& log) {
  const size_t master = log.find("master=");
  const size_t colon = master == std::string::npos ? master : log.find(':', master);
  if (colon == std::string::npos) return 0;
  int port = 0;
  for (size_t i = colon + 1; i < log.size() && std::isdigit(static_cast<unsigned char>(log[i]));
       ++i) {
    port = port * 10 + (log[i] - '0');
  }
  return port;
}

TEST_F(ServerGroupsTest, AGangRunsWithItsRanksAndOnlyItsTenantSeesIt) {
  // Something on the node already listens on torchrun's default port: rank 0's agent must
  // reserve another. (Held when this process can bind it; a parallel test may hold it instead.)
  auto held = std::make_unique<testing::TcpListener>(29500);
  const bool holds_29500 = held->port() == 29500;
  const std::string acme = NewTenant("acme", 8);
  auto created = Post("/v1/groups", acme,
                      Gang(2, 1,
                           "echo rank=$RANK of $WORLD_SIZE local=$LOCAL_RANK "
                           "master=$MASTER_ADDR:$MASTER_PORT; sleep 60"));
  ASSERT_EQ(created.status, 201) << created.raw;
  const json& g = created.body;
  EXPECT_EQ(g["state"], "running");
  EXPECT_EQ(g["placed"], 2);
  const std::string id = g["id"];
  std::vector<int> ports;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string member = g["members"][rank]["instance"];
    EXPECT_EQ(AwaitState(acme, member, "running"), "running");
    const std::string want = fmt::format("rank={} of 2 local={} master={}:", rank, rank,
                                         g["members"][0]["node"].get<std::string>());
    const std::string log = AwaitLog(acme, member, want);
    EXPECT_NE(log.find(want), std::string::npos) << log;
    ports.push_back(MasterPort(log));
    auto shown = Get("/v1/instances/" + member, acme);
    EXPECT_EQ(shown.body["group"], id);
    EXPECT_EQ(shown.body["rank"], rank);
  }
  // Both ranks meet at the port rank 0's agent reserved in its rendezvous range.
  EXPECT_EQ(ports[0], ports[1]);
  EXPECT_GE(ports[0], 29500);
  EXPECT_LE(ports[0], 29999);
  if (holds_29500) {
    EXPECT_NE(ports[0], 29500) << "the agent handed out a port in use";
  }
  held.reset();
  // The fleet's H100 node has two GPUs: a gang needing two more waits and holds nothing.
  auto waits = Post("/v1/groups", acme, Gang(1, 2, "sleep 60"));
  ASSERT_EQ(waits.status, 201) << waits.raw;
  EXPECT_EQ(waits.body["state"], "waiting");
  EXPECT_EQ(waits.body["placed"], 0);
  EXPECT_NE(waits.body.value("reason", "").find("waiting for room"), std::string::npos);
  // A member is not deleted alone.
  const std::string rank0 = g["members"][0]["instance"];
  EXPECT_EQ(Call("DELETE", "/v1/instances/" + rank0, acme).status, 409);
  // Errors name the field.
  json bad = Gang(2, 1, "true");
  bad["template"]["gpus"] = "two";
  auto refused = Post("/v1/groups", acme, bad);
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.raw.find("template.gpus"), std::string::npos) << refused.raw;
  json big = Gang(2, 1, "true");
  big["min_available"] = 3;
  EXPECT_NE(Post("/v1/groups", acme, big).raw.find("min_available"), std::string::npos);
  // Another tenant sees none of it.
  const std::string beta = NewTenant("beta", 8);
  EXPECT_EQ(Get("/v1/groups/" + id, beta).status, 404);
  EXPECT_EQ(Get("/v1/groups", beta).body["groups"].size(), 0u);
  EXPECT_EQ(Call("DELETE", "/v1/groups/" + id, beta).status, 404);
  json scale = {{"size", 1}};
  EXPECT_EQ(Call("PATCH", "/v1/groups/" + id, beta, &scale).status, 404);
  // Deleting the group stops its members; the waiting gang then runs.
  auto deleted = Call("DELETE", "/v1/groups/" + id, acme);
  EXPECT_EQ(deleted.status, 200);
  EXPECT_EQ(deleted.body["state"], "deleted");
  EXPECT_EQ(AwaitState(acme, rank0, "terminated"), "terminated");
  const std::string next = waits.body["members"][0]["instance"];
  EXPECT_EQ(AwaitState(acme, next, "running"), "running");
  EXPECT_EQ(Get("/v1/groups/" + waits.body["id"].get<std::string>(), acme).body["state"],
            "running");
}

TEST_F(ServerGroupsTest, AReservedGangClaimsOneUnitAMemberOrIsRefusedWhole) {
  const std::string acme = NewTenant("acme", 8);
  auto resv = Post("/v1/reservations", acme,
                   {{"instance_type", "gpu.1xh100"}, {"count", 2}, {"term", "1y"}});
  ASSERT_EQ(resv.status, 201) << resv.raw;
  json body = Gang(3, 1, "sleep 60");
  body["template"]["billing"] = "reserved";
  auto refused = Post("/v1/groups", acme, body);
  EXPECT_EQ(refused.status, 409) << refused.raw;
  EXPECT_EQ(refused.body["error"]["code"], "no_reservation") << refused.raw;
  EXPECT_EQ(Get("/v1/instances", acme).body["instances"].size(), 0u) << "a refused gang made some";
  body["size"] = 2;
  auto created = Post("/v1/groups", acme, body);
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_EQ(created.body["state"], "running");
  EXPECT_EQ(Get("/v1/reservations", acme).body["reservations"][0]["used"], 2);
  json grow = {{"size", 3}};
  auto grown = Call("PATCH", "/v1/groups/" + created.body["id"].get<std::string>(), acme, &grow);
  EXPECT_EQ(grown.status, 409) << grown.raw;
  EXPECT_EQ(Get("/v1/groups/" + created.body["id"].get<std::string>(), acme).body["size"], 2);
}

TEST_F(ServerGroupsTest, TheCliCreatesListsScalesAndDeletesGroups) {
  const std::string acme = NewTenant("acme", 8);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--url", server_->url(), "--token", acme});
    return testing::RunTessera(args);
  };
  auto created = run({"groups",      "create", "--name",       "web",       "--size",    "2",
                      "--placement", "spread", "--gpu-model",  "H100-80GB", "--gpus",    "1",
                      "--vcpus",     "2",      "--memory-mib", "1024",      "--command", "sleep 60",
                      "--elastic",   "1:2",    "-o",           "json"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const json g = json::parse(created.out);
  EXPECT_EQ(g["name"], "web");
  EXPECT_EQ(g["elastic"], json({{"min", 1}, {"max", 2}}));
  EXPECT_EQ(g["placement"], "spread");
  const std::string id = g["id"];
  auto list = run({"groups", "list"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_NE(list.out.find(id), std::string::npos) << list.out;
  EXPECT_NE(list.out.find(" 1:2 "), std::string::npos) << list.out;
  auto scaled = run({"groups", "scale", id, "1", "-o", "json"});
  ASSERT_EQ(scaled.exit_code, 0) << scaled.err;
  EXPECT_EQ(json::parse(scaled.out)["members"].size(), 1u);
  EXPECT_EQ(json::parse(scaled.out)["restarts"], 0) << "an elastic group resizes in place";
  auto beyond = run({"groups", "scale", id, "3"});
  EXPECT_NE(beyond.exit_code, 0);
  EXPECT_NE(beyond.err.find("elastic [min, max] = [1, 2]"), std::string::npos) << beyond.err;
  auto vague = run({"groups", "create", "--size", "2", "--gpu-model", "H100-80GB", "--gpus", "1",
                    "--elastic", "2-8"});
  EXPECT_NE(vague.exit_code, 0);
  EXPECT_NE(vague.err.find("MIN:MAX"), std::string::npos) << vague.err;
  auto shown = run({"groups", "get", id});
  EXPECT_NE(shown.out.find("RANK"), std::string::npos) << shown.out;
  EXPECT_EQ(run({"groups", "delete", id}).exit_code, 0);
  auto unknown = run({"groups", "get", "grp-999999"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("not found"), std::string::npos) << unknown.err;
}

TEST_F(ServerGroupsTest, TheAutoscalerFollowsTheBacklogAndSaysSoInTheAuditAndMetrics) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  StartServer({"--sim-agents", "--autoscale-interval", "200ms"});
  const std::string acme = NewTenant("acme", 8);
  json body = Gang(1, 1, "sleep 60");
  body["topology"] = "any";
  body["autoscale"] = {{"min", 1}, {"max", 2}, {"metric", "pending"}, {"target", 10}};
  auto created = Post("/v1/groups", acme, body);
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  json backlog = {{"pending", 40}};  // 40 for one member against 10: 4 wanted, 2 at most.
  ASSERT_EQ(Call("PUT", "/v1/groups/" + id + "/backlog", acme, &backlog).status, 200);
  json g;
  for (int i = 0; i < 100; ++i) {
    g = Get("/v1/groups/" + id, acme).body;
    if (g["size"] == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(g["size"], 2) << g.dump();
  EXPECT_EQ(g["autoscale_status"]["scale_ups"], 1);
  EXPECT_NE(g["autoscale_status"]["last_decision"].get<std::string>().find("pending 40.0"),
            std::string::npos)
      << g.dump();
  // The decision is audited with its inputs, and counted on /metrics.
  bool audited = false;
  const HttpReply audit = Get("/v1/audit", kAdminToken);
  for (const json& e : audit.body["entries"]) {
    if (e["actor"] == "autoscaler" && e["target"] == id) audited = true;
  }
  EXPECT_TRUE(audited) << audit.raw;
  const std::string metrics = Call("GET", "/metrics", kAdminToken).raw;
  EXPECT_NE(metrics.find("tessera_group_autoscale_decisions_total{group=\"" + id +
                         "\",tenant=\"tenant-000001\",direction=\"up\"} 1"),
            std::string::npos)
      << metrics.substr(0, 2000);
  if (auto problems = testing::PromtoolProblems(metrics)) {
    EXPECT_EQ(*problems, "");
  }
  // A cron field out of range is a 400 naming the entry and the field.
  json bad = body;
  bad["autoscale"]["schedule"] = {{{"cron", "0 14 * 13 1-5"}, {"min", 2}}};
  auto refused = Post("/v1/groups", acme, bad);
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.raw.find("autoscale.schedule[0].cron"), std::string::npos) << refused.raw;
  EXPECT_NE(refused.raw.find("month"), std::string::npos) << refused.raw;
  // Another tenant cannot report a backlog for it.
  const std::string beta = NewTenant("beta", 8);
  EXPECT_EQ(Call("PUT", "/v1/groups/" + id + "/backlog", beta, &backlog).status, 404);
}

TEST_F(ServerGroupsTest, KillNineMidScaleOutLeavesEachGroupWholeOrWaiting) {
  const std::string acme = NewTenant("acme", 8);
  // The fleet's H100 node has two GPUs: a gang of one member of one GPU, scaled out to two while
  // a gang of two waits for both GPUs, and the server killed the moment the change is answered.
  // The first is elastic: its scale-out adds a member beside the running one.
  json elastic = Gang(1, 1, "sleep 60");
  elastic["elastic"] = {{"min", 1}, {"max", 2}};
  auto small = Post("/v1/groups", acme, elastic);
  ASSERT_EQ(small.status, 201) << small.raw;
  auto pair = Post("/v1/groups", acme, Gang(1, 2, "sleep 60"));
  ASSERT_EQ(pair.status, 201) << pair.raw;
  ASSERT_EQ(pair.body["state"], "waiting");
  const std::string small_id = small.body["id"], pair_id = pair.body["id"];
  json scale = {{"size", 2}};
  ASSERT_EQ(Call("PATCH", "/v1/groups/" + small_id, acme, &scale).status, 200);
  server_->Stop(SIGKILL);
  StartServer();
  const json a = Get("/v1/groups/" + small_id, acme).body;
  const json b = Get("/v1/groups/" + pair_id, acme).body;
  EXPECT_EQ(a["size"], 2) << a.dump();
  EXPECT_EQ(a["placed"], 2) << "the scale-out was answered, so it is durable: " << a.dump();
  EXPECT_EQ(b["state"], "waiting") << b.dump();
  EXPECT_EQ(b["placed"], 0) << "never half placed: " << b.dump();
  // The freed GPUs go to the waiting gang whole once the first group is gone.
  ASSERT_EQ(Call("DELETE", "/v1/groups/" + small_id, acme).status, 200);
  json after;
  for (int i = 0; i < 200; ++i) {
    after = Get("/v1/groups/" + pair_id, acme).body;
    if (after["placed"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(after["state"], "running") << after.dump();
  EXPECT_EQ(after["placed"], 1);
}

TEST_F(ServerGroupsTest, AnEndedGroupLeavesMemoryAfterTheRetentionAndTheStoreStillAnswers) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  StartServer({"--sim-agents", "--instance-retention", "1s"});
  const std::string acme = NewTenant("acme", 8);
  auto created = Post("/v1/groups", acme, Gang(2, 1, "echo done"));
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  ASSERT_TRUE(WaitFor([&] { return Get("/v1/groups", acme).body["groups"].empty(); },
                      std::chrono::seconds(15)))
      << "an ended group leaves memory and lists: " << Get("/v1/groups", acme).raw;
  auto archived = Get("/v1/groups/" + id, acme);
  ASSERT_EQ(archived.status, 200) << archived.raw;
  EXPECT_EQ(archived.body["state"], "succeeded");
  EXPECT_EQ(archived.body["id"], id);
  EXPECT_EQ(Get("/v1/groups/" + id, NewTenant("beta", 1)).status, 404)
      << "another tenant does not see it in the store either";
}

}  // namespace
}  // namespace tessera
