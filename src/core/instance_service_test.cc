// The instance lifecycle (Instances, instance_service.h) in the State that composes it, on a fake
// clock and without a store: admission, quota in one unit, the queue, preemption and its rules,
// agents, retention, pages and the batch window.
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "fleet/fleet_file.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

// Two exclusive H100s on one NVLink island, one A100-40GB in MIG mode, one shared L40S, and a
// second L40S whose GPU is exclusive.
constexpr const char* kFleet = R"({"name": "t", "shapes": [
  {"name": "h100", "count": 1, "gpu_model": "H100-80GB", "gpus": 2, "vcpus": 64,
   "memory_gib": 512, "nvlink": "all", "gpu_mode": "exclusive"},
  {"name": "a100", "count": 1, "gpu_model": "A100-40GB", "gpus": 1, "vcpus": 32,
   "memory_gib": 256, "gpu_mode": "mig"},
  {"name": "l40s", "count": 1, "gpu_model": "L40S-48GB", "gpus": 1, "vcpus": 32,
   "memory_gib": 256, "gpu_mode": "shared"}]})";

CreateInstanceRequest Type(const std::string& type, Billing billing = Billing::kOnDemand) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.instance_type = type;
  return r;
}

CreateInstanceRequest H100(int gpus, Billing billing, int64_t vcpus = 4) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.shape.gpu_model = "H100-80GB";
  r.shape.mode = catalog::SharingMode::kExclusive;
  r.shape.gpus = gpus;
  r.shape.vcpus = vcpus;
  r.shape.memory_mib = 1024;
  return r;
}

class StateTest : public ::testing::Test {
 protected:
  void SetUp() override { Build(); }

  // Simulated agents, and the rest of the options as `edit` leaves them.
  static StateOptions Options(const std::function<void(StateOptions&)>& edit = nullptr) {
    StateOptions o;
    o.sim_agents = true;
    if (edit) edit(o);
    return o;
  }

  void Build(StateOptions options = Options(), const char* fleet_json = kFleet) {
    auto f = fleet::ParseFleetJson(TestCatalog(), fleet_json, "fleet");
    ASSERT_TRUE(f.ok()) << f.status().message();
    auto fleet = std::make_unique<fleet::Fleet>(std::move(*f));
    auto sched = sched::Scheduler::Create(fleet.get(), {"guarded-fgd", 42, {}});
    ASSERT_TRUE(sched.ok());
    state_ = std::make_unique<State>(&TestCatalog(), &clock_, std::move(fleet), std::move(*sched),
                                     options);
    store::Batch b;
    acme_ = *state_->tenants().Create("acme", 16000, "h-acme", b);
    beta_ = *state_->tenants().Create("beta", 16000, "h-beta", b);
  }

  // A round as the core runs it: the commands, then the end of the round.
  Result<Instance> Create(const Tenant& t, const CreateInstanceRequest& r) {
    state_->BeginRound();
    auto out = state_->instances().Create(*state_->tenants().Find(t.id.str()), r, batch_);
    state_->EndRound(batch_);
    return out;
  }
  Result<Instance> Delete(const Tenant& t, const std::string& id) {
    state_->BeginRound();
    auto out = state_->instances().Delete(*state_->tenants().Find(t.id.str()), id, batch_);
    state_->EndRound(batch_);
    return out;
  }
  Instance Get(const std::string& id) {
    Tenant admin;
    admin.admin = true;
    return *state_->views().Get(admin, id);
  }

  FakeClock clock_;
  std::unique_ptr<State> state_;
  Tenant acme_, beta_;
  store::Batch batch_;
};

