// Groups on the core's state with a fake clock and nodes joined by agents (groups.cc): gangs placed
// all or nothing on NVLink islands and nodes, nothing held while they wait, no deadlock between
// gangs, members' rank environment, whole-group restarts, scaling, and a restart of the server.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <malloc.h>

#include <set>

#include "common/json.h"
#include "core/core.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "store/memory_store.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

// A node of `gpus` H100s whose NVLink islands are `islands` (each a list of GPU indices).
json Inventory(const std::string& node, int gpus, const std::vector<std::vector<int>>& islands) {
  json list = json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back(
        {{"index", i}, {"uuid", fmt::format("GPU-{}-{}", node, i)}, {"model", "H100-80GB"}});
  }
  return {
      {"cpu_milli", 256000}, {"memory_mib", 2097152}, {"gpus", list}, {"nvlink_islands", islands}};
}

std::vector<std::vector<int>> OneIsland(int gpus) {
  std::vector<int> all;
  for (int i = 0; i < gpus; ++i) all.push_back(i);
  return {all};
}

CreateInstanceRequest H100s(int gpus, Billing billing = Billing::kOnDemand) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.command = "train";
  r.shape.gpu_model = "H100-80GB";
  r.shape.gpus = gpus;
  r.shape.vcpus = 8;
  r.shape.memory_mib = 1024;
  r.shape.nvlink = gpus > 1;
  return r;
}

GroupRequest Gang(int size, int gpus, Topology topology = Topology::kNvlink,
                  Placement placement = Placement::kPack) {
  GroupRequest g;
  g.name = "train";
  g.member = H100s(gpus);
  g.size = size;
  g.min_available = size;
  g.topology = topology;
  g.placement = placement;
  return g;
}

class GroupsTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    StateOptions o;
    o.node_timeout = 10s;
    o.spot_notice = 5s;
    MakeState(o, 1'000'000);
  }

  void Join(const std::string& name, int gpus, std::vector<std::vector<int>> islands) {
    ASSERT_TRUE(JoinNode(name, Inventory(name, gpus, islands), agent_).ok());
    nodes_[name] = {gpus, islands};
  }

  json Create(const GroupRequest& g) {
    state_->BeginRound();
    auto out = state_->CreateGroup(Acme(), g, batch_);
    state_->EndRound(batch_);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : json();
  }

  json Get(const std::string& id) {
    auto g = state_->GetGroup(Acme(), id);
    EXPECT_TRUE(g.ok());
    return g.ok() ? *g : json();
  }

  Instance Member(const json& group, int rank) {
    return *state_->GetInstance(Acme(), group["members"][rank]["instance"].get<std::string>());
  }

  // The node's agent reports `reports` in one round.
  void Sync(const std::string& node, std::vector<AgentReport> reports = {}) {
    const Status s = SyncRound(*state_, node, agent_, ++seq_[node], std::move(reports), batch_);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  AgentReport Report(const Instance& inst, InstanceState to, std::optional<int> exit_code = {}) {
    AgentReport r;
    r.instance = inst.id.str();
    r.attempt = inst.restarts;
    if (to == InstanceState::kRunning) {
      r.started_at = clock_.Now();
    } else {
      r.state = to;
      r.exit_code = exit_code;
    }
    return r;
  }

  // A one-year reservation of `count` gpu.1xh100 for acme, starting now.
  void ReserveH100s(int count) {
    billing::ReservationRequest r;
    r.instance_type = "gpu.1xh100";
    r.count = count;
    r.term = "1y";
    ASSERT_TRUE(state_->CreateReservation(Acme(), r, batch_).ok());
  }

  // What the instance's agent is told of it: null when it is not listed.
  json Workload(const Instance& inst) {
    const json desired = state_->DesiredState(inst.node);
    for (const json& w : desired["workloads"]) {
      if (w["id"] == inst.id.str()) return w;
    }
    return nullptr;
  }

  // Free whole GPUs on `node`.
  int FreeGpus(const std::string& node) {
    int free = 0;
    for (const fleet::Node& n : state_->fleet().nodes()) {
      if (n.name != node) continue;
      for (const fleet::Gpu& g : n.gpus) free += g.free_milli == fleet::kMilliPerGpu;
    }
    return free;
  }

  std::set<std::string> NodesOf(const json& group) {
    std::set<std::string> nodes;
    for (const json& m : group["members"]) {
      if (m["node"].is_string()) nodes.insert(m["node"].get<std::string>());
    }
    return nodes;
  }

  void Commit() {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
  }

  // On two 8-GPU nodes, 10,000 instances and 1,000 gangs of two, 16 at a time, each member
  // printing a 200-byte line and exiting 0. With `keep`, each step is committed to the store;
  // else the batch is dropped (a test of the state's own memory).
  void RunThroughTheirLives(bool keep) {
    Join("n1", 8, OneIsland(8));
    Join("n2", 8, OneIsland(8));
    // Each starts, prints a line and exits 0, in a round per node per step.
    auto live = [&](const std::vector<Instance>& insts) {
      for (const bool start : {true, false}) {
        std::map<std::string, AgentSync> by_node;
        for (const Instance& i : insts) {
          AgentSync& s = by_node[i.node];
          s.reports.push_back(start ? Report(i, InstanceState::kRunning)
                                    : Report(i, InstanceState::kTerminated, 0));
          if (!start) s.logs.push_back({i.id.str(), i.restarts, 0, std::string(200, 'x') + "\n"});
        }
        for (auto& [node, s] : by_node) {
          s.agent_id = agent_;
          s.seq = ++seq_[node];
          ASSERT_TRUE(SyncNode(node, s).ok());
        }
      }
    };
    auto step = [&] {
      if (keep) {
        Commit();
      } else {
        batch_ = {};
      }
    };
    for (int done = 0; done < 10'000; done += 16) {
      std::vector<Instance> insts;
      for (int i = 0; i < 16; ++i) {
        auto inst = CreateInRound(TestH100(1));
        ASSERT_TRUE(inst.ok()) << inst.status().message();
        insts.push_back(*state_->GetInstance(Acme(), inst->id.str()));
      }
      live(insts);
      step();
    }
    for (int done = 0; done < 1'000; done += 8) {
      std::vector<Instance> members;
      for (int i = 0; i < 8; ++i) {
        const json g = Create(Gang(2, 1, Topology::kAny));
        members.push_back(Member(g, 0));
        members.push_back(Member(g, 1));
      }
      live(members);
      step();
    }
  }

  // The server restarts from its store, and every node's agent registers again.
  void Restart() {
    Commit();
    state_ = NewState();
    seq_.clear();
    agent_ += "'";
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
    for (const auto& [name, node] : nodes_) {
      ASSERT_TRUE(
          state_->RegisterAgent(name, {agent_, Inventory(name, node.first, node.second)}, batch_)
              .ok());
    }
  }

  std::map<std::string, int64_t> seq_;
  std::map<std::string, std::pair<int, std::vector<std::vector<int>>>> nodes_;
};

