// State's telemetry and alerts (state_monitoring.cc, monitoring.h) on a fake clock: the dcgm-style
// targets of joined nodes, per-GPU history for tenants and operators, alert rules and their
// isolation, evaluation through EndRound with its deliveries, and a restart from the stored rules
// and alerts. The store is the in-memory one: the real contract, without a disk.
#include <gtest/gtest.h>

#include <algorithm>

#include "alerts/rule.h"
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
using telemetry::Field;

constexpr Duration kNodeTimeout = 10s;

// A node's inventory as its agent registers it, with the names dcgm-exporter's labels show.
json Inventory(const std::string& node, int gpus) {
  json list = json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back({{"index", i},
                    {"uuid", "GPU-" + node + "-" + std::to_string(i)},
                    {"model", "H100-80GB"},
                    {"name", "NVIDIA H100 80GB HBM3"}});
  }
  return {{"cpu_milli", 64000},
          {"memory_mib", 524288},
          {"driver_version", "550.54.15"},
          {"gpus", list}};
}

CreateInstanceRequest OneH100() {
  CreateInstanceRequest r;
  r.billing = Billing::kOnDemand;
  r.command = "sleep 600";
  r.shape.gpu_model = "H100-80GB";
  r.shape.mode = catalog::SharingMode::kExclusive;
  r.shape.gpus = 1;
  r.shape.vcpus = 4;
  r.shape.memory_mib = 1024;
  return r;
}

// One GPU's readings; the rest of the sample derives from `temp` and `util` so every field is
// told apart from its neighbours.
telemetry::GpuSample Gpu(int index, double temp, double util = 50) {
  telemetry::GpuSample s;
  s.index = index;
  s.temperature_c = temp;
  s.gpu_util = util;
  s.memory_used_mib = 1000 + index;
  s.memory_total_mib = 81559;
  s.power_w = 300 + index;
  s.sm_clock_mhz = 1980;
  return s;
}

// A report's telemetry: GPU i reads temps[i] C and utils[i] % (50 when not given).
std::shared_ptr<const telemetry::Telemetry> Readings(const std::vector<double>& temps,
                                                     const std::vector<double>& utils = {}) {
  auto t = std::make_shared<telemetry::Telemetry>();
  for (size_t i = 0; i < temps.size(); ++i) {
    t->gpus.push_back(Gpu(static_cast<int>(i), temps[i], i < utils.size() ? utils[i] : 50));
  }
  return t;
}

Tenant Admin() {
  Tenant admin;
  admin.admin = true;
  return admin;
}

// A rule as POST /v1/alert-rules would carry it: GPU temperature above 85 C, at once.
alerts::Rule HotRule(const std::string& name, const std::string& webhook, bool tenant_owned) {
  json body = {{"name", name},
               {"metric", "DCGM_FI_DEV_GPU_TEMP"},
               {"op", ">"},
               {"threshold", 85},
               {"for_seconds", 0},
               {"annotations", {{"summary", "GPU {{ $labels.gpu }} at {{ $value }} C"}}}};
  if (!webhook.empty()) body["notify"] = json::array({{{"webhook", webhook}}});
  auto r = alerts::ParseRule(body, tenant_owned);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : alerts::Rule{};
}

std::vector<alerts::Delivery> To(const std::vector<alerts::Delivery>& deliveries,
                                 const std::string& target) {
  std::vector<alerts::Delivery> out;
  for (const alerts::Delivery& d : deliveries) {
    if (d.receiver.target == target) out.push_back(d);
  }
  return out;
}

class StateMonitoringTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    StateOptions o;
    o.node_timeout = kNodeTimeout;
    o.alert_interval = 1s;
    MakeState(o);
    beta_ = *state_->tenants().Create("beta", 64000, "h-beta", batch_);
  }

  // Adds a node with `gpus` GPUs and registers its agent run.
  void Join(const std::string& name, int gpus) {
    ASSERT_TRUE(JoinNode(name, Inventory(name, gpus), agent_).ok());
  }

  // Its agent reports that it runs each tenant's work under a uid of its own, so that two
  // tenants may share the node (docs/agent.md).
  void ReportIsolated(const std::string& node) {
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_[node];
    s.isolation = Isolation::kUid;
    auto out = SyncNode(node, s);
    ASSERT_TRUE(out.ok()) << out.status().message();
  }

  // One round in which the node's agent reports `readings`.
  void Report(const std::string& node, std::shared_ptr<const telemetry::Telemetry> readings) {
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_[node];
    s.telemetry = std::move(readings);
    auto out = SyncNode(node, s);
    ASSERT_TRUE(out.ok()) << out.status().message();
  }

  Instance Create(const Tenant& tenant) {
    auto out = CreateInRound(tenant, OneH100());
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : Instance{};
  }

  void Tick() {
    state_->BeginRound();
    state_->EndRound(batch_);
  }

  // Commits the round's batch to the store and starts a new one.
  void Commit() {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
  }

  // A restart as the server does it (RestoreFromStore): a fresh State rebuilt from the store,
  // whose node's agent then registers again as a new run.
  void Restart() {
    Commit();
    state_ = NewState();
    seq_.clear();
    agent_ = "a2";
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
  }

  // The target of GPU `gpu` of `node`.
  std::optional<telemetry::Target> GpuTarget(const std::string& node, int gpu) const {
    for (const telemetry::Target& t : state_->Targets()) {
      const std::string* host = t.label("Hostname");
      const std::string* index = t.label("gpu");
      if (host && *host == node && index && *index == std::to_string(gpu)) return t;
    }
    return std::nullopt;
  }

  // The node target of `node` (Hostname its only label).
  std::optional<telemetry::Target> NodeTarget(const std::string& node) const {
    for (const telemetry::Target& t : state_->Targets()) {
      if (t.labels.size() == 1 && t.labels[0].name == "Hostname" && t.labels[0].value == node) {
        return t;
      }
    }
    return std::nullopt;
  }

  Tenant beta_;
  std::map<std::string, int64_t> seq_;
};

TEST_F(StateMonitoringTest, TargetsShowEachGpuTheInstanceOnItAndWhetherTheNodeIsReady) {
  Join("gpu-1", 2);
  const Instance inst = Create(acme_);
  ASSERT_EQ(inst.gpus.size(), 1u);
  const int held = inst.gpus[0].index;
  const int idle = 1 - held;
  std::vector<double> temps(2);
  temps[static_cast<size_t>(held)] = 71;
  temps[static_cast<size_t>(idle)] = 42;
  Report("gpu-1", Readings(temps));

  EXPECT_EQ(state_->Targets().size(), 3u) << "the node's target and one per GPU";
  auto node = NodeTarget("gpu-1");
  ASSERT_TRUE(node.has_value());
  EXPECT_EQ(node->get(Field::kNodeReady), 1);
  EXPECT_FALSE(node->has(Field::kGpuTemp)) << "the node target carries readiness only";

  auto mine = GpuTarget("gpu-1", held);
  ASSERT_TRUE(mine.has_value());
  EXPECT_EQ(mine->get(Field::kGpuTemp), 71);
  EXPECT_EQ(mine->get(Field::kFbUsed), 1000 + held);
  ASSERT_NE(mine->label("UUID"), nullptr);
  EXPECT_EQ(*mine->label("UUID"), "GPU-gpu-1-" + std::to_string(held));
  ASSERT_NE(mine->label("modelName"), nullptr);
  EXPECT_EQ(*mine->label("modelName"), "NVIDIA H100 80GB HBM3");
  ASSERT_NE(mine->label("DCGM_FI_DRIVER_VERSION"), nullptr);
  EXPECT_EQ(*mine->label("DCGM_FI_DRIVER_VERSION"), "550.54.15");
  ASSERT_NE(mine->label("tessera_instance"), nullptr);
  EXPECT_EQ(*mine->label("tessera_instance"), inst.id.str());
  ASSERT_NE(mine->label("tenant"), nullptr);
  EXPECT_EQ(*mine->label("tenant"), acme_.id.str());
  EXPECT_EQ(mine->tenant, acme_.id.str());

  auto other = GpuTarget("gpu-1", idle);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->get(Field::kGpuTemp), 42);
  EXPECT_EQ(other->label("tessera_instance"), nullptr) << "an idle GPU names no instance";
  EXPECT_TRUE(other->tenant.empty());

  clock_.Advance(kNodeTimeout / 2 + 1s);  // Silent while the server runs.
  Tick();
  clock_.Advance(kNodeTimeout / 2);
  Tick();
  ASSERT_EQ(state_->counters().nodes_lost, 1);
  node = NodeTarget("gpu-1");
  ASSERT_TRUE(node.has_value()) << "a lost node still has its target";
  EXPECT_EQ(node->get(Field::kNodeReady), 0);
}