TEST_F(StateTest, ShapesTheFleetCanNeverHostAreRefusedSayingWhy) {
  struct Case {
    CreateInstanceRequest req;
    StatusCode code;
    std::string message;
  };
  CreateInstanceRequest nvlink = H100(2, Billing::kOnDemand);
  nvlink.shape.nvlink = true;
  const std::vector<Case> cases = {
      {H100(3, Billing::kOnDemand), StatusCode::kInvalidArgument,
       "field 'gpus': the largest H100-80GB node has 2 GPUs; 3 asked"},
      {H100(1, Billing::kOnDemand, 4096), StatusCode::kInvalidArgument,
       "field 'vcpus': no H100-80GB node that could host the GPUs has 4096 vCPUs (the most is "
       "64)"},
      {Type("gpu.1xa100-80gb"), StatusCode::kInvalidArgument,
       "field 'gpu_model': the fleet has no A100-80GB GPUs"},
      {Type("mig.h100.1g.10gb"), StatusCode::kFailedPrecondition,
       "no H100-80GB GPU is in mig mode now; the fleet's H100-80GB nodes could host this shape "
       "once an operator switches idle GPUs to mig mode"},
      {Type("gpu.1xl40s"), StatusCode::kFailedPrecondition,
       "no L40S-48GB GPU is in exclusive mode now; the fleet's L40S-48GB nodes could host this "
       "shape once an operator switches idle GPUs to exclusive mode"},
  };
  for (const Case& c : cases) {
    auto r = Create(acme_, c.req);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), c.code) << c.message;
    EXPECT_EQ(r.status().message(), c.message);
  }
  EXPECT_TRUE(Create(acme_, nvlink).ok()) << "the two H100s share an island";
  EXPECT_EQ(state_->instances().TenantGpuMilli(acme_.id), 2000) << "refused requests hold no quota";
  EXPECT_EQ(state_->instances().queue().size(), 0u);
}

TEST_F(StateTest, PendingWorkSaysWhyItWaits) {
  ASSERT_TRUE(Create(acme_, H100(2, Billing::kSpot)).ok());
  ASSERT_TRUE(Create(acme_, H100(1, Billing::kSpot)).ok());  // Waits: both GPUs are taken.
  auto od = Create(beta_, H100(2, Billing::kOnDemand, 62));  // Preempts the 2-GPU spot one.
  ASSERT_TRUE(od.ok());
  EXPECT_EQ(od->state, InstanceState::kScheduled);
  auto waits = Create(beta_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(waits->state, InstanceState::kPending);
  EXPECT_EQ(waits->reason,
            "waiting for 1 x H100-80GB with 4 vCPUs and 1024 MiB on one node; no ready "
            "H100-80GB node has those vCPUs and memory free");
  Tenant admin;
  admin.admin = true;
  for (const Instance& i : state_->views().List(admin, {}).items) {
    if (i.state == InstanceState::kPending && i.restarts == 1) {
      EXPECT_NE(i.reason.find("preempted by higher-priority work; restarting; waiting for"),
                std::string::npos)
          << i.reason;
    }
  }
}

TEST_F(StateTest, SevenMigSlicesOfOneGpuCostExactlyOneGpuOfQuota) {
  store::Batch b;
  const Tenant one = *state_->tenants().Create("one", 1000, "h-one", b);
  for (int i = 0; i < 7; ++i) {
    auto r = Create(one, Type("mig.a100-40gb.1g.5gb"));
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().message();
    EXPECT_EQ(r->state, InstanceState::kScheduled);
  }
  EXPECT_EQ(state_->instances().TenantGpuMilli(one.id), 1000);
  EXPECT_EQ(state_->fleet().used_gpu_milli(), 1000) << "the fleet counts them alike";
  auto eighth = Create(one, Type("mig.a100-40gb.1g.5gb"));
  ASSERT_FALSE(eighth.ok());
  EXPECT_EQ(eighth.status().code(), StatusCode::kResourceExhausted);
}

// An L40S node whose first GPU an operator set up for sharing and whose second is exclusive.
constexpr const char* kMixedModes = R"({"name": "t", "shapes": [
  {"name": "l40s", "count": 1, "gpu_model": "L40S-48GB", "gpus": 2, "vcpus": 32,
   "memory_gib": 256, "gpu_modes": ["shared", "exclusive"]}]})";

