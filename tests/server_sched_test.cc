// End-to-end tests of queueing, priorities and spot preemption through the real server.
#include <csignal>
#include <filesystem>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

std::string State(const HttpReply& r) { return r.body.value("state", "?"); }

class ServerSchedTest : public ServerTest {
 protected:
  std::string Create(const std::string& token, json body) {
    auto r = Post("/v1/instances", token, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", "");
  }
  std::string StateOf(const std::string& token, const std::string& id) {
    return State(Get("/v1/instances/" + id, token));
  }
};

TEST_F(ServerSchedTest, WorkThatDoesNotFitWaitsAndRunsWhenCapacityFrees) {
  const std::string t = NewTenant("acme", 16);
  const std::string a = Create(t, H100(1, "on_demand"));
  const std::string b = Create(t, H100(1, "on_demand"));
  const std::string c = Create(t, H100(1, "on_demand"));
  EXPECT_EQ(AwaitState(t, a, "running"), "running");
  EXPECT_EQ(AwaitState(t, b, "running"), "running");
  EXPECT_EQ(StateOf(t, c), "pending");
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + a, t).status, 200);
  EXPECT_EQ(AwaitState(t, c, "running"), "running");
}

// On an openb node list every GPU is in shared mode, and whole-GPU work runs on a GPU that holds
// no share, as in openb's cluster and in `tessera sim`: the server and the simulator agree.
TEST_F(ServerSchedTest, OnAnOpenbNodeListWholeGpusRunOnIdleSharedGpus) {
  server_.reset();
  std::filesystem::remove_all(dir_.File("data"));
  const std::string nodes =
      dir_.Write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nt4-01,64000,262144,2,T4\n");
  StartServer({"--sim-agents", "--fleet", nodes}, /*with_fleet=*/false);
  const std::string t = NewTenant("acme", 16);
  const std::string whole = Create(t, {{"billing", "on_demand"}, {"instance_type", "gpu.1xt4"}});
  EXPECT_EQ(AwaitState(t, whole, "running"), "running");
  const std::string share = Create(t, {{"billing", "on_demand"},
                                       {"gpu_model", "T4-16GB"},
                                       {"milli_gpu", 500},
                                       {"gpu_memory_mib", 4096},
                                       {"vcpus", 2},
                                       {"memory_mib", 4096}});
  EXPECT_EQ(AwaitState(t, share, "running"), "running");
  const json a = Get("/v1/instances/" + whole, t).body, b = Get("/v1/instances/" + share, t).body;
  EXPECT_NE(a["gpus"][0].value("index", -1), b["gpus"][0].value("index", -1))
      << "a whole GPU is never shared: " << a.dump() << b.dump();
  // Both GPUs hold work now, one a share: another whole GPU waits.
  const std::string more = Create(t, {{"billing", "on_demand"}, {"instance_type", "gpu.1xt4"}});
  EXPECT_EQ(StateOf(t, more), "pending");
}

TEST_F(ServerSchedTest, ALargeRequestDoesNotBlockSmallerOnes) {
  const std::string t = NewTenant("acme", 16);
  const std::string one = Create(t, H100(1, "on_demand"));
  const std::string two = Create(t, H100(2, "on_demand"));  // Cannot fit while `one` runs.
  const std::string small = Create(t, H100(1, "on_demand"));
  EXPECT_EQ(StateOf(t, two), "pending");
  EXPECT_EQ(AwaitState(t, small, "running"), "running");
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + one, t).status, 200);
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + small, t).status, 200);
  EXPECT_EQ(AwaitState(t, two, "running"), "running");
}

TEST_F(ServerSchedTest, QueuedWorkRunsByPriorityThenArrival) {
  const std::string t = NewTenant("acme", 16);
  const std::string a = Create(t, H100(1, "on_demand"));
  const std::string b = Create(t, H100(1, "on_demand"));
  const std::string spot = Create(t, H100(1, "spot"));
  const std::string od1 = Create(t, H100(1, "on_demand"));
  const std::string od2 = Create(t, H100(1, "on_demand"));
  for (const auto& id : {spot, od1, od2}) EXPECT_EQ(StateOf(t, id), "pending");
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + a, t).status, 200);
  EXPECT_EQ(AwaitState(t, od1, "running"), "running") << "on-demand before spot, first come first";
  EXPECT_EQ(StateOf(t, od2), "pending");
  EXPECT_EQ(StateOf(t, spot), "pending");
}

