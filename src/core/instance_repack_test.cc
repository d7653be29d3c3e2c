// Repacking (Instances with StateOptions::repack; docs/core.md, "Repacking") in the State that
// composes it, on joined nodes and a fake clock: a migratable share moved with notice to make room
// and restarted where its move booked, what never moves, a move cut short by a delete or by a
// restart of the server, the cooldown, the longest run a move may throw away, and what
// migratable refuses.
#include <gtest/gtest.h>

#include <map>

#include "core/core.h"
#include "core/core_test_util.h"
#include "core/state.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

CreateInstanceRequest Share(int milli, bool migratable = false, int stop_grace_seconds = 10) {
  CreateInstanceRequest r;
  r.command = "sleep 600";
  r.shape.gpu_model = "L40S-48GB";
  r.shape.mode = catalog::SharingMode::kShared;
  r.shape.milli_gpu = milli;
  r.shape.vcpus = 2;
  r.shape.memory_mib = 1024;
  r.migratable = migratable;
  r.stop_grace_seconds = stop_grace_seconds;
  return r;
}

// Two joined nodes, l-1 and l-2, of one shared L40S each. Set() leaves a migratable 300 share
// alone on one GPU (`p`) and a 500 share on the other (`q`), both running: an 800 share fits
// nowhere unless the 300 moves.
class RepackTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void Make(bool repack, Duration max_run = 6h) {
    StateOptions o;
    o.node_timeout = 10s;
    o.spot_notice = 30s;
    o.repack = repack;
    o.repack_max_run = max_run;
    MakeState(o);
    for (const char* node : {"l-1", "l-2"}) {
      ASSERT_TRUE(JoinNode(node, TestInventory(1, "L40S-48GB", std::string(node) + "-u"), agent_,
                           catalog::SharingMode::kShared)
                      .ok());
    }
  }

  Instance Create(const CreateInstanceRequest& r) {
    auto out = CreateInRound(r);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : Instance{};
  }

  // One round in which `node`'s agent reports `reports`.
  void Report(const std::string& node, std::vector<AgentReport> reports) {
    ASSERT_TRUE(SyncRound(*state_, node, agent_, ++seq_[node], std::move(reports), batch_).ok());
  }
  void Running(const std::string& id) {
    const Instance& inst = Get(id);
    Report(inst.node, {{id, inst.restarts, InstanceState::kRunning, {}, "", false, {}, {}}});
  }
  // `id`'s agent reports the stop it was asked for (SIGTERM's exit).
  void Stopped(const std::string& id) {
    const Instance& inst = Get(id);
    Report(inst.node,
           {{id, inst.restarts, InstanceState::kTerminated, 143, "stopped", false, {}, {}}});
  }
  void Delete(const std::string& id) {
    state_->BeginRound();
    ASSERT_TRUE(state_->instances().Delete(Acme(), id, batch_).ok());
    state_->EndRound(batch_);
    Stopped(id);
  }
  // Lets `d` pass, every joined node reporting each 5 s so that none goes silent.
  void Pass(Duration d) {
    for (Duration done{}; done < d; done += 5s) {
      clock_.Advance(5s);
      std::vector<std::string> names;
      for (const auto& n : state_->fleet().nodes()) names.push_back(n.name);
      for (const std::string& n : names) {
        if (state_->fleet().Find(n).ok()) Report(n, {});  // Unless it left the fleet meanwhile.
      }
    }
  }
  int Free(const std::string& node) {
    return state_->fleet().node(*state_->fleet().Find(node)).gpus[0].free_milli;
  }

  void Set(bool migratable = true, int stop_grace_seconds = 10) {
    const Instance f1 = Create(Share(700));
    const Instance f2 = Create(Share(700));
    const Instance a = Create(Share(300, migratable, stop_grace_seconds));
    a_ = a.id.str();
    p_ = a.node;
    q_ = p_ == "l-1" ? "l-2" : "l-1";
    const std::string on_q = f1.node == q_ ? f1.id.str() : f2.id.str();
    const std::string on_p = f1.node == p_ ? f1.id.str() : f2.id.str();
    Delete(on_q);
    const Instance b = Create(Share(500));
    ASSERT_EQ(b.node, q_);
    b_ = b.id.str();
    Delete(on_p);
    Running(a_);
    Running(b_);
    ASSERT_EQ(Free(p_), 700);
    ASSERT_EQ(Free(q_), 500);
  }

  std::map<std::string, int64_t> seq_;
  std::string a_, b_, p_, q_;
};

