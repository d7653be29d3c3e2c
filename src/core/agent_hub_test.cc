// Joined nodes (AgentHub, agent_hub.h; NodeHealth, node_health.h) in the State that composes them,
// on a fake clock and without a store: registration against the catalog, reports and their
// refusals, the lease, node loss and removal, spot notice, and the logs agents ship.
#include <gtest/gtest.h>

#include <set>

#include "core/core_test_util.h"
#include "core/state.h"
#include "fleet/fleet.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

class NodeAgentsTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    StateOptions o;
    o.node_timeout = 10s;
    o.spot_notice = 30s;
    MakeState(o);
  }

  // Adds a node and registers its agent run `agent`.
  void Join(const std::string& name, int gpus, const std::string& agent = "a1") {
    ASSERT_TRUE(JoinNode(name, TestInventory(gpus, "H100-80GB", name), agent).ok());
  }

  Result<bool> Report(const std::string& node, int64_t seq, std::vector<AgentReport> reports = {},
                      const std::string& agent = "a1") {
    AgentSync s;
    s.agent_id = agent;
    s.seq = seq;
    s.reports = std::move(reports);
    return SyncNode(node, s);
  }

  Instance Create(const CreateInstanceRequest& r) {
    auto out = CreateInRound(r);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : Instance{};
  }

  static AgentReport Running(const Instance& inst) {
    return {inst.id.str(), 0, InstanceState::kRunning, {}, "", false, {}, {}};
  }

  void Tick() {
    state_->BeginRound();
    state_->EndRound(batch_);
  }

  // Lets `d` pass in steps of the report period, gpu-2 reporting at each and gpu-1 saying
  // nothing.
  void OnlyGpu2Reports(Duration d) {
    for (Duration done{}; done < d; done += 2s) {
      clock_.Advance(2s);
      ASSERT_TRUE(Report("gpu-2", ++gpu2_seq_).ok());
    }
  }
  int64_t gpu2_seq_ = 0;
};