std::vector<int> GpuIndices(const Instance& inst) {
  std::vector<int> out;
  for (const GpuRef& g : inst.gpus) out.push_back(g.index);
  return out;
}

TEST_F(StateTest, ExclusiveRequestsTakeOnlyExclusiveModeGpus) {
  Build(Options(), kMixedModes);
  auto first = Create(acme_, Type("gpu.1xl40s"));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(first->state, InstanceState::kScheduled);
  EXPECT_EQ(GpuIndices(*first), std::vector<int>{1}) << "GPU 0 is free but in shared mode";
  auto second = Create(beta_, Type("gpu.1xl40s"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->state, InstanceState::kPending)
      << "the only free GPU is in shared mode: an exclusive instance waits";
  auto shared = Create(beta_, Type("shared.l40s.half"));
  ASSERT_TRUE(shared.ok()) << shared.status().message();
  EXPECT_EQ(GpuIndices(*shared), std::vector<int>{0}) << "shares still use the shared GPU";
  ASSERT_TRUE(Delete(acme_, first->id.str()).ok());
  EXPECT_EQ(GpuIndices(Get(second->id.str())), std::vector<int>{1})
      << "the waiting instance takes the exclusive GPU once it frees";
}

// Two L40S GPUs, both set up for sharing.
constexpr const char* kSharedL40s = R"({"name": "t", "shapes": [
  {"name": "l40s", "count": 1, "gpu_model": "L40S-48GB", "gpus": 2, "vcpus": 32,
   "memory_gib": 256, "gpu_mode": "shared"}]})";

TEST_F(StateTest, WithWholeGpusOnSharedAWholeGpuTakesASharedGpuThatHoldsNoShare) {
  Build(Options(), kSharedL40s);
  auto refused = Create(acme_, Type("gpu.1xl40s"));
  ASSERT_FALSE(refused.ok()) << "by default whole GPUs come from exclusive-mode GPUs only";
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);

  Build(Options([](StateOptions& o) { o.whole_gpus_on_shared = true; }), kSharedL40s);
  auto share = Create(acme_, Type("shared.l40s.half"));
  ASSERT_TRUE(share.ok()) << share.status().message();
  auto whole = Create(acme_, Type("gpu.1xl40s"));
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(whole->state, InstanceState::kScheduled);
  ASSERT_EQ(GpuIndices(*whole).size(), 1u);
  EXPECT_NE(GpuIndices(*whole), GpuIndices(*share)) << "not the GPU that holds the share";
  auto second = Create(beta_, Type("gpu.1xl40s"));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->state, InstanceState::kPending) << "the other GPU holds a share";
  const std::string why = Get(second->id.str()).reason;
  EXPECT_NE(why.find("the best node has 0 free"), std::string::npos) << why;
  auto other_share = Create(beta_, Type("shared.l40s.half"));
  ASSERT_TRUE(other_share.ok());
  EXPECT_EQ(GpuIndices(*other_share), GpuIndices(*share))
      << "a share never lands on a GPU held whole";
  ASSERT_TRUE(Delete(acme_, share->id.str()).ok());
  ASSERT_TRUE(Delete(beta_, other_share->id.str()).ok());
  EXPECT_EQ(Get(second->id.str()).state, InstanceState::kRunning)
      << "the GPU with no share left is whole again";
}