TEST_F(StateMonitoringTest, InstanceMetricsGiveTheOwnerItsGpusPointsWithinTheWindowOnly) {
  Join("gpu-1", 2);
  const Instance inst = Create(acme_);
  ASSERT_EQ(inst.gpus.size(), 1u);
  const auto held = static_cast<size_t>(inst.gpus[0].index);
  const Time first = clock_.Now();
  for (int i = 1; i <= 4; ++i) {  // Utilization 10, 20, 30, 40 at first + 0, 5, 10, 15 s.
    std::vector<double> utils(2, 99);
    utils[held] = 10.0 * i;
    Report("gpu-1", Readings({60, 61}, utils));
    if (i < 4) clock_.Advance(5s);
  }

  auto m = state_->readings().OfInstance(acme_, inst.id.str(), 12s);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->id, inst.id.str());
  EXPECT_EQ(m->node, "gpu-1");
  ASSERT_EQ(m->gpus.size(), 1u);
  const GpuReadings& gpu = m->gpus[0];
  EXPECT_EQ(gpu.gpu.index, inst.gpus[0].index);
  EXPECT_EQ(gpu.gpu.uuid, "GPU-gpu-1-" + std::to_string(held));
  ASSERT_EQ(gpu.points.size(), 3u) << "the report 15 s ago is outside a 12 s window";
  EXPECT_EQ(gpu.points[0].t_ms,
            std::chrono::duration_cast<std::chrono::milliseconds>((first + 5s).time_since_epoch())
                .count());
  EXPECT_EQ(gpu.points[0].gpu_util, 20);
  EXPECT_EQ(gpu.points[2].gpu_util, 40) << "the instance's GPU, not its neighbour";
  EXPECT_EQ(gpu.points[2].temperature_c, held == 0 ? 60 : 61);

  auto all = state_->readings().OfInstance(acme_, inst.id.str(), 1h);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->gpus[0].points.size(), 4u);

  auto other = state_->readings().OfInstance(beta_, inst.id.str(), 1h);
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(other.status().message(), "instance '" + inst.id.str() + "' not found")
      << "another tenant's instance reads as an unknown one";
  EXPECT_EQ(state_->readings().OfInstance(acme_, "inst-999999", 1h).status().code(),
            StatusCode::kNotFound);
  auto admin = state_->readings().OfInstance(Admin(), inst.id.str(), 12s);
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(admin->gpus[0].points.size(), gpu.points.size());
}

TEST_F(StateMonitoringTest, NodeMetricsListEachGpusPointsAndLatestReadings) {
  Join("gpu-1", 2);
  Report("gpu-1", Readings({60, 70}, {10, 20}));
  clock_.Advance(5s);
  Report("gpu-1", Readings({62, 72}, {11, 21}));

  auto m = state_->readings().OfNode("gpu-1", 1h);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const GpuReadings& g = (*m)[static_cast<size_t>(i)];
    EXPECT_EQ(g.gpu.index, i);
    ASSERT_EQ(g.points.size(), 2u);
    EXPECT_EQ(g.points[0].gpu_util, 10 + 10 * i);
    EXPECT_EQ(g.points[1].gpu_util, 11 + 10 * i);
    ASSERT_TRUE(g.sampled && g.latest);
    EXPECT_EQ(g.latest->temperature_c, 62 + 10 * i);
    EXPECT_EQ(g.latest->fb_total_mib, 81559);
  }
  auto recent = state_->readings().OfNode("gpu-1", 2s);
  ASSERT_TRUE(recent.ok());
  EXPECT_EQ((*recent)[0].points.size(), 1u);

  auto unknown = state_->readings().OfNode("gpu-9", 1h);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("gpu-9"), std::string::npos)
      << unknown.status().message();
}

