// A sick GPU in State, on a fake clock with the in-memory store: which faults take a GPU out of
// service (the XID table, a lost GPU, double-bit ECC), its work moving and billed to the fault,
// nothing placed on it again until an operator clears it, a restart keeping it out, and a node
// whose GPUs are all out being not_ready.
#include "core/gpu_health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <set>

#include "billing/meter.h"
#include "core/core.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "store/memory_store.h"
#include "testing/testing.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using ::testing::HasSubstr;

TEST(XidTableTest, ActsOnTheCatalogsImmediateAction) {
  ASSERT_NE(FindXid(79), nullptr);
  EXPECT_EQ(FindXid(79)->action, XidAction::kNodeUnhealthy);
  EXPECT_EQ(FindXid(48)->action, XidAction::kGpuUnhealthy);
  EXPECT_EQ(FindXid(13)->action, XidAction::kWorkload);  // The application's own fault.
  EXPECT_EQ(FindXid(63)->action, XidAction::kIgnore);
  EXPECT_EQ(FindXid(1000), nullptr);
  for (size_t i = 1; i < XidTable().size(); ++i) {
    EXPECT_LT(XidTable()[i - 1].code, XidTable()[i].code) << "the table is sorted for lookups";
  }
}

// docs/gpu-health.md's table is the code's, row for row.
TEST(GpuHealthDocTest, TheDocumentedXidTableIsTheCodes) {
  std::ifstream in(tessera::testing::SourceDir() + "/docs/gpu-health.md");
  ASSERT_TRUE(in) << "docs/gpu-health.md";
  std::vector<std::string> documented;
  for (std::string line; std::getline(in, line);) {
    if (line.size() > 2 && line[0] == '|' && std::isdigit(static_cast<unsigned char>(line[2]))) {
      documented.push_back(line);
    }
  }
  std::vector<std::string> code;
  for (const XidInfo& x : XidTable()) {
    code.push_back(fmt::format("| {} | {} | {} |", x.code, x.mnemonic, XidActionName(x.action)));
  }
  EXPECT_EQ(documented, code);
}

TEST(FindGpuFaultsTest, LostFatalXidsAndNewDoubleBitErrors) {
  telemetry::Telemetry t;
  t.gpus.resize(4);
  for (int i = 0; i < 4; ++i) t.gpus[static_cast<size_t>(i)].index = i;
  t.gpus[0].lost = true;
  t.gpus[3].ecc_dbe_total = 2;
  t.xids = {{1, 13}, {2, 79}, {2, 48}, {-1, 79}};
  const std::vector<GpuFault> faults = FindGpuFaults(t, {});
  ASSERT_EQ(faults.size(), 3u);
  EXPECT_EQ(faults[0].gpu, 2);  // XID 13 on GPU 1 is its workload's; one fault per GPU.
  EXPECT_EQ(faults[0].reason, "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS): the node needs a restart");
  EXPECT_TRUE(faults[0].node_restart);
  EXPECT_EQ(faults[1].gpu, 0);
  EXPECT_THAT(faults[1].reason, HasSubstr("lost"));
  EXPECT_FALSE(faults[1].node_restart);
  EXPECT_EQ(faults[2].gpu, 3);
  EXPECT_THAT(faults[2].reason, HasSubstr("2 uncorrectable (double-bit) ECC error(s)"));
  // Errors an operator accepted when clearing the GPU do not count again; new ones do.
  t.gpus[0].lost = false;
  t.xids.clear();
  EXPECT_TRUE(FindGpuFaults(t, {{3, 2}}).empty());
  t.gpus[3].ecc_dbe_total = 3;
  EXPECT_EQ(FindGpuFaults(t, {{3, 2}}).size(), 1u);
}

class GpuHealthTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    clock_.Set(Time(std::chrono::seconds(1'795'996'800)));
    MakeState(Options());
    ASSERT_TRUE(JoinNode("gpu-1", TestInventory(2), agent_).ok());
  }

  static StateOptions Options() {
    StateOptions o;
    o.node_timeout = 10s;
    return o;
  }

  void Register() {
    ASSERT_TRUE(state_->agent_hub().Register("gpu-1", {agent_, TestInventory(2)}, batch_).ok());
  }

  // One report of the node's agent: workloads that started, and telemetry.
  void Sync(std::vector<AgentReport> reports, std::shared_ptr<telemetry::Telemetry> t = nullptr) {
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_;
    s.reports = std::move(reports);
    s.telemetry = std::move(t);
    auto out = SyncNode("gpu-1", s);
    ASSERT_TRUE(out.ok()) << out.status().message();
  }

  static std::shared_ptr<telemetry::Telemetry> Readings(std::vector<telemetry::XidEvent> xids,
                                                        int lost = -1) {
    auto t = std::make_shared<telemetry::Telemetry>();
    for (int i = 0; i < 2; ++i) {
      telemetry::GpuSample g;
      g.index = i;
      g.lost = i == lost;
      t->gpus.push_back(g);
    }
    t->xids = std::move(xids);
    return t;
  }

  Instance Create() {
    auto out = CreateInRound(TestH100(1));
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : Instance{};
  }

  // Creates an instance and has the agent report it running.
  Instance Running() {
    const Instance inst = Create();
    AgentReport r;
    r.instance = inst.id.str();
    r.attempt = inst.restarts;
    r.started_at = clock_.Now();
    Sync({r});
    return Get(inst.id.str());
  }

  Status Health(int gpu, bool healthy, const std::string& reason = "") {
    state_->BeginRound();
    Status s = state_->node_health().SetGpuHealth("gpu-1", gpu, healthy, reason, batch_);
    state_->EndRound(batch_);
    return s;
  }

  // The ledger lines of `id` stored so far.
  std::vector<store::LedgerRecord> Lines(const std::string& id) {
    EXPECT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
    std::vector<store::LedgerRecord> out;
    EXPECT_TRUE(store_
                    ->ScanLedger("", 0, INT64_MAX,
                                 [&](const store::LedgerRecord& l) {
                                   if (l.instance == id) out.push_back(l);
                                 })
                    .ok());
    return out;
  }

  int64_t seq_ = 0;
};

TEST_F(GpuHealthTest, AFatalXidMovesTheWorkBillsItToTheFaultAndNothingLandsThereAgain) {
  const Instance first = Running();
  const Instance second = Running();
  ASSERT_EQ(first.state, InstanceState::kRunning);
  ASSERT_NE(first.gpus[0].index, second.gpus[0].index);
  const int sick = first.gpus[0].index;
  const int64_t started = billing::UnixSeconds(clock_.Now());

  clock_.Advance(90s);
  Sync({}, Readings({{sick, 48}}));
  const Instance moved = Get(first.id.str());
  EXPECT_EQ(moved.state, InstanceState::kPending);
  EXPECT_THAT(
      moved.reason,
      HasSubstr(fmt::format("GPU {} of node gpu-1 out of service: XID 48 (GPU_ECC_DBE)", sick)));
  EXPECT_EQ(moved.history.back().reason, moved.reason);
  EXPECT_EQ(Get(second.id.str()).state, InstanceState::kRunning) << "the other GPU's work stays";
  // Billed to the second of the report that carried the fault, with no minimum.
  const auto lines = Lines(first.id.str());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].start, started);
  EXPECT_EQ(lines[0].seconds, 90);
  EXPECT_EQ(lines[0].note, "ended by the platform");

  const AgentNode& node = AgentOf(*state_, "gpu-1");
  ASSERT_EQ(node.unhealthy.size(), 1u);
  EXPECT_EQ(node.unhealthy.begin()->first, sick);
  EXPECT_EQ(node.unhealthy.begin()->second.reason, "XID 48 (GPU_ECC_DBE)");
  EXPECT_EQ(node.StateName(), "ready");
  EXPECT_EQ(state_->counters().gpus_unhealthy, 1);
  // The healthy GPU is busy and the sick one takes nothing: new work waits.
  EXPECT_EQ(Create().state, InstanceState::kPending);
  // The series says so while it lasts, for the GpuUnhealthy rule.
  int unhealthy_series = 0;
  for (const telemetry::Target& t : state_->Targets()) {
    if (t.has(telemetry::Field::kGpuHealthy) && t.get(telemetry::Field::kGpuHealthy) == 0) {
      ++unhealthy_series;
    }
  }
  EXPECT_EQ(unhealthy_series, 1);

  // A restart keeps it out of service: the store has it.
  ASSERT_TRUE(store_->Commit(batch_).ok());
  batch_ = {};
  state_ = NewState();
  ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
  agent_ = "a2";
  seq_ = 0;
  Register();
  Sync({});
  EXPECT_EQ(Get(first.id.str()).state, InstanceState::kPending);
  EXPECT_EQ(AgentOf(*state_, "gpu-1").unhealthy.size(), 1u);

  // The operator clears it: the waiting work lands there.
  ASSERT_TRUE(Health(sick, true).ok());
  EXPECT_TRUE(AgentOf(*state_, "gpu-1").unhealthy.empty());
  const Instance back = Get(first.id.str());
  EXPECT_EQ(back.state, InstanceState::kScheduled);
  EXPECT_EQ(back.gpus[0].index, sick);
  EXPECT_EQ(Health(7, true).code(), StatusCode::kNotFound);
}