TEST_F(StateTest, WithSimulatedNoticeASpotVictimRunsOnUntilItsWorkloadStops) {
  Build(Options([](StateOptions& o) {
    o.simulated_notice = true;
    o.spot_notice = 120s;
  }));
  auto spot = Create(acme_, H100(2, Billing::kSpot));
  ASSERT_TRUE(spot.ok());
  ASSERT_EQ(Get(spot->id.str()).state, InstanceState::kRunning);
  auto od = Create(beta_, H100(2, Billing::kOnDemand));
  ASSERT_TRUE(od.ok());
  const Instance victim = Get(spot->id.str());
  EXPECT_EQ(victim.state, InstanceState::kPreempting);
  ASSERT_TRUE(victim.preempt_at.has_value());
  EXPECT_EQ(*victim.preempt_at, clock_.Now() + 120s);
  EXPECT_EQ(Get(od->id.str()).state, InstanceState::kPending) << "it waits out the notice";
  clock_.Advance(120s);
  state_->BeginRound();
  state_->instances().WorkloadExited(spot->id.str(), 143);
  state_->EndRound(batch_);
  EXPECT_EQ(Get(spot->id.str()).state, InstanceState::kPending) << "preempted and re-queued";
  EXPECT_EQ(Get(od->id.str()).state, InstanceState::kRunning);

  // The provider's reclaim gives the same notice, and says so.
  ASSERT_TRUE(Delete(beta_, od->id.str()).ok());
  ASSERT_EQ(Get(spot->id.str()).state, InstanceState::kRunning);
  state_->BeginRound();
  state_->instances().ReclaimSpot(spot->id.str(), batch_);
  state_->EndRound(batch_);
  const Instance reclaimed = Get(spot->id.str());
  EXPECT_EQ(reclaimed.state, InstanceState::kPreempting);
  EXPECT_EQ(reclaimed.reason.rfind("spot capacity reclaimed by the provider; stops at", 0), 0u)
      << reclaimed.reason;
  EXPECT_EQ(*reclaimed.preempt_at, clock_.Now() + 120s);
  clock_.Advance(120s);
  state_->BeginRound();
  state_->instances().WorkloadExited(spot->id.str(), 143);
  state_->EndRound(batch_);
  const Instance restarted = Get(spot->id.str());
  EXPECT_EQ(restarted.restarts, 2);
  EXPECT_EQ(restarted.state, InstanceState::kRunning) << "the GPUs are free: it runs again";
  const bool said =
      std::any_of(restarted.history.begin(), restarted.history.end(), [](const StateChange& c) {
        return c.state == InstanceState::kPreempted &&
               c.reason ==
                   "spot capacity reclaimed by the provider "
                   "after its notice";
      });
  EXPECT_TRUE(said) << "its history says why it stopped";
}

TEST_F(StateTest, ADeletedSpotInstanceIsNeverAVictimNorRestarted) {
  auto spot = Create(acme_, H100(2, Billing::kSpot));
  ASSERT_TRUE(spot.ok());
  EXPECT_EQ(Get(spot->id.str()).state, InstanceState::kRunning);
  // One round: the owner deletes it, and an on-demand create that needs its GPUs arrives. With
  // agents serving the nodes the delete waits for the agent's stop, so the create must not take
  // the GPUs by preempting an instance that is being deleted.
  state_->BeginRound();
  ASSERT_TRUE(state_->instances()
                  .Delete(*state_->tenants().Find(acme_.id.str()), spot->id.str(), batch_)
                  .ok());
  auto od = state_->instances().Create(*state_->tenants().Find(beta_.id.str()),
                                       H100(2, Billing::kOnDemand), batch_);
  ASSERT_TRUE(od.ok());
  EXPECT_EQ(od->state, InstanceState::kPending) << "no victim: the only spot work is stopping";
  state_->EndRound(batch_);
  const Instance deleted = Get(spot->id.str());
  EXPECT_EQ(deleted.state, InstanceState::kTerminated);
  EXPECT_EQ(deleted.restarts, 0);
  EXPECT_EQ(Get(od->id.str()).state, InstanceState::kRunning)
      << "the agent's stop freed the GPUs within the round";
  EXPECT_EQ(state_->counters().preemptions, 0);
}