// Ended work leaves memory after the retention (1 hour): 10,000 short instances with output and
// 1,000 groups, run through their lives, leave no instance, log tail or group behind.
TEST_F(GroupsTest, EndedInstancesTheirLogsAndEndedGroupsLeaveMemoryAfterTheRetention) {
  RunThroughTheirLives(/*keep=*/true);
  EXPECT_EQ(state_->instances().size(), 12'000u);
  EXPECT_EQ(state_->log_tails(), 12'000u);
  ASSERT_EQ(state_->groups().size(), 1'000u);
  EXPECT_EQ(state_->groups().begin()->second.state, GroupState::kSucceeded);
  clock_.Advance(61min);
  for (const auto& [node, shape] : nodes_) Sync(node);
  EXPECT_EQ(state_->instances().size(), 0u);
  EXPECT_EQ(state_->log_tails(), 0u) << "log tails leave with their instances";
  EXPECT_EQ(state_->groups().size(), 0u) << "ended groups leave like ended instances";
  // A restart does not bring them back.
  Restart();
  EXPECT_EQ(state_->groups().size(), 0u);
}

// What the state holds comes back near where it started once the retention passed: the heap's
// bytes in use (glibc's count of allocated chunks, not the resident set, which a kept-mapped
// allocator does not give back), with the store's share left out (its batches are dropped).
TEST_F(GroupsTest, TheHeapInUseReturnsNearItsStartAfterTheRetention) {
  batch_ = {};
  const size_t start = mallinfo2().uordblks;
  RunThroughTheirLives(/*keep=*/false);
  batch_ = {};
  const size_t peak = mallinfo2().uordblks;
  clock_.Advance(61min);
  for (const auto& [node, shape] : nodes_) Sync(node);
  batch_ = {};
  const size_t end = mallinfo2().uordblks;
  ASSERT_GT(peak, start);
  const double kept =
      static_cast<double>(end > start ? end - start : 0) / static_cast<double>(peak - start);
  EXPECT_LT(kept, 0.05) << "of the " << (peak - start) / 1024 << " KiB the lives took, "
                        << (end > start ? end - start : 0) / 1024 << " KiB are still in use";
}

// A member that ended while its group ran is kept as long as the group lists it; once a restart or
// a scale-in drops it, it leaves memory after the retention like any ended instance, even though
// the group itself lives on.
TEST_F(GroupsTest, AMemberKeptForItsGroupLeavesMemoryOnceTheGroupDropsIt) {
  Join("n1", 8, OneIsland(8));
  const json g = Create(Gang(3, 1, Topology::kAny));
  ASSERT_EQ(g["state"], "running");
  const std::string id = g["id"];
  auto start = [&](const json& group) {
    std::vector<Instance> ms;
    for (int rank = 0; rank < 3; ++rank) ms.push_back(Member(group, rank));
    AgentReport r0 = Report(ms[0], InstanceState::kRunning);
    r0.port = 29500;
    Sync("n1",
         {r0, Report(ms[1], InstanceState::kRunning), Report(ms[2], InstanceState::kRunning)});
    return ms;
  };
  auto kept = [&](const Instance& m) { return state_->instances().Find(m.id.str()) != nullptr; };
  const std::vector<Instance> first = start(g);
  Sync("n1", {Report(first[2], InstanceState::kTerminated, 0)});  // Rank 2 is done early.
  clock_.Advance(61min);
  Sync("n1");
  EXPECT_TRUE(kept(first[2])) << "its group still lists it";
  // Rank 1 fails: the group restarts whole and lists a new attempt.
  Sync("n1", {Report(first[1], InstanceState::kFailed, 1)});
  Sync("n1", {Report(first[0], InstanceState::kTerminated, 0)});
  const json again = Get(id);
  ASSERT_EQ(again["state"], "running") << again.dump();
  const std::vector<Instance> second = start(again);
  Sync("n1", {Report(second[2], InstanceState::kTerminated, 0)});
  clock_.Advance(61min);
  Sync("n1");
  for (const Instance& m : first) EXPECT_FALSE(kept(m)) << m.id.str() << " of the last attempt";
  EXPECT_TRUE(kept(second[2]));
  // A scale-in drops the ended rank 2: it goes too, while ranks 0 and 1 run on.
  state_->BeginRound();
  ASSERT_TRUE(state_->ScaleGroup(Acme(), id, 2, batch_).ok());
  state_->EndRound(batch_);
  clock_.Advance(61min);
  Sync("n1");
  EXPECT_FALSE(kept(second[2]));
  EXPECT_TRUE(kept(second[0]) && kept(second[1]));
  EXPECT_EQ(state_->instances().size(), 2u);
}

// A group that restarts finds its volumes as they were: the new attempt's members go to the
// volumes' node however much room another node has, and a volume that is not shared, mounted by
// the one member of the old attempt, takes the new attempt's (docs/volumes.md).
TEST_F(GroupsTest, ARestartedGroupGoesBackToItsVolumesNode) {
  Join("n1", 2, OneIsland(2));
  Join("n2", 8, OneIsland(8));
  ASSERT_TRUE(state_->CreateVolume(Acme(), {"ckpt", 10, "n1", false}, "", batch_).ok());
  GroupRequest req = Gang(1, 1, Topology::kNode);
  req.member.volumes = {{"ckpt", "/ckpt"}};
  const json g = Create(req);
  const std::string id = g["id"];
  const Instance first = Member(g, 0);
  EXPECT_EQ(first.node, "n1");
  Sync("n1", {Report(first, InstanceState::kRunning)});
  Sync("n1", {Report(first, InstanceState::kFailed, 1)});
  const json again = Get(id);
  ASSERT_EQ(again["restarts"], 1) << again.dump();
  const Instance second = Member(again, 0);
  EXPECT_NE(second.id, first.id);
  EXPECT_EQ(second.node, "n1") << again.dump();
  EXPECT_EQ(second.volumes, req.member.volumes);
  EXPECT_EQ(state_->VolumeUsers(acme_.id.str(), "ckpt"), std::vector<std::string>{second.id.str()});
}

// A gang that uses its owner's whole quota restarts after a failure: the new attempt is admitted
// once the last one's members stopped, not beside them (which the quota would refuse).
TEST_F(GroupsTest, AGangAtItsQuotaRestartsOnceTheLastAttemptStopped) {
  Join("n1", 8, OneIsland(8));
  state_->BeginRound();
  const Tenant small = *state_->tenants().Create("small", 4000, "h-small", batch_);
  state_->EndRound(batch_);
  state_->BeginRound();
  auto created = state_->CreateGroup(small, Gang(2, 2, Topology::kNode), batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(created.ok()) << created.status().message();
  const std::string id = (*created)["id"];
  auto member = [&](const json& g, int rank) {
    return *state_->GetInstance(small, g["members"][rank]["instance"].get<std::string>());
  };
  const Instance r0 = member(*created, 0), r1 = member(*created, 1);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29500;
  Sync("n1", {started, Report(r1, InstanceState::kRunning)});
  Sync("n1", {Report(r1, InstanceState::kFailed, 1)});
  Sync("n1", {Report(r0, InstanceState::kTerminated, 143)});
  const json after = *state_->GetGroup(small, id);
  EXPECT_EQ(after["state"], "running") << after.dump();
  EXPECT_EQ(after["restarts"], 1);
  EXPECT_EQ(after["placed"], 2) << after.dump();
}

TEST_F(GroupsTest, AGangOfEightLandsOnOneEightGpuIslandOrWaitsHoldingNothing) {
  Join("split", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}});  // Two islands of four.
  Join("whole", 8, OneIsland(8));
  const json g = Create(Gang(8, 1));
  EXPECT_EQ(g["state"], "running");
  EXPECT_EQ(NodesOf(g), std::set<std::string>{"whole"}) << g.dump();
  EXPECT_EQ(FreeGpus("whole"), 0);
  // A second gang of 8 NVLinked GPUs finds no island of 8 (the other node has two of four): it
  // waits, and holds nothing meanwhile.
  const json waits = Create(Gang(1, 8));
  EXPECT_EQ(waits["state"], "waiting");
  EXPECT_EQ(waits["placed"], 0);
  EXPECT_NE(waits.value("reason", "").find("waiting for room"), std::string::npos) << waits;
  EXPECT_EQ(FreeGpus("split"), 8) << "never split across islands, never partly held";
}

TEST_F(GroupsTest, TwoGangsThatEachNeedMostOfTheFleetNeverDeadlockAndSmallWorkRuns) {
  Join("n1", 8, OneIsland(8));
  Join("n2", 8, OneIsland(8));
  const json a = Create(Gang(3, 4, Topology::kNode));
  const json b = Create(Gang(3, 4, Topology::kNode));
  EXPECT_EQ(a["state"], "running");
  EXPECT_EQ(b["state"], "waiting");
  EXPECT_EQ(b["placed"], 0) << "the waiting gang holds nothing";
  EXPECT_EQ(FreeGpus("n1") + FreeGpus("n2"), 4);
  // Small work still runs beside them.
  state_->BeginRound();
  auto small = state_->CreateInstance(Acme(), H100s(1), batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->state, InstanceState::kScheduled);
  // The first gang ends: the second takes its place.
  state_->BeginRound();
  ASSERT_TRUE(state_->DeleteGroup(Acme(), a["id"].get<std::string>(), batch_).ok());
  state_->EndRound(batch_);
  for (int rank = 0; rank < 3; ++rank) {
    const Instance m = Member(a, rank);
    Sync(m.node, {Report(m, InstanceState::kTerminated, 0)});
  }
  EXPECT_EQ(Get(b["id"])["state"], "running");
  EXPECT_EQ(Get(b["id"])["placed"], 3);
}

TEST_F(GroupsTest, PackFillsFewNodesAndSpreadTakesMany) {
  for (int i = 0; i < 4; ++i) Join(fmt::format("n{}", i), 8, OneIsland(8));
  const json packed = Create(Gang(4, 2, Topology::kNode, Placement::kPack));
  EXPECT_EQ(NodesOf(packed).size(), 1u) << packed.dump();
  const json spread = Create(Gang(3, 1, Topology::kAny, Placement::kSpread));
  EXPECT_EQ(NodesOf(spread).size(), 3u) << spread.dump();
}

TEST_F(GroupsTest, MembersGetTheirRankEnvironmentAndAFailureRestartsTheWholeGroup) {
  Join("n1", 8, OneIsland(8));
  Join("n2", 8, OneIsland(8));
  const json g = Create(Gang(3, 4, Topology::kNode));
  ASSERT_EQ(g["state"], "running");
  const Instance r0 = Member(g, 0), r1 = Member(g, 1), r2 = Member(g, 2);
  // Rank 0's agent is asked to reserve MASTER_PORT as it starts rank 0; the others wait for it.
  json w0 = Workload(r0), w1 = Workload(r1);
  ASSERT_TRUE(w0.is_object());
  EXPECT_EQ(w0.value("reserve_port", ""), "MASTER_PORT");
  EXPECT_FALSE(w0["env"].contains("MASTER_PORT"));
  EXPECT_TRUE(w1.is_null()) << "rank 1 starts before its rendezvous port exists: " << w1.dump();
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29517;
  Sync(r0.node, {started});
  w1 = Workload(r1);
  ASSERT_TRUE(w1.is_object()) << "rank 1 still held back once rank 0 reserved its port";
  const json& env = w1["env"];
  EXPECT_FALSE(w1.contains("reserve_port"));
  EXPECT_EQ(env["WORLD_SIZE"], "3");
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], r0.node) << "an agent that gave no address: its node's name";
  EXPECT_EQ(env["MASTER_PORT"], "29517");
  EXPECT_EQ(env["TESSERA_GROUP"], g["id"]);
  EXPECT_EQ(env["LOCAL_RANK"], r0.node == r1.node ? "1" : "0");
  EXPECT_EQ(Workload(r2)["env"]["MASTER_PORT"], "29517");
  // The port survives a restart of the server: rank 0's record keeps it too.
  Restart();
  EXPECT_EQ(Workload(r2)["env"]["MASTER_PORT"], "29517");
  EXPECT_EQ(Workload(r0)["env"]["MASTER_PORT"], "29517");
  for (const Instance& m : {r1, r2}) Sync(m.node, {Report(m, InstanceState::kRunning)});
  // Rank 2 fails: the others are stopped, and the group starts a new attempt, whole.
  Sync(r2.node, {Report(r2, InstanceState::kFailed, 1)});
  json after = Get(g["id"]);
  EXPECT_EQ(after["restarts"], 1);
  EXPECT_EQ(state_->GetInstance(Acme(), r0.id.str())->state, InstanceState::kStopping);
  EXPECT_EQ(state_->GetInstance(Acme(), r1.id.str())->state, InstanceState::kStopping);
  EXPECT_EQ(after["state"], "waiting");
  EXPECT_EQ(after["members"].size(), 0u) << "the new attempt waits for the last one to stop";
  EXPECT_EQ(after["draining"].size(), 2u) << after.dump();
  // Once the old members have stopped, the new attempt is made and placed.
  if (r1.node != r0.node) {
    Sync(r0.node, {Report(r0, InstanceState::kTerminated, 0)});
    Sync(r1.node, {Report(r1, InstanceState::kTerminated, 0)});
  } else {
    Sync(r0.node,
         {Report(r0, InstanceState::kTerminated, 0), Report(r1, InstanceState::kTerminated, 0)});
  }
  after = Get(g["id"]);
  EXPECT_EQ(after["state"], "running") << after.dump();
  EXPECT_EQ(after["placed"], 3);
  EXPECT_EQ(Member(after, 0).group_env.at("TESSERA_GROUP_RESTARTS"), "1");
  // A new attempt meets at a port rank 0's agent reserves anew.
  EXPECT_EQ(Workload(Member(after, 0)).value("reserve_port", ""), "MASTER_PORT");
  EXPECT_TRUE(Workload(Member(after, 1)).is_null());
}

