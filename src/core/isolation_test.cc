// Nodes that cannot isolate tenants, on the core's state with a fake clock: a node whose agent
// reports `isolation: none` (or has not said) hosts one tenant's work at a time, instances and
// group members alike; the preemptor does not evict another tenant's work to empty one; a node
// that isolates by uid takes every tenant; the nodes of in-core simulated agents (the what-if
// simulator) are never restricted.
#include <gtest/gtest.h>

#include "core/core_test_util.h"
#include "core/state.h"
#include "fleet/fleet.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

AgentReport Running(const Instance& inst) {
  return {inst.id.str(), inst.restarts, InstanceState::kRunning, {}, "", false, {}, {}};
}

AgentReport Stopped(const Instance& inst) {
  return {inst.id.str(), inst.restarts, InstanceState::kTerminated, 0, "stopped", false, {}, {}};
}

class IsolationTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    StateOptions o;
    o.node_timeout = 10s;
    o.spot_notice = 30s;
    MakeState(o);
    globex_ = *state_->tenants().Create("globex", 64000, "h-globex", batch_);
  }

  // Adds a node of `gpus` H100s; its agent registers and, unless `isolation` is empty, reports
  // it in its first sync.
  void Join(const std::string& name, int gpus, std::optional<Isolation> isolation) {
    ASSERT_TRUE(JoinNode(name, TestInventory(gpus, "H100-80GB", name + "-"), "a1").ok());
    if (isolation) {
      ASSERT_TRUE(Sync(name, {}, isolation).ok());
    }
  }

  // One report of `node`'s agent, in a round of its own.
  Result<bool> Sync(const std::string& node, std::vector<AgentReport> reports = {},
                    std::optional<Isolation> isolation = std::nullopt) {
    AgentSync s;
    s.agent_id = "a1";
    s.seq = ++seq_[node];
    s.reports = std::move(reports);
    s.isolation = isolation;
    s.isolation_note =
        isolation == Isolation::kUid ? "one uid per tenant" : "the agent is not root";
    return SyncNode(node, s);
  }

  Instance Create(const Tenant& who, const CreateInstanceRequest& r) {
    auto out = CreateInRound(who, r);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : Instance{};
  }

  // The owner deletes it and its agent reports the stop.
  void Delete(const Tenant& who, const Instance& inst) {
    state_->BeginRound();
    ASSERT_TRUE(state_->instances()
                    .Delete(*state_->tenants().Find(who.id.str()), inst.id.str(), batch_)
                    .ok());
    state_->EndRound(batch_);
    ASSERT_EQ(Get(inst).state, InstanceState::kStopping);
    ASSERT_TRUE(Sync(inst.node, {Stopped(inst)}).ok());
    ASSERT_EQ(Get(inst).state, InstanceState::kTerminated);
  }

  const Instance& Get(const Instance& inst) {
    return *state_->instances().table().Find(inst.id.str());
  }

  Tenant globex_;
  std::map<std::string, int64_t> seq_;
};