TEST_F(StateTest, IdenticalRequestsQueueInOrderAndAPassIsBudgeted) {
  Build(Options([](StateOptions& o) { o.queue_failures_per_pass = 2; }));
  ASSERT_TRUE(Create(acme_, H100(2, Billing::kOnDemand)).ok());  // Fills the H100 node.
  std::vector<std::string> waiting;
  for (int vcpus = 1; vcpus <= 5; ++vcpus) {  // Five groups, one request each.
    auto r = Create(acme_, H100(1, Billing::kOnDemand, vcpus));
    ASSERT_EQ(r->state, InstanceState::kPending);
    waiting.push_back(r->id.str());
  }
  const auto twin = Create(acme_, H100(1, Billing::kOnDemand, 1));
  EXPECT_EQ(twin->state, InstanceState::kPending);
  EXPECT_EQ(state_->instances().queue().size(), 6u);
  EXPECT_EQ(state_->instances().queue().groups(), 5u) << "identical requests share a group";
  const int64_t attempts = state_->counters().scheduling_attempts;
  // Nothing freed: an empty round makes no attempt.
  state_->BeginRound();
  state_->EndRound(batch_);
  EXPECT_EQ(state_->counters().scheduling_attempts, attempts);
}

TEST_F(StateTest, PreemptionSearchesAreBoundedPerRound) {
  Build(Options([](StateOptions& o) { o.preemption.searches_per_round = 2; }));
  // Spot work fills the L40S; on-demand requests for the H100s can never be helped by it.
  CreateInstanceRequest half = Type("shared.l40s.half", Billing::kSpot);
  ASSERT_TRUE(Create(acme_, half).ok());
  ASSERT_TRUE(Create(acme_, H100(2, Billing::kSpot)).ok());
  ASSERT_TRUE(Create(beta_, H100(2, Billing::kOnDemand, 62)).ok());  // Preempts.
  EXPECT_EQ(state_->counters().preemptions, 1);
  // The preempted spot work restarts and waits; now flood one round with on-demand requests of
  // fifty shapes that preemption could only try to help: at most two searches run.
  store::Batch b;
  const Tenant big = *state_->tenants().Create("big", 1000000, "h-big", b);
  const int64_t searches = state_->counters().preemption_searches;
  state_->BeginRound();
  for (int i = 1; i <= 50; ++i) {
    auto r = state_->instances().Create(*state_->tenants().Find(big.id.str()),
                                        H100(1, Billing::kOnDemand, i), batch_);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->state, InstanceState::kPending);
  }
  state_->EndRound(batch_);
  EXPECT_LE(state_->counters().preemption_searches - searches, 2);
  EXPECT_EQ(state_->instances().queue().groups(), 51u);
}

TEST_F(StateTest, EndedInstancesLeaveMemoryAfterTheRetentionPeriod) {
  Build(Options([](StateOptions& o) { o.retention = 10min; }));
  auto a = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(Delete(acme_, a->id.str()).ok());
  EXPECT_EQ(Get(a->id.str()).state, InstanceState::kTerminated);
  clock_.Advance(9min);
  state_->BeginRound();
  state_->EndRound(batch_);
  EXPECT_EQ(state_->instances().table().size(), 1u);
  clock_.Advance(2min);
  state_->BeginRound();
  state_->EndRound(batch_);
  EXPECT_EQ(state_->instances().table().size(), 0u);
  EXPECT_EQ(state_->counters().evicted, 1);
  Tenant admin;
  admin.admin = true;
  EXPECT_EQ(state_->views().Get(admin, a->id.str()).status().code(), StatusCode::kNotFound);
  // Its last record is in the batch, for the store to keep.
  EXPECT_EQ(batch_.instances.back().state, "terminated");
  EXPECT_FALSE(batch_.instances.back().ended_at.empty());
}