TEST_F(ServerSchedTest, OnDemandPreemptsSpotWhichRestartsUnlessToldNot) {
  const std::string t = NewTenant("acme", 16);
  json keep = H100(1, "spot");
  json no_restart = H100(1, "spot");
  no_restart["restart"] = false;
  const std::string s1 = Create(t, keep);
  const std::string s2 = Create(t, no_restart);
  EXPECT_EQ(AwaitState(t, s1, "running"), "running");
  EXPECT_EQ(AwaitState(t, s2, "running"), "running");

  auto od = Post("/v1/instances", t, H100(2, "on_demand"));
  ASSERT_EQ(od.status, 201) << od.raw;
  EXPECT_EQ(State(od), "scheduled") << "placed at once by preempting both spot instances";

  auto r1 = Get("/v1/instances/" + s1, t);
  EXPECT_EQ(State(r1), "pending") << "auto-restart re-queues it";
  EXPECT_EQ(r1.body["restarts"], 1);
  const std::string reason = r1.body["reason"];
  EXPECT_EQ(reason.rfind("preempted by higher-priority work; restarting", 0), 0u) << r1.raw;
  EXPECT_EQ(reason.find(od.body["id"].get<std::string>()), std::string::npos)
      << "a reason never names another (maybe another tenant's) instance";
  EXPECT_TRUE(r1.body.contains("preempted_at"));
  auto r2 = Get("/v1/instances/" + s2, t);
  EXPECT_EQ(State(r2), "preempted");
  EXPECT_EQ(r2.body["restarts"], 0);
  EXPECT_TRUE(r2.body.contains("preempted_at"));
  // It holds nothing (the on-demand instance runs on its GPU) and still says where it ran.
  EXPECT_EQ(r2.body["gpus"].size(), 1u) << r2.raw;
  EXPECT_EQ(r2.body["node"], od.body["node"]) << r2.raw;
}

TEST_F(ServerSchedTest, PreemptionEvictsTheFewestVictims) {
  const std::string t = NewTenant("acme", 16);
  // Two spot shares on the one L40S; one spot H100 and one on-demand H100.
  const std::string big_spot = Create(t, H100(1, "spot"));
  const std::string od = Create(t, H100(1, "on_demand"));
  (void)od;
  // A reserved request for one H100 must evict exactly the one spot H100, nothing else: the
  // reservation's capacity ran spot work while unclaimed.
  const std::string share1 =
      Create(t, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
  auto reservation =
      Post("/v1/reservations", t, {{"instance_type", "gpu.1xh100"}, {"count", 1}, {"term", "1y"}});
  ASSERT_EQ(reservation.status, 201) << reservation.raw;
  auto reserved = Post("/v1/instances", t, H100(1, "reserved"));
  ASSERT_EQ(reserved.status, 201);
  EXPECT_EQ(State(reserved), "scheduled");
  EXPECT_EQ(StateOf(t, big_spot), "pending");
  EXPECT_EQ(AwaitState(t, share1, "running"), "running") << "spot on another node is left alone";
  EXPECT_EQ(AwaitState(t, od, "running"), "running")
      << "on-demand is never preempted for reserved here";
}

TEST_F(ServerSchedTest, APreemptedSpotInstanceRestartsAtOnceWhereItFits) {
  // Two nodes of two H100s. Place an on-demand GPU on one and a spot GPU on the other, leaving
  // one GPU free on each; then a two-GPU on-demand request must evict the spot instance, which
  // restarts on the other node's free GPU.
  server_->Stop(SIGKILL);
  fleet_path_ = dir_.Write("two.json", R"({"name": "two", "shapes": [
      {"name": "h100", "count": 2, "gpu_model": "H100-80GB", "gpus": 2, "vcpus": 64,
       "memory_gib": 512, "gpu_mode": "exclusive"}]})");
  std::filesystem::remove_all(dir_.File("data"));
  StartServer();
  const std::string t = NewTenant("acme", 16);
  auto drain = [&](const std::string& node, bool on) {
    ASSERT_EQ(Post("/v1/nodes/" + node + (on ? "/drain" : "/undrain"), kAdminToken, json::object())
                  .status,
              200);
  };
  drain("node-h100-02", true);
  const std::string od = Create(t, H100(1, "on_demand"));
  drain("node-h100-02", false);
  drain("node-h100-01", true);
  const std::string spot = Create(t, H100(1, "spot"));
  drain("node-h100-01", false);
  ASSERT_EQ(Get("/v1/instances/" + spot, t).body["node"], "node-h100-02");

  auto big = Post("/v1/instances", t, H100(2, "on_demand"));
  ASSERT_EQ(big.status, 201);
  EXPECT_EQ(big.body["node"], "node-h100-02");
  EXPECT_EQ(AwaitState(t, spot, "running"), "running");
  auto restarted = Get("/v1/instances/" + spot, t);
  EXPECT_EQ(restarted.body["node"], "node-h100-01");
  EXPECT_EQ(restarted.body["restarts"], 1);
  EXPECT_EQ(AwaitState(t, od, "running"), "running");
}