TEST_F(RepackTest, AShareMovesWithNoticeAndRestartsWhereItsMoveBookedAndTheWaitingWorkTakesItsGpu) {
  Make(/*repack=*/true);
  Set();
  const Instance r = Create(Share(800));
  EXPECT_EQ(r.state, InstanceState::kPending);
  EXPECT_NE(r.reason.find("waiting for 1 instance(s) to move to other GPUs after their notice"),
            std::string::npos)
      << r.reason;
  EXPECT_EQ(r.reason.find(a_), std::string::npos) << "the reason names no instance";
  const Instance& moving = Get(a_);
  EXPECT_EQ(moving.state, InstanceState::kPreempting);
  EXPECT_EQ(moving.node, p_) << "it runs on where it was until its notice is over";
  EXPECT_EQ(moving.preempt_at, clock_.Now() + 30s);
  EXPECT_EQ(moving.reason.rfind("moved to another GPU to make room for waiting work; stops at", 0),
            0u)
      << moving.reason;
  EXPECT_EQ(Free(q_), 200) << "its new place is booked at once";
  EXPECT_EQ(Free(p_), 700);
  const auto told = Told(state_->agent_hub().DesiredState(p_), a_);
  ASSERT_TRUE(told.has_value());
  EXPECT_EQ(told->action, DesiredWorkload::Action::kPreempt);
  EXPECT_EQ(told->reason, "moved to another GPU");
  EXPECT_EQ(state_->counters().repack_moves, 1);

  Pass(30s);
  Stopped(a_);
  const Instance& moved = Get(a_);
  EXPECT_EQ(moved.state, InstanceState::kScheduled);
  EXPECT_EQ(moved.node, q_);
  EXPECT_EQ(moved.restarts, 1);
  EXPECT_EQ(moved.reason,
            "moved to another GPU to make room for waiting work; restarting on node '" + q_ + "'");
  EXPECT_TRUE(Told(state_->agent_hub().DesiredState(q_), a_).has_value());
  EXPECT_FALSE(Told(state_->agent_hub().DesiredState(p_), a_).has_value());
  const Instance& placed = Get(r.id.str());
  EXPECT_EQ(placed.state, InstanceState::kScheduled);
  EXPECT_EQ(placed.node, p_);
  EXPECT_EQ(Free(p_), 200);
  EXPECT_EQ(Free(q_), 200);
  Running(a_);
  EXPECT_EQ(Get(a_).state, InstanceState::kRunning);
}

TEST_F(RepackTest, AShareThatAsksForMoreThan30SecondsToStopIsNeverMoved) {
  // The create would wait through the grace, and the share would run it unbilled: a tenant could
  // have its own share moved on purpose for up to an hour of free GPU time.
  Make(/*repack=*/true);
  Set(/*migratable=*/true, /*stop_grace_seconds=*/31);
  const Instance r = Create(Share(800));
  EXPECT_EQ(r.state, InstanceState::kPending);
  EXPECT_EQ(r.reason.find("to move to other GPUs"), std::string::npos) << r.reason;
  EXPECT_EQ(Get(a_).state, InstanceState::kRunning);
  EXPECT_EQ(state_->counters().repack_moves, 0);
  EXPECT_EQ(Free(q_), 500) << "no place is booked for a move";
}

TEST_F(RepackTest, AShareThatAsksFor30SecondsToStopStillMoves) {
  Make(/*repack=*/true);
  Set(/*migratable=*/true, /*stop_grace_seconds=*/30);
  const Instance r = Create(Share(800));
  EXPECT_EQ(r.state, InstanceState::kPending);
  EXPECT_EQ(Get(a_).state, InstanceState::kPreempting);
  EXPECT_EQ(state_->counters().repack_moves, 1);
}

TEST_F(RepackTest, NothingMovesWithoutRepackingOrWhenTheShareIsNotMigratable) {
  for (const bool repack : {false, true}) {
    SCOPED_TRACE(repack ? "not migratable" : "repacking off");
    Make(repack);
    Set(/*migratable=*/!repack);
    const Instance r = Create(Share(800));
    EXPECT_EQ(r.state, InstanceState::kPending);
    EXPECT_EQ(Get(a_).state, InstanceState::kRunning);
    EXPECT_EQ(state_->counters().repack_moves, 0);
    EXPECT_EQ(Free(q_), 500);
  }
}