TEST_F(IsolationTest, ANodeWithoutIsolationHostsOneTenantAtATime) {
  Join("shared", 8, Isolation::kNone);
  const Instance a1 = Create(acme_, TestH100(1));
  ASSERT_EQ(a1.state, InstanceState::kScheduled);
  ASSERT_TRUE(Sync("shared", {Running(a1)}).ok());

  const Instance g1 = Create(globex_, TestH100(1));
  EXPECT_EQ(g1.state, InstanceState::kPending) << "7 GPUs are free, but acme's work is there";
  EXPECT_NE(g1.reason.find("1 node(s) that cannot isolate tenants"), std::string::npos)
      << g1.reason;
  EXPECT_EQ(g1.reason.find(acme_.id.str()), std::string::npos) << "it names no other tenant";

  // The same tenant's identical request shares the node: it does not queue behind globex's.
  const Instance a2 = Create(acme_, TestH100(1));
  EXPECT_EQ(a2.state, InstanceState::kScheduled);
  EXPECT_EQ(a2.node, "shared");
  ASSERT_TRUE(Sync("shared", {Running(a1), Running(a2)}).ok());

  Delete(acme_, a1);
  EXPECT_EQ(Get(g1).state, InstanceState::kPending) << "acme's a2 still runs there";
  // Stopping work holds the node until its agent reports it gone.
  state_->BeginRound();
  ASSERT_TRUE(state_->instances()
                  .Delete(*state_->tenants().Find(acme_.id.str()), a2.id.str(), batch_)
                  .ok());
  state_->EndRound(batch_);
  ASSERT_EQ(Get(a2).state, InstanceState::kStopping);
  EXPECT_EQ(Get(g1).state, InstanceState::kPending) << "a2 may still run until its agent says";
  ASSERT_TRUE(Sync("shared", {Stopped(a2)}).ok());
  EXPECT_EQ(Get(g1).state, InstanceState::kScheduled) << "the node is free of acme's work now";
  EXPECT_EQ(Get(g1).node, "shared");
  EXPECT_EQ(Create(acme_, TestH100(1)).state, InstanceState::kPending) << "now it is globex's turn";
}

TEST_F(IsolationTest, ANodeWhoseAgentHasNotSaidCountsAsNone) {
  Join("quiet", 8, std::nullopt);
  const AgentNode& agent = AgentOf(*state_, "quiet");
  EXPECT_FALSE(agent.isolation.has_value());
  EXPECT_NE(agent.IsolationNote().find("has not reported"), std::string::npos);
  ASSERT_EQ(Create(acme_, TestH100(1)).state, InstanceState::kScheduled);
  EXPECT_EQ(Create(globex_, TestH100(1)).state, InstanceState::kPending);
  // An older agent's reports carry no isolation: it stays none.
  ASSERT_TRUE(Sync("quiet").ok());
  EXPECT_EQ(IsolationName(AgentOf(*state_, "quiet").isolation.value_or(Isolation::kNone)), "none");
}

TEST_F(IsolationTest, AnotherTenantGoesToANodeThatIsolatesAndWaitsWhenThereIsNone) {
  Join("shared", 8, Isolation::kNone);
  const Instance a1 = Create(acme_, TestH100(1));
  ASSERT_EQ(a1.node, "shared");
  Join("isolated", 2, Isolation::kUid);
  const Instance g1 = Create(globex_, TestH100(2));
  EXPECT_EQ(g1.state, InstanceState::kScheduled);
  EXPECT_EQ(g1.node, "isolated") << "the roomier node holds acme's work";
  const Instance g2 = Create(globex_, TestH100(1));
  EXPECT_EQ(g2.state, InstanceState::kPending) << "the isolated node is full";
  // The shared node turns isolated (its agent restarted as root): globex's work may go there.
  ASSERT_TRUE(Sync("shared", {}, Isolation::kUid).ok());
  EXPECT_EQ(Get(g2).state, InstanceState::kScheduled);
  EXPECT_EQ(Get(g2).node, "shared");
  EXPECT_EQ(IsolationName(AgentOf(*state_, "shared").isolation.value_or(Isolation::kNone)), "uid");
  EXPECT_EQ(AgentOf(*state_, "shared").IsolationNote(), "one uid per tenant");
}

TEST_F(IsolationTest, ANodeThatIsolatesByUidTakesEveryTenant) {
  Join("isolated", 8, Isolation::kUid);
  EXPECT_EQ(IsolationName(AgentOf(*state_, "isolated").isolation.value_or(Isolation::kNone)),
            "uid");
  const Instance a1 = Create(acme_, TestH100(1));
  const Instance g1 = Create(globex_, TestH100(1));
  EXPECT_EQ(a1.node, "isolated");
  EXPECT_EQ(g1.state, InstanceState::kScheduled);
  EXPECT_EQ(g1.node, "isolated");
  // A new agent run has said nothing yet: the node is back to one tenant, so a third tenant's
  // work waits while acme's and globex's stay.
  ASSERT_TRUE(state_->agent_hub()
                  .Register("isolated", {"a2", TestInventory(8, "H100-80GB", "isolated-")}, batch_)
                  .ok());
  EXPECT_EQ(IsolationName(AgentOf(*state_, "isolated").isolation.value_or(Isolation::kNone)),
            "none");
  const Tenant initech = *state_->tenants().Create("initech", 64000, "h-initech", batch_);
  EXPECT_EQ(Create(initech, TestH100(1)).state, InstanceState::kPending);
  EXPECT_EQ(Get(a1).state, InstanceState::kScheduled);
}

