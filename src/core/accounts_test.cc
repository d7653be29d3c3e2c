// Accounts on a fake clock, alone: meters cut at midnight and what a billing read sees of an
// open stretch, the tightest reservation claimed and its units in use, capacity held for
// reservations against on-demand work, the fleet's GPUs by model as nodes leave, and restores
// of corrupt records. The state's own tests (state_billing_test.cc) drive it through real
// agents' reports and the API's paths.
#include "core/accounts.h"

#include <gtest/gtest.h>

#include <memory>

#include "common/json.h"
#include "core/core_test_util.h"
#include "store/memory_store.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kDec6 = 1'796'515'200;  // 2026-12-06T00:00:00Z.

Time At(int64_t unix_seconds) { return Time(std::chrono::seconds(unix_seconds)); }

Tenant Admin() {
  Tenant admin;
  admin.admin = true;
  return admin;
}

class AccountsTest : public ::testing::Test {
 protected:
  AccountsTest()
      : fleet_(&TestCatalog()),
        admission_(&TestCatalog(), &fleet_, false),
        tenants_(&clock_),
        accounts_(TestCatalog(), clock_, fleet_, admission_, tenants_, instances_, volumes_, 10s) {
    clock_.Set(At(kDec6 + 22 * 3600));  // 22:00 UTC.
    fleet::NodeSpec spec;
    spec.name = "gpu-1";
    spec.gpu_model = "H100-80GB";
    spec.gpus = 8;
    spec.cpu_milli = 256000;
    spec.memory_mib = 2 << 20;
    spec.nvlink_islands = {{0, 1, 2, 3, 4, 5, 6, 7}};
    EXPECT_TRUE(fleet_.AddNode(spec).ok());
    spec.name = "gpu-2";
    EXPECT_TRUE(fleet_.AddNode(spec).ok());
    admission_.FleetChanged();
    auto acme = tenants_.Create("acme", 16000, "hash-acme", batch_);
    EXPECT_TRUE(acme.ok());
    acme_ = *acme;
  }

  // A running instance of acme's, its workload started `ran` ago, its meter open.
  Instance& Running(const std::string& type, Billing billing, Duration ran,
                    const std::string& reservation = "") {
    Instance inst;
    inst.id = InstanceId::FromNumber(++next_);
    inst.seq = next_;
    inst.tenant = acme_.id;
    inst.billing = billing;
    inst.reservation = reservation;
    CreateInstanceRequest req;
    req.instance_type = type;
    req.billing = billing;
    auto admitted = admission_.Admit(req);
    EXPECT_TRUE(admitted.ok()) << admitted.status().message();
    inst.shape = admitted->shape;
    inst.price_per_hour = admitted->price_per_hour;
    inst.state = InstanceState::kRunning;
    inst.enqueued_at = clock_.Now() - ran;
    inst.started_at = clock_.Now() - ran;
    Instance& added = instances_.Add(std::move(inst));
    accounts_.CountReservationUnit(added, true);
    accounts_.Open(added);
    return added;
  }

  billing::ReservationRequest Reservation(const std::string& type, int count) {
    billing::ReservationRequest r;
    r.instance_type = type;
    r.count = count;
    r.term = "1y";
    return r;
  }

  FakeClock clock_;
  fleet::Fleet fleet_;
  Admission admission_;
  Tenants tenants_;
  InstanceTable instances_;
  Volumes volumes_;
  Accounts accounts_;
  Tenant acme_;
  store::Batch batch_;
  int64_t next_ = 0;
};

