// State's billing (Accounts, through the state) on a fake clock, exact to the micro-dollar: what a
// run costs from the agent's report to the stop, the minimum, preemption and node loss, shares,
// reservations and their capacity, midnight and month boundaries, a restart in the middle of an
// interval, and budgets. The store is the in-memory one: the real contract, without a disk.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "billing/meter.h"
#include "common/json.h"
#include "core/core.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "fleet/fleet.h"
#include "store/memory_store.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr int64_t kNov30 = 1'795'996'800;  // 2026-11-30T00:00:00Z.

Time At(int64_t unix_seconds) { return Time(std::chrono::seconds(unix_seconds)); }

// A node's GPUs; their UUIDs are the node's own, as a GPU is in one node.
json Inventory(int gpus, const std::string& model, bool mig, const std::string& node) {
  json list = json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back({{"index", i},
                    {"uuid", "GPU-" + node + "-" + std::to_string(i)},
                    {"model", model},
                    {"mig_enabled", mig}});
  }
  return {{"cpu_milli", 128000}, {"memory_mib", 2097152}, {"gpus", list}};
}

CreateInstanceRequest H100(Billing billing, int gpus = 1) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.command = "sleep 600";
  r.shape.gpu_model = "H100-80GB";
  r.shape.gpus = gpus;
  r.shape.vcpus = 4;
  r.shape.memory_mib = 1024;
  return r;
}

CreateInstanceRequest Type(const std::string& type, Billing billing) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.command = "sleep 600";
  r.instance_type = type;
  return r;
}

Money Usd(const char* text) { return *Money::Parse(text); }

class BillingTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    clock_.Set(At(kNov30 + 3600));
    StateOptions o;
    o.node_timeout = 10s;
    o.spot_notice = 5s;
    MakeState(o);
    Join("gpu-1", 2, "H100-80GB", catalog::SharingMode::kExclusive);
  }

  void Join(const std::string& name, int gpus, const std::string& model,
            catalog::SharingMode mode) {
    // MIG mode is the agent's to report; the node itself is created exclusive.
    const auto created =
        mode == catalog::SharingMode::kMig ? catalog::SharingMode::kExclusive : mode;
    ASSERT_TRUE(JoinNode(name, Inventory(gpus, model, mode == catalog::SharingMode::kMig, name),
                         agent_, created)
                    .ok());
    nodes_.push_back(name);
  }

  // One round in which `node`'s agent reports `reports` (nothing: a heartbeat).
  void Sync(const std::string& node, std::vector<AgentReport> reports = {}) {
    const Status s = SyncRound(*state_, node, agent_, ++seq_[node], std::move(reports), batch_);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  Result<Instance> Create(const CreateInstanceRequest& req) { return CreateInRound(req); }

  // Creates an instance and has its agent report it running now.
  Instance Running(const CreateInstanceRequest& req) {
    auto inst = Create(req);
    EXPECT_TRUE(inst.ok()) << inst.status().message();
    if (!inst.ok()) return {};
    Started(*inst);
    return *state_->views().Get(Admin(), inst->id.str());
  }

  void Started(const Instance& inst) {
    AgentReport r;
    r.instance = inst.id.str();
    r.attempt = inst.restarts;
    r.started_at = clock_.Now();
    Sync(inst.node, {r});
  }

  // The agent reports `inst` ended (after a stop, or on its own with `exit_code`).
  // The agent reports `insts` ended in one report (after a stop, or on their own with
  // `exit_code`).
  void Ended(const std::vector<Instance>& insts, std::optional<int> exit_code = 0) {
    std::vector<AgentReport> reports;
    for (const Instance& inst : insts) {
      AgentReport& r = reports.emplace_back();
      r.instance = inst.id.str();
      r.attempt = inst.restarts;
      r.state = InstanceState::kTerminated;
      r.exit_code = exit_code;
    }
    Sync(insts.front().node, std::move(reports));
  }
  void Ended(const Instance& inst, std::optional<int> exit_code = 0) {
    Ended(std::vector<Instance>{inst}, exit_code);
  }

  // The agent reports `inst`'s image pulled to `percent` of 100 MB.
  void Pulling(const Instance& inst, int percent) {
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_[inst.node];
    s.pulls = {
        {inst.id.str(), inst.restarts, {int64_t{percent} * 1'000'000, 100'000'000, percent}}};
    auto out = SyncNode(inst.node, s);
    ASSERT_TRUE(out.ok()) << out.status().message();
  }

  void Delete(const Instance& inst) {
    state_->BeginRound();
    ASSERT_TRUE(state_->instances().Delete(Admin(), inst.id.str(), batch_).ok());
    state_->EndRound(batch_);
  }

  static Tenant Admin() {
    Tenant admin;
    admin.admin = true;
    return admin;
  }

  void Commit() {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
  }

  // Every billing line of `tenant` ("" all) as a billing read sees them: the core's snapshot,
  // scanned by a ledger reader.
  Status ScanBilling(const std::string& tenant,
                     const std::function<void(const store::LedgerRecord&, bool open)>& fn) {
    auto reader = store_->OpenLedgerReader();
    if (!reader.ok()) return reader.status();
    return state_->accounts().Snapshot(*store_, tenant, 0, INT64_MAX).Scan(**reader, fn);
  }

  // The lines the store gained since the last call, after committing the round.
  std::vector<store::LedgerRecord> Ledger() {
    Commit();
    std::vector<store::LedgerRecord> out;
    EXPECT_TRUE(store_
                    ->ScanLedger("", 0, INT64_MAX,
                                 [&](const store::LedgerRecord& l) {
                                   if (l.seq > seen_seq_) out.push_back(l);
                                 })
                    .ok());
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
    if (!out.empty()) seen_seq_ = out.back().seq;
    return out;
  }

  // A restart as the server does it (RestoreFromStore), whose agents then register again.
  void Restart() {
    Commit();
    state_ = NewState();
    seq_.clear();
    agent_ = "a2";
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
    for (const char* node : {"gpu-1"}) {
      ASSERT_TRUE(state_->agent_hub()
                      .Register(node, {agent_, Inventory(2, "H100-80GB", false, node)}, batch_)
                      .ok());
    }
  }

  void Tick() {
    state_->BeginRound();
    state_->EndRound(batch_);
  }

  // Lets `d` pass with the nodes' agents reporting every few seconds, as they do.
  void Wait(Duration d) {
    while (d > Duration::zero()) {
      const Duration step = std::min<Duration>(d, 5s);
      clock_.Advance(step);
      d -= step;
      for (const std::string& node : nodes_) Sync(node);
    }
  }

  Result<billing::Reservation> Reserve(const std::string& type, int count,
                                       std::optional<int64_t> start = std::nullopt) {
    billing::ReservationRequest req;
    req.instance_type = type;
    req.count = count;
    req.term = "1y";
    req.start = start;
    return state_->accounts().CreateReservation(*state_->tenants().Find(acme_.id.str()), req,
                                                batch_);
  }

  std::map<std::string, int64_t> seq_;
  std::vector<std::string> nodes_;
  int64_t seen_seq_ = 0;
};