// MASTER_ADDR is where other nodes reach rank 0's node: the address its agent registered with.
TEST_F(GroupsTest, MasterAddrIsRankZerosAdvertisedAddress) {
  Join("n1", 8, OneIsland(8));
  AgentRegistration bad{agent_, Inventory("n1", 8, OneIsland(8)), "gpu 07"};
  const Status refused = state_->RegisterAgent("n1", bad, batch_);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("advertise_address"), std::string::npos) << refused.message();
  ASSERT_TRUE(
      state_->RegisterAgent("n1", {agent_, Inventory("n1", 8, OneIsland(8)), "10.0.0.7"}, batch_)
          .ok());
  EXPECT_EQ(state_->AgentJson("n1")["address"], "10.0.0.7");
  const json g = Create(Gang(2, 1, Topology::kNode));
  const Instance r0 = Member(g, 0), r1 = Member(g, 1);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29500;
  Sync("n1", {started});
  EXPECT_EQ(Workload(r1)["env"]["MASTER_ADDR"], "10.0.0.7");
  EXPECT_EQ(Workload(r0)["env"]["MASTER_ADDR"], "10.0.0.7");
  // The members' records keep it across a restart of the server.
  Restart();
  EXPECT_EQ(Workload(r1)["env"]["MASTER_ADDR"], "10.0.0.7");
}