TEST_F(StateMonitoringTest, TopInstancesShowsATenantOnlyItsOwnAndTheAdminEveryonesWithTenant) {
  Join("gpu-1", 2);
  ReportIsolated("gpu-1");
  const Instance a = Create(acme_);
  const Instance b = Create(beta_);
  ASSERT_EQ(a.gpus.size(), 1u);
  ASSERT_EQ(b.gpus.size(), 1u);
  ASSERT_NE(a.gpus[0].index, b.gpus[0].index);
  std::vector<double> temps(2);
  temps[static_cast<size_t>(a.gpus[0].index)] = 55;
  temps[static_cast<size_t>(b.gpus[0].index)] = 77;
  Report("gpu-1", Readings(temps));

  const auto mine = state_->readings().Top(acme_);
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].id, a.id.str());
  EXPECT_EQ(mine[0].node, "gpu-1");
  EXPECT_EQ(mine[0].sampled_at, clock_.Now());
  ASSERT_EQ(mine[0].gpus.size(), 1u);
  ASSERT_TRUE(mine[0].gpus[0].latest);
  EXPECT_EQ(mine[0].gpus[0].latest->temperature_c, 55);

  const auto theirs = state_->readings().Top(beta_);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].id, b.id.str());
  ASSERT_TRUE(theirs[0].gpus[0].latest);
  EXPECT_EQ(theirs[0].gpus[0].latest->temperature_c, 77);

  const auto all = state_->readings().Top(Admin());
  ASSERT_EQ(all.size(), 2u);
  std::map<std::string, std::string> tenant_of;
  for (const InstanceReadings& r : all) tenant_of[r.id] = r.tenant;
  EXPECT_EQ(tenant_of[a.id.str()], acme_.id.str());
  EXPECT_EQ(tenant_of[b.id.str()], beta_.id.str());
}

