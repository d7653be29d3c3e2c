// The cap on a tenant's pending work (issue 26): the count and its message alone, then through
// the state: instances and groups refused at the cap with the reason an API answers as 429,
// another tenant untouched, room again once work is placed or ended, the count and a tenant's own
// cap across a restart, a group's restart never refused, and waiting gangs that cost a round
// nothing until capacity frees.
#include "core/pending_work.h"

#include <gtest/gtest.h>

#include "core/core.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "store/memory_store.h"

namespace tessera::core {
namespace {

using nlohmann::json;

Tenant Named(const std::string& name, std::optional<int64_t> max_pending = std::nullopt) {
  Tenant t;
  t.id = TenantId::FromNumber(1);
  t.name = name;
  t.max_pending = max_pending;
  return t;
}

TEST(PendingWorkTest, AdmitsUpToTheCapAndNamesTheCapTheCountAndTheAskBeyond) {
  PendingWork w(3);
  const Tenant acme = Named("acme");
  struct Case {
    int pending;
    int64_t ask;
    bool ok;
  };
  for (const Case& c : std::vector<Case>{{0, 3, true},
                                         {0, 4, false},
                                         {2, 1, true},
                                         {2, 2, false},
                                         {3, 0, true},
                                         {3, 1, false},
                                         {0, INT64_MAX, false}}) {
    PendingWork counted = w;
    for (int i = 0; i < c.pending; ++i) counted.Add(acme.id.str());
    const Status s = counted.Admit(acme, c.ask);
    EXPECT_EQ(s.ok(), c.ok) << c.pending << " pending, asking " << c.ask;
    EXPECT_EQ(counted.Room(acme), 3 - c.pending);
    if (s.ok()) continue;
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(s.reason(), "too_many_pending");
    EXPECT_EQ(s.message(),
              fmt::format("too many pending instances: tenant 'acme' has {} waiting to be placed "
                          "(members of waiting groups included) and a cap of 3; this asks for {} "
                          "more. Delete pending instances or groups, or wait for some to be "
                          "placed; an operator may raise quota.max_pending",
                          c.pending, c.ask));
  }
}

TEST(PendingWorkTest, ATenantsOwnCapOverridesTheDefaultAndCountsAreApart) {
  PendingWork w(3);
  const Tenant own = Named("own", 1), zero = Named("zero", 0);
  Tenant other = Named("other");
  other.id = TenantId::FromNumber(2);
  EXPECT_EQ(w.CapOf(own), 1);
  EXPECT_EQ(w.CapOf(other), 3);
  EXPECT_FALSE(w.Admit(zero, 1).ok()) << "a cap of 0 refuses every create";
  w.Add(own.id.str());
  EXPECT_FALSE(w.Admit(own, 1).ok());
  EXPECT_TRUE(w.Admit(other, 3).ok()) << "another tenant's count is its own";
  w.Remove(own.id.str());
  EXPECT_EQ(w.Count(own.id.str()), 0);
  EXPECT_TRUE(w.Admit(own, 1).ok());
}

// One joined node of 2 H100s; a server default cap of 4.
class PendingCapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = store::NewMemoryStore();
    state_ = NewState();
    acme_ = state_->tenants().Create("acme", 1'000'000, "h-acme", batch_)->id.str();
    beta_ = state_->tenants().Create("beta", 1'000'000, "h-beta", batch_)->id.str();
    ASSERT_TRUE(state_->agent_hub()
                    .CreateNode("n1", {}, catalog::SharingMode::kExclusive, "token-n1", batch_)
                    .ok());
    Register();
  }

  // Whatever a test did, the kept count is what a scan of the instances finds.
  void TearDown() override {
    for (const std::string& t : {acme_, beta_}) {
      int64_t scanned = 0;
      state_->instances().table().ForEach([&](const Instance& inst) {
        scanned += inst.tenant.str() == t && inst.state == InstanceState::kPending;
      });
      EXPECT_EQ(Pending(t), scanned) << t;
    }
  }

  std::unique_ptr<State> NewState() {
    StateOptions o;
    o.max_pending_per_tenant = 4;
    return NewTestState(&clock_, o);
  }

  void Register() {
    ASSERT_TRUE(state_->agent_hub().Register("n1", {agent_, TestInventory(2)}, batch_).ok());
  }

  // The server restarts from its store, and the node's agent registers again.
  void Restart() {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
    state_ = NewState();
    agent_ += "'";
    seq_ = 0;
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
    Register();
  }

  const Tenant& T(const std::string& id) { return *state_->tenants().Find(id); }
  int64_t Pending(const std::string& id) { return state_->instances().pending().Count(id); }