TEST_F(BillingTest, ARunIsBilledFromItsStartToItsStopWithAMinuteAtLeast) {
  const catalog::Price* p = TestCatalog().FindPrice("gpu.1xh100");
  ASSERT_NE(p, nullptr);
  // Pending and scheduled time is free: the agent reports the start 40 s after the create.
  auto created = Create(Type("gpu.1xh100", Billing::kOnDemand));
  ASSERT_TRUE(created.ok()) << created.status().message();
  Wait(40s);
  Started(*created);
  const Instance inst = *state_->views().Get(Admin(), created->id.str());
  Wait(30s);
  Delete(inst);  // Running -> stopping closes the interval.
  Wait(9s);
  Ended(inst);  // The stop itself is not billed.
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].instance, inst.id.str());
  EXPECT_EQ(lines[0].instance_type, "gpu.1xh100");
  EXPECT_EQ(lines[0].billing, "on_demand");
  EXPECT_EQ(lines[0].seconds, 60) << "30 s run, one minute billed";
  EXPECT_EQ(lines[0].note, "minimum");
  EXPECT_EQ(lines[0].rate_micros, p->on_demand_per_hour.micros());
  EXPECT_EQ(lines[0].amount_micros, p->on_demand_per_hour.MulDiv(60, 3600).micros());
  EXPECT_EQ(lines[0].end - lines[0].start, 30);

  // A workload that exits on its own after 125 s pays 125 s.
  const Instance second = Running(Type("gpu.1xh100", Billing::kOnDemand));
  Wait(125s);
  Ended(second, 0);
  lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 125);
  EXPECT_EQ(lines[0].amount_micros, p->on_demand_per_hour.MulDiv(125, 3600).micros());
  EXPECT_EQ(state_->views().Get(Admin(), second.id.str())->state, InstanceState::kSucceeded);
}

TEST_F(BillingTest, PreemptionAndNodeLossAreBilledToTheSecond) {
  // A spot instance on each GPU; an on-demand request for both preempts them after 20 s.
  const Instance s1 = Running(H100(Billing::kSpot));
  const Instance s2 = Running(H100(Billing::kSpot));
  Wait(20s);
  ASSERT_TRUE(Create(H100(Billing::kOnDemand, 2)).ok());
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 2u) << "billing stops at the notice";
  for (const auto& l : lines) {
    EXPECT_EQ(l.billing, "spot");
    EXPECT_EQ(l.seconds, 20);
    EXPECT_EQ(l.note, "ended by the platform");
    EXPECT_EQ(l.amount_micros, Money::FromMicros(l.rate_micros).MulDiv(20, 3600).micros());
  }
  // The spot custom share pays the H100's per-GPU spot price.
  const catalog::Price* p = TestCatalog().FindPrice("gpu.8xh100");
  EXPECT_LE(lines[0].rate_micros, p->spot_per_hour.MulDiv(1, 8).micros());

  // Node loss: the running on-demand instance's node stops reporting.
  Wait(6s);  // The victims' notice ends; their agent reports them stopped.
  Ended({s1, s2}, std::nullopt);
  Wait(20s);  // The on-demand request's wait for its victims ends: it is placed.
  const Instance od = state_->views().List(Admin(), {}).items.back();
  ASSERT_EQ(od.billing, Billing::kOnDemand);
  ASSERT_EQ(od.state, InstanceState::kScheduled) << od.reason;
  Started(od);
  (void)Ledger();
  Wait(5s);
  for (int i = 0; i < 3; ++i) {  // The node falls silent past its 10 s timeout.
    clock_.Advance(5s);
    Tick();
  }
  lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].instance, od.id.str());
  EXPECT_EQ(lines[0].seconds, 5) << "billed to its node's last report, no minimum";
  EXPECT_EQ(lines[0].note, "ended by the platform");
  EXPECT_EQ(state_->views().Get(Admin(), od.id.str())->state, InstanceState::kRunning)
      << "it may still run there: it moves once its node's lease has run out";
  for (int i = 0; i < 62; ++i) {
    clock_.Advance(5s);
    Tick();
  }
  EXPECT_EQ(state_->views().Get(Admin(), od.id.str())->state, InstanceState::kPending);
  EXPECT_TRUE(Ledger().empty()) << "nothing more is billed when it moves";
}

TEST_F(BillingTest, SharesPayTheirFraction) {
  Join("l40s-1", 1, "L40S", catalog::SharingMode::kShared);
  const catalog::Price* half = TestCatalog().FindPrice("shared.l40s.half");
  ASSERT_NE(half, nullptr);
  const Instance inst = Running(Type("shared.l40s.half", Billing::kOnDemand));
  ASSERT_EQ(inst.state, InstanceState::kRunning);
  Wait(3600s);
  Delete(inst);
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 3600);
  EXPECT_EQ(lines[0].amount_micros, half->on_demand_per_hour.micros());
  const catalog::Price* whole = TestCatalog().FindPrice("gpu.1xl40s");
  ASSERT_NE(whole, nullptr);
  EXPECT_LT(lines[0].amount_micros, whole->on_demand_per_hour.micros());
}