TEST_F(StateMonitoringTest, ARuleFiresOnAHotGpuResolvesWhenItCoolsAndATenantsOnlyOnItsOwn) {
  clock_.Advance(kNodeTimeout + 1s);  // Past the start's settling period.
  Join("gpu-1", 2);
  ReportIsolated("gpu-1");
  const Instance a = Create(acme_);
  const Instance b = Create(beta_);
  ASSERT_EQ(a.gpus.size(), 1u);
  ASSERT_EQ(b.gpus.size(), 1u);
  const auto ga = static_cast<size_t>(a.gpus[0].index);
  const auto gb = static_cast<size_t>(b.gpus[0].index);
  const std::string acme_hook = "https://hooks.example.com/acme";
  const std::string ops_hook = "https://hooks.example.com/ops";
  auto rule =
      state_->monitoring().CreateRule(acme_, HotRule("AcmeGpuHot", acme_hook, true), batch_);
  ASSERT_TRUE(rule.ok());
  ASSERT_TRUE(state_->monitoring()
                  .CreateRule(Admin(), HotRule("FleetGpuHot", ops_hook, false), batch_)
                  .ok());
  auto readings = [&](double acme_temp, double beta_temp) {
    std::vector<double> temps(2);
    temps[ga] = acme_temp;
    temps[gb] = beta_temp;
    return Readings(temps);
  };

  Report("gpu-1", readings(40, 40));
  EXPECT_TRUE(state_->monitoring().ListAlerts(Admin()).empty());
  EXPECT_TRUE(state_->monitoring().TakeOutbox().deliveries.empty());

  // Beta's GPU runs hot: the operator hears of it, acme does not.
  clock_.Advance(1s);
  Report("gpu-1", readings(40, 92));
  auto out = state_->monitoring().TakeOutbox();
  ASSERT_EQ(To(out.deliveries, ops_hook).size(), 1u) << "the operator's rule sees beta's GPU";
  EXPECT_TRUE(To(out.deliveries, acme_hook).empty()) << "acme's rule never sees beta's GPU";
  EXPECT_TRUE(state_->monitoring().ListAlerts(acme_).empty());
  EXPECT_TRUE(state_->monitoring().ListAlerts(beta_).empty())
      << "the operator's alerts are not beta's";

  // Acme's GPU runs hot too.
  clock_.Advance(1s);
  batch_ = {};
  Report("gpu-1", readings(90, 92));
  auto firing = state_->monitoring().ListAlerts(acme_);
  ASSERT_EQ(firing.size(), 1u);
  const alerts::Alert& alert = firing[0];
  EXPECT_EQ(alert.state, alerts::AlertState::kFiring);
  EXPECT_EQ(alert.rule_id, rule->id);
  EXPECT_EQ(alert.owner, acme_.id.str());
  EXPECT_EQ(alert.value, 90);
  EXPECT_EQ(alert.labels.at("alertname"), "AcmeGpuHot");
  EXPECT_EQ(alert.labels.at("tessera_instance"), a.id.str());
  EXPECT_EQ(alert.labels.at("tenant"), acme_.id.str());
  EXPECT_EQ(alert.labels.at("gpu"), std::to_string(ga));
  EXPECT_EQ(alert.annotations.at("summary"), "GPU " + std::to_string(ga) + " at 90 C");
  auto stored = SettingOf(batch_, std::string(Monitoring::kAlertPrefix) + alert.key);
  ASSERT_TRUE(stored.has_value()) << "the firing alert is stored with the round";
  EXPECT_EQ(json::parse(*stored)["state"], "firing");
  out = state_->monitoring().TakeOutbox();
  auto to_acme = To(out.deliveries, acme_hook);
  ASSERT_EQ(to_acme.size(), 1u);
  EXPECT_TRUE(to_acme[0].alert.firing);
  EXPECT_EQ(to_acme[0].alert_key, alert.key);
  EXPECT_TRUE(to_acme[0].receiver.tenant_owned);
  EXPECT_EQ(to_acme[0].alert.labels.at("tessera_instance"), a.id.str());
  EXPECT_EQ(To(out.deliveries, ops_hook).size(), 1u) << "the operator hears of acme's GPU once";
  EXPECT_EQ(state_->monitoring().ListAlerts(Admin()).size(), 3u);

  // Still hot: no message again before the repeat interval.
  clock_.Advance(1s);
  Report("gpu-1", readings(91, 92));
  EXPECT_TRUE(state_->monitoring().TakeOutbox().deliveries.empty());

  // Acme's GPU cools: its alert resolves and says so.
  clock_.Advance(1s);
  batch_ = {};
  Report("gpu-1", readings(50, 92));
  auto resolved = state_->monitoring().ListAlerts(acme_);
  ASSERT_EQ(resolved.size(), 1u);
  EXPECT_EQ(resolved[0].state, alerts::AlertState::kResolved);
  EXPECT_EQ(resolved[0].resolved_at, clock_.Now());
  stored = SettingOf(batch_, std::string(Monitoring::kAlertPrefix) + alert.key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(json::parse(*stored)["state"], "resolved");
  out = state_->monitoring().TakeOutbox();
  to_acme = To(out.deliveries, acme_hook);
  ASSERT_EQ(to_acme.size(), 1u);
  EXPECT_FALSE(to_acme[0].alert.firing);
  EXPECT_EQ(to_acme[0].alert.ends_at, clock_.Now());
  EXPECT_EQ(To(out.deliveries, ops_hook).size(), 1u) << "the operator's alert on it resolves too";
  auto fleet_alerts = state_->monitoring().ListAlerts(Admin());
  ASSERT_FALSE(fleet_alerts.empty());
  EXPECT_EQ(fleet_alerts[0].state, alerts::AlertState::kFiring) << "firing alerts list first";
}

TEST_F(StateMonitoringTest, AnAlertThatResolvedFiresAndNotifiesAgainWhenTheGpuHeatsUpAgain) {
  clock_.Advance(kNodeTimeout + 1s);
  Join("gpu-1", 1);
  const std::string hook = "https://hooks.example.com/ops";
  ASSERT_TRUE(
      state_->monitoring().CreateRule(Admin(), HotRule("FleetGpuHot", hook, false), batch_).ok());
  std::vector<bool> firing;  // What each message said, in order.
  for (double temp : {90.0, 50.0, 91.0}) {
    clock_.Advance(1s);
    Report("gpu-1", Readings({temp}));
    for (const alerts::Delivery& d : To(state_->monitoring().TakeOutbox().deliveries, hook)) {
      firing.push_back(d.alert.firing);
    }
  }
  EXPECT_EQ(firing, (std::vector<bool>{true, false, true}));
  auto alerts = state_->monitoring().ListAlerts(Admin());
  ASSERT_EQ(alerts.size(), 1u) << "one alert a rule and series";
  EXPECT_EQ(alerts[0].state, alerts::AlertState::kFiring);
  EXPECT_EQ(alerts[0].fired_at, clock_.Now());
  EXPECT_FALSE(alerts[0].resolved_at.has_value());
}

TEST_F(StateMonitoringTest, ALostNodeFiresTheBuiltinNodeNotReadyAtOnce) {
  ASSERT_TRUE(state_->monitoring().Restore({}, {}, {}, batch_).ok());
  Join("gpu-1", 1);
  Report("gpu-1", Readings({40}));
  auto named = [&](const std::string& name) {
    std::vector<alerts::Alert> out;
    for (const alerts::Alert& a : state_->monitoring().ListAlerts(Admin())) {
      if (a.labels.at("alertname") == name) out.push_back(a);
    }
    return out;
  };
  EXPECT_TRUE(named("NodeNotReady").empty());
  clock_.Advance(kNodeTimeout / 2 + 1s);  // Silent while the server runs.
  Tick();
  clock_.Advance(kNodeTimeout / 2);
  Tick();
  auto down = named("NodeNotReady");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].state, alerts::AlertState::kFiring);
  EXPECT_EQ(down[0].labels.at("Hostname"), "gpu-1");
  EXPECT_EQ(down[0].annotations.at("summary"), "Node gpu-1 is not ready: its agent is silent");
  clock_.Advance(1s);
  Report("gpu-1", Readings({40}));
  down = named("NodeNotReady");
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].state, alerts::AlertState::kResolved) << "its agent reports again";
}

