// Changing a GPU's sharing mode on a joined node, in State on a fake clock with the in-memory
// store: a GPU that holds work is refused, exclusive and shared swap at once and outlast a
// restart, a change into or out of MIG is a request its agent is sent while the GPU is held, and
// the agent's result (pending_reset, applied, refused) ends it; a registration follows the MIG
// mode its inventory shows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/core.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "store/memory_store.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;
using catalog::SharingMode;
using nlohmann::json;
using ::testing::HasSubstr;

class GpuModesTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    MakeState({});
    const Status joined = JoinNode("gpu-1", TestInventory(2), agent_);
    ASSERT_TRUE(joined.ok()) << joined.message();
  }

  void Register(const json& inventory) {
    auto s = state_->agent_hub().Register("gpu-1", {agent_, inventory}, batch_);
    ASSERT_TRUE(s.ok()) << s.message();
    seq_ = 0;
  }

  // The inventory after the agent turned MIG on for `mig` GPUs.
  static json MigInventory(std::initializer_list<int> mig) {
    json inv = TestInventory(2);
    for (int g : mig) inv["gpus"][static_cast<size_t>(g)]["mig_enabled"] = true;
    return inv;
  }

  Result<GpuModeChange> SetMode(int gpu, SharingMode mode, bool allow_reset = false,
                                const std::string& node = "gpu-1") {
    state_->BeginRound();
    auto out = state_->agent_hub().SetGpuMode(node, gpu, mode, allow_reset, batch_);
    state_->EndRound(batch_);
    return out;
  }

  Status Sync(std::vector<GpuModeResult> results, std::vector<AgentReport> reports = {}) {
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_;
    s.reports = std::move(reports);
    s.gpu_mode_results = std::move(results);
    return SyncNode("gpu-1", s).status();
  }

  Instance Create(CreateInstanceRequest r = TestH100(1)) {
    auto out = CreateInRound(r);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : Instance{};
  }
  const fleet::Gpu& Gpu(int g) { return state_->fleet().nodes()[0].gpus[static_cast<size_t>(g)]; }
  std::vector<GpuModeChange> Requests() {
    return state_->agent_hub().DesiredState("gpu-1").mode_requests;
  }
  json Shown(int gpu) {
    for (const auto& [g, c] : AgentOf(*state_, "gpu-1").mode_changes) {
      if (g == gpu) return c.ToJson();
    }
    return nullptr;
  }
  // The audit rows this batch holds for agents' results.
  std::vector<json> Outcomes() {
    std::vector<json> out;
    for (const store::AuditRecord& a : batch_.audit) {
      if (a.action == "gpu mode change") out.push_back(json::parse(a.detail));
    }
    return out;
  }

  // Stores what happened, and starts a new State from the store, its agent registering anew.
  void Restart(const json& inventory) {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
    state_ = NewState();
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
    agent_ = "a" + std::to_string(++runs_);
    Register(inventory);
  }

  int runs_ = 1;
  int64_t seq_ = 0;
};