// Rank 0 may end before any report of its agent saw it run (`echo done` on a loaded node): the
// exit names the port it held, and the members it held back start with it. Had it named none,
// they start at the group's own port rather than wait for a rank 0 that is gone.
TEST_F(GroupsTest, MembersHeldForRankZerosPortStartWhenRankZeroEndsBeforeItWasSeenRunning) {
  Join("n1", 8, OneIsland(8));
  const json named = Create(Gang(2, 1, Topology::kNode));
  const Instance a0 = Member(named, 0), a1 = Member(named, 1);
  ASSERT_TRUE(Workload(a1).is_null()) << "rank 1 waits for rank 0's port";
  AgentReport ended = Report(a0, InstanceState::kTerminated, 0);
  ended.port = 29533;
  Sync("n1", {ended});
  EXPECT_EQ(state_->GetInstance(Acme(), a0.id.str())->state, InstanceState::kSucceeded);
  json w1 = Workload(a1);
  ASSERT_TRUE(w1.is_object()) << "rank 1 is still held back after rank 0 ended";
  EXPECT_EQ(w1["env"]["MASTER_PORT"], "29533");
  Sync("n1", {Report(a1, InstanceState::kRunning)});
  Sync("n1", {Report(a1, InstanceState::kTerminated, 0)});
  EXPECT_EQ(Get(named["id"])["state"], "succeeded") << Get(named["id"]).dump();

  const json unnamed = Create(Gang(2, 1, Topology::kNode));
  const Instance b0 = Member(unnamed, 0), b1 = Member(unnamed, 1);
  ASSERT_TRUE(Workload(b1).is_null());
  Sync("n1", {Report(b0, InstanceState::kTerminated, 0)});
  w1 = Workload(b1);
  ASSERT_TRUE(w1.is_object()) << "rank 1 waits forever for a rank 0 that is gone";
  EXPECT_GE(std::stoi(w1["env"]["MASTER_PORT"].get<std::string>()), 29500);
}

// A template's image, pull policy and registry credentials go to every member's desired state,
// rank 0 included (an image with no command runs its entrypoint, so rank 0's agent reserves the
// rendezvous port); the group's API form shows the username only; a restart keeps them all.
TEST_F(GroupsTest, ATemplatesImageAndCredentialsReachEveryMembersAgentAndNoApiAnswer) {
  Join("n1", 8, OneIsland(8));
  Join("n2", 8, OneIsland(8));
  GroupRequest req = Gang(3, 4, Topology::kNode);
  req.member.command.clear();
  req.member.image.ref = "registry.example.com/team/train:1.4";
  req.member.image.pull_policy = PullPolicy::kNever;
  req.member.image.auth = RegistryAuth{.username = "robot", .password = "s3cret-pw"};
  const json g = Create(req);
  ASSERT_EQ(g["state"], "running");
  EXPECT_EQ(g["template"]["image"], "registry.example.com/team/train:1.4");
  EXPECT_EQ(g["template"]["registry_auth"], json({{"username", "robot"}}));
  EXPECT_EQ(g.dump().find("s3cret-pw"), std::string::npos);
  EXPECT_EQ(Get(g["id"]).dump().find("s3cret-pw"), std::string::npos);
  EXPECT_EQ(state_->ListGroups(Acme()).dump().find("s3cret-pw"), std::string::npos);
  const Instance r0 = Member(g, 0);
  EXPECT_EQ(Workload(r0).value("reserve_port", ""), "MASTER_PORT")
      << "rank 0 runs its image's entrypoint: its agent reserves the port";
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29517;
  Sync(r0.node, {started});
  auto check = [&](const char* when) {
    for (int rank = 0; rank < 3; ++rank) {
      const Instance m = Member(Get(g["id"]), rank);
      EXPECT_EQ(ToJson(m).dump().find("s3cret-pw"), std::string::npos) << when;
      const json w = Workload(m);
      ASSERT_TRUE(w.is_object()) << when << ": rank " << rank;
      EXPECT_EQ(w["image"], "registry.example.com/team/train:1.4") << when << ": rank " << rank;
      EXPECT_EQ(w["pull_policy"], "never") << when;
      EXPECT_EQ(w["registry_auth"], json({{"username", "robot"}, {"password", "s3cret-pw"}}))
          << when << ": rank " << rank;
      EXPECT_EQ(w["env"]["MASTER_PORT"], "29517") << when;
    }
  };
  check("placed");
  Restart();
  check("after a restart");
  EXPECT_EQ(Get(g["id"])["template"]["registry_auth"], json({{"username", "robot"}}));
  // A new attempt's members are made from the stored template: the credentials come with it.
  std::vector<Instance> old;
  for (int rank = 0; rank < 3; ++rank) old.push_back(Member(Get(g["id"]), rank));
  Sync(old[1].node, {Report(old[1], InstanceState::kFailed, 1)});
  for (const Instance& m : old) {
    if (state_->GetInstance(Acme(), m.id.str())->state == InstanceState::kStopping) {
      Sync(m.node, {Report(m, InstanceState::kTerminated, 0)});
    }
  }
  const json after = Get(g["id"]);
  ASSERT_EQ(after["restarts"], 1);
  ASSERT_EQ(after["state"], "running") << after.dump();
  const json w0 = Workload(Member(after, 0));
  ASSERT_TRUE(w0.is_object());
  EXPECT_EQ(w0["registry_auth"]["password"], "s3cret-pw");
}

TEST_F(GroupsTest, WithoutRestartAFailedMemberFailsTheGroup) {
  Join("n1", 8, OneIsland(8));
  GroupRequest req = Gang(2, 1, Topology::kNode);
  req.restart = false;
  const json g = Create(req);
  const Instance r0 = Member(g, 0);
  Sync(r0.node, {Report(r0, InstanceState::kRunning)});
  Sync(r0.node, {Report(r0, InstanceState::kFailed, 3)});
  const json after = Get(g["id"]);
  EXPECT_EQ(after["state"], "failed");
  EXPECT_NE(after["reason"].get<std::string>().find("rank 0"), std::string::npos);
  EXPECT_EQ(state_->GetInstance(Acme(), Member(g, 1).id.str())->state, InstanceState::kStopping);
}