TEST_F(IsolationTest, ThePreemptorDoesNotEvictAnotherTenantToEmptyASharedNode) {
  Join("shared", 2, Isolation::kNone);
  const Instance spot = Create(acme_, TestH100(2, Billing::kSpot));
  ASSERT_TRUE(Sync("shared", {Running(spot)}).ok());
  const Instance od = Create(globex_, TestH100(1));
  EXPECT_EQ(od.state, InstanceState::kPending);
  EXPECT_EQ(Get(spot).state, InstanceState::kRunning) << "globex could not share the node anyway";
  // Acme's own on-demand work preempts acme's spot as on any node.
  const Instance mine = Create(acme_, TestH100(1));
  EXPECT_EQ(mine.state, InstanceState::kPending);
  EXPECT_EQ(Get(spot).state, InstanceState::kPreempting);
}

TEST_F(IsolationTest, AGroupMemberWaitsForTheSharedNodeLikeAnInstance) {
  Join("shared", 8, Isolation::kNone);
  const Instance a1 = Create(acme_, TestH100(1));
  ASSERT_TRUE(Sync("shared", {Running(a1)}).ok());
  GroupRequest g;
  g.name = "train";
  g.member = TestH100(2);
  g.size = 2;
  state_->BeginRound();
  auto created = state_->groups().Create(*state_->tenants().Find(globex_.id.str()), g, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(created.ok()) << created.status().message();
  EXPECT_EQ(created->group.state, GroupState::kWaiting) << created->group.reason;
  const std::string id = created->group.id;
  Delete(acme_, a1);
  auto now = state_->groups().Get(*state_->tenants().Find(globex_.id.str()), id);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->group.state, GroupState::kRunning) << now->group.reason;
  for (const GroupMemberStatus& m : now->members) EXPECT_EQ(m.node, "shared");
}

// The what-if simulator's agents live in the core and run nothing: their nodes take every tenant.
TEST(IsolationSimulatedTest, NodesOfInCoreSimulatedAgentsAreNeverRestricted) {
  FakeClock clock;
  auto fleet = std::make_unique<fleet::Fleet>(&TestCatalog());
  ASSERT_TRUE(fleet
                  ->AddNode({.name = "sim-1",
                             .gpu_model = "H100-80GB",
                             .gpus = 8,
                             .cpu_milli = 64000,
                             .memory_mib = 524288})
                  .ok());
  auto sched = sched::Scheduler::Create(fleet.get(), {"guarded-fgd", 42, {}});
  ASSERT_TRUE(sched.ok());
  StateOptions o;
  o.sim_agents = true;
  State state(&TestCatalog(), &clock, std::move(fleet), std::move(*sched), o);
  store::Batch batch;
  const Tenant a = *state.tenants().Create("acme", 64000, "h-acme", batch);
  const Tenant b = *state.tenants().Create("globex", 64000, "h-globex", batch);
  for (const Tenant* t : {&a, &b}) {
    state.BeginRound();
    auto inst = state.instances().Create(*state.tenants().Find(t->id.str()), TestH100(1), batch);
    state.EndRound(batch);
    ASSERT_TRUE(inst.ok()) << inst.status().message();
    EXPECT_EQ(state.instances().table().Find(inst->id.str())->state, InstanceState::kRunning);
  }
}

}  // namespace
}  // namespace tessera::core