TEST_F(StateMonitoringTest, DeletingARuleResolvesItsFiringAlertAndSaysSo) {
  clock_.Advance(kNodeTimeout + 1s);
  Join("gpu-1", 1);
  const std::string hook = "https://hooks.example.com/ops";
  auto rule = state_->monitoring().CreateRule(Admin(), HotRule("FleetGpuHot", hook, false), batch_);
  ASSERT_TRUE(rule.ok());
  ASSERT_TRUE(state_->monitoring().CreateRule(Admin(), HotRule("Other", "", false), batch_).ok());
  Report("gpu-1", Readings({90}));
  ASSERT_EQ(To(state_->monitoring().TakeOutbox().deliveries, hook).size(), 1u);
  const std::string key = state_->monitoring().ListAlerts(Admin())[0].key;

  batch_ = {};
  ASSERT_TRUE(state_->monitoring().DeleteRule(Admin(), rule->id, batch_).ok());
  Tick();  // At once, not after the interval: the delete asks for an evaluation.
  auto stored = SettingOf(batch_, std::string(Monitoring::kAlertPrefix) + key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(json::parse(*stored)["state"], "resolved");
  auto to = To(state_->monitoring().TakeOutbox().deliveries, hook);
  ASSERT_EQ(to.size(), 1u);
  EXPECT_FALSE(to[0].alert.firing);
}

// Deleting the last rule still stores and sends its firing alert's resolution.
TEST_F(StateMonitoringTest, DeletingTheLastRuleStillResolvesItsFiringAlertAndSaysSo) {
  clock_.Advance(kNodeTimeout + 1s);
  Join("gpu-1", 1);
  const std::string hook = "https://hooks.example.com/ops";
  auto rule = state_->monitoring().CreateRule(Admin(), HotRule("FleetGpuHot", hook, false), batch_);
  ASSERT_TRUE(rule.ok());
  Report("gpu-1", Readings({90}));
  ASSERT_EQ(To(state_->monitoring().TakeOutbox().deliveries, hook).size(), 1u);
  const std::string key = state_->monitoring().ListAlerts(Admin())[0].key;

  batch_ = {};
  ASSERT_TRUE(state_->monitoring().DeleteRule(Admin(), rule->id, batch_).ok());
  clock_.Advance(1s);
  Tick();
  auto alerts = state_->monitoring().ListAlerts(Admin());
  ASSERT_EQ(alerts.size(), 1u);
  EXPECT_EQ(alerts[0].state, alerts::AlertState::kResolved) << "in memory, it resolved";
  EXPECT_TRUE(SettingOf(batch_, std::string(Monitoring::kAlertPrefix) + key).has_value())
      << "the resolved alert is stored";
  EXPECT_EQ(To(state_->monitoring().TakeOutbox().deliveries, hook).size(), 1u)
      << "the resolved notice is sent";
}

TEST_F(StateMonitoringTest, ARestartRebuildsRulesAndFiringAlertsWithoutNotifyingAgain) {
  ASSERT_TRUE(state_->monitoring().Restore({}, {}, {}, batch_).ok());  // A store's first start.
  std::vector<std::string> names;
  for (const alerts::Rule& r : state_->monitoring().ListRules(Admin())) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"BudgetAlmostSpent", "BudgetSpent", "GpuEccDoubleBitError",
                                      "GpuFramebufferFull", "GpuTemperatureHigh", "GpuUnhealthy",
                                      "GpuXidError", "InstanceInterrupted", "NodeNotReady"}));
  EXPECT_EQ(SettingOf(batch_, std::string(Monitoring::kBuiltinSeeded)), "1");
  EXPECT_EQ(KeysWithPrefix(batch_, Monitoring::kRulePrefix).size(), 9u);
  EXPECT_TRUE(state_->monitoring().ListRules(acme_).empty())
      << "the built-in rules are the operator's";

  clock_.Advance(kNodeTimeout + 1s);
  Join("gpu-1", 1);
  const Instance a = Create(acme_);
  ASSERT_EQ(a.gpus.size(), 1u);
  const std::string hook = "https://hooks.example.com/acme";
  auto rule = state_->monitoring().CreateRule(acme_, HotRule("AcmeGpuHot", hook, true), batch_);
  ASSERT_TRUE(rule.ok());
  clock_.Advance(1s);  // Create's round evaluated the built-in rules just now.
  Report("gpu-1", Readings({95}));
  // Acme's rule's alerts; acme also sees the built-in GpuTemperatureHigh on its own GPU.
  auto own = [&] {
    std::vector<alerts::Alert> out;
    for (const alerts::Alert& alert : state_->monitoring().ListAlerts(acme_)) {
      if (alert.rule_id == rule->id) out.push_back(alert);
    }
    return out;
  };
  EXPECT_EQ(state_->monitoring().ListAlerts(acme_).size(), 2u);
  auto before = own();
  ASSERT_EQ(before.size(), 1u);
  ASSERT_EQ(before[0].state, alerts::AlertState::kFiring);
  ASSERT_EQ(To(state_->monitoring().TakeOutbox().deliveries, hook).size(), 1u);
  ASSERT_TRUE(state_->monitoring().DeleteRule(Admin(), "builtin-xid", batch_).ok());
  Tick();
  clock_.Advance(2s);

  Restart();
  EXPECT_TRUE(KeysWithPrefix(batch_, Monitoring::kRulePrefix).empty())
      << "no built-in rule is seeded again, the deleted one least of all";
  EXPECT_FALSE(SettingOf(batch_, std::string(Monitoring::kBuiltinSeeded)).has_value());
  EXPECT_EQ(state_->monitoring().ListRules(Admin()).size(), 9u) << "8 built-in rules and acme's";
  EXPECT_EQ(state_->monitoring().GetRule(Admin(), "builtin-xid").status().code(),
            StatusCode::kNotFound);
  auto restored = state_->monitoring().GetRule(acme_, rule->id);
  ASSERT_TRUE(restored.ok()) << "acme's rule is acme's after the restart";
  EXPECT_EQ(restored->notify.size(), 1u);
  auto after = own();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].key, before[0].key);
  EXPECT_EQ(after[0].state, alerts::AlertState::kFiring);
  EXPECT_EQ(after[0].fired_at, before[0].fired_at);

  // The node's new agent run reports the GPU still hot: the alert goes on firing, unannounced.
  ASSERT_TRUE(state_->agent_hub().Register("gpu-1", {agent_, Inventory("gpu-1", 1)}, batch_).ok());
  const int64_t evaluations = state_->monitoring().evaluations();
  Report("gpu-1", Readings({96}));
  ASSERT_GT(state_->monitoring().evaluations(), evaluations);
  after = own();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].key, before[0].key) << "the same alert, not a second one";
  EXPECT_EQ(after[0].state, alerts::AlertState::kFiring);
  EXPECT_EQ(after[0].value, 96);
  EXPECT_TRUE(To(state_->monitoring().TakeOutbox().deliveries, hook).empty())
      << "a restart does not announce a firing alert again";

  auto next = state_->monitoring().CreateRule(acme_, HotRule("Again", "", true), batch_);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id, "rule-000002") << "rule ids are not reused after a restart";
}