// An elastic gang resizes in place: new ranks are placed as a gang, the newest stop first, and no
// member restarts. Its members get torchrun's elastic rendezvous, not a WORLD_SIZE to go stale.
TEST_F(GroupsTest, AnElasticGangResizesInPlaceWithinItsRange) {
  Join("n1", 8, OneIsland(8));
  GroupRequest req = Gang(2, 2, Topology::kNode);
  req.elastic = Elastic{1, 4};
  const json g = Create(req);
  const std::string id = g["id"];
  const Instance r0 = Member(g, 0);
  // Rank 0's agent writes the port it reserves into the endpoint.
  const json w0 = Workload(r0);
  EXPECT_EQ(w0["env"]["PET_RDZV_ENDPOINT"], "n1:{port}");
  EXPECT_EQ(w0["port_env"], json::array({"PET_RDZV_ENDPOINT"}));
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29501;
  Sync("n1", {started, Report(Member(g, 1), InstanceState::kRunning)});
  const json env = Workload(Member(g, 1))["env"];
  EXPECT_EQ(env["PET_NNODES"], "1:4");
  EXPECT_EQ(env["PET_RDZV_BACKEND"], "c10d");
  EXPECT_EQ(env["PET_RDZV_ENDPOINT"], "n1:29501");
  EXPECT_EQ(env["PET_RDZV_ID"], id + "-0");
  EXPECT_FALSE(env.contains("WORLD_SIZE")) << env.dump();
  EXPECT_FALSE(env.contains("RANK"));
  state_->BeginRound();
  auto grown = state_->ScaleGroup(Acme(), id, 4, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(grown.ok()) << grown.status().message();
  EXPECT_EQ((*grown)["placed"], 4);
  EXPECT_EQ((*grown)["restarts"], 0);
  EXPECT_EQ(FreeGpus("n1"), 0);
  EXPECT_EQ(Workload(Member(*grown, 3))["env"]["PET_RDZV_ENDPOINT"], "n1:29501")
      << "a new rank meets the running ones";
  EXPECT_EQ(state_->GetInstance(Acme(), r0.id.str())->state, InstanceState::kRunning);
  const Instance newest = Member(*grown, 3);
  state_->BeginRound();
  auto shrunk = state_->ScaleGroup(Acme(), id, 3, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(shrunk.ok());
  EXPECT_EQ((*shrunk)["members"].size(), 3u);
  EXPECT_EQ(state_->GetInstance(Acme(), newest.id.str())->state, InstanceState::kStopping);
  // Outside its range: refused, naming it.
  state_->BeginRound();
  auto outside = state_->ScaleGroup(Acme(), id, 5, batch_);
  state_->EndRound(batch_);
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("elastic [min, max] = [1, 4]"), std::string::npos)
      << outside.status().message();
  // A member is not deleted on its own.
  state_->BeginRound();
  auto refused = state_->DeleteInstance(Acme(), Member(g, 0).id.str(), batch_);
  state_->EndRound(batch_);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
}

// A gang that is not elastic never runs ranks that disagree on WORLD_SIZE: a resize stops the
// running world and starts a new one, whole, at the new size.
TEST_F(GroupsTest, AResizedGangThatIsNotElasticRestartsWholeAtTheNewSize) {
  Join("n1", 8, OneIsland(8));
  const json g = Create(Gang(2, 2, Topology::kNode));
  const std::string id = g["id"];
  const Instance r0 = Member(g, 0), r1 = Member(g, 1);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29501;
  Sync("n1", {started, Report(r1, InstanceState::kRunning)});
  EXPECT_EQ(Workload(r1)["env"]["WORLD_SIZE"], "2");
  state_->BeginRound();
  auto grown = state_->ScaleGroup(Acme(), id, 3, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(grown.ok()) << grown.status().message();
  EXPECT_EQ((*grown)["restarts"], 1);
  EXPECT_EQ((*grown)["state"], "waiting");
  EXPECT_NE((*grown)["reason"].get<std::string>().find("restarting whole at size 3 (was 2)"),
            std::string::npos)
      << grown->dump();
  for (const Instance& m : {r0, r1}) {
    const Instance now = *state_->GetInstance(Acme(), m.id.str());
    EXPECT_EQ(now.state, InstanceState::kStopping);
    EXPECT_NE(now.reason.find("resized from 2 to 3"), std::string::npos) << now.reason;
  }
  Sync("n1",
       {Report(r0, InstanceState::kTerminated, 143), Report(r1, InstanceState::kTerminated, 143)});
  const json after = Get(id);
  ASSERT_EQ(after["state"], "running") << after.dump();
  EXPECT_EQ(after["placed"], 3);
  const Instance n0 = Member(after, 0);
  AgentReport again = Report(n0, InstanceState::kRunning);
  again.port = 29502;
  Sync("n1", {again});
  for (int rank = 0; rank < 3; ++rank) {
    const json env = Workload(Member(after, rank))["env"];
    EXPECT_EQ(env["WORLD_SIZE"], "3") << rank;
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["TESSERA_GROUP_RESTARTS"], "1");
  }
  // A resize the quota refuses changes nothing.
  state_->BeginRound();
  auto huge = state_->ScaleGroup(Acme(), id, 1024, batch_);
  state_->EndRound(batch_);
  EXPECT_FALSE(huge.ok());
  EXPECT_EQ(Get(id)["size"], 3);
  EXPECT_EQ(Get(id)["restarts"], 1);
}

TEST_F(GroupsTest, AfterARestartAGroupIsWholeOrStillWaitingNeverHalfPlaced) {
  Join("n1", 8, OneIsland(8));
  const json placed = Create(Gang(2, 4, Topology::kNode));
  const json waiting = Create(Gang(2, 4, Topology::kNode));
  ASSERT_EQ(waiting["state"], "waiting");
  Restart();
  Sync("n1");
  EXPECT_EQ(Get(placed["id"])["placed"], 2);
  EXPECT_EQ(Get(waiting["id"])["placed"], 0);
  EXPECT_EQ(Get(waiting["id"])["state"], "waiting");
  EXPECT_EQ(FreeGpus("n1"), 0);
  // A new group gets a new id.
  EXPECT_NE(Create(Gang(1, 1))["id"], waiting["id"]);
}

TEST_F(GroupsTest, AnOnDemandGangPreemptsTheFewestSpotInstancesAndOnlyIfItThenFitsWhole) {
  Join("n1", 8, OneIsland(8));
  std::vector<Instance> spot;
  for (int i = 0; i < 8; ++i) {
    state_->BeginRound();
    auto inst = state_->CreateInstance(Acme(), H100s(1, Billing::kSpot), batch_);
    state_->EndRound(batch_);
    ASSERT_TRUE(inst.ok());
    Sync("n1", {Report(*inst, InstanceState::kRunning)});
    spot.push_back(*state_->GetInstance(Acme(), inst->id.str()));
  }
  // A gang that could never fit the node preempts nobody.
  const json too_big = Create(Gang(3, 4, Topology::kNode));
  EXPECT_EQ(too_big["state"], "waiting");
  // Two members of two GPUs: four victims, not eight, and only because all of it then fits.
  const json g = Create(Gang(2, 2, Topology::kNode));
  EXPECT_EQ(g["state"], "waiting");
  EXPECT_NE(Get(g["id"])["reason"].get<std::string>().find("4 spot instance(s)"), std::string::npos)
      << Get(g["id"]).dump();
  std::vector<Instance> noticed;
  for (const Instance& v : spot) {
    const Instance now = *state_->GetInstance(Acme(), v.id.str());
    if (now.state == InstanceState::kPreempting) noticed.push_back(now);
  }
  ASSERT_EQ(noticed.size(), 4u);
  EXPECT_EQ(Get(g["id"])["placed"], 0) << "nothing is held during the notice";
  // Their agent stops them after the notice; the gang is placed whole.
  clock_.Advance(6s);
  std::vector<AgentReport> stops;
  for (const Instance& v : noticed) stops.push_back(Report(v, InstanceState::kTerminated, 143));
  Sync("n1", stops);
  EXPECT_EQ(Get(g["id"])["state"], "running") << Get(g["id"]).dump();
  EXPECT_EQ(Get(g["id"])["placed"], 2);
  int running = 0;
  for (const Instance& v : spot) {
    running += state_->GetInstance(Acme(), v.id.str())->state == InstanceState::kRunning;
  }
  EXPECT_EQ(running, 4) << "the other spot work runs on";
}

TEST_F(GroupsTest, APreemptedSpotGangRestartsWhole) {
  Join("n1", 8, OneIsland(8));
  GroupRequest spot = Gang(4, 2, Topology::kNode);
  spot.member.billing = Billing::kSpot;
  const json g = Create(spot);
  ASSERT_EQ(g["placed"], 4);
  for (int rank = 0; rank < 4; ++rank) {
    const Instance m = Member(g, rank);
    Sync(m.node, {Report(m, InstanceState::kRunning)});
  }
  // On-demand work takes one member's GPUs after the notice.
  state_->BeginRound();
  auto od = state_->CreateInstance(Acme(), H100s(2), batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(od.ok());
  Instance victim;
  for (int rank = 0; rank < 4; ++rank) {
    const Instance m = *state_->GetInstance(Acme(), Member(g, rank).id.str());
    if (m.state == InstanceState::kPreempting) victim = m;
  }
  ASSERT_FALSE(victim.id.str().empty());
  clock_.Advance(6s);
  Sync("n1", {Report(victim, InstanceState::kTerminated, 143)});
  const json after = Get(g["id"]);
  EXPECT_EQ(after["restarts"], 1) << after.dump();
  for (int rank = 0; rank < 4; ++rank) {
    const InstanceState old = state_->GetInstance(Acme(), Member(g, rank).id.str())->state;
    EXPECT_TRUE(old == InstanceState::kStopping || old == InstanceState::kPreempted)
        << StateName(old);
  }
  EXPECT_EQ(after["placed"], 0) << "the new attempt waits whole";
  // The other members, which the platform stopped, ran 6 s and are billed 6 s: no minimum.
  ASSERT_TRUE(store_->Commit(batch_).ok());
  batch_ = {};
  int lines = 0;
  ASSERT_TRUE(store_
                  ->ScanLedger("", 0, INT64_MAX,
                               [&](const store::LedgerRecord& l) {
                                 if (l.billing != "spot" || l.instance == victim.id.str()) return;
                                 ++lines;
                                 EXPECT_EQ(l.seconds, 6) << l.instance;
                               })
                  .ok());
  EXPECT_EQ(lines, 3);
}

TEST_F(GroupsTest, AnOnDemandGangLeavesReservedCapacityAlone) {
  Join("n1", 8, OneIsland(8));
  ReserveH100s(6);
  const json waits = Create(Gang(2, 2, Topology::kNode));  // 4 GPUs; 6 of 8 are reserved.
  EXPECT_EQ(waits["state"], "waiting");
  EXPECT_NE(waits["reason"].get<std::string>().find("held for reservations"), std::string::npos)
      << waits.dump();
  EXPECT_EQ(Create(Gang(1, 2, Topology::kNode))["state"], "running") << "2 of 8 are not held";
}

TEST_F(GroupsTest, AReservedGangClaimsAUnitAMemberAndRestartsOnTheSameUnits) {
  Join("n1", 8, OneIsland(8));
  ReserveH100s(3);
  GroupRequest req = Gang(4, 1, Topology::kNode);
  req.member.billing = Billing::kReserved;
  // Four members and three units: refused whole, nothing made.
  state_->BeginRound();
  auto refused = state_->CreateGroup(Acme(), req, batch_);
  state_->EndRound(batch_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "no_reservation");
  EXPECT_NE(refused.status().message().find("needs 4 free units"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(state_->instances().size(), 0u);
  EXPECT_TRUE(state_->ListGroups(Acme())["groups"].empty());
  req.size = req.min_available = 3;
  const json g = Create(req);
  ASSERT_EQ(g["state"], "running") << g.dump();
  const std::string id = g["id"];
  for (int rank = 0; rank < 3; ++rank) EXPECT_FALSE(Member(g, rank).reservation.empty());
  EXPECT_EQ(state_->ReservationUnitsUsed(Member(g, 0).reservation), 3);
  // No unit for a fourth: the scale-out is refused, and the group keeps its three.
  state_->BeginRound();
  auto grown = state_->ScaleGroup(Acme(), id, 4, batch_);
  state_->EndRound(batch_);
  EXPECT_EQ(grown.status().reason(), "no_reservation");
  EXPECT_EQ(Get(id)["members"].size(), 3u);
  const Instance r0 = Member(g, 0), r1 = Member(g, 1), r2 = Member(g, 2);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29500;
  Sync("n1", {started, Report(r1, InstanceState::kRunning), Report(r2, InstanceState::kRunning)});
  // Rank 2 fails: the next attempt waits for the others to give their units back.
  Sync("n1", {Report(r2, InstanceState::kFailed, 1)});
  json after = Get(id);
  EXPECT_EQ(after["state"], "waiting");
  EXPECT_EQ(after["restarts"], 1);
  EXPECT_TRUE(after["members"].empty()) << after.dump();
  EXPECT_EQ(after["draining"].size(), 2u) << after.dump();
  EXPECT_NE(after["reason"].get<std::string>().find("reservation units"), std::string::npos);
  Sync("n1", {Report(r0, InstanceState::kTerminated, 0)});
  EXPECT_TRUE(Get(id)["members"].empty());
  // A restart of the server in between loses nothing.
  Restart();
  Sync("n1", {Report(r1, InstanceState::kTerminated, 0)});
  after = Get(id);
  EXPECT_EQ(after["state"], "running") << after.dump();
  EXPECT_EQ(after["placed"], 3);
  EXPECT_FALSE(after.contains("draining"));
  EXPECT_EQ(state_->ReservationUnitsUsed(r0.reservation), 3);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(Member(after, rank).reservation, r0.reservation);
    EXPECT_NE(Member(after, rank).id, Member(g, rank).id) << "the new attempt is new instances";
  }
}

// Autoscaling with the fake clock: HPA's rule on a reported backlog and on measured GPU
// utilization, the tolerance, min and max, the scale-down window and the cron floor.
class AutoscaleTest : public GroupsTest {
 protected:
  void SetUp() override {
    GroupsTest::SetUp();
    clock_.Set(Time(std::chrono::seconds(kMonday)));
    Join("n1", 8, OneIsland(8));
    Join("n2", 8, OneIsland(8));
  }

  static GroupRequest Scaled(int size, Autoscale a) {
    GroupRequest g = Gang(size, 1, Topology::kAny);
    g.min_available = 1;
    g.elastic = Elastic{a.min, a.max};  // What the API gives an autoscaled group by default.
    g.autoscale = std::move(a);
    return g;
  }

  static Autoscale OnBacklog(int min, int max, double target) {
    Autoscale a;
    a.min = min;
    a.max = max;
    a.metric = AutoscaleMetric::kPending;
    a.target = target;
    return a;
  }

  void Backlog(const std::string& id, int64_t pending) {
    ASSERT_TRUE(state_->SetGroupBacklog(Acme(), id, pending).ok());
  }

  // Lets `d` pass in steps of the autoscale interval, a round each (agents heartbeating).
  void Wait(Duration d) {
    while (d > Duration::zero()) {
      const Duration step = std::min<Duration>(d, 15s);
      clock_.Advance(step);
      d -= step;
      for (const auto& [node, shape] : nodes_) Sync(node);
    }
  }

  int Size(const std::string& id) { return Get(id)["size"].get<int>(); }

  static constexpr int64_t kMonday = 1'796'047'140;  // 2026-11-30T13:59:00Z, a Monday.
};

TEST_F(AutoscaleTest, TheBacklogScalesUpAtOnceAndDownOnlyAfterTheWindow) {
  const std::string id = Create(Scaled(2, OnBacklog(1, 6, 10)))["id"];
  const std::string rank0 = Get(id)["members"][0]["instance"];
  Backlog(id, 40);  // 20 a member against a target of 10: ceil(2 x 2) = 4.
  Wait(15s);
  EXPECT_EQ(Size(id), 4);
  EXPECT_EQ(Get(id)["placed"], 4) << "new ranks are placed";
  Backlog(id, 42);  // 10.5 a member: within 10% of the target, no change.
  Wait(15s);
  EXPECT_EQ(Size(id), 4);
  Backlog(id, 200);  // 50 a member: 20 wanted, 6 at most.
  Wait(15s);
  EXPECT_EQ(Size(id), 6);
  Backlog(id, 0);  // Nothing to do: 1 (the min), but not before the window has passed.
  Wait(285s);
  EXPECT_EQ(Size(id), 6) << "the window still holds the recommendation of 6";
  Wait(30s);
  EXPECT_EQ(Size(id), 1);
  EXPECT_EQ(Get(id)["members"][0]["instance"], rank0) << "the newest members go first";
  const json status = Get(id)["autoscale_status"];
  EXPECT_EQ(status["scale_ups"], 2);
  EXPECT_EQ(status["scale_downs"], 1);
  // Every decision is in the audit log with its inputs.
  int audited = 0;
  for (const store::AuditRecord& a : batch_.audit) {
    if (a.actor != "autoscaler") continue;
    ++audited;
    EXPECT_EQ(a.target, id);
    EXPECT_NE(a.detail.find("\"metric\":\"pending\""), std::string::npos) << a.detail;
  }
  EXPECT_EQ(audited, 3);
}

// At the limits the API allows (a backlog of 2^40 against a target of 0.001, then none), the
// size goes to max and back to min: no overflow.
TEST_F(AutoscaleTest, AHugeBacklogOrATinyTargetGoesToMaxWithoutOverflow) {
  Autoscale a = OnBacklog(1, 3, 0.001);
  a.scale_down_stabilization_seconds = 0;
  const std::string id = Create(Scaled(2, a))["id"];
  Backlog(id, int64_t{1} << 40);
  Wait(15s);
  EXPECT_EQ(Size(id), 3);
  Backlog(id, 0);
  Wait(15s);
  EXPECT_EQ(Size(id), 1);
}

// Scaling out passes the same gate as creating: the tenant's quota holds its autoscaler too.
TEST_F(AutoscaleTest, ScaleOutStopsAtTheTenantsQuotaAndSaysSo) {
  ASSERT_TRUE(state_->UpdateTenant(acme_.id.str(), 3000, std::nullopt, batch_).ok());  // 3 GPUs.
  const std::string id = Create(Scaled(2, OnBacklog(1, 6, 10)))["id"];
  Backlog(id, 200);  // 6 wanted, one GPU each: 6 GPUs against a quota of 3.
  Wait(15s);
  EXPECT_EQ(Size(id), 2) << "all of the new members, or none";
  const std::string decision = Get(id)["autoscale_status"]["last_decision"];
  EXPECT_NE(decision.find("refused: quota exceeded by 3 GPUs"), std::string::npos) << decision;
  EXPECT_EQ(state_->TenantGpuMilli(acme_.id), 2000);
  auto scaled = state_->ScaleGroup(Acme(), id, 5, batch_);
  EXPECT_EQ(scaled.status().code(), StatusCode::kResourceExhausted) << "the API's scale too";
}

// At its owner's cap on pending work an autoscaler scales out as far as the cap leaves room and
// then holds, saying why once: no refusal at every evaluation.
TEST_F(AutoscaleTest, ScaleOutStopsAtThePendingCapAndSaysSoOnce) {
  const std::string id = Create(Scaled(2, OnBacklog(1, 6, 10)))["id"];
  ASSERT_EQ(Get(id)["placed"], 2);
  ASSERT_TRUE(state_->UpdateTenant(acme_.id.str(), std::nullopt, std::nullopt, batch_, 3).ok());
  for (const char* node : {"n1", "n2"})
    ASSERT_TRUE(state_->SetNodeDrained(node, true, batch_).ok());
  Backlog(id, 200);  // 6 wanted; new members wait on the drained nodes.
  auto audited = [&] {
    return std::count_if(batch_.audit.begin(), batch_.audit.end(),
                         [&](const store::AuditRecord& a) { return a.target == id; });
  };
  Wait(15s);
  EXPECT_EQ(Size(id), 5) << "3 more members: the cap's room";
  std::string decision = Get(id)["autoscale_status"]["last_decision"];
  EXPECT_NE(decision.find("2 -> 5: "), std::string::npos) << decision;
  EXPECT_NE(decision.find("; held at 5 by its owner's cap on pending instances (0 pending, cap 3)"),
            std::string::npos)
      << decision;
  EXPECT_EQ(state_->pending_work().Count(acme_.id.str()), 3);
  Wait(15s);
  decision = Get(id)["autoscale_status"]["last_decision"];
  EXPECT_EQ(Size(id), 5);
  EXPECT_NE(decision.find("5 -> 6: "), std::string::npos) << decision;
  EXPECT_NE(decision.find("; held at 5 by its owner's cap on pending instances (3 pending, cap 3)"),
            std::string::npos)
      << decision;
  EXPECT_EQ(decision.find("refused"), std::string::npos) << decision;
  const auto rows = audited();
  Wait(60s);
  EXPECT_EQ(audited(), rows) << "held, it says so once";
  EXPECT_EQ(Size(id), 5);
}

TEST_F(AutoscaleTest, GpuUtilizationFromTelemetryDrivesTheSize) {
  Autoscale a;
  a.min = 1;
  a.max = 8;
  a.metric = AutoscaleMetric::kGpuUtil;
  a.target = 50;
  const std::string id = Create(Scaled(2, a))["id"];
  std::map<std::string, std::vector<int>> busy;  // GPUs the members hold, by node.
  for (int rank = 0; rank < 2; ++rank) {
    const Instance m = Member(Get(id), rank);
    Sync(m.node, {Report(m, InstanceState::kRunning)});
    busy[m.node].push_back(m.gpus[0].index);
  }
  // The members' GPUs at 90%: ceil(2 x 90 / 50) = 4.
  for (const auto& [node, gpus] : busy) {
    auto t = std::make_shared<telemetry::Telemetry>();
    for (int g = 0; g < 8; ++g) {
      telemetry::GpuSample sample;
      sample.index = g;
      sample.gpu_util = std::find(gpus.begin(), gpus.end(), g) != gpus.end() ? 90 : 0;
      sample.memory_total_mib = 81920;
      t->gpus.push_back(sample);
    }
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_[node];
    s.telemetry = t;
    state_->BeginRound();
    ASSERT_TRUE(state_->SyncAgent(node, s, batch_).ok());
    state_->EndRound(batch_);
  }
  clock_.Advance(15s);
  Sync("n1");
  EXPECT_EQ(Size(id), 4);
  EXPECT_NEAR(Get(id)["autoscale_status"]["value"].get<double>(), 90, 1e-9);
  // The two new members have not started: their GPUs count as idle, and 180 / 4 = 45 would turn
  // a scale-up into a scale-down, so it reads as on target: the group does not grow again on
  // the same readings, nor shrink.
  clock_.Advance(15s);
  Sync("n1");
  EXPECT_EQ(Size(id), 4);
  EXPECT_NEAR(Get(id)["autoscale_status"]["value"].get<double>(), 50, 1e-9);
}

TEST_F(AutoscaleTest, TheScheduleRaisesTheFloorAtItsTimes) {
  Autoscale a = OnBacklog(1, 8, 10);
  a.scale_down_stabilization_seconds = 60;
  a.schedule.push_back({*Cron::Parse("0 14 * * 1-5"), 4});  // The trading peak, weekdays.
  a.schedule.push_back({*Cron::Parse("0 18 * * 1-5"), 1});
  const std::string id = Create(Scaled(1, a))["id"];
  Backlog(id, 0);
  Wait(15s);  // 13:59:15 on a Monday: the last entry to fire was last Friday's 18:00.
  EXPECT_EQ(Size(id), 1);
  Wait(60s);  // 14:00:15.
  EXPECT_EQ(Size(id), 4);
  EXPECT_EQ(Get(id)["autoscale_status"]["floor"], 4);
  Wait(std::chrono::hours(3) + 45min);  // 17:45: the floor holds with no backlog.
  EXPECT_EQ(Size(id), 4);
  Wait(30min);  // 18:15: the floor is back to 1, and the window has passed.
  EXPECT_EQ(Size(id), 1);
}

// A running group gains, changes and loses its autoscale without a restart; a change its elastic
// range cannot hold, or a size outside the new range, is refused and changes nothing.
TEST_F(AutoscaleTest, ARunningGroupsAutoscaleIsSetChangedAndRemovedWithoutARestart) {
  GroupRequest plain = Gang(2, 1, Topology::kAny);
  plain.min_available = 1;
  plain.elastic = Elastic{1, 6};
  const std::string id = Create(plain)["id"];
  const std::string rank0 = Get(id)["members"][0]["instance"];
  auto patch = [&](std::optional<int> size, std::optional<Autoscale> a) {
    GroupPatch p;
    p.size = size;
    p.autoscale = std::move(a);
    return state_->PatchGroup(Acme(), id, p, batch_);
  };
  ASSERT_TRUE(patch(std::nullopt, OnBacklog(1, 6, 10)).ok());
  Backlog(id, 40);
  Wait(15s);
  EXPECT_EQ(Size(id), 4) << Get(id).dump();
  EXPECT_EQ(Get(id)["restarts"], 0);
  EXPECT_EQ(Get(id)["members"][0]["instance"], rank0);

  auto wider = patch(std::nullopt, OnBacklog(1, 8, 10));
  EXPECT_EQ(wider.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wider.status().message().find("elastic [min, max] = [1, 6]"), std::string::npos)
      << wider.status().message();
  auto both = patch(5, OnBacklog(1, 3, 10));
  EXPECT_NE(both.status().message().find("field 'size': 5 is outside autoscale's"),
            std::string::npos)
      << both.status().message();
  Autoscale rps = OnBacklog(1, 6, 10);
  rps.metric = AutoscaleMetric::kRps;
  EXPECT_NE(patch(std::nullopt, rps).status().message().find("rps needs a service"),
            std::string::npos);
  EXPECT_EQ(Get(id)["autoscale"]["max"], 6) << "a refused change changes nothing";
  EXPECT_EQ(Size(id), 4);

  // Narrowed: the next evaluation brings the size within it.
  ASSERT_TRUE(patch(std::nullopt, OnBacklog(1, 3, 10)).ok());
  EXPECT_FALSE(Get(id)["autoscale_status"].contains("last_decision"));
  Wait(15s);
  EXPECT_EQ(Size(id), 3);
  // Removed: the group keeps its size, whatever the backlog.
  GroupPatch off;
  off.autoscale.emplace();
  ASSERT_TRUE(state_->PatchGroup(Acme(), id, off, batch_).ok());
  EXPECT_FALSE(Get(id).contains("autoscale"));
  Backlog(id, 400);
  Wait(30s);
  EXPECT_EQ(Size(id), 3);
  EXPECT_EQ(Get(id)["members"][0]["instance"], rank0);
  // Another tenant's group is unknown to it.
  GroupPatch any;
  any.size = 2;
  EXPECT_EQ(state_->PatchGroup(Tenant{}, id, any, batch_).status().code(), StatusCode::kNotFound);
}

TEST(AutoscaleSpecTest, ErrorsNameTheField) {
  auto read = [](const json& body) {
    JsonFields f(body, "body");
    auto r = ReadGroupRequest(f, body);
    return f.ok() ? r.status() : f.body_error();
  };
  json base = {{"size", 2},
               {"template", {{"billing", "spot"}, {"instance_type", "gpu.1xh100"}}},
               {"autoscale",
                {{"min", 1},
                 {"max", 4},
                 {"metric", "gpu_util"},
                 {"target", 60},
                 {"schedule", {{{"cron", "0 14 * * 1-5"}, {"min", 3}}}}}}};
  EXPECT_TRUE(read(base).ok()) << read(base).message();
  json bad_cron = base;
  bad_cron["autoscale"]["schedule"][0]["cron"] = "0 25 * * 1-5";
  EXPECT_NE(read(bad_cron).message().find("autoscale.schedule[0].cron"), std::string::npos)
      << read(bad_cron).message();
  EXPECT_NE(read(bad_cron).message().find("hour"), std::string::npos);
  json fields = base;
  fields["autoscale"]["schedule"][0]["cron"] = "0 14 * *";
  EXPECT_NE(read(fields).message().find("5"), std::string::npos) << read(fields).message();
  json metric = base;
  metric["autoscale"]["metric"] = "qps";
  EXPECT_NE(read(metric).message().find("autoscale.metric"), std::string::npos);
  json range = base;
  range["autoscale"]["max"] = 0;
  EXPECT_NE(read(range).message().find("autoscale.max"), std::string::npos);
  json outside = base;
  outside["size"] = 9;
  EXPECT_NE(read(outside).message().find("size"), std::string::npos);
}

// `elastic` is false or {min, max}; an autoscaled group is elastic over its range unless it says
// otherwise; errors name the field.
TEST(ElasticSpecTest, DefaultsAndErrorsNameTheField) {
  auto read = [](const json& body) -> Result<GroupRequest> {
    JsonFields f(body, "body");
    auto r = ReadGroupRequest(f, body);
    if (!f.ok()) return f.body_error();
    return r;
  };
  const json gang = {
      {"size", 2},
      {"template",
       {{"billing", "on_demand"}, {"instance_type", "gpu.1xh100"}, {"command", "torchrun t.py"}}}};
  ASSERT_TRUE(read(gang).ok()) << read(gang).status().message();
  EXPECT_FALSE(read(gang)->elastic) << "a gang is not elastic unless it says so";
  json scaled = gang;
  scaled["autoscale"] = {{"min", 1}, {"max", 6}, {"metric", "pending"}, {"target", 10}};
  ASSERT_TRUE(read(scaled)->elastic);
  EXPECT_EQ(read(scaled)->elastic->max, 6) << "replicas resize in place";
  scaled["elastic"] = false;
  EXPECT_FALSE(read(scaled)->elastic) << "unless they say not to";
  json elastic = gang;
  elastic["elastic"] = {{"min", 2}, {"max", 8}};
  ASSERT_TRUE(read(elastic).ok());
  EXPECT_EQ(read(elastic)->elastic->min, 2);
  const auto message = [&](json body) { return read(body).status().message(); };
  json bad = gang;
  bad["elastic"] = true;
  EXPECT_NE(message(bad).find("'elastic'"), std::string::npos) << message(bad);
  bad["elastic"] = {{"min", 3}, {"max", 2}};
  EXPECT_NE(message(bad).find("elastic.max"), std::string::npos) << message(bad);
  bad["elastic"] = {{"min", 1}, {"max", 4}, {"step", 1}};
  EXPECT_NE(message(bad).find("step"), std::string::npos) << message(bad);
  bad["elastic"] = {{"min", 3}, {"max", 4}};
  EXPECT_NE(message(bad).find("'size'"), std::string::npos) << message(bad);
  json narrow = scaled;
  narrow["elastic"] = {{"min", 1}, {"max", 4}};
  EXPECT_NE(message(narrow).find("does not hold autoscale's [1, 6]"), std::string::npos)
      << message(narrow);
  // The stored form says which, and reads back the same.
  Group g;
  g.id = "grp-000001";
  g.tenant = *TenantId::Parse("tenant-000001");
  g.spec = *read(elastic);
  const json stored = ToJson(g, Secrets::kIncluded);
  EXPECT_EQ(stored["elastic"], json({{"min", 2}, {"max", 8}}));
  auto back = GroupFromJson(stored, "test");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->spec.elastic->max, 8);
}

TEST(CronTest, MatchesAndFindsThePreviousFiring) {
  const Time monday_1400 = Time(std::chrono::seconds(1'796'047'200));  // 2026-11-30T14:00:00Z.
  auto peak = Cron::Parse("0 14 * * 1-5");
  ASSERT_TRUE(peak.ok());
  EXPECT_TRUE(peak->Matches(monday_1400));
  EXPECT_FALSE(peak->Matches(monday_1400 + 1min));
  EXPECT_EQ(peak->Previous(monday_1400 + 3h, 24h), monday_1400);
  // Before Monday's: last Friday's, three days back.
  EXPECT_EQ(peak->Previous(monday_1400 - 1min, std::chrono::hours(24 * 7)),
            monday_1400 - std::chrono::hours(72));
  EXPECT_FALSE(peak->Previous(monday_1400 - 1min, 24h).has_value());
  auto steps = Cron::Parse("*/15 9-17/2 1,15 * 0,7");
  ASSERT_TRUE(steps.ok()) << steps.status().message();
  for (const char* bad : {"60 * * * *", "* * 0 * *", "* * * 13 *", "* * * * 8", "5-1 * * * *",
                          "*/0 * * * *", "a * * * *", "* * * *"}) {
    EXPECT_FALSE(Cron::Parse(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace tessera::core
