// The GPUs of joined nodes, alone on a fake clock: a mode change applied at once or held for the
// node's agent and moved on by its results, a GPU that holds work keeping its mode, and the MIG
// devices an agent reports booked and named. The state's tests (gpu_modes_test.cc,
// agent_hub_test.cc) carry the same through real agents' registrations and reports.
#include "core/node_gpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using catalog::SharingMode;
using ::testing::HasSubstr;

class NodeGpusTest : public ::testing::Test {
 protected:
  NodeGpusTest() { clock_.Set(Time{} + std::chrono::hours(24 * 365 * 50)); }

  // Joins node `name` of `gpus` GPUs of `model`, each in `mode`, as its agent registered it.
  AgentNode& Join(const std::string& name, int gpus, const std::string& model, SharingMode mode) {
    fleet::NodeSpec spec;
    spec.name = name;
    spec.gpus = gpus;
    spec.gpu_model = model;
    spec.cpu_milli = 64000;
    spec.memory_mib = 524288;
    for (int g = 0; g < gpus; ++g) {
      spec.gpu_uuids.push_back(name + "-u" + std::to_string(g));
      spec.gpu_modes.push_back(mode);
    }
    EXPECT_TRUE(fleet_.AddNode(spec).ok());
    AgentNode node;
    node.name = name;
    node.inventory = TestInventory(gpus, model, name + "-u");
    return agents_.nodes().emplace(name, std::move(node)).first->second;
  }

  const fleet::Gpu& GpuOf(const std::string& node, int gpu) const {
    return fleet_.node(*fleet_.Find(node)).gpus[static_cast<size_t>(gpu)];
  }

  FakeClock clock_;
  fleet::Fleet fleet_{&TestCatalog()};
  AgentSupervisor agents_{false};
  InstanceTable instances_;
  Admission admission_{&TestCatalog(), &fleet_};
  NodeGpus gpus_{&TestCatalog(), &clock_, &fleet_, &agents_, &instances_, &admission_, false};
  store::Batch batch_;
};

TEST_F(NodeGpusTest, BetweenExclusiveAndSharedAModeIsAppliedAtOnceAndFreesCapacity) {
  AgentNode& node = Join("gpu-1", 2, "H100-80GB", SharingMode::kExclusive);
  NodeGpus::Effects effects;
  auto change = gpus_.SetMode("gpu-1", 1, SharingMode::kShared, false, batch_, effects);
  ASSERT_TRUE(change.ok()) << change.status().message();
  EXPECT_EQ(change->state, ModeChangeState::kApplied);
  EXPECT_EQ(change->id, 0) << "no request for the agent";
  EXPECT_EQ(GpuOf("gpu-1", 1).mode, SharingMode::kShared);
  EXPECT_EQ(GpuOf("gpu-1", 0).mode, SharingMode::kExclusive);
  EXPECT_EQ(node.SharingOf(1), SharingMode::kShared) << "kept in the node's record";
  EXPECT_TRUE(effects.capacity_freed);
  EXPECT_FALSE(effects.hold_changed);
  EXPECT_TRUE(SettingOf(batch_, std::string(AgentSupervisor::kRecordPrefix) + "gpu-1"));

  NodeGpus::Effects again;
  auto same = gpus_.SetMode("gpu-1", 1, SharingMode::kShared, false, batch_, again);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->reason, "GPU 1 is in shared mode already");
  EXPECT_FALSE(again.capacity_freed);

  NodeGpus::Effects none;
  EXPECT_EQ(gpus_.SetMode("gpu-9", 0, SharingMode::kShared, false, batch_, none).status().code(),
            StatusCode::kNotFound);
  auto bad = gpus_.SetMode("gpu-1", 2, SharingMode::kShared, false, batch_, none);
  EXPECT_THAT(bad.status().message(), HasSubstr("field 'index': node 'gpu-1' has no GPU 2"));
}