TEST_F(ServerSchedTest, SpotNeverPreemptsAnything) {
  const std::string t = NewTenant("acme", 16);
  const std::string a = Create(t, H100(2, "spot"));
  auto b = Post("/v1/instances", t, H100(1, "spot"));
  EXPECT_EQ(State(b), "pending");
  EXPECT_EQ(AwaitState(t, a, "running"), "running");
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// `--batch-window 2`: a one-GPU create waits for a second; the two-GPU create that follows fills
// the window and is placed first, on the node of two GPUs.
TEST_F(ServerSchedTest, ABatchWindowPlacesTheLargerOfTwoCreatesFirst) {
  StartServer({"--sim-agents", "--batch-window", "2", "--batch-wait", "10s"});
  const std::string t = NewTenant("acme", 16);
  auto one = Post("/v1/instances", t, H100(1, "on_demand"));
  ASSERT_EQ(one.status, 201) << one.raw;
  EXPECT_EQ(one.body["state"], "pending");
  EXPECT_EQ(one.body["reason"], "in the batch window: placed with up to 1 others within 10000 ms");
  const std::string two = Create(t, H100(2, "on_demand"));
  EXPECT_EQ(AwaitState(t, two, "running"), "running");
  const auto waiting = Get("/v1/instances/" + one.body["id"].get<std::string>(), t);
  EXPECT_EQ(State(waiting), "pending");
  EXPECT_EQ(waiting.body["reason"].get<std::string>().find("batch window"), std::string::npos)
      << waiting.raw;

  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--batch-window", "65"},
                                              {"--batch-window", "0"},
                                              {"--batch-wait", "20s"},
                                              {"--batch-wait", "soon"}}) {
    std::vector<std::string> args = {"server", "--sim-agents"};
    args.insert(args.end(), bad.begin(), bad.end());
    const auto r = testing::RunTessera(args);
    EXPECT_EQ(r.exit_code, 2) << bad[0] << " " << bad[1];
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
  }
}

// With --repack, a share that finds no room moves a migratable share to the node's other GPU and
// takes its place; the moved one restarts there and says why. (The server's simulated agents stop
// it at once; a joined node's agent gives it notice first: core/instance_repack_test.cc.)
TEST_F(ServerSchedTest, WithRepackingAMigratableShareMovesToMakeRoomAndSaysWhy) {
  server_.reset();
  std::filesystem::remove_all(dir_.File("data"));
  const std::string nodes =
      dir_.Write("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nt4-01,64000,262144,2,T4\n");
  StartServer({"--sim-agents", "--repack", "--fleet", nodes}, /*with_fleet=*/false);
  const std::string t = NewTenant("acme", 16);
  auto share = [](int milli, bool migratable) {
    return json{{"billing", "on_demand"}, {"gpu_model", "T4-16GB"},
                {"milli_gpu", milli},     {"vcpus", 2},
                {"memory_mib", 4096},     {"migratable", migratable}};
  };
  // f (700) and a (300) fill one GPU, b (500) half the other; f leaves.
  const std::string f = Create(t, share(700, false));
  const std::string a = Create(t, share(300, true));
  const std::string b = Create(t, share(500, false));
  for (const std::string& id : {f, a, b}) EXPECT_EQ(AwaitState(t, id, "running"), "running");
  const int a_gpu = Get("/v1/instances/" + a, t).body["gpus"][0]["index"];
  ASSERT_NE(Get("/v1/instances/" + b, t).body["gpus"][0]["index"], a_gpu)
      << "the test's premise: a shares f's GPU";
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + f, t).status, 200);
  EXPECT_EQ(AwaitState(t, f, "terminated"), "terminated");
  // w (800) fits only once a moves.
  const std::string w = Create(t, share(800, false));
  EXPECT_EQ(AwaitState(t, w, "running"), "running");
  EXPECT_EQ(AwaitState(t, a, "running"), "running");
  const json moved = Get("/v1/instances/" + a, t).body;
  EXPECT_EQ(moved["restarts"], 1);
  EXPECT_NE(moved["gpus"][0]["index"], a_gpu);
  EXPECT_TRUE(moved.contains("moved_at")) << moved.dump();
  bool said = false;
  for (const json& h : moved["history"]) {
    said = said || h.value("reason", "")
                       .starts_with(
                           "moved to another GPU to make room for waiting work; restarting on node "
                           "'t4-01'");
  }
  EXPECT_TRUE(said) << moved.dump();
  EXPECT_EQ(Get("/v1/instances/" + w, t).body["gpus"][0]["index"], a_gpu);
  EXPECT_NE(Get("/metrics", kAdminToken).raw.find("tessera_repack_moves_total 1\n"),
            std::string::npos);

  const auto r = testing::RunTessera({"server", "--sim-agents", "--repack-cooldown", "soon"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--repack-cooldown"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