// An interval open over midnight is cut there once, whatever the rounds; what a read sees of the
// stretch since is marked open and counts towards this month's spend.
TEST_F(AccountsTest, MidnightCutsOpenIntervalsOnceAndAReadSeesTheOpenStretch) {
  Instance& inst = Running("gpu.1xh100", Billing::kOnDemand, 1h);
  EXPECT_TRUE(accounts_.Roll(batch_).empty()) << "nothing to cut before midnight";
  clock_.Set(At(kDec6 + 86400 + 3600));  // 01:00 the next day.
  const std::vector<Instance*> cut = accounts_.Roll(batch_);
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0], &inst);
  ASSERT_EQ(batch_.ledger.size(), 1u);
  EXPECT_EQ(batch_.ledger[0].start, kDec6 + 21 * 3600);
  EXPECT_EQ(batch_.ledger[0].end, kDec6 + 86400) << "three hours, to midnight";
  EXPECT_TRUE(accounts_.Roll(batch_).empty()) << "a day is rolled once";
  EXPECT_EQ(batch_.ledger.size(), 1u);

  auto store = store::NewMemoryStore();
  const BillingSnapshot snap = accounts_.Snapshot(*store, acme_.id.str(), 0, INT64_MAX);
  ASSERT_EQ(snap.beyond.size(), 1u);
  EXPECT_EQ(snap.beyond[0].start, kDec6 + 86400);
  EXPECT_EQ(snap.beyond[0].end, kDec6 + 86400 + 3600);
  EXPECT_EQ(snap.beyond[0].note, "open");

  // The budget's use this month: the cut line and the open stretch, four hours.
  const Money hourly = inst.meter->rate;
  const BudgetUse use = accounts_.UseOf(acme_.id.str(), {hourly.MulDiv(40, 1), true});
  EXPECT_EQ(use.spent, hourly.MulDiv(4, 1));
  EXPECT_EQ(use.basis_points, 1000) << "4 of 40 hours' worth";
  EXPECT_FALSE(use.stopping);

  accounts_.Close(inst, billing::Ending::kCustomer, batch_);
  EXPECT_FALSE(inst.meter);
  EXPECT_TRUE(accounts_.Snapshot(*store, acme_.id.str(), 0, INT64_MAX).beyond.empty());
}

// A reserved create takes the tightest covering reservation with a free unit, and units are
// counted in use until their instances end.
TEST_F(AccountsTest, AClaimTakesTheTightestFreeUnitAndUnitsComeBackWhenWorkEnds) {
  auto eight = accounts_.CreateReservation(acme_, Reservation("gpu.8xh100", 1), batch_);
  ASSERT_TRUE(eight.ok()) << eight.status().message();
  auto one = accounts_.CreateReservation(acme_, Reservation("gpu.1xh100", 1), batch_);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(KeysWithPrefix(batch_, Accounts::kReservationPrefix).size(), 2u);

  // A custom shape of one H100: a unit of either type covers it.
  Shape shape;
  shape.gpu_model = "H100-80GB";
  shape.gpus = 1;
  shape.vcpus = 2;
  shape.memory_mib = 1024;
  EXPECT_EQ(*accounts_.ClaimReservation(acme_, shape), one->id) << "the 1-GPU unit, not the 8";
  Instance& first = Running("gpu.1xh100", Billing::kReserved, 1min, one->id);
  EXPECT_EQ(accounts_.ReservationUnitsUsed(one->id), 1);
  EXPECT_EQ(*accounts_.ClaimReservation(acme_, shape), eight->id) << "the 8-GPU unit covers it";
  EXPECT_FALSE(accounts_.ClaimReservation(acme_, shape, 2).ok()) << "one unit free, not two";

  accounts_.CountReservationUnit(first, false);
  EXPECT_EQ(accounts_.ReservationUnitsUsed(one->id), 0);
  EXPECT_EQ(*accounts_.ClaimReservation(acme_, shape), one->id);

  EXPECT_FALSE(accounts_.ClaimReservation(Admin(), shape).ok()) << "the admin holds none";
  clock_.Advance(10min);  // Started, and past its cancellation window.
  const Status late = accounts_.DeleteReservation(acme_, one->id, batch_);
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(late.message().find("cancellation window closed"), std::string::npos) << late.message();
}

