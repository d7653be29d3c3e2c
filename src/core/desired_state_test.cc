// What a node's agent is told, built alone from the parts that hold the facts: each workload's
// action, environment (its GPUs, who it is, its secrets' values), image password, volumes, GPUs
// and log offset; gang members held back until rank 0 reserved the port; the volumes to delete,
// outstanding GPU mode changes and live exec sessions. The state's own tests (agent_hub_test.cc,
// state_secrets_test.cc) carry it through real agents.
#include "core/desired_state.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

class DesiredStatesTest : public ::testing::Test {
 protected:
  DesiredStatesTest() : secrets_(&clock_, TestSealer()) {
    EXPECT_TRUE(secrets_.Put("tenant-000001", "hf-token", "hf_abc", "", false, batch_).ok());
    EXPECT_TRUE(secrets_.Put("tenant-000002", "hf-token", "theirs", "", false, batch_).ok());
    EXPECT_TRUE(secrets_.Put("tenant-000001", "pull-pw", "pw1", "", false, batch_).ok());
    node_.name = "gpu-1";
    node_.generation = 7;
  }

  // Instance `seq` of tenant 1, in `state`, assigned to gpu-1.
  Instance& Add(int64_t seq, InstanceState state) {
    Instance i = TestInstance(seq, "tenant-000001", state);
    i.name = "job-" + std::to_string(seq);
    i.node = "gpu-1";
    i.command = "python train.py";
    i.shape.vcpus = 4;
    i.shape.memory_mib = 8192;
    i.stop_grace_seconds = 10;
    node_.assigned.insert(i.id.str());
    return instances_.Add(std::move(i));
  }

  DesiredState Told(const AgentNode* node) const {
    return desired_.For("gpu-1", node, timing_, clock_.Now());
  }

  FakeClock clock_;
  store::Batch batch_;
  TenantSecrets secrets_;
  InstanceTable instances_;
  Volumes volumes_;
  LogTails logs_;
  AgentNode node_;
  const AgentTiming timing_{2s, 10s, 5min};
  DesiredStates desired_{&instances_, &secrets_, &volumes_, &logs_};
};