  Result<Instance> Create(const std::string& tenant, const CreateInstanceRequest& r) {
    state_->BeginRound();
    auto out = state_->instances().Create(T(tenant), r, batch_);
    state_->EndRound(batch_);
    return out;
  }
  Status Delete(const std::string& tenant, const std::string& id) {
    state_->BeginRound();
    auto out = state_->instances().Delete(T(tenant), id, batch_);
    state_->EndRound(batch_);
    return out.status();
  }
  // A gang of `size` one-GPU members, placed whole or not at all.
  Result<GroupStatus> CreateGang(const std::string& tenant, int size) {
    GroupRequest g;
    g.name = "gang";
    g.member = TestH100(1);
    g.size = g.min_available = size;
    state_->BeginRound();
    auto out = state_->groups().Create(T(tenant), g, batch_);
    state_->EndRound(batch_);
    return out;
  }
  // The node's agent reports each instance in `to` (an end), in one round.
  void Report(const std::vector<std::pair<std::string, InstanceState>>& reports) {
    std::vector<AgentReport> list;
    for (const auto& [id, to] : reports) {
      AgentReport r;
      r.instance = id;
      r.attempt = state_->instances().table().Find(id)->restarts;
      r.state = to;
      r.exit_code = to == InstanceState::kFailed ? 1 : 0;
      list.push_back(r);
    }
    ASSERT_TRUE(SyncRound(*state_, "n1", agent_, ++seq_, std::move(list), batch_).ok());
  }
  void Round() {
    state_->BeginRound();
    state_->EndRound(batch_);
  }

  // Both GPUs taken by one of acme's instances, so what follows waits; its id.
  std::string FillTheNode() {
    auto big = Create(acme_, TestH100(2));
    EXPECT_TRUE(big.ok() && big->state == InstanceState::kScheduled);
    return big.ok() ? big->id.str() : "";
  }

  static std::string Refusal(int64_t pending, int64_t cap, int64_t ask) {
    return fmt::format(
        "too many pending instances: tenant 'acme' has {} waiting to be placed (members of "
        "waiting groups included) and a cap of {}; this asks for {} more. Delete pending "
        "instances or groups, or wait for some to be placed; an operator may raise "
        "quota.max_pending",
        pending, cap, ask);
  }

  FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<State> state_;
  store::Batch batch_;
  std::string acme_, beta_, agent_ = "a1";
  int64_t seq_ = 0;
};

TEST_F(PendingCapTest, AtTheCapAnInstanceOrAGroupIsRefusedNamingTheCapAndAnotherTenantIsNot) {
  FillTheNode();
  std::vector<std::string> waiting;
  for (int i = 0; i < 4; ++i) {
    auto inst = Create(acme_, TestH100(1));
    ASSERT_TRUE(inst.ok()) << inst.status().message();
    EXPECT_EQ(inst->state, InstanceState::kPending);
    waiting.push_back(inst->id.str());
  }
  EXPECT_EQ(Pending(acme_), 4);
  const size_t instances = state_->instances().table().size();

  auto refused = Create(acme_, TestH100(1));
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.status().reason(), "too_many_pending");
  EXPECT_EQ(refused.status().message(), Refusal(4, 4, 1));
  auto gang = CreateGang(acme_, 2);
  EXPECT_EQ(gang.status().reason(), "too_many_pending");
  EXPECT_EQ(gang.status().message(), Refusal(4, 4, 2));
  EXPECT_EQ(state_->instances().table().size(), instances) << "a refusal makes nothing";
  EXPECT_TRUE(state_->groups().all().empty());

  // Another tenant has a count of its own.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Create(beta_, TestH100(1)).ok());
  EXPECT_EQ(Pending(beta_), 4);
  EXPECT_EQ(Pending(acme_), 4);

  // A group counts all its members: 2 waiting and a gang of 3 would be 5.
  ASSERT_TRUE(Delete(acme_, waiting[0]).ok());
  ASSERT_TRUE(Delete(acme_, waiting[1]).ok());
  EXPECT_EQ(Pending(acme_), 2);
  EXPECT_EQ(CreateGang(acme_, 3).status().message(), Refusal(2, 4, 3));
  auto fits = CreateGang(acme_, 2);
  ASSERT_TRUE(fits.ok()) << fits.status().message();
  EXPECT_EQ(GroupStateName(fits->group.state), "waiting");
  EXPECT_EQ(Pending(acme_), 4) << "the waiting gang's members count";
  EXPECT_EQ(Create(acme_, TestH100(1)).status().reason(), "too_many_pending");
}