// An ended instance keeps where it ran (its node and GPUs) and shows its run time, in the API and
// in its stored record; one that waits again after a move shows no node.
TEST_F(StateTest, AnEndedInstanceShowsWhereItRanAndForHowLong) {
  auto a = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(a.ok()) << a.status().message();
  const Instance running = Get(a->id.str());
  ASSERT_EQ(running.state, InstanceState::kRunning);
  ASSERT_FALSE(running.node.empty());
  ASSERT_EQ(running.gpus.size(), 1u);
  EXPECT_FALSE(ToJson(running).contains("ended_at"));
  clock_.Advance(90s);
  ASSERT_TRUE(Delete(acme_, a->id.str()).ok());
  const nlohmann::json ended = ToJson(Get(a->id.str()));
  ASSERT_EQ(ended["state"], "terminated");
  EXPECT_EQ(ended["node"], running.node) << ended.dump();
  ASSERT_EQ(ended["gpus"].size(), 1u) << ended.dump();
  EXPECT_EQ(ended["gpus"][0]["uuid"], running.gpus[0].uuid);
  EXPECT_EQ(ended["gpus"][0]["index"], running.gpus[0].index);
  EXPECT_EQ(ended["run_seconds"], 90) << ended.dump();
  EXPECT_EQ(ended["ended_at"], FormatRfc3339(clock_.Now()));
  // The stored record says it too, and a restart reads it back without booking anything.
  const nlohmann::json doc = nlohmann::json::parse(batch_.instances.back().doc);
  auto stored = FromStoredJson(doc, state_->fleet());
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_FALSE(stored->instance.assignment.has_value());
  EXPECT_TRUE(stored->instance.node.empty());
  const nlohmann::json again = ToJson(stored->instance);
  EXPECT_EQ(again["node"], running.node);
  EXPECT_EQ(again["gpus"], ended["gpus"]);
  EXPECT_EQ(again["run_seconds"], 90);
}

TEST_F(StateTest, PagesAreStableInCreationOrder) {
  std::vector<std::string> ids;
  for (int i = 0; i < 7; ++i) {
    ids.push_back(
        Create(i % 2 ? beta_ : acme_, Type("shared.l40s.half", Billing::kSpot))->id.str());
  }
  Tenant admin;
  admin.admin = true;
  std::vector<std::string> seen;
  ListQuery q;
  q.limit = 3;
  for (int page = 0; page < 5; ++page) {
    const InstancePage p = state_->views().List(admin, q);
    for (const Instance& i : p.items) seen.push_back(i.id.str());
    if (!p.next_after) break;
    q.after_seq = *p.next_after;
  }
  EXPECT_EQ(seen, ids);
  // A tenant's pages hold only its own instances.
  ListQuery mine;
  const InstancePage acme = state_->views().List(*state_->tenants().Find(acme_.id.str()), mine);
  EXPECT_EQ(acme.items.size(), 4u);
  EXPECT_FALSE(acme.next_after);
}

}  // namespace
}  // namespace tessera::core