TEST_F(RepackTest, SpotWorkNeverMovesOnDemandWork) {
  Make(true);
  Set();
  CreateInstanceRequest spot = Share(800);
  spot.billing = Billing::kSpot;
  EXPECT_EQ(Create(spot).state, InstanceState::kPending);
  EXPECT_EQ(Get(a_).state, InstanceState::kRunning);
  EXPECT_EQ(Create(Share(800)).state, InstanceState::kPending) << "on-demand may move it";
  EXPECT_EQ(Get(a_).state, InstanceState::kPreempting);
}

// On nodes that cannot isolate tenants, a move's new node is its tenant's from the notice on:
// another tenant's work does not land there meanwhile, nor after.
TEST_F(RepackTest, AMovesNewNodeIsItsTenantsFromTheNotice) {
  Make(true);
  Set();
  // q has room for no move (b grows to 750); n-3 has room for a but too few vCPUs for r.
  Delete(b_);
  Running(Create(Share(750)).id.str());
  nlohmann::json small = TestInventory(1, "L40S-48GB", "n-3-u");
  small["cpu_milli"] = 3000;
  ASSERT_TRUE(JoinNode("n-3", small, agent_, catalog::SharingMode::kShared).ok());
  CreateInstanceRequest wide = Share(800);
  wide.shape.vcpus = 4;
  const Instance r = Create(wide);
  ASSERT_EQ(Get(a_).state, InstanceState::kPreempting);
  ASSERT_EQ(Free("n-3"), 700) << "a's new place";
  store::Batch b;
  const Tenant beta = *state_->tenants().Create("beta", 64000, "h-beta", b);
  CreateInstanceRequest other = Share(100);
  other.shape.vcpus = 1;
  auto theirs = CreateInRound(beta, other);
  ASSERT_TRUE(theirs.ok()) << theirs.status().message();
  EXPECT_EQ(theirs->state, InstanceState::kPending) << "every node holds acme's work";
  Pass(30s);
  Stopped(a_);
  EXPECT_EQ(Get(a_).node, "n-3");
  EXPECT_EQ(Get(r.id.str()).node, p_);
  EXPECT_EQ(Get(theirs->id.str()).state, InstanceState::kPending);
}