TEST_F(NodeAgentsTest, RegistrationAddsTheNodeAsItsAgentDescribesItOrSaysWhatIsWrong) {
  ASSERT_TRUE(state_->agent_hub()
                  .CreateNode("gpu-1", {}, catalog::SharingMode::kExclusive, "t1", batch_)
                  .ok());
  EXPECT_EQ(state_->agent_hub()
                .CreateNode("gpu-1", {}, catalog::SharingMode::kExclusive, "t2", batch_)
                .status()
                .code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(state_->fleet().size(), 0u) << "a node joins the fleet when its agent registers";

  json mixed = TestInventory(2);
  mixed["gpus"][1]["model"] = "A100-80GB";
  auto s = state_->agent_hub().Register("gpu-1", {"a1", mixed}, batch_);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("gpus[1]"), std::string::npos) << s.message();
  json twice = TestInventory(2);
  twice["gpus"][1]["uuid"] = "u0";
  EXPECT_NE(state_->agent_hub().Register("gpu-1", {"a1", twice}, batch_).message().find("twice"),
            std::string::npos);

  ASSERT_TRUE(state_->agent_hub().Register("gpu-1", {"a1", TestInventory(2)}, batch_).ok());
  ASSERT_EQ(state_->fleet().size(), 1u);
  EXPECT_EQ(state_->fleet().nodes()[0].gpus[1].uuid, "u1");
  EXPECT_TRUE(state_->agent_hub().Register("gpu-1", {"a2", TestInventory(2)}, batch_).ok())
      << "an agent that restarts registers the same hardware again";
  auto changed = state_->agent_hub().Register("gpu-1", {"a3", TestInventory(4)}, batch_);
  EXPECT_EQ(changed.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(changed.message().find("4 x H100-80GB"), std::string::npos) << changed.message();

  // What a node token claims is checked as tenant input is, and a refusal adds nothing.
  ASSERT_TRUE(state_->agent_hub()
                  .CreateNode("gpu-2", {}, catalog::SharingMode::kExclusive, "t3", batch_)
                  .ok());
  json loud = TestInventory(1, "H100-80GB", "v");
  loud["gpus"][0]["name"] = std::string(990'000, 'N');  // It would label every series.
  auto named = state_->agent_hub().Register("gpu-2", {"b1", loud}, batch_);
  EXPECT_EQ(named.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(named.message().find("gpus[0]: field 'name'"), std::string::npos) << named.message();
  auto copied = state_->agent_hub().Register("gpu-2", {"b1", TestInventory(2)}, batch_);
  EXPECT_EQ(copied.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(copied.message().find("'u0' is a GPU of node 'gpu-1'"), std::string::npos)
      << copied.message();
  auto nowhere = state_->agent_hub().Register(
      "gpu-2", {"b1", TestInventory(1, "H100-80GB", "v"), "no where"}, batch_);
  EXPECT_EQ(nowhere.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nowhere.message().find("advertise_address"), std::string::npos) << nowhere.message();
  EXPECT_EQ(state_->fleet().size(), 1u) << "no refused registration joined the fleet";
}

// A report's times and GPUs are the node's to tell, within what can be: a start before the
// instance was scheduled (or in the future) is clamped and counted, readings of a GPU the node
// does not have are refused naming the field.
TEST_F(NodeAgentsTest, WhatAReportClaimsIsClampedOrRefusedNeverStoredAsSent) {
  Join("gpu-1", 1);
  const Instance inst = Create(TestH100(1));
  clock_.Advance(5s);
  AgentReport ancient = Running(inst);
  ancient.started_at = Time(std::chrono::seconds(-62'135'596'800));  // Year 1.
  ASSERT_TRUE(Report("gpu-1", 1, {ancient}).ok());
  const Instance& running = Get(inst.id.str());
  ASSERT_EQ(running.state, InstanceState::kRunning);
  EXPECT_EQ(*running.started_at, inst.updated_at) << "no earlier than it was scheduled";
  EXPECT_EQ(state_->counters().agent_times_clamped, 1);
  EXPECT_GE(state_->counters().start_latency.sum, 0) << "no negative start latency";
  AgentSync s;
  s.agent_id = "a1";
  s.seq = 2;
  auto t = std::make_shared<telemetry::Telemetry>();
  t->gpus.resize(2);
  t->gpus[1].index = 1;  // The node has one GPU.
  s.telemetry = t;
  state_->BeginRound();
  auto refused = state_->agent_hub().Sync("gpu-1", s, batch_);
  state_->EndRound(batch_);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("telemetry.gpus[1].index"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(state_->counters().agent_reports_refused, 1);
}

TEST_F(NodeAgentsTest, ReplayedAndSupersededReportsAreRefusedAndChangeNothing) {
  Join("gpu-1", 2);
  ASSERT_TRUE(Report("gpu-1", 1).ok());
  EXPECT_EQ(Report("gpu-1", 1).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(state_->agent_hub()
                  .Register("gpu-1", {"a2", TestInventory(2, "H100-80GB", "gpu-1")}, batch_)
                  .ok());
  auto old = Report("gpu-1", 7, {}, "a1");
  EXPECT_EQ(old.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(old.status().message().find("superseded"), std::string::npos);
  EXPECT_EQ(state_->counters().agent_reports_refused, 2);
}

TEST_F(NodeAgentsTest, ReportsMoveAnInstanceThroughItsStatesAndOnlyItsNodeMayReport) {
  Join("gpu-1", 2);
  Join("gpu-2", 2);
  const Instance inst = Create(TestH100(1, Billing::kOnDemand));
  ASSERT_EQ(inst.state, InstanceState::kScheduled);
  const std::string other = inst.node == "gpu-1" ? "gpu-2" : "gpu-1";
  ASSERT_TRUE(
      Report(other, 1, {{inst.id.str(), 0, InstanceState::kRunning, {}, "", false, {}, {}}}).ok());
  EXPECT_EQ(Get(inst.id.str()).state, InstanceState::kScheduled)
      << "another node's report about it is ignored";
  clock_.Advance(150ms);
  ASSERT_TRUE(
      Report(inst.node, 1, {{inst.id.str(), 0, InstanceState::kRunning, {}, "", false, {}, {}}})
          .ok());
  EXPECT_EQ(Get(inst.id.str()).state, InstanceState::kRunning);
  EXPECT_EQ(state_->counters().start_latency.count, 1);
  EXPECT_NEAR(state_->counters().start_latency.sum, 0.150, 1e-6);
  ASSERT_TRUE(Report(inst.node, 2,
                     {{inst.id.str(), 0, InstanceState::kTerminated, 3, "exited", false, {}, {}}})
                  .ok());
  EXPECT_EQ(Get(inst.id.str()).state, InstanceState::kFailed);
  EXPECT_EQ(Get(inst.id.str()).exit_code, 3);
  EXPECT_EQ(state_->fleet().used_gpu_milli(), 0) << "its GPU is free once the process is gone";
  // Its history keeps every transition, with when and why, and survives the store.
  const Instance ended = Get(inst.id.str());
  std::vector<InstanceState> states;
  for (const StateChange& c : ended.history) states.push_back(c.state);
  EXPECT_EQ(states, (std::vector<InstanceState>{InstanceState::kPending, InstanceState::kScheduled,
                                                InstanceState::kRunning, InstanceState::kFailed}));
  EXPECT_EQ(ended.history[2].at - ended.history[1].at, 150ms);
  EXPECT_EQ(ended.history[3].reason, ended.reason);
  nlohmann::json stored = ToStoredJson(ended, state_->fleet());
  auto back = FromStoredJson(stored, state_->fleet());
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->instance.history.size(), 4u);
  EXPECT_EQ(back->instance.history[3].reason, ended.reason);
  EXPECT_EQ(back->instance.history[2].at, ended.history[2].at);
  stored["history"].push_back({{"at", "yesterday"}, {"state", "running"}});
  auto bad = FromStoredJson(stored, state_->fleet());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("history[4]"), std::string::npos) << bad.status().message();
}

TEST_F(NodeAgentsTest, ASilentNodeIsNotReadyAndUnbilledAndItsWorkMovesOnlyOnceItsLeaseRanOut) {
  Join("gpu-1", 2);
  const Instance od = Create(TestH100(1, Billing::kOnDemand));
  const Instance spot = Create(TestH100(1, Billing::kSpot));
  ASSERT_EQ(od.node, "gpu-1");
  ASSERT_EQ(spot.node, "gpu-1");
  Join("gpu-2", 1);
  ASSERT_TRUE(Report("gpu-1", 1, {Running(od)}).ok());
  clock_.Advance(2s);
  ASSERT_TRUE(Report("gpu-1", 2).ok());
  const Time last = clock_.Now();
  // The server dictates the timing: the lease covers a 5-minute outage and the node timeout.
  const DesiredState desired = state_->agent_hub().DesiredState("gpu-1");
  EXPECT_EQ(desired.lease, 310s);
  EXPECT_EQ(desired.heartbeat, 2s);
  OnlyGpu2Reports(10s);
  EXPECT_EQ(AgentOf(*state_, "gpu-1").StateName(), "ready") << "within the node timeout";
  OnlyGpu2Reports(2s);
  EXPECT_EQ(AgentOf(*state_, "gpu-1").StateName(), "not_ready");
  EXPECT_EQ(state_->counters().nodes_lost, 1);
  const Instance& silent = Get(od.id.str());
  EXPECT_EQ(silent.state, InstanceState::kRunning) << "it may still run: nothing moves yet";
  EXPECT_EQ(silent.node, "gpu-1");
  EXPECT_FALSE(silent.meter.has_value());
  EXPECT_NE(silent.reason.find("not_ready"), std::string::npos) << silent.reason;
  EXPECT_NE(silent.reason.find("billed to then"), std::string::npos) << silent.reason;
  ASSERT_FALSE(batch_.ledger.empty());
  EXPECT_EQ(batch_.ledger.back().instance, od.id.str());
  EXPECT_EQ(batch_.ledger.back().end, billing::UnixSeconds(last)) << "billed to its last report";
  // Its lease (5 min 10 s) and the kill grace (5 s) from the last report: then it moves.
  OnlyGpu2Reports(5min + 2s);
  EXPECT_EQ(Get(od.id.str()).node, "gpu-1") << "its old copy may still run until " << 5min + 15s;
  OnlyGpu2Reports(2s);
  EXPECT_EQ(Get(od.id.str()).node, "gpu-2") << "on-demand work runs elsewhere once fenced";
  EXPECT_EQ(Get(od.id.str()).restarts, 1);
  const auto& history = Get(od.id.str()).history;
  EXPECT_TRUE(std::any_of(history.begin(), history.end(), [](const StateChange& c) {
    return c.state == InstanceState::kPending && c.reason.starts_with("node lost: no report since");
  })) << "its history says why it moved";
  std::set<std::string> interrupted;  // Their owners' series (and alerts) say so too.
  for (const telemetry::Target& t : state_->Targets()) {
    if (!t.has(telemetry::Field::kInstanceInterrupted)) continue;
    for (const telemetry::Label& l : t.labels) {
      if (l.name == "tessera_instance") interrupted.insert(l.value);
      if (l.name == "cause") {
        EXPECT_EQ(l.value, "node_lost");
      }
    }
  }
  EXPECT_EQ(interrupted, (std::set<std::string>{od.id.str(), spot.id.str()}));
  EXPECT_EQ(Get(spot.id.str()).state, InstanceState::kPending) << "no room left for the spot";
  EXPECT_TRUE(Get(spot.id.str()).preempted_at.has_value());
  EXPECT_TRUE(state_->agent_hub().DesiredState("gpu-1").workloads.empty())
      << "when the lost node comes back, it is told to run nothing it held";
  EXPECT_EQ(state_->counters().nodes_lost, 1) << "one silence, one loss";
}

TEST_F(NodeAgentsTest, ASilentNodeThatReportsBeforeItsFenceKeepsItsWorkAndBillingResumes) {
  Join("gpu-1", 1);
  const Instance od = Create(TestH100(1, Billing::kOnDemand));
  ASSERT_TRUE(Report("gpu-1", 1, {Running(od)}).ok());
  clock_.Advance(2s);
  ASSERT_TRUE(Report("gpu-1", 2).ok());
  clock_.Advance(2s);
  ASSERT_TRUE(Report("gpu-1", 3).ok());  // It ran 4 s, as far as the server knows.
  for (int i = 0; i < 48; ++i) {         // 4 minutes of silence, the server up and checking.
    clock_.Advance(5s);
    Tick();
  }
  ASSERT_EQ(AgentOf(*state_, "gpu-1").StateName(), "not_ready");
  ASSERT_TRUE(Report("gpu-1", 4).ok());
  EXPECT_EQ(AgentOf(*state_, "gpu-1").StateName(), "ready");
  const Instance& back = Get(od.id.str());
  EXPECT_EQ(back.state, InstanceState::kRunning);
  EXPECT_EQ(back.restarts, 0) << "nothing restarted";
  ASSERT_TRUE(back.meter.has_value());
  EXPECT_EQ(back.meter->since, billing::UnixSeconds(clock_.Now())) << "the silence is not billed";
  EXPECT_NE(back.reason.find("billing resumes"), std::string::npos) << back.reason;
  // A customer's stop soon after owes no minimum: the platform interrupted the start.
  clock_.Advance(5s);
  state_->BeginRound();
  ASSERT_TRUE(state_->instances()
                  .Delete(*state_->tenants().Find(acme_.id.str()), od.id.str(), batch_)
                  .ok());
  state_->EndRound(batch_);
  int64_t billed = 0;
  for (const store::LedgerRecord& l : batch_.ledger) {
    if (l.instance == od.id.str()) billed += l.seconds;
  }
  EXPECT_EQ(billed, 4 + 5) << "to its last report before the silence, and from its return";
}

TEST_F(NodeAgentsTest, TimeTheServerWasNotRunningNeverCountsAsANodesSilence) {
  Join("gpu-1", 1);
  const Instance od = Create(TestH100(1, Billing::kOnDemand));
  ASSERT_TRUE(Report("gpu-1", 1, {Running(od)}).ok());
  clock_.Advance(60s);  // Stopped (SIGSTOP, a suspended VM): no round ran.
  Tick();
  EXPECT_EQ(AgentOf(*state_, "gpu-1").StateName(), "ready") << "it gets a whole node timeout";
  clock_.Advance(5s);
  Tick();
  clock_.Advance(6s);
  Tick();
  EXPECT_EQ(AgentOf(*state_, "gpu-1").StateName(), "not_ready") << "silent while the server ran";
  // Not ready is stored: after a restart the node stays so until its agent reports.
  const auto [key, value] = AgentSupervisor::Record(*state_->agents().Find("gpu-1"));
  auto restored = AgentSupervisor::FromRecord(key, value);
  ASSERT_TRUE(restored.ok()) << restored.status().message();
  EXPECT_TRUE(restored->lost);
}

TEST_F(NodeAgentsTest, TimingsThatCannotWorkAreRefusedNamingTheRule) {
  EXPECT_TRUE(CheckAgentTiming({2s, 10s, 5min}).ok());
  EXPECT_TRUE(CheckAgentTiming({2s, 4s, 0s}).ok());
  const Status tight = CheckAgentTiming({2s, 3s, 5min});
  EXPECT_EQ(tight.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(tight.message().find("--node-timeout 3.0s: must be at least twice the report period"),
            std::string::npos)
      << tight.message();
  EXPECT_NE(CheckAgentTiming({50ms, 10s, 5min}).message().find("--report-period"),
            std::string::npos);
  EXPECT_NE(CheckAgentTiming({2s, 10s, std::chrono::days(8)}).message().find("--outage-bound"),
            std::string::npos);
}

TEST_F(NodeAgentsTest, ASpotVictimOnAJoinedNodeGetsNoticeAndThePreemptorWaitsForIt) {
  Join("gpu-1", 2);
  const Instance spot = Create(TestH100(2, Billing::kSpot));
  ASSERT_TRUE(
      Report("gpu-1", 1, {{spot.id.str(), 0, InstanceState::kRunning, {}, "", false, {}, {}}})
          .ok());
  const Instance od = Create(TestH100(2, Billing::kOnDemand));
  EXPECT_EQ(Get(spot.id.str()).state, InstanceState::kPreempting);
  EXPECT_EQ(Get(spot.id.str()).preempt_at, clock_.Now() + 30s);
  EXPECT_EQ(Get(od.id.str()).state, InstanceState::kPending);
  const auto told = Told(state_->agent_hub().DesiredState("gpu-1"), spot.id.str());
  ASSERT_TRUE(told.has_value());
  EXPECT_EQ(told->action, DesiredWorkload::Action::kPreempt);
  EXPECT_EQ(told->deadline, clock_.Now() + 30s);
  clock_.Advance(30s);
  ASSERT_TRUE(
      Report("gpu-1", 2,
             {{spot.id.str(), 0, InstanceState::kTerminated, 143, "preempted", false, {}, {}}})
          .ok());
  EXPECT_EQ(Get(od.id.str()).state, InstanceState::kScheduled)
      << "the preemptor takes the capacity once the victim stopped";
  EXPECT_EQ(Get(spot.id.str()).state, InstanceState::kPending);
  EXPECT_EQ(Get(spot.id.str()).restarts, 1);
}

TEST_F(NodeAgentsTest, LogsKeepTheNewestBytesAndTailCountsLines) {
  Join("gpu-1", 1);
  const Instance inst = Create(TestH100(1, Billing::kOnDemand));
  AgentSync s;
  s.agent_id = "a1";
  s.seq = 1;
  s.logs = {{inst.id.str(), 0, 0, "one\ntwo\nthree\n"}, {inst.id.str(), 0, 8, "three\nfour"}};
  ASSERT_TRUE(state_->agent_hub().Sync("gpu-1", s, batch_).ok());
  const Tenant& caller = *state_->tenants().Find(acme_.id.str());
  auto tail = state_->views().Log(caller, inst.id.str(), 2, std::nullopt);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->text, "three\nfour") << "overlapping chunks are kept once";
  EXPECT_EQ(tail->end, 18);
  EXPECT_EQ(state_->views().Log(caller, inst.id.str(), 100, std::nullopt)->text,
            "one\ntwo\nthree\nfour");
  EXPECT_EQ(state_->views().Log(caller, inst.id.str(), 1, int64_t{14})->text, "four");
  s.seq = 2;
  s.logs = {{inst.id.str(), 0, 30, "later\n"}};
  ASSERT_TRUE(state_->agent_hub().Sync("gpu-1", s, batch_).ok());
  EXPECT_NE(
      state_->views().Log(caller, inst.id.str(), 100, std::nullopt)->text.find("12 bytes dropped"),
      std::string::npos)
      << "a gap the agent could not ship is marked";
}

TEST_F(NodeAgentsTest, AMigSliceGetsTheUuidOfTheMigDeviceTheAgentReportedAtItsPlacement) {
  json devices = json::array();
  for (int start = 0; start < 7; ++start) {
    devices.push_back(
        {{"uuid", "MIG-real-" + std::to_string(start)}, {"profile", "1g.5gb"}, {"start", start}});
  }
  json inv = {{"cpu_milli", 32000},
              {"memory_mib", 262144},
              {"gpus",
               {{{"index", 0},
                 {"uuid", "GPU-a"},
                 {"model", "A100-40GB"},
                 {"mig_enabled", true},
                 {"mig_devices", devices}}}}};
  ASSERT_TRUE(state_->agent_hub()
                  .CreateNode("mig-1", {}, catalog::SharingMode::kExclusive, "t", batch_)
                  .ok());
  json bad = inv;
  bad["gpus"][0]["mig_devices"][3]["start"] = "three";
  auto refused = state_->agent_hub().Register("mig-1", {"a1", bad}, batch_);
  EXPECT_NE(refused.message().find("mig_devices[3]"), std::string::npos) << refused.message();
  ASSERT_TRUE(state_->agent_hub().Register("mig-1", {"a1", inv}, batch_).ok());
  CreateInstanceRequest r;
  r.billing = Billing::kOnDemand;
  r.shape.gpu_model = "A100-40GB";
  r.shape.mode = catalog::SharingMode::kMig;
  r.shape.mig_profile = "1g.5gb";
  r.shape.vcpus = 2;
  r.shape.memory_mib = 1024;
  const Instance inst = Create(r);
  ASSERT_EQ(inst.gpus.size(), 1u);
  EXPECT_EQ(inst.gpus[0].uuid, "MIG-real-" + std::to_string(inst.gpus[0].mig_start))
      << "CUDA knows the slice by the UUID the driver gave it";
}

// An instance with an image and registry credentials: only its node's desired state carries the
// password; what the API shows carries the username; a pull its agent reports shows as "pulling"
// with its progress, moves nothing else, and is gone once the workload runs.
TEST_F(NodeAgentsTest, AnImagesCredentialsGoOnlyToItsAgentAndAPullShowsUntilItRuns) {
  Join("gpu-1", 2);
  Join("gpu-2", 2);
  CreateInstanceRequest r = TestH100(1, Billing::kOnDemand);
  r.command.clear();  // The image's own entrypoint runs.
  r.image.ref = "registry.example.com/team/train:1.4";
  r.image.pull_policy = PullPolicy::kAlways;
  r.image.auth = RegistryAuth{.username = "robot", .password = "s3cret-pw"};
  const Instance inst = Create(r);
  ASSERT_EQ(inst.state, InstanceState::kScheduled);
  const std::string id = inst.id.str();
  const auto workload = Told(state_->agent_hub().DesiredState(inst.node), id);
  ASSERT_TRUE(workload.has_value()) << "an image without a command is something to run";
  EXPECT_EQ(workload->action, DesiredWorkload::Action::kRun);
  EXPECT_EQ(workload->command, "");
  EXPECT_EQ(workload->image.ref, "registry.example.com/team/train:1.4");
  EXPECT_EQ(workload->image.pull_policy, PullPolicy::kAlways);
  ASSERT_TRUE(workload->image.auth.has_value());
  EXPECT_EQ(workload->image.auth->username, "robot");
  EXPECT_EQ(workload->image.auth->password, "s3cret-pw");
  const std::string other = inst.node == "gpu-1" ? "gpu-2" : "gpu-1";
  EXPECT_FALSE(Told(state_->agent_hub().DesiredState(other), id).has_value());
  EXPECT_FALSE(Carries(state_->agent_hub().DesiredState(other), "s3cret-pw"))
      << "another node's agent is told nothing of it";
  const json shown = ToJson(Get(id));
  EXPECT_EQ(shown["registry_auth"], json({{"username", "robot"}}));
  EXPECT_EQ(shown.dump().find("s3cret-pw"), std::string::npos);
  EXPECT_EQ(shown["state"], "scheduled");
  EXPECT_FALSE(shown.contains("pull"));

  AgentSync s;
  s.agent_id = "a1";
  s.seq = 1;
  s.pulls = {{id, 0, {44040192, 104857600, 42}}};
  ASSERT_TRUE(state_->agent_hub().Sync(inst.node, s, batch_).ok());
  EXPECT_EQ(Get(id).state, InstanceState::kScheduled) << "a pull moves nothing";
  json pulling = ToJson(*state_->views().Get(*state_->tenants().Find(acme_.id.str()), id));
  EXPECT_EQ(pulling["state"], "pulling");
  EXPECT_EQ(pulling["pull"], json({{"bytes", 44040192},
                                   {"total_bytes", 104857600},
                                   {"percent", 42},
                                   {"image", "registry.example.com/team/train:1.4"}}));
  const json stored = ToStoredJson(Get(id), state_->fleet());
  EXPECT_EQ(stored["state"], "scheduled") << "the store keeps the real state";
  EXPECT_FALSE(stored.contains("pull")) << "a pull is not stored";
  // The credentials are stored, sealed under the instance's own record.
  EXPECT_EQ(stored.dump().find("s3cret-pw"), std::string::npos) << stored.dump();
  const std::string sealed = stored["registry_auth"]["password"].value("sealed", "");
  EXPECT_EQ(TestSealer()->Open(sealed, "instance/" + id + "/registry_auth/password").value(),
            "s3cret-pw");
  // Another node's report, or one of another attempt, changes nothing.
  AgentSync elsewhere;
  elsewhere.agent_id = "a1";
  elsewhere.seq = 1;
  elsewhere.pulls = {{id, 0, {1, 1, 100}}};
  ASSERT_TRUE(state_->agent_hub().Sync(other, elsewhere, batch_).ok());
  s.seq = 2;
  s.pulls = {{id, 1, {1, 1, 100}}};
  ASSERT_TRUE(state_->agent_hub().Sync(inst.node, s, batch_).ok());
  EXPECT_EQ(Get(id).pull->percent, 42);
  // Listing by state: it is "pulling", no longer "scheduled".
  const Tenant& caller = *state_->tenants().Find(acme_.id.str());
  ListQuery q;
  q.state = InstanceState::kScheduled;
  EXPECT_TRUE(state_->views().List(caller, q).items.empty());
  q.pulling = true;
  EXPECT_EQ(state_->views().List(caller, q).items.size(), 1u);
  ASSERT_TRUE(Report(inst.node, 3, {{id, 0, InstanceState::kRunning, {}, "", false, {}, {}}}).ok());
  EXPECT_EQ(Get(id).state, InstanceState::kRunning);
  EXPECT_FALSE(Get(id).pull) << "running: the pull is over";
  EXPECT_EQ(ToJson(Get(id))["state"], "running");
  s.seq = 4;
  s.pulls = {{id, 0, {1, 2, 50}}};
  ASSERT_TRUE(state_->agent_hub().Sync(inst.node, s, batch_).ok());
  EXPECT_FALSE(Get(id).pull) << "a late pull report does not bring it back";
}

// A pull that fails (a missing image, refused credentials, a full disk) comes as an exit without
// an exit code and with the agent's reason, which names the image: the instance fails with it.
TEST_F(NodeAgentsTest, AFailedPullFailsTheInstanceWithTheAgentsReason) {
  Join("gpu-1", 2);
  CreateInstanceRequest r = TestH100(1, Billing::kOnDemand);
  r.image.ref = "registry.example.com/team/missing:1.0";
  const Instance inst = Create(r);
  const std::string id = inst.id.str();
  AgentSync s;
  s.agent_id = "a1";
  s.seq = 1;
  s.pulls = {{id, 0, {0, 0, 0}}};
  ASSERT_TRUE(state_->agent_hub().Sync("gpu-1", s, batch_).ok());
  const std::string why =
      "image registry.example.com/team/missing:1.0: manifest unknown (the registry has no such "
      "tag)";
  ASSERT_TRUE(
      Report("gpu-1", 2, {{id, 0, InstanceState::kTerminated, {}, why, false, {}, {}}}).ok());
  const Instance& failed = Get(id);
  EXPECT_EQ(failed.state, InstanceState::kFailed);
  EXPECT_FALSE(failed.exit_code);
  EXPECT_EQ(failed.reason, "its workload ended: " + why);
  EXPECT_FALSE(failed.pull);
  EXPECT_FALSE(failed.started_at) << "it never ran";
  EXPECT_FALSE(failed.meter) << "nothing was metered";
  EXPECT_EQ(state_->fleet().used_gpu_milli(), 0) << "its GPU is free";
  const json shown = ToJson(failed);
  EXPECT_EQ(shown["state"], "failed");
  EXPECT_EQ(shown["reason"], "its workload ended: " + why);
}

TEST_F(NodeAgentsTest, AnExecSessionIsToldToTheInstancesAgentUntilItConnectsOrExpires) {
  Join("gpu-1", 2);
  const Instance inst = Create(TestH100(1, Billing::kOnDemand));
  ExecSession ask;
  ask.command = {"nvidia-smi"};
  ask.tty = true;
  ask.cols = 120;
  ask.rows = 40;
  // Not running yet: refused, naming the state.
  auto early = state_->OpenExec(Acme(), inst.id.str(), ask, 10s);
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(early.status().message().find("scheduled"), std::string::npos);
  ASSERT_TRUE(Report("gpu-1", 1, {Running(inst)}).ok());
  // Another tenant's instance is one that does not exist.
  const Tenant other = *state_->tenants().Create("globex", 1000, "h-globex", batch_);
  EXPECT_EQ(state_->OpenExec(other, inst.id.str(), ask, 10s).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(state_->OpenExec(Acme(), "inst-999999", ask, 10s).status().code(),
            StatusCode::kNotFound);
  const uint64_t before = state_->agent_hub().DesiredState("gpu-1").generation;
  auto opened = state_->OpenExec(Acme(), inst.id.str(), ask, 10s);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  EXPECT_EQ(opened->node, "gpu-1");
  EXPECT_EQ(opened->id.size(), 5u + 32u);
  EXPECT_NE(opened->id, state_->OpenExec(Acme(), inst.id.str(), ask, 10s)->id);
  const DesiredState desired = state_->agent_hub().DesiredState("gpu-1");
  EXPECT_GT(desired.generation, before) << "its agent's long poll wakes";
  ASSERT_EQ(desired.exec.size(), 2u);
  const ExecSession& e = desired.exec[0];
  EXPECT_EQ(e.id, opened->id);
  EXPECT_EQ(e.instance, inst.id.str());
  EXPECT_EQ(e.attempt, 0);
  EXPECT_EQ(e.command, std::vector<std::string>{"nvidia-smi"});
  EXPECT_TRUE(e.tty);
  EXPECT_EQ(e.cols, 120);
  EXPECT_EQ(e.rows, 40);
  // Taken by the agent: no longer told; the other one expires unclaimed.
  state_->agents().CloseExec("gpu-1", opened->id);
  EXPECT_EQ(state_->agent_hub().DesiredState("gpu-1").exec.size(), 1u);
  clock_.Advance(11s);
  EXPECT_EQ(state_->agent_hub().DesiredState("gpu-1").exec.size(), 0u);
}

// An operator removes a node: refused while work runs there unless forced, which moves the work
// as a GPU fault does and finishes once the node's agent has been told to stop it; then the node
// is out of the fleet, its token revoked and its name free for a new node.
TEST_F(NodeAgentsTest, ARemovedNodeLeavesOnceItsAgentIsToldToStopItsWorkWhichMovesElsewhere) {
  Join("gpu-1", 2);
  const Instance od = Create(TestH100(1, Billing::kOnDemand));
  ASSERT_EQ(od.node, "gpu-1");
  Join("gpu-2", 1);
  ASSERT_TRUE(Report("gpu-1", 1, {Running(od)}).ok());
  auto refused = state_->node_health().RemoveNode("gpu-1", false, batch_);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("runs 1 instance(s) (" + od.id.str() + ")"),
            std::string::npos)
      << refused.status().message();
  EXPECT_EQ(state_->node_health().RemoveNode("gpu-9", false, batch_).status().code(),
            StatusCode::kNotFound);

  state_->BeginRound();
  auto removing = state_->node_health().RemoveNode("gpu-1", true, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(removing.ok()) << removing.status().message();
  EXPECT_FALSE(removing->removed);
  EXPECT_EQ(Get(od.id.str()).node, "gpu-2") << "moved at once, as for a GPU fault";
  EXPECT_TRUE(state_->agent_hub().DesiredState("gpu-1").workloads.empty())
      << "its agent is told to stop the old copy";
  EXPECT_TRUE(state_->fleet().Find("gpu-1").ok()) << "until its agent has heard it";
  // The agent's next report says it received that desired state: the node goes.
  AgentSync heard;
  heard.agent_id = "a1";
  heard.seq = 2;
  heard.generation = state_->agent_hub().DesiredState("gpu-1").generation;
  ASSERT_TRUE(SyncNode("gpu-1", heard).ok());
  Tick();
  EXPECT_FALSE(state_->fleet().Find("gpu-1").ok());
  EXPECT_EQ(state_->agents().Find("gpu-1"), nullptr);
  EXPECT_EQ(state_->tenants().index()->Find("token-gpu-1"), nullptr) << "its token is revoked";
  EXPECT_EQ(state_->fleet().total_gpus(), 1);
  EXPECT_TRUE(std::find(batch_.deleted_settings.begin(), batch_.deleted_settings.end(),
                        "agent_node/gpu-1") != batch_.deleted_settings.end());
  // Its name is free: a new machine joins under it.
  Join("gpu-1", 4, "b1");
  EXPECT_EQ(state_->fleet().total_gpus(), 5);
  // A node with nothing on it leaves at once.
  auto idle = state_->node_health().RemoveNode("gpu-1", false, batch_);
  ASSERT_TRUE(idle.ok()) << idle.status().message();
  EXPECT_TRUE(idle->removed);
  EXPECT_FALSE(state_->fleet().Find("gpu-1").ok());
}

// A lost node's work moves at its fence time even when it is being removed: its old copies may
// still run until then.
TEST_F(NodeAgentsTest, ARemovedLostNodesWorkMovesOnlyOnceItsLeaseRanOut) {
  Join("gpu-1", 1);
  const Instance od = Create(TestH100(1, Billing::kOnDemand));
  Join("gpu-2", 1);
  ASSERT_TRUE(Report("gpu-1", 1, {Running(od)}).ok());
  OnlyGpu2Reports(12s);
  ASSERT_EQ(AgentOf(*state_, "gpu-1").StateName(), "not_ready");
  state_->BeginRound();
  auto removing = state_->node_health().RemoveNode("gpu-1", true, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(removing.ok()) << removing.status().message();
  EXPECT_FALSE(removing->removed);
  EXPECT_EQ(Get(od.id.str()).node, "gpu-1") << "its old copy may still run";
  OnlyGpu2Reports(5min + 6s);
  EXPECT_EQ(Get(od.id.str()).node, "gpu-2");
  EXPECT_FALSE(state_->fleet().Find("gpu-1").ok()) << "gone once its work moved";
}

}  // namespace
}  // namespace tessera::core