namespace tessera::core {
namespace {

class BatchWindowTest : public StateTest {
 protected:
  void Window(int k) {
    Build(Options([k](StateOptions& o) {
      o.batch_window = k;
      o.batch_wait = 200ms;
    }));
  }
  void Round() {
    state_->BeginRound();
    state_->EndRound(batch_);
  }
};

// One GPU is asked for and then two, on a node of two: the plain server gives the first request
// a GPU and the second waits; a window of two places the larger first.
TEST_F(BatchWindowTest, AFullWindowPlacesTheLargestFirst) {
  auto one = Create(acme_, H100(1, Billing::kOnDemand));
  auto two = Create(acme_, H100(2, Billing::kOnDemand));
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_FALSE(Get(one->id.str()).node.empty());
  EXPECT_EQ(Get(two->id.str()).state, InstanceState::kPending);

  Window(2);
  one = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(Get(one->id.str()).state, InstanceState::kPending);
  EXPECT_NE(Get(one->id.str())
                .reason.find("in the batch window: placed with up to 1 others "
                             "within 200 ms"),
            std::string::npos)
      << Get(one->id.str()).reason;
  EXPECT_TRUE(state_->has_deferred_work());
  two = Create(acme_, H100(2, Billing::kOnDemand));
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(Get(two->id.str()).node.empty());
  EXPECT_EQ(Get(one->id.str()).state, InstanceState::kPending);
  EXPECT_EQ(Get(one->id.str()).reason.find("batch window"), std::string::npos);
  EXPECT_NE(Get(one->id.str()).reason.find("waiting"), std::string::npos)
      << Get(one->id.str()).reason;
  EXPECT_EQ(state_->batch_due_in(), Duration::max());  // Nothing is held any more.
}

TEST_F(BatchWindowTest, ALoneCreateWaitsNoLongerThanTheWindow) {
  Window(8);
  auto one = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(state_->batch_due_in(), 200ms);
  clock_.Advance(199ms);
  Round();
  EXPECT_EQ(Get(one->id.str()).state, InstanceState::kPending);
  EXPECT_EQ(state_->batch_due_in(), 1ms);
  clock_.Advance(1ms);
  EXPECT_EQ(state_->batch_due_in(), Duration::zero());
  Round();
  EXPECT_FALSE(Get(one->id.str()).node.empty());
  EXPECT_FALSE(state_->has_deferred_work());
}

TEST_F(BatchWindowTest, ADeletedCreateLeavesTheWindowAndAClockSteppedBackClosesIt) {
  Window(2);
  auto gone = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(gone.ok());
  ASSERT_TRUE(Delete(acme_, gone->id.str()).ok());
  auto kept = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(kept.ok());
  // The deleted create does not fill the window of two: the new one is still held.
  EXPECT_EQ(Get(kept->id.str()).state, InstanceState::kPending);
  EXPECT_EQ(state_->batch_due_in(), 200ms);
  clock_.Advance(-1s);  // NTP steps the wall clock back.
  EXPECT_EQ(state_->batch_due_in(), Duration::zero());
  Round();
  EXPECT_FALSE(Get(kept->id.str()).node.empty());
}

// A disabled tenant's held create ends and leaves the window as a deleted one does: it neither
// fills the window nor keeps the core waking for it.
TEST_F(BatchWindowTest, ADisabledTenantsCreateLeavesTheWindow) {
  Window(2);
  auto gone = Create(beta_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(gone.ok());
  ASSERT_TRUE(state_->UpdateTenant(beta_.id.str(), std::nullopt, true, batch_).ok());
  EXPECT_EQ(Get(gone->id.str()).state, InstanceState::kTerminated);
  EXPECT_FALSE(state_->has_deferred_work());
  EXPECT_EQ(state_->batch_due_in(), Duration::max());
  auto kept = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(Get(kept->id.str()).state, InstanceState::kPending);  // Alone in a window of two.
  EXPECT_EQ(state_->batch_due_in(), 200ms);
}

TEST_F(BatchWindowTest, PriorityComesBeforeSizeAndADeletedCreateIsNotPlaced) {
  Window(3);
  auto spot = Create(acme_, H100(2, Billing::kSpot));
  auto gone = Create(beta_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(spot.ok() && gone.ok());
  ASSERT_TRUE(Delete(beta_, gone->id.str()).ok());
  auto od = Create(acme_, H100(1, Billing::kOnDemand));
  ASSERT_TRUE(od.ok());
  EXPECT_EQ(Get(od->id.str()).state, InstanceState::kPending);  // Two of three held.
  clock_.Advance(200ms);
  Round();
  EXPECT_EQ(Get(gone->id.str()).state, InstanceState::kTerminated);
  EXPECT_TRUE(Get(gone->id.str()).node.empty());
  EXPECT_FALSE(Get(od->id.str()).node.empty());  // On-demand before spot, however large.
  EXPECT_EQ(Get(spot->id.str()).state, InstanceState::kPending);
}

}  // namespace
}  // namespace tessera::core
