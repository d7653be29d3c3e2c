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

CreateInstanceRequest Share(int milli, bool migratable = false) {
  CreateInstanceRequest r;
  r.command = "sleep 600";
  r.shape.gpu_model = "L40S-48GB";
  r.shape.mode = catalog::SharingMode::kShared;
  r.shape.milli_gpu = milli;
  r.shape.vcpus = 2;
  r.shape.memory_mib = 1024;
  r.migratable = migratable;
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
      for (const std::string& n : names) Report(n, {});
    }
  }
  int Free(const std::string& node) {
    return state_->fleet().node(*state_->fleet().Find(node)).gpus[0].free_milli;
  }

  void Set(bool migratable = true) {
    const Instance f1 = Create(Share(700));
    const Instance f2 = Create(Share(700));
    const Instance a = Create(Share(300, migratable));
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