TEST_F(BillingTest, MigSlicesPayTheirFraction) {
  Join("mig-1", 1, "H100-80GB", catalog::SharingMode::kMig);
  const catalog::Price* slice = TestCatalog().FindPrice("mig.h100.1g.10gb");
  ASSERT_NE(slice, nullptr);
  const Instance inst = Running(Type("mig.h100.1g.10gb", Billing::kSpot));
  ASSERT_EQ(inst.state, InstanceState::kRunning) << inst.reason;
  Wait(1800s);
  Delete(inst);
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 1800);
  EXPECT_EQ(lines[0].amount_micros, slice->spot_per_hour.MulDiv(1, 2).micros());
  EXPECT_EQ(lines[0].gpu_milli, 142) << "one of seven compute slices";
}

TEST_F(BillingTest, IntervalsAreCutAtMidnightAndAMonthsLinesStayPut) {
  clock_.Set(At(kNov30 + 86400 - 30));  // 23:59:30 on the last day of November.
  Sync("gpu-1");
  const Instance inst = Running(H100(Billing::kOnDemand));
  Wait(45s);  // 00:00:15 on December 1st: the round rolls the interval at midnight.
  Tick();
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].start, kNov30 + 86400 - 30);
  EXPECT_EQ(lines[0].end, kNov30 + 86400);
  EXPECT_EQ(lines[0].seconds, 30) << "the roll bills no minimum: the run goes on";
  // Usage reads the same while it runs: November's 30 s (closed) and December's 15 s (open).
  std::vector<std::pair<store::LedgerRecord, bool>> seen;
  ASSERT_TRUE(ScanBilling("", [&](const store::LedgerRecord& l, bool open) {
                seen.emplace_back(l, open);
              }).ok());
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FALSE(seen[0].second);
  EXPECT_TRUE(seen[1].second);
  EXPECT_EQ(seen[1].first.seconds, 15);
  Wait(15s);
  Delete(inst);
  lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].start, kNov30 + 86400);
  EXPECT_EQ(lines[0].seconds, 30) << "the start ran 60 s in all: no top-up";
}

TEST_F(BillingTest, ARestartInTheMiddleOfAnIntervalLosesAndDuplicatesNothing) {
  const Instance inst = Running(H100(Billing::kOnDemand));
  Wait(100s);
  Restart();
  clock_.Advance(50s);  // The server was down; the workload ran on.
  Sync("gpu-1");
  Delete(*state_->views().Get(Admin(), inst.id.str()));
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 150);
  // Restarting again changes nothing that is billed.
  Restart();
  Tick();
  EXPECT_EQ(Ledger().size(), 0u);
}

TEST_F(BillingTest, TheFleetsFirstStartIsRecordedOnceAndAnOlderStoreIsDatedByItsTenants) {
  // The fixture's store predates the record: its tenant and node came an hour after midnight.
  clock_.Advance(24h * 10);
  Restart();
  EXPECT_EQ(state_->accounts().fleet_since(), kNov30 + 3600);
  clock_.Advance(24h);
  Restart();  // Commits what the first restart recorded.
  EXPECT_EQ(state_->accounts().fleet_since(), kNov30 + 3600);
  EXPECT_EQ(store_->GetSetting(std::string(Accounts::kFleetSince))->value_or(""),
            "2026-11-30T01:00:00Z");
  // A new store is dated by its first start, and a restart keeps that date.
  auto fresh = store::NewMemoryStore();
  auto first = NewState();
  store::Batch recorded;
  ASSERT_TRUE(RestoreFromStore(*first, *fresh, recorded).ok());
  EXPECT_EQ(first->accounts().fleet_since(), billing::UnixSeconds(clock_.Now()));
  ASSERT_TRUE(fresh->Commit(recorded).ok());
  clock_.Advance(1h);
  auto second = NewState();
  store::Batch none;
  ASSERT_TRUE(RestoreFromStore(*second, *fresh, none).ok());
  EXPECT_EQ(second->accounts().fleet_since(), first->accounts().fleet_since());
  // A record that is not a time is data loss, named.
  store::Batch bad;
  bad.settings.emplace_back(std::string(Accounts::kFleetSince), "yesterday");
  ASSERT_TRUE(fresh->Commit(bad).ok());
  auto third = NewState();
  const Status broken = RestoreFromStore(*third, *fresh, none).status();
  EXPECT_EQ(broken.code(), StatusCode::kDataLoss);
  EXPECT_NE(broken.message().find("billing/fleet_since"), std::string::npos) << broken.message();
}