// After a restart a restored node's GPUs are listed without readings until its agent reports:
// their firing alerts wait for it rather than resolve (and notify) in between.
TEST_F(StateMonitoringTest, AfterARestartAFiringAlertWaitsForItsNodesAgentBeforeResolving) {
  clock_.Advance(kNodeTimeout + 1s);
  Join("gpu-1", 1);
  const Instance a = Create(acme_);
  const std::string hook = "https://hooks.example.com/acme";
  ASSERT_TRUE(
      state_->monitoring().CreateRule(acme_, HotRule("AcmeGpuHot", hook, true), batch_).ok());
  Report("gpu-1", Readings({95}));
  ASSERT_EQ(To(state_->monitoring().TakeOutbox().deliveries, hook).size(), 1u);

  Restart();
  // The node's agent has not reported since the restart: the server has no readings of it yet.
  clock_.Advance(2s);
  Tick();
  auto alerts = state_->monitoring().ListAlerts(acme_);
  ASSERT_EQ(alerts.size(), 1u);
  EXPECT_EQ(alerts[0].state, alerts::AlertState::kFiring)
      << "no readings yet is not a cool GPU: the alert must not resolve while settling";
  EXPECT_TRUE(To(state_->monitoring().TakeOutbox().deliveries, hook).empty());
}