TEST_F(NodeGpusTest, IntoMigTheGpuIsHeldUntilItsAgentsResultOnceAndAudited) {
  AgentNode& node = Join("a100-1", 2, "A100-80GB", SharingMode::kExclusive);
  NodeGpus::Effects asked;
  auto change = gpus_.SetMode("a100-1", 0, SharingMode::kMig, false, batch_, asked);
  ASSERT_TRUE(change.ok()) << change.status().message();
  EXPECT_EQ(change->state, ModeChangeState::kRequested);
  EXPECT_EQ(change->id, 1);
  EXPECT_TRUE(asked.hold_changed) << "the GPU is held while its agent acts";
  EXPECT_TRUE(node.mode_held(0));
  EXPECT_EQ(GpuOf("a100-1", 0).mode, SharingMode::kExclusive) << "until the agent says so";

  NodeGpus::Effects other;
  auto back = gpus_.SetMode("a100-1", 0, SharingMode::kShared, false, batch_, other);
  EXPECT_EQ(back.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(back.status().message(), HasSubstr("is changing to mig mode (request 1"));

  Status wrong = gpus_.CheckResults(node, {{1, 5, ModeChangeState::kApplied, ""}});
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.message(), HasSubstr("field 'gpu_mode_results[0].gpu'"));

  NodeGpus::Effects applied;
  gpus_.ApplyResults(node, {{1, 0, ModeChangeState::kApplied, ""}}, batch_, applied);
  EXPECT_EQ(GpuOf("a100-1", 0).mode, SharingMode::kMig);
  EXPECT_FALSE(node.mode_held(0));
  EXPECT_TRUE(applied.hold_changed) << "released";
  EXPECT_TRUE(applied.capacity_freed);
  ASSERT_EQ(batch_.audit.size(), 1u);
  EXPECT_EQ(batch_.audit[0].action, "gpu mode change");

  NodeGpus::Effects repeated;
  gpus_.ApplyResults(node, {{1, 0, ModeChangeState::kApplied, ""}}, batch_, repeated);
  EXPECT_FALSE(repeated.hold_changed) << "an agent repeats a result: once is enough";
  EXPECT_EQ(batch_.audit.size(), 1u);
}

TEST_F(NodeGpusTest, AGpuThatHoldsWorkKeepsItsModeAndTheRefusalNamesTheWork) {
  AgentNode& node = Join("gpu-1", 2, "H100-80GB", SharingMode::kExclusive);
  Instance inst = TestInstance(7, "tenant-000001", InstanceState::kRunning);
  inst.node = "gpu-1";
  inst.gpus = {{"gpu-1-u1", "H100-80GB", 1, "", 0, 0}};
  fleet::Assignment a;
  a.node = *fleet_.Find("gpu-1");
  a.gpu_count = 1;
  a.gpus[0].gpu = 1;  // The whole GPU.
  ASSERT_TRUE(fleet_.Allocate(a).ok());
  inst.assignment = a;
  node.assigned.insert(inst.id.str());
  instances_.Add(std::move(inst));

  NodeGpus::Effects effects;
  auto refused = gpus_.SetMode("gpu-1", 1, SharingMode::kShared, false, batch_, effects);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("GPU 1 of node 'gpu-1' holds work: inst-000007"));
  EXPECT_EQ(GpuOf("gpu-1", 1).mode, SharingMode::kExclusive);
  EXPECT_FALSE(effects.capacity_freed);
  EXPECT_TRUE(gpus_.SetMode("gpu-1", 0, SharingMode::kShared, false, batch_, effects).ok())
      << "its neighbour is free";
}

TEST_F(NodeGpusTest, AnUnmanagedMigDeviceIsBookedAndAnInstanceTakesItsDevicesUuid) {
  AgentNode& node = Join("a100-1", 1, "A100-80GB", SharingMode::kMig);
  Instance inst = TestInstance(3, "tenant-000001", InstanceState::kRunning);
  inst.node = "a100-1";
  inst.gpus = {{"a100-1-u0", "A100-80GB", 0, "3g.40gb", 4, 0}};
  node.assigned.insert(inst.id.str());
  instances_.Add(std::move(inst));

  const std::vector<MigReport> report = {{0, "MIG-op", "1g.10gb", 0, "unmanaged"},
                                         {0, "MIG-work", "3g.40gb", 4, "inst-000003"}};
  NodeGpus::Effects booked;
  gpus_.ApplyMigLayout(node, report, 2, batch_, booked);
  ASSERT_EQ(node.mig_held.size(), 1u) << "the operator's device, not the instance's";
  EXPECT_EQ(GpuOf("a100-1", 0).mig_instances.size(), 1u);
  EXPECT_EQ(node.mig_repartitions, 2);
  EXPECT_FALSE(booked.capacity_freed) << "nothing was held before";
  EXPECT_EQ(instances_.Find("inst-000003")->gpus[0].uuid, "MIG-work");
  ASSERT_EQ(batch_.instances.size(), 1u) << "the instance's new UUID is stored";
  EXPECT_EQ(node.inventory["gpus"][0]["mig_devices"].size(), 2u);

  NodeGpus::Effects freed;
  gpus_.ApplyMigLayout(node, {}, -1, batch_, freed);
  EXPECT_TRUE(node.mig_held.empty());
  EXPECT_TRUE(GpuOf("a100-1", 0).mig_instances.empty());
  EXPECT_TRUE(freed.capacity_freed);
  EXPECT_EQ(node.mig_repartitions, 2) << "-1 leaves the count";
}

}  // namespace
}  // namespace tessera::core