TEST_F(DesiredStatesTest, EachWorkloadIsToldItsActionEnvironmentAndGpus) {
  Instance& whole = Add(1, InstanceState::kRunning);
  whole.gpus = {{"GPU-aaa", "H100-80GB", 0, "", 0, 0}, {"GPU-bbb", "H100-80GB", 1, "", 0, 0}};
  whole.env["HF_TOKEN"].secret = "hf-token";
  whole.env["TESSERA_TENANT"].value = "forged";
  whole.env["MODE"].value = "train";
  whole.image.ref = "registry.local/train:1";
  whole.image.auth = RegistryAuth{"robot", "", "pull-pw", ""};
  whole.ports = {8080};
  Volumes::Request data;
  data.name = "data";
  data.size_gib = 100;
  auto vol = volumes_.Create("tenant-000001", data, "", clock_.Now(), Money::FromCents(1), batch_);
  ASSERT_TRUE(vol.ok());
  whole.volumes = {{"data", "/data"}};
  logs_.Append(whole.id.str(), {whole.id.str(), 0, 0, "epoch 1\n"});

  Instance& share = Add(2, InstanceState::kScheduled);
  share.shape.gpu_memory_mib = 24576;
  share.gpus = {{"GPU-ccc", "H100-80GB", 2, "", 0, 250}};
  Instance& slice = Add(3, InstanceState::kStopping);
  slice.gpus = {{"MIG-ddd", "A100-80GB", 3, "3g.40gb", 4, 0}};
  Instance& victim = Add(4, InstanceState::kPreempting);
  victim.preempt_at = clock_.Now() + 30s;
  node_.assigned.insert("inst-000099");  // Evicted from memory meanwhile: not told.

  const DesiredState d = Told(&node_);
  EXPECT_EQ(d.node, "gpu-1");
  EXPECT_EQ(d.generation, 7u);
  EXPECT_EQ(d.lease, 5min + 10s);
  EXPECT_EQ(d.heartbeat, 2s);
  ASSERT_EQ(d.workloads.size(), 4u);

  const DesiredWorkload& w = d.workloads[0];
  EXPECT_EQ(w.action, DesiredWorkload::Action::kRun);
  EXPECT_EQ(w.tenant, "tenant-000001");
  EXPECT_EQ(w.env.at("CUDA_VISIBLE_DEVICES"), "GPU-aaa,GPU-bbb");
  EXPECT_EQ(w.env.at("NVIDIA_VISIBLE_DEVICES"), "GPU-aaa,GPU-bbb");
  EXPECT_EQ(w.env.at("TESSERA_TENANT"), "tenant-000001") << "Tessera's own variables win";
  EXPECT_EQ(w.env.at("HF_TOKEN"), "hf_abc") << "its own tenant's secret, not the other's";
  EXPECT_EQ(w.env.at("MODE"), "train");
  EXPECT_FALSE(w.env.contains("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"));
  ASSERT_TRUE(w.image.auth.has_value());
  EXPECT_EQ(w.image.auth->password, "pw1");
  EXPECT_EQ(w.cpu_milli, 4000);
  EXPECT_EQ(w.memory_mib, 8192);
  EXPECT_EQ(w.stop_grace_ms, 10000);
  ASSERT_EQ(w.volumes.size(), 1u);
  EXPECT_EQ(w.volumes[0].id, (*vol)->id);
  EXPECT_EQ(w.volumes[0].path, "/data");
  EXPECT_EQ(w.volumes[0].size_gib, 100);
  ASSERT_EQ(w.gpus.size(), 2u);
  EXPECT_EQ(w.gpus[1].index, 1);
  EXPECT_EQ(w.gpus[1].milli, 1000);
  EXPECT_FALSE(w.gpus[1].memory_mib.has_value());
  EXPECT_EQ(w.log_offset, 8) << "the agent resumes shipping after what the server holds";

  const DesiredWorkload& s = d.workloads[1];
  EXPECT_EQ(s.env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(s.env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=24576M");
  ASSERT_EQ(s.gpus.size(), 1u);
  EXPECT_EQ(s.gpus[0].milli, 250);
  EXPECT_EQ(s.gpus[0].memory_mib, 24576);
  EXPECT_EQ(s.log_offset, 0);

  const DesiredWorkload& m = d.workloads[2];
  EXPECT_EQ(m.action, DesiredWorkload::Action::kStop);
  ASSERT_EQ(m.gpus.size(), 1u);
  EXPECT_EQ(m.gpus[0].mig_profile, "3g.40gb");
  EXPECT_EQ(m.gpus[0].mig_start, 4);
  EXPECT_EQ(m.gpus[0].uuid, "MIG-ddd");
  EXPECT_EQ(m.env.at("CUDA_VISIBLE_DEVICES"), "MIG-ddd");

  const DesiredWorkload& p = d.workloads[3];
  EXPECT_EQ(p.action, DesiredWorkload::Action::kPreempt);
  EXPECT_EQ(p.deadline, clock_.Now() + 30s);
  EXPECT_EQ(p.reason, "spot preemption");
  EXPECT_EQ(p.env.at("CUDA_VISIBLE_DEVICES"), "") << "no GPUs: CUDA sees none";
  EXPECT_EQ(p.env.at("NVIDIA_VISIBLE_DEVICES"), "void");
}

TEST_F(DesiredStatesTest, GangMembersWaitForRankZeroToReserveThePort) {
  Instance& rank0 = Add(1, InstanceState::kScheduled);
  Instance& rank1 = Add(2, InstanceState::kScheduled);
  for (Instance* i : {&rank0, &rank1}) {
    i->group = "grp-000001";
    i->group_env = {{"PET_RDZV_ENDPOINT", "gpu-1"}, {"WORLD_SIZE", "2"}};
  }
  rank1.rank = 1;
  DesiredState d = Told(&node_);
  ASSERT_EQ(d.workloads.size(), 1u) << "rank 1 starts only once rank 0 reserved the port";
  EXPECT_EQ(d.workloads[0].id, rank0.id.str());
  EXPECT_EQ(d.workloads[0].reserve_port, "MASTER_PORT");
  EXPECT_EQ(d.workloads[0].port_env, std::vector<std::string>{"PET_RDZV_ENDPOINT"});
  EXPECT_EQ(d.workloads[0].env.at("WORLD_SIZE"), "2");

  rank1.state = InstanceState::kStopping;
  EXPECT_EQ(Told(&node_).workloads.size(), 2u) << "a member being stopped is told to stop";
  rank1.state = InstanceState::kScheduled;
  for (Instance* i : {&rank0, &rank1}) i->group_env["MASTER_PORT"] = "29500";
  d = Told(&node_);
  ASSERT_EQ(d.workloads.size(), 2u);
  EXPECT_EQ(d.workloads[0].reserve_port, "");
  EXPECT_EQ(d.workloads[1].env.at("MASTER_PORT"), "29500");
}

TEST_F(DesiredStatesTest, VolumesToDeleteModeChangesAndSessionsStillOpen) {
  Volumes::Request r;
  r.name = "old";
  r.size_gib = 5;
  auto here = volumes_.Create("tenant-000001", r, "", clock_.Now(), Money::FromCents(1), batch_);
  r.name = "elsewhere";
  auto there = volumes_.Create("tenant-000001", r, "", clock_.Now(), Money::FromCents(1), batch_);
  ASSERT_TRUE(here.ok() && there.ok());
  (*here)->node = "gpu-1";
  (*there)->node = "gpu-2";
  volumes_.MarkDeleting(**here, batch_);
  volumes_.MarkDeleting(**there, batch_);

  // A node no agent joined is told only its lease and what to delete there.
  DesiredState d = Told(nullptr);
  EXPECT_EQ(d.volumes_to_delete, std::vector<std::string>{(*here)->id});
  EXPECT_EQ(d.generation, 0u);
  EXPECT_TRUE(d.workloads.empty());

  GpuModeChange asked;
  asked.id = 1;
  asked.gpu = 0;
  GpuModeChange done = asked;
  done.id = 2;
  done.gpu = 1;
  done.state = ModeChangeState::kApplied;
  node_.mode_changes = {{0, asked}, {1, done}};
  ExecSession live;
  live.id = "exec-live";
  live.expires = clock_.Now() + 10s;
  ExecSession stale = live;
  stale.id = "exec-stale";
  stale.expires = clock_.Now() - 1s;
  node_.exec = {live, stale};
  node_.faults = {{3, "xid:0:79"}};
  d = Told(&node_);
  ASSERT_EQ(d.mode_requests.size(), 1u) << "only a change without its result";
  EXPECT_EQ(d.mode_requests[0].id, 1);
  ASSERT_EQ(d.exec.size(), 1u) << "a session past its connect deadline is dropped";
  EXPECT_EQ(d.exec[0].id, "exec-live");
  ASSERT_EQ(d.faults.size(), 1u);
  EXPECT_EQ(d.faults[0].fault, "xid:0:79");
}

}  // namespace
}  // namespace tessera::core