// The owner of an instance a fault moved is told: a series of its own for 15 minutes, the
// built-in InstanceInterrupted alert in its list (not in another tenant's), and its own rule on
// the series notifies its webhook.
TEST_F(GpuHealthTest, TheOwnerOfAnInstanceAFaultMovedSeesItAndIsAlerted) {
  ASSERT_TRUE(state_->monitoring().Restore({}, {}, {}, batch_).ok());  // A store's first start.
  const Tenant& acme = *state_->tenants().Find(acme_.id.str());
  const Tenant beta = *state_->tenants().Create("beta", 8000, "h-beta", batch_);
  const std::string hook = "https://hooks.example.com/acme";
  const json body = {{"name", "MyWorkMoved"},
                     {"metric", "tessera_instance_interrupted"},
                     {"op", ">"},
                     {"threshold", 0},
                     {"notify", json::array({{{"webhook", hook}}})}};
  auto rule = alerts::ParseRule(body, /*tenant_owned=*/true);
  ASSERT_TRUE(rule.ok()) << rule.status().message();
  state_->BeginRound();
  ASSERT_TRUE(state_->monitoring().CreateRule(acme, *rule, batch_).ok());
  state_->EndRound(batch_);
  const Instance inst = Running();
  const int sick = inst.gpus[0].index;
  clock_.Advance(10s);
  Sync({}, Readings({{sick, 79}}));
  int shown = 0;
  for (const telemetry::Target& t : state_->Targets()) {
    if (!t.has(telemetry::Field::kInstanceInterrupted)) continue;
    ++shown;
    EXPECT_EQ(t.tenant, acme_.id.str());
    std::map<std::string, std::string> labels;
    for (const telemetry::Label& l : t.labels) labels[l.name] = l.value;
    EXPECT_EQ(labels.at("tessera_instance"), inst.id.str());
    EXPECT_EQ(labels.at("cause"), "gpu_unhealthy");
    EXPECT_EQ(labels.at("gpu"), std::to_string(sick));
    EXPECT_THAT(labels.at("fault"), HasSubstr("XID 79"));
    EXPECT_EQ(labels.at("Hostname"), "gpu-1");
  }
  EXPECT_EQ(shown, 1);
  clock_.Advance(6s);  // The next evaluation.
  Sync({});
  std::set<std::string> seen;
  for (const alerts::Alert& a : state_->monitoring().ListAlerts(acme)) {
    if (a.state == alerts::AlertState::kFiring) seen.insert(a.labels.at("alertname"));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"InstanceInterrupted", "MyWorkMoved"}));
  for (const alerts::Alert& a : state_->monitoring().ListAlerts(beta)) {
    ADD_FAILURE() << "beta sees acme's alert " << a.key;
  }
  int told = 0;
  for (const alerts::Delivery& d : state_->monitoring().TakeOutbox().deliveries) {
    if (d.receiver.target == hook) ++told;
  }
  EXPECT_EQ(told, 1) << "acme's webhook hears of it";
  // Fifteen minutes on, the series is gone and the alerts resolve.
  clock_.Advance(16min);
  Sync({});
  clock_.Advance(6s);
  Sync({});
  for (const telemetry::Target& t : state_->Targets()) {
    EXPECT_FALSE(t.has(telemetry::Field::kInstanceInterrupted));
  }
  for (const alerts::Alert& a : state_->monitoring().ListAlerts(acme)) {
    EXPECT_EQ(a.state, alerts::AlertState::kResolved) << a.key;
  }
}

TEST_F(GpuHealthTest, ALostGpuAndAnOperatorsWordTakeGpusOutAndAllOutIsNotReady) {
  const Instance inst = Running();
  Sync({}, Readings({}, /*lost=*/inst.gpus[0].index));
  bool moved = false;
  for (const StateChange& c : Get(inst.id.str()).history) {
    moved = moved || c.reason.find("out of service: lost") != std::string::npos;
  }
  EXPECT_TRUE(moved);
  // An XID the node needs a restart for drains it; the operator takes the last GPU out by hand.
  Sync({}, Readings({{1 - inst.gpus[0].index, 79}}));
  EXPECT_EQ(AgentOf(*state_, "gpu-1").StateName(), "not_ready");
  ASSERT_TRUE(Health(1 - inst.gpus[0].index, true).ok());
  EXPECT_EQ(AgentOf(*state_, "gpu-1").StateName(), "ready");
  ASSERT_TRUE(Health(1 - inst.gpus[0].index, false, "fan noise").ok());
  const AgentNode& node = AgentOf(*state_, "gpu-1");
  EXPECT_EQ(node.StateName(), "not_ready");
  bool found = false;
  for (const auto& [gpu, u] : node.unhealthy) found = found || u.reason == "fan noise";
  EXPECT_TRUE(found);
  const auto n = state_->fleet().Find("gpu-1");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(state_->fleet().node(*n).state, fleet::NodeState::kDown);
}

TEST_F(GpuHealthTest, DoubleBitErrorsClearedByTheOperatorDoNotCountAgain) {
  auto t = Readings({});
  t->gpus[1].ecc_dbe_total = 2;
  Sync({}, t);
  ASSERT_EQ(AgentOf(*state_, "gpu-1").unhealthy.size(), 1u);
  ASSERT_TRUE(Health(1, true).ok());
  Sync({}, t);  // The driver still counts 2 until the GPU is reset: accepted.
  EXPECT_TRUE(AgentOf(*state_, "gpu-1").unhealthy.empty());
  auto more = Readings({});
  more->gpus[1].ecc_dbe_total = 3;
  Sync({}, more);
  EXPECT_EQ(AgentOf(*state_, "gpu-1").unhealthy.size(), 1u);
}

}  // namespace
}  // namespace tessera::core