TEST_F(PendingCapTest, PlacedOrEndedWorkMakesRoomAgain) {
  const std::string big = FillTheNode();
  std::vector<std::string> waiting;
  for (int i = 0; i < 4; ++i) waiting.push_back(Create(acme_, TestH100(1))->id.str());
  ASSERT_FALSE(Create(acme_, TestH100(1)).ok());

  // Ended while pending: room for one.
  ASSERT_TRUE(Delete(acme_, waiting[0]).ok());
  EXPECT_EQ(Pending(acme_), 3);
  ASSERT_TRUE(Create(acme_, TestH100(1)).ok());
  ASSERT_FALSE(Create(acme_, TestH100(1)).ok());

  // Placed: the big one stops, its two GPUs take two waiting ones.
  ASSERT_TRUE(Delete(acme_, big).ok());
  Report({{big, InstanceState::kTerminated}});
  EXPECT_EQ(state_->instances().table().Find(waiting[1])->state, InstanceState::kScheduled);
  EXPECT_EQ(Pending(acme_), 2);
  EXPECT_TRUE(Create(acme_, TestH100(1)).ok());
  EXPECT_TRUE(Create(acme_, TestH100(1)).ok());
  EXPECT_FALSE(Create(acme_, TestH100(1)).ok());
}

TEST_F(PendingCapTest, TheCountAndATenantsOwnCapComeBackAfterARestart) {
  FillTheNode();
  ASSERT_TRUE(Create(acme_, TestH100(1)).ok());
  ASSERT_TRUE(Create(acme_, TestH100(1)).ok());
  ASSERT_TRUE(CreateGang(acme_, 2).ok());
  ASSERT_TRUE(state_->UpdateTenant(beta_, std::nullopt, std::nullopt, batch_, 1).ok());
  EXPECT_EQ(Pending(acme_), 4);

  Restart();
  EXPECT_EQ(Pending(acme_), 4) << "rebuilt from the pending instances and the gang's members";
  EXPECT_EQ(Create(acme_, TestH100(1)).status().message(), Refusal(4, 4, 1));
  EXPECT_EQ(state_->instances().pending().CapOf(T(beta_)), 1) << "a tenant's own cap is stored";
  EXPECT_TRUE(Create(beta_, TestH100(1)).ok());
  EXPECT_EQ(Create(beta_, TestH100(1)).status().reason(), "too_many_pending");
}

// A group's restart makes again what was admitted: at its owner's cap it restarts, rather than
// fail "cannot restart".
TEST_F(PendingCapTest, AGroupsRestartIsNotRefusedByTheCap) {
  auto gang = CreateGang(acme_, 2);
  ASSERT_TRUE(gang.ok());
  ASSERT_EQ(GroupStateName(gang->group.state), "running");
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(Create(acme_, TestH100(1)).ok());
  ASSERT_EQ(Pending(acme_), 4);
  const std::string m0 = gang->members[0].instance, m1 = gang->members[1].instance;
  Report({{m0, InstanceState::kFailed}});      // Rank 1 is told to stop...
  Report({{m1, InstanceState::kTerminated}});  // ...and the new attempt is made once it has.
  auto after = state_->groups().Get(T(acme_), gang->group.id);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->group.state, GroupState::kFailed) << after->group.reason;
  EXPECT_EQ(after->group.restarts, 1);
  EXPECT_EQ(after->members.size(), 2u);
}

// The cause of issue 26's slowdown: with more waiting gangs than a pass may fail (16), every
// round tried the first 16 again, each a scan of its members, and never reached the rest. Now a
// gang that found no room waits for capacity to free, and each is tried once when it does.
TEST_F(PendingCapTest, WaitingGangsCostARoundNothingUntilCapacityFreesThenEachIsTriedOnce) {
  ASSERT_TRUE(state_->UpdateTenant(acme_, std::nullopt, std::nullopt, batch_, 1000).ok());
  const std::string big = FillTheNode();
  std::vector<std::string> gangs;
  for (int i = 0; i < 30; ++i) {
    auto g = CreateGang(acme_, 4);
    ASSERT_TRUE(g.ok()) << g.status().message();
    gangs.push_back(g->group.id);
  }
  const int64_t attempts = state_->counters().scheduling_attempts;
  for (int i = 0; i < 5; ++i) Round();
  EXPECT_EQ(state_->counters().scheduling_attempts, attempts) << "nothing changed: nothing tried";

  ASSERT_TRUE(Delete(acme_, big).ok());
  Report({{big, InstanceState::kTerminated}});  // Two GPUs free: room for 2 of 4.
  Round();
  for (const std::string& id : gangs) {
    const GroupStatus g = *state_->groups().Get(T(acme_), id);
    EXPECT_NE(g.group.reason.find("the fleet has room for 2 now"), std::string::npos)
        << id << ": " << g.group.reason;
  }
  const int64_t tried = state_->counters().scheduling_attempts;
  for (int i = 0; i < 5; ++i) Round();
  EXPECT_EQ(state_->counters().scheduling_attempts, tried);
}

}  // namespace
}  // namespace tessera::core