TEST_F(BillingTest, ReservedInstancesDrawOnAReservationThatBillsItsTerm) {
  auto none = Create(Type("gpu.1xh100", Billing::kReserved));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().reason(), "no_reservation");
  EXPECT_NE(none.status().message().find("no reservation"), std::string::npos);

  auto r = Reserve("gpu.1xh100", 1);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->rate, TestCatalog().FindPrice("gpu.1xh100")->reserved_1y_per_hour);
  // The fleet has two H100s: a second reservation of two more does not fit.
  auto too_many = Reserve("gpu.1xh100", 2);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), StatusCode::kResourceExhausted);

  const Instance inst = Running(Type("gpu.1xh100", Billing::kReserved));
  EXPECT_EQ(inst.reservation, r->id);
  auto second = Create(Type("gpu.1xh100", Billing::kReserved));
  ASSERT_FALSE(second.ok()) << "one unit, in use";
  EXPECT_NE(second.status().message().find("1 in use"), std::string::npos)
      << second.status().message();
  Wait(600s);
  Delete(inst);
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].rate_micros, 0) << "the reservation pays";
  EXPECT_EQ(lines[0].reservation, r->id);
  // The unit is free again once the instance ended.
  Ended(inst);
  EXPECT_TRUE(Create(Type("gpu.1xh100", Billing::kReserved)).ok());
  // Started: it cannot be cancelled. One that has not started can.
  EXPECT_EQ(state_->accounts().DeleteReservation(Admin(), r->id, batch_).code(),
            StatusCode::kFailedPrecondition);
  auto later = Reserve("gpu.1xh100", 1, kNov30 + 30 * 86400);
  ASSERT_TRUE(later.ok()) << later.status().message();
  EXPECT_TRUE(state_->accounts().DeleteReservation(Admin(), later->id, batch_).ok());
}

// A reservation passes the same gate as an instance (quota, budget), can be priced without being
// made, and cancelled at no cost for five minutes.
TEST_F(BillingTest, AReservationPassesTheGateCanBePreviewedAndIsCancellableForFiveMinutes) {
  ASSERT_TRUE(state_->UpdateTenant(acme_.id.str(), 1000, std::nullopt, batch_).ok());  // 1 GPU.
  auto over = Reserve("gpu.1xh100", 2);
  ASSERT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("quota exceeded by 1 GPUs"), std::string::npos)
      << over.status().message();

  billing::ReservationRequest preview;
  preview.instance_type = "gpu.1xh100";
  preview.count = 1;
  preview.term = "3y";
  preview.dry_run = true;
  auto priced = state_->accounts().CreateReservation(Acme(), preview, batch_);
  ASSERT_TRUE(priced.ok()) << priced.status().message();
  EXPECT_TRUE(priced->id.empty());
  const Money rate = TestCatalog().FindPrice("gpu.1xh100")->reserved_3y_per_hour;
  EXPECT_EQ(priced->commitment(), rate.MulDiv(3 * 365 * 24, 1)) << "every hour of three years";
  EXPECT_TRUE(state_->accounts().ListReservations(Admin()).empty()) << "a dry run makes nothing";

  // A hard-stop budget: what a reservation bills this month must fit what is left of it.
  ASSERT_TRUE(state_->accounts()
                  .SetBudget(Admin(), acme_.id.str(), {*Money::Parse("10"), true}, batch_)
                  .ok());
  auto spendy = Reserve("gpu.1xh100", 1);
  EXPECT_EQ(spendy.status().reason(), "budget_exceeded") << spendy.status().message();
  EXPECT_NE(spendy.status().message().find("this month"), std::string::npos);
  ASSERT_TRUE(state_->accounts().DeleteBudget(Admin(), acme_.id.str(), batch_).ok());

  auto r = Reserve("gpu.1xh100", 1);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(Reserve("gpu.1xh100", 1).status().code(), StatusCode::kResourceExhausted)
      << "its reservations together hold at most the quota";
  clock_.Advance(299s);
  ASSERT_TRUE(state_->accounts().DeleteReservation(Acme(), r->id, batch_).ok())
      << "within five minutes";
  Commit();
  int billed = 0;
  ASSERT_TRUE(
      ScanBilling(acme_.id.str(), [&](const store::LedgerRecord&, bool) { ++billed; }).ok());
  EXPECT_EQ(billed, 0) << "a cancelled reservation bills nothing";
  auto kept = Reserve("gpu.1xh100", 1);
  ASSERT_TRUE(kept.ok());
  clock_.Advance(301s);
  const Status late = state_->accounts().DeleteReservation(Acme(), kept->id, batch_);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(late.message().find("cancellation window closed"), std::string::npos) << late.message();
}