TEST_F(StateMonitoringTest, AStoredAlertWhoseRuleIsGoneIsDeletedAtRestore) {
  ASSERT_TRUE(state_->monitoring().Restore({}, {}, {}, batch_).ok());
  clock_.Advance(kNodeTimeout + 1s);
  Join("gpu-1", 1);
  ASSERT_TRUE(
      state_->monitoring()
          .CreateRule(Admin(), HotRule("FleetGpuHot", "https://h.example.com/", false), batch_)
          .ok());
  Report("gpu-1", Readings({95}));
  std::vector<alerts::Alert> firing;
  for (const alerts::Alert& a : state_->monitoring().ListAlerts(Admin())) {
    if (!a.labels.count("alertname") || a.labels.at("alertname") != "FleetGpuHot") continue;
    firing.push_back(a);
  }
  ASSERT_EQ(firing.size(), 1u);
  ASSERT_EQ(firing[0].state, alerts::AlertState::kFiring);
  Commit();
  // The rule's record is lost while its alert's stays (a store edited by hand).
  batch_.deleted_settings.push_back(std::string(Monitoring::kRulePrefix) + firing[0].rule_id);
  Restart();
  for (const alerts::Alert& a : state_->monitoring().ListAlerts(Admin())) {
    EXPECT_NE(a.key, firing[0].key) << "an alert without its rule does not come back";
  }
  EXPECT_NE(std::find(batch_.deleted_settings.begin(), batch_.deleted_settings.end(),
                      std::string(Monitoring::kAlertPrefix) + firing[0].key),
            batch_.deleted_settings.end());
}

}  // namespace
}  // namespace tessera::core