// A node being removed waits for a move's place there to be let go (the round that would remove
// it must not find capacity still booked), and the move then restarts elsewhere.
TEST_F(RepackTest, AMovesNewNodeIsRemovedOnlyOnceTheMoveLetsItGo) {
  Make(true);
  Set();
  Create(Share(800));
  ASSERT_EQ(Get(a_).state, InstanceState::kPreempting);
  const fleet::NodeIndex q = *state_->fleet().Find(q_);
  state_->BeginRound();
  auto removal = state_->node_health().RemoveNode(q_, /*force=*/true, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(removal.ok()) << removal.status().message();
  if (Get(b_).state == InstanceState::kStopping) Stopped(b_);
  // q's agent has received the desired state without its work: only the move's place keeps it.
  AgentSync ack;
  ack.agent_id = agent_;
  ack.seq = ++seq_[q_];
  ack.generation = state_->agent_hub().DesiredState(q_).generation;
  ASSERT_TRUE(SyncNode(q_, ack).ok());
  Pass(10s);  // Rounds go on while the removal waits.
  ASSERT_TRUE(state_->fleet().Find(q_).ok());
  EXPECT_GT(state_->fleet().node(q).workloads, 0) << "a's move still holds a place there";
  Pass(20s);
  Stopped(a_);
  Pass(5s);
  EXPECT_FALSE(state_->fleet().Find(q_).ok()) << "removed once the move let go";
  EXPECT_NE(Get(a_).node, q_);
  EXPECT_NE(Get(a_).state, InstanceState::kPreempting);
}

TEST_F(RepackTest, AShareWhoseRunHasLastedLongerThanTheLimitStays) {
  for (const Duration max_run : {Duration(1min), Duration(10min)}) {
    SCOPED_TRACE(max_run == 1min ? "limit 1 min" : "limit 10 min");
    Make(true, max_run);
    Set();
    Pass(2min);
    Create(Share(800));
    EXPECT_EQ(Get(a_).state,
              max_run == 1min ? InstanceState::kRunning : InstanceState::kPreempting);
  }
}

TEST_F(RepackTest, AMoveCutShortByADeleteFreesThePlaceItBooked) {
  Make(true);
  Set();
  const Instance r = Create(Share(800));
  ASSERT_EQ(Get(a_).state, InstanceState::kPreempting);
  ASSERT_EQ(Free(q_), 200);
  Delete(a_);
  EXPECT_EQ(Get(a_).state, InstanceState::kTerminated);
  EXPECT_EQ(Free(q_), 500) << "the place booked for its move is free again";
  EXPECT_EQ(Get(r.id.str()).state, InstanceState::kScheduled);
  EXPECT_EQ(Get(r.id.str()).node, p_);
}

TEST_F(RepackTest, AMoveUnderWayOutlivesARestartOfTheServer) {
  Make(true);
  Set();
  const Instance r = Create(Share(800));
  ASSERT_EQ(Get(a_).state, InstanceState::kPreempting);
  ASSERT_TRUE(store_->Commit(batch_).ok());
  batch_ = {};
  state_ = NewState();
  ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
  agent_ = "a2";
  seq_.clear();
  for (const std::string& node : {p_, q_}) {
    ASSERT_TRUE(state_->agent_hub()
                    .Register(node, {agent_, TestInventory(1, "L40S-48GB", node + "-u")}, batch_)
                    .ok());
  }
  EXPECT_EQ(Get(a_).state, InstanceState::kPreempting);
  EXPECT_EQ(Free(q_), 200) << "the place its move booked is booked again";
  Pass(30s);
  Stopped(a_);
  EXPECT_EQ(Get(a_).state, InstanceState::kScheduled);
  EXPECT_EQ(Get(a_).node, q_);
  EXPECT_EQ(Get(r.id.str()).state, InstanceState::kScheduled);
  EXPECT_EQ(Get(r.id.str()).node, p_);
}

TEST_F(RepackTest, AMovedShareIsNotMovedAgainWithinTheCooldown) {
  Make(true);
  ASSERT_TRUE(JoinNode("h-1", TestInventory(1, "H100-80GB", "h-1-u"), agent_).ok());
  Set();
  const Instance r = Create(Share(800));
  Pass(30s);
  Stopped(a_);
  Running(a_);
  // p: r (800); q: b (500) and a (300). r leaves, a 700 takes p, and a 400 waits: it fits only
  // if a moves again, to p.
  Delete(r.id.str());
  const Instance d = Create(Share(700));
  ASSERT_EQ(d.node, p_);
  Running(d.id.str());
  const Instance elsewhere = Create(TestH100(1));
  ASSERT_EQ(elsewhere.node, "h-1");
  const Instance waits = Create(Share(400));
  EXPECT_EQ(waits.state, InstanceState::kPending);
  EXPECT_EQ(Get(a_).state, InstanceState::kRunning) << "moved 30 s ago";
  EXPECT_EQ(state_->counters().repack_moves, 1);
  // Once the hour has passed, the next capacity that frees tries again, and a moves.
  Pass(1h);
  Delete(elsewhere.id.str());
  EXPECT_EQ(Get(a_).state, InstanceState::kPreempting);
  EXPECT_EQ(state_->counters().repack_moves, 2);
  Pass(30s);
  Stopped(a_);
  EXPECT_EQ(Get(a_).node, p_);
  EXPECT_EQ(Get(waits.id.str()).node, q_);
}

TEST_F(RepackTest, MigratableIsRefusedWhereAMoveCouldNotTakeTheInstanceAlong) {
  Make(true);
  ASSERT_TRUE(JoinNode("h-1", TestInventory(1, "H100-80GB", "h-1-u"), agent_).ok());
  CreateInstanceRequest whole = TestH100(1);
  whole.migratable = true;
  auto refused = CreateInRound(whole);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "migratable: only a milli_gpu share moves; whole GPUs and MIG slices stay where they "
            "are");
  GroupRequest g;
  g.name = "gang";
  g.member = Share(300, true);
  g.size = 2;
  state_->BeginRound();
  auto gang = state_->groups().Create(Acme(), g, batch_);
  state_->EndRound(batch_);
  ASSERT_FALSE(gang.ok());
  EXPECT_EQ(gang.status().message(),
            "template: migratable: a group's members never move; their gang is placed together");
  EXPECT_EQ(state_->instances().TenantGpuMilli(acme_.id), 0) << "nothing refused holds quota";
}

}  // namespace
}  // namespace tessera::core