// Active reservations hold their GPUs against on-demand work, counted as it is booked.
TEST_F(AccountsTest, OnDemandWorkDoesNotTakeCapacityHeldForReservations) {
  ASSERT_TRUE(accounts_.CreateReservation(acme_, Reservation("gpu.8xh100", 1), batch_).ok());
  Instance probe;
  probe.billing = Billing::kOnDemand;
  probe.shape.gpu_model = "H100-80GB";
  probe.shape.gpus = 1;
  EXPECT_EQ(accounts_.HeldForReservations(probe, 8), "") << "16 GPUs: 8 reserved, 8 free";
  Instance& held = Running("gpu.8xh100", Billing::kOnDemand, 1min);
  accounts_.CountOnDemand(held, true);
  const std::string why = accounts_.HeldForReservations(probe);
  EXPECT_NE(why.find("8.000 are held for reservations and 8.000 run on-demand work"),
            std::string::npos)
      << why;
  accounts_.CountOnDemand(held, false);
  EXPECT_EQ(accounts_.HeldForReservations(probe), "");
  // A reservation over the fleet's GPUs is refused, naming them.
  auto over = accounts_.CreateReservation(Admin(), Reservation("gpu.8xh100", 2), batch_);
  EXPECT_EQ(over.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("the fleet has 16.000 H100-80GB GPUs"), std::string::npos)
      << over.status().message();
}

TEST_F(AccountsTest, TheFleetsGpusByModelAreCountedAgainWhenANodeLeaves) {
  EXPECT_EQ(accounts_.FleetMilliOf("H100-80GB"), 16000);
  EXPECT_EQ(accounts_.FleetMilliOf("A100-80GB"), 0);
  ASSERT_TRUE(fleet_.RemoveNode(*fleet_.Find("gpu-2")).ok());
  accounts_.FleetChanged();
  EXPECT_EQ(accounts_.FleetMilliOf("H100-80GB"), 8000);
}

// What a restore reads back: a corrupt record is data loss naming it; a budget's spend so far
// this month comes back with it, and shows in its series; a store without its first start is dated
// as the caller says.
TEST_F(AccountsTest, RestoresNameACorruptRecordAndKeepWhatWasSpent) {
  const Status bad = accounts_.RestoreReservations({{"reservation/resv-000001", "{not json"}});
  EXPECT_EQ(bad.code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.message().find("reservation/resv-000001"), std::string::npos) << bad.message();

  const billing::Budget budget{*Money::Parse("100"), true};
  const std::string key = std::string(Accounts::kBudgetPrefix) + acme_.id.str();
  ASSERT_TRUE(accounts_
                  .RestoreBudgets({{key, DumpJson(billing::ToJson(budget))}},
                                  billing::MonthStart(kDec6),
                                  {{acme_.id.str(), *Money::Parse("100")}})
                  .ok());
  const BudgetUse use = accounts_.UseOf(acme_.id.str(), budget);
  EXPECT_TRUE(use.stopping) << "spent before the restart";
  EXPECT_EQ(accounts_.CheckBudget(acme_, Billing::kOnDemand).reason(), "budget_exceeded");
  EXPECT_TRUE(accounts_.CheckBudget(acme_, Billing::kReserved).ok()) << "reserved is prepaid";
  EXPECT_EQ(accounts_.Budgets(Admin()).size(), 1u);
  std::vector<telemetry::Target> series;
  accounts_.BudgetTargets(series);
  ASSERT_EQ(series.size(), 1u) << "one series a budget, its tenant's to alert on";
  EXPECT_EQ(series[0].tenant, acme_.id.str());
  EXPECT_EQ(series[0].get(telemetry::Field::kBudgetUsedPercent), 100);

  store::Batch recorded;
  accounts_.DateFleetSince(At(kDec6), recorded);
  EXPECT_EQ(accounts_.fleet_since(), kDec6);
  EXPECT_EQ(SettingOf(recorded, std::string(Accounts::kFleetSince)), "2026-12-06T00:00:00Z");
  EXPECT_EQ(accounts_.RestoreFleetSince("yesterday").code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tessera::core