TEST_F(BillingTest, ATenantMayLowerButNeverRaiseOrDeleteTheOperatorsBudget) {
  ASSERT_TRUE(state_->accounts()
                  .SetBudget(Admin(), acme_.id.str(), {*Money::Parse("100"), true}, batch_)
                  .ok());
  auto raised =
      state_->accounts().SetBudget(Acme(), acme_.id.str(), {*Money::Parse("500"), true}, batch_);
  EXPECT_EQ(raised.status().code(), StatusCode::kPermissionDenied);
  auto softened =
      state_->accounts().SetBudget(Acme(), acme_.id.str(), {*Money::Parse("50"), false}, batch_);
  EXPECT_EQ(softened.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(state_->accounts().DeleteBudget(Acme(), acme_.id.str(), batch_).code(),
            StatusCode::kPermissionDenied);
  auto lowered =
      state_->accounts().SetBudget(Acme(), acme_.id.str(), {*Money::Parse("50"), true}, batch_);
  ASSERT_TRUE(lowered.ok()) << lowered.status().message();
  EXPECT_TRUE(lowered->by_operator) << "lowered, it is still the operator's";
  ASSERT_EQ(state_->accounts().Budgets(Acme()).size(), 1u);
  EXPECT_TRUE(state_->accounts().Budgets(Acme())[0].budget.by_operator);
  // Its own budget is the tenant's to change.
  ASSERT_TRUE(state_->accounts().DeleteBudget(Admin(), acme_.id.str(), batch_).ok());
  ASSERT_TRUE(state_->accounts()
                  .SetBudget(Acme(), acme_.id.str(), {*Money::Parse("20"), true}, batch_)
                  .ok());
  EXPECT_TRUE(state_->accounts()
                  .SetBudget(Acme(), acme_.id.str(), {*Money::Parse("90"), false}, batch_)
                  .ok());
  EXPECT_TRUE(state_->accounts().DeleteBudget(Acme(), acme_.id.str(), batch_).ok());
}

TEST_F(BillingTest, UnclaimedReservedCapacityRunsSpotButNotOnDemand) {
  ASSERT_TRUE(Reserve("gpu.1xh100", 1).ok());
  const Instance od = Running(H100(Billing::kOnDemand));
  auto waits = Create(H100(Billing::kOnDemand));
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(waits->state, InstanceState::kPending) << "the free H100 is held for the reservation";
  EXPECT_NE(waits->reason.find("held for reservations"), std::string::npos) << waits->reason;
  const Instance spot = Running(H100(Billing::kSpot));
  EXPECT_EQ(spot.state, InstanceState::kRunning) << "idle reserved capacity runs spot work";
  auto holder = Create(Type("gpu.1xh100", Billing::kReserved));
  ASSERT_TRUE(holder.ok());
  EXPECT_EQ(state_->views().Get(Admin(), spot.id.str())->state, InstanceState::kPreempting)
      << "the holder claims its capacity";
  (void)od;
}

TEST_F(BillingTest, AHardStopBudgetRefusesNewSpendOnceSpent) {
  ASSERT_TRUE(state_->accounts()
                  .SetBudget(Admin(), acme_.id.str(), {Usd("1.00"), /*hard_stop=*/true}, batch_)
                  .ok());
  const Instance inst = Running(Type("gpu.1xh100", Billing::kOnDemand));
  const Money rate = TestCatalog().FindPrice("gpu.1xh100")->on_demand_per_hour;
  // Half the budget: still allowed.
  Wait(std::chrono::seconds(1800 * 1'000'000 / rate.micros()));
  auto budgets = state_->accounts().Budgets(Admin());
  ASSERT_EQ(budgets.size(), 1u);
  EXPECT_NEAR(static_cast<double>(budgets[0].use.basis_points), 5000, 50);
  EXPECT_FALSE(budgets[0].use.stopping);
  Wait(std::chrono::seconds(1800 * 1'000'000 / rate.micros()));
  Wait(5s);
  budgets = state_->accounts().Budgets(Admin());
  EXPECT_GE(budgets[0].use.basis_points, 10000);
  EXPECT_TRUE(budgets[0].use.stopping);
  auto refused = Create(H100(Billing::kSpot));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "budget_exceeded");
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(state_->views().Get(Admin(), inst.id.str())->state, InstanceState::kRunning)
      << "running work is not killed";
  // The alert engine's series says the same.
  bool seen = false;
  for (const telemetry::Target& t : state_->Targets()) {
    if (t.has(telemetry::Field::kBudgetUsedPercent)) {
      seen = true;
      EXPECT_GE(t.get(telemetry::Field::kBudgetUsedPercent), 100);
      EXPECT_EQ(t.tenant, acme_.id.str());
    }
  }
  EXPECT_TRUE(seen);
}