TEST_F(GpuModesTest, AskingIsCheckedNamingTheField) {
  EXPECT_EQ(SetMode(0, SharingMode::kShared, false, "nowhere").status().code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(state_->agent_hub()
                  .CreateNode("gpu-2", {}, SharingMode::kExclusive, "token-gpu-2", batch_)
                  .ok());
  auto waiting = SetMode(0, SharingMode::kShared, false, "gpu-2");
  EXPECT_EQ(waiting.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(waiting.status().message(), HasSubstr("no registered agent"));
  auto index = SetMode(2, SharingMode::kShared);
  EXPECT_EQ(index.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(index.status().message(), HasSubstr("field 'index': node 'gpu-1' has no GPU 2"));

  ASSERT_TRUE(JoinNode("l4-1", TestInventory(1, "L4-24GB", "l4-"), "b1").ok());
  auto no_mig = SetMode(0, SharingMode::kMig, false, "l4-1");
  EXPECT_EQ(no_mig.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(no_mig.status().message(), HasSubstr("field 'mode': the L4-24GB has no MIG mode"));
}

TEST_F(GpuModesTest, AGpuThatHoldsWorkIsRefusedNamingTheInstances) {
  const Instance busy = Create();
  ASSERT_EQ(busy.state, InstanceState::kScheduled);
  const int gpu = busy.gpus[0].index;
  for (SharingMode mode : {SharingMode::kShared, SharingMode::kMig}) {
    auto refused = SetMode(gpu, mode);
    EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_THAT(
        refused.status().message(),
        HasSubstr(fmt::format("GPU {} of node 'gpu-1' holds work: {}", gpu, busy.id.str())));
  }
  EXPECT_EQ(Gpu(gpu).mode, SharingMode::kExclusive);
  EXPECT_TRUE(Requests().empty()) << "a refusal asks the agent nothing";
  EXPECT_TRUE(SetMode(1 - gpu, SharingMode::kShared).ok()) << "the other GPU is free";
}

TEST_F(GpuModesTest, ExclusiveAndSharedSwapAtOnceAndOutlastARestart) {
  auto applied = SetMode(1, SharingMode::kShared);
  ASSERT_TRUE(applied.ok()) << applied.status().message();
  EXPECT_EQ(applied->state, ModeChangeState::kApplied);
  EXPECT_EQ(applied->id, 0) << "no request: the agent has nothing to do";
  EXPECT_EQ(Gpu(1).mode, SharingMode::kShared);
  EXPECT_EQ(Gpu(0).mode, SharingMode::kExclusive);
  EXPECT_TRUE(Requests().empty());
  auto again = SetMode(1, SharingMode::kShared);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state, ModeChangeState::kApplied);
  EXPECT_THAT(again->reason, HasSubstr("already"));

  // A share lands on the shared GPU.
  CreateInstanceRequest share = TestH100(0);
  share.shape.mode = SharingMode::kShared;
  share.shape.milli_gpu = 250;
  share.shape.gpu_memory_mib = 8192;
  const Instance placed = Create(share);
  ASSERT_EQ(placed.state, InstanceState::kScheduled) << placed.reason;
  EXPECT_EQ(placed.gpus[0].index, 1);

  Restart(TestInventory(2));
  EXPECT_EQ(Gpu(1).mode, SharingMode::kShared) << "the store keeps it, and so does registration";
  EXPECT_EQ(Gpu(0).mode, SharingMode::kExclusive);
  EXPECT_EQ(Get(placed.id.str()).gpus[0].index, 1);
}

TEST_F(GpuModesTest, AMigRequestHoldsTheGpuUntilItsAgentResetsAndAppliesIt) {
  ASSERT_TRUE(SetMode(1, SharingMode::kShared).ok());
  // GPU 0 is the only one a whole GPU fits, once a share holds GPU 1.
  CreateInstanceRequest share = TestH100(0);
  share.shape.mode = SharingMode::kShared;
  share.shape.milli_gpu = 250;
  share.shape.gpu_memory_mib = 8192;
  ASSERT_EQ(Create(share).gpus[0].index, 1);

  clock_.Advance(5s);
  auto requested = SetMode(0, SharingMode::kMig);
  ASSERT_TRUE(requested.ok()) << requested.status().message();
  EXPECT_EQ(requested->state, ModeChangeState::kRequested);
  EXPECT_EQ(requested->id, 1);
  EXPECT_EQ(requested->requested_at, clock_.Now());
  ASSERT_EQ(Requests().size(), 1u);
  EXPECT_EQ(Requests()[0].id, 1);
  EXPECT_EQ(Requests()[0].gpu, 0);
  EXPECT_EQ(Requests()[0].mode, SharingMode::kMig);
  EXPECT_FALSE(Requests()[0].allow_reset);
  EXPECT_TRUE(Gpu(0).held);
  EXPECT_EQ(Gpu(0).mode, SharingMode::kExclusive) << "not until its agent says so";
  EXPECT_EQ(Shown(0)["state"], "requested");
  auto other = SetMode(0, SharingMode::kShared);
  EXPECT_EQ(other.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.status().message(), HasSubstr("is changing to mig mode (request 1"));

  // Nothing new lands there meanwhile.
  const Instance waiting = Create();
  EXPECT_EQ(waiting.state, InstanceState::kPending);

  // The driver needs a reset, which the operator has not allowed.
  ASSERT_TRUE(Sync({{1, 0, ModeChangeState::kPendingReset, "needs a reset"}}).ok());
  EXPECT_EQ(Shown(0)["state"], "pending_reset");
  EXPECT_EQ(Shown(0)["reason"], "needs a reset");
  EXPECT_TRUE(Gpu(0).held);
  EXPECT_EQ(Requests().size(), 1u) << "still asked: the agent waits for the reset";
  ASSERT_EQ(Outcomes().size(), 1u);
  EXPECT_EQ(Outcomes()[0]["state"], "pending_reset");

  // The operator allows it: the same request, asked again.
  auto reset = SetMode(0, SharingMode::kMig, true);
  ASSERT_TRUE(reset.ok());
  EXPECT_EQ(reset->id, 1);
  EXPECT_EQ(reset->state, ModeChangeState::kRequested);
  EXPECT_TRUE(Requests()[0].allow_reset);
  // A report sent before the agent heard it says pending_reset again: the request stays asked.
  ASSERT_TRUE(Sync({{1, 0, ModeChangeState::kPendingReset, "needs a reset"}}).ok());
  EXPECT_EQ(Shown(0)["state"], "requested");

  ASSERT_TRUE(Sync({{1, 0, ModeChangeState::kApplied, ""}}).ok());
  EXPECT_EQ(Shown(0)["state"], "applied");
  EXPECT_FALSE(Gpu(0).held);
  EXPECT_EQ(Gpu(0).mode, SharingMode::kMig);
  EXPECT_TRUE(Requests().empty());
  EXPECT_EQ(Outcomes().back()["state"], "applied");
  EXPECT_EQ(Get(waiting.id.str()).state, InstanceState::kPending)
      << "a whole GPU does not fit a MIG GPU";
  // The agent repeats its result until it sees the request gone: nothing more happens.
  const size_t outcomes = Outcomes().size();
  ASSERT_TRUE(Sync({{1, 0, ModeChangeState::kApplied, ""}}).ok());
  EXPECT_EQ(Outcomes().size(), outcomes);

  // Its agent registers the new inventory; the mode and the last request outlast a restart.
  Register(MigInventory({0}));
  EXPECT_EQ(Gpu(0).mode, SharingMode::kMig);
  Restart(MigInventory({0}));
  EXPECT_EQ(Gpu(0).mode, SharingMode::kMig);
  EXPECT_EQ(Gpu(1).mode, SharingMode::kShared);
  EXPECT_EQ(Shown(0)["state"], "applied");
  EXPECT_EQ(Shown(0)["id"], 1);

  // And back out of MIG: request 2, to the mode the operator names.
  auto back = SetMode(0, SharingMode::kExclusive);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->id, 2);
  EXPECT_EQ(back->state, ModeChangeState::kRequested);
  ASSERT_TRUE(Sync({{2, 0, ModeChangeState::kApplied, ""}}).ok());
  EXPECT_EQ(Gpu(0).mode, SharingMode::kExclusive);
  Register(TestInventory(2));
  EXPECT_EQ(Gpu(0).mode, SharingMode::kExclusive);
  EXPECT_EQ(Get(waiting.id.str()).state, InstanceState::kScheduled);
}

TEST_F(GpuModesTest, ARefusalEndsTheRequestAndReleasesTheGpu) {
  ASSERT_TRUE(SetMode(0, SharingMode::kMig).ok());
  ASSERT_TRUE(SetMode(1, SharingMode::kMig).ok());
  EXPECT_EQ(Requests().size(), 2u);
  const Instance waiting = Create();
  ASSERT_EQ(waiting.state, InstanceState::kPending);

  // A request outlasts a restart, and holds its GPU after it.
  Restart(TestInventory(2));
  EXPECT_TRUE(Gpu(0).held);
  EXPECT_TRUE(Gpu(1).held);
  EXPECT_EQ(Requests().size(), 2u);
  EXPECT_EQ(Get(waiting.id.str()).state, InstanceState::kPending);

  ASSERT_TRUE(Sync({{1, 0, ModeChangeState::kRefused, "1 process(es) use GPU 0"}}).ok());
  EXPECT_EQ(Shown(0)["state"], "refused");
  EXPECT_EQ(Shown(0)["reason"], "1 process(es) use GPU 0");
  EXPECT_FALSE(Gpu(0).held);
  EXPECT_EQ(Gpu(0).mode, SharingMode::kExclusive);
  EXPECT_EQ(Requests().size(), 1u);
  EXPECT_EQ(Requests()[0].id, 2);
  const Instance placed = Get(waiting.id.str());
  EXPECT_EQ(placed.state, InstanceState::kScheduled) << "the released GPU takes the waiting work";
  EXPECT_EQ(placed.gpus[0].index, 0);

  ASSERT_TRUE(Sync({{2, 1, ModeChangeState::kFailed, "nvidia-smi: not supported"}}).ok());
  EXPECT_EQ(Shown(1)["state"], "failed");
  EXPECT_FALSE(Gpu(1).held);
  EXPECT_TRUE(Requests().empty());
  ASSERT_EQ(Outcomes().size(), 2u);
  EXPECT_EQ(Outcomes()[1]["reason"], "nvidia-smi: not supported");

  // A result for a GPU the node does not have refuses the whole report.
  auto bad = Sync({{3, 5, ModeChangeState::kApplied, ""}});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("field 'gpu_mode_results[0].gpu': 5 is not a GPU"));
}

TEST_F(GpuModesTest, ARegistrationFollowsTheMigModeItsInventoryShowsUnlessTheGpuIsBusy) {
  const Instance busy = Create();
  const int taken = busy.gpus[0].index;
  const int idle = 1 - taken;
  // Someone turned MIG on by hand on both GPUs.
  Register(MigInventory({0, 1}));
  EXPECT_EQ(Gpu(idle).mode, SharingMode::kMig);
  EXPECT_EQ(Gpu(taken).mode, SharingMode::kExclusive) << "its work keeps it as it was";
  Register(TestInventory(2));
  EXPECT_EQ(Gpu(idle).mode, SharingMode::kExclusive);
}

TEST(GpuModeChangeTest, AStoredRequestRoundTripsAndAMalformedOneNamesTheField) {
  GpuModeChange c{7,
                  3,
                  SharingMode::kMig,
                  true,
                  ModeChangeState::kPendingReset,
                  "reset",
                  Time(std::chrono::seconds(1'767'225'600))};
  auto back = GpuModeChange::FromJson(c.ToJson(), "stored node 'x'");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ToJson(), c.ToJson());
  json bad = c.ToJson();
  bad["state"] = "done";
  auto refused = GpuModeChange::FromJson(bad, "stored node 'x'");
  EXPECT_THAT(refused.status().message(), HasSubstr("stored node 'x': field 'state'"));
}

}  // namespace
}  // namespace tessera::core