TEST_F(BillingTest, ABudgetCountsOnlyItsOwnTenantsSpend) {
  ASSERT_TRUE(state_->accounts()
                  .SetBudget(Admin(), acme_.id.str(), {Usd("100.00"), /*hard_stop=*/true}, batch_)
                  .ok());
  const Tenant beta = *state_->tenants().Create("beta", 64000, "h-beta", batch_);
  state_->BeginRound();
  auto theirs = state_->instances().Create(beta, Type("gpu.1xh100", Billing::kOnDemand), batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(theirs.ok()) << theirs.status().message();
  Started(*theirs);
  Wait(std::chrono::hours(10));
  auto budgets = state_->accounts().Budgets(Admin());
  ASSERT_EQ(budgets.size(), 1u);
  EXPECT_EQ(budgets[0].use.spent, Money()) << "beta's ten hours are not acme's";
  EXPECT_TRUE(Create(H100(Billing::kOnDemand)).ok());
}

TEST_F(BillingTest, TheDryRunCountsLargeRequestsWithoutPlacingThem) {
  constexpr int kNodes = 5;
  for (int i = 2; i < 2 + kNodes; ++i) {
    Join(fmt::format("gpu-{}", i), 8, "H100-80GB", catalog::SharingMode::kExclusive);
  }
  const catalog::InstanceType& one = *TestCatalog().FindInstanceType("gpu.1xh100");
  const catalog::InstanceType& eight = *TestCatalog().FindInstanceType("gpu.8xh100");
  // Each node's 128 vCPUs hold this many of the type, whatever its GPUs.
  const int per_node = static_cast<int>(128 / one.vcpus);
  ASSERT_GT(per_node * kNodes, State::kDryRunUnits) << "the count, not the scheduler, decides";
  const int fit = per_node * kNodes + std::min(2, per_node);
  EXPECT_TRUE(state_->PlaceableNow(one, fit));
  EXPECT_FALSE(state_->PlaceableNow(one, fit + 1));
  EXPECT_TRUE(state_->PlaceableNow(one, State::kDryRunUnits)) << "by the scheduler";
  EXPECT_FALSE(state_->PlaceableNow(eight, 1)) << "these nodes report no NVLink island";
  Running(Type("gpu.1xh100", Billing::kOnDemand));
  EXPECT_FALSE(state_->PlaceableNow(one, fit)) << "one is taken now";
  EXPECT_TRUE(state_->PlaceableNow(one, fit - 1));
  // Neither way booked anything: every other unit can still be had.
  for (int i = 0; i < fit - 1; ++i) {
    auto inst = Create(Type("gpu.1xh100", Billing::kOnDemand));
    ASSERT_TRUE(inst.ok());
    EXPECT_EQ(inst->state, InstanceState::kScheduled) << i;
  }
}

// Nothing is billed for pulling an image: not while it pulls, not across a restart of the server
// (which forgets the pull but keeps the image and its credentials), not for a pull that fails.
// Billing starts when the agent reports the workload running.
TEST_F(BillingTest, APullIsNotBilledAndARestartKeepsTheImageAndItsCredentials) {
  CreateInstanceRequest req = Type("gpu.1xh100", Billing::kOnDemand);
  req.image.ref = "registry.example.com/team/train:1.4";
  req.image.auth = RegistryAuth{.username = "robot", .password = "s3cret-pw"};
  auto created = Create(req);
  ASSERT_TRUE(created.ok()) << created.status().message();
  const std::string id = created->id.str();
  for (int percent : {10, 40, 70}) {
    Pulling(*created, percent);
    Wait(120s);
  }
  json shown = ToJson(*state_->views().Get(Admin(), id));
  EXPECT_EQ(shown["state"], "pulling");
  EXPECT_EQ(shown["pull"]["percent"], 70);
  EXPECT_TRUE(Ledger().empty()) << "six minutes of pulling cost nothing";
  EXPECT_FALSE(state_->views().Get(Admin(), id)->meter);

  Restart();
  shown = ToJson(*state_->views().Get(Admin(), id));
  EXPECT_EQ(shown["state"], "scheduled") << "the pull is not stored; the agent reports it again";
  EXPECT_EQ(shown["image"], "registry.example.com/team/train:1.4");
  EXPECT_EQ(shown["registry_auth"], json({{"username", "robot"}}));
  const auto workload = Told(state_->agent_hub().DesiredState("gpu-1"), id);
  ASSERT_TRUE(workload.has_value() && workload->image.auth.has_value());
  EXPECT_EQ(workload->image.ref, "registry.example.com/team/train:1.4");
  EXPECT_EQ(workload->image.pull_policy, PullPolicy::kIfNotPresent);
  EXPECT_EQ(workload->image.auth->username, "robot");
  EXPECT_EQ(workload->image.auth->password, "s3cret-pw")
      << "a restarted server still sends the credentials to the node's agent";
  Pulling(*created, 90);
  EXPECT_EQ(ToJson(*state_->views().Get(Admin(), id))["state"], "pulling");
  Wait(60s);
  EXPECT_TRUE(Ledger().empty());
  Started(*created);
  Wait(120s);
  Ended(*created);
  auto lines = Ledger();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 120) << "billed from the running report, not from the pull";

  // A pull that fails ends the instance failed, and costs nothing either.
  CreateInstanceRequest missing = Type("gpu.1xh100", Billing::kOnDemand);
  missing.image.ref = "registry.example.com/team/missing:1.0";
  auto doomed = Create(missing);
  ASSERT_TRUE(doomed.ok());
  Pulling(*doomed, 0);
  Wait(300s);
  Ended(*doomed, std::nullopt);
  EXPECT_EQ(state_->views().Get(Admin(), doomed->id.str())->state, InstanceState::kFailed);
  EXPECT_TRUE(Ledger().empty());
}

}  // namespace
}  // namespace tessera::core
