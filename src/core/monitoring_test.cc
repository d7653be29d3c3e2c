// Monitoring on a fake clock, alone: alert rules (ids, owners, caps, what is stored), the
// built-in rules seeded once per store, when an evaluation is due and what it stores and sends,
// the interruptions' retention, and rules' webhooks sealed at rest and re-sealed by a rotation.
// The state's own tests (state_monitoring_test.cc) give it series from real agents' reports.
#include "core/monitoring.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "alerts/rule.h"
#include "common/envelope.h"
#include "common/json.h"
#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using telemetry::Field;

Tenant Admin() {
  Tenant admin;
  admin.admin = true;
  return admin;
}

Tenant Named(const std::string& id) {
  Tenant t;
  t.id = *TenantId::Parse(id);
  t.name = id;
  return t;
}

// A rule as POST /v1/alert-rules would carry it: GPU temperature above 85 C, at once.
alerts::Rule HotRule(const std::string& name, const std::string& webhook, bool tenant_owned) {
  json body = {{"name", name},
               {"metric", "DCGM_FI_DEV_GPU_TEMP"},
               {"op", ">"},
               {"threshold", 85},
               {"for_seconds", 0}};
  if (!webhook.empty()) body["notify"] = json::array({{{"webhook", webhook}}});
  auto r = alerts::ParseRule(body, tenant_owned);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : alerts::Rule{};
}

// GPU `gpu` of node-1 at `temp` C, held by `tenant` ("" = nobody).
telemetry::Target Gpu(int gpu, double temp, const std::string& tenant = "") {
  telemetry::Target t;
  t.labels = {{"Hostname", "node-1"}, {"gpu", std::to_string(gpu)}};
  t.tenant = tenant;
  t.set(Field::kGpuTemp, temp);
  return t;
}

class MonitoringTest : public ::testing::Test {
 protected:
  std::unique_ptr<Monitoring> NewMonitoring(Sealer* sealer = nullptr) {
    Monitoring::Options o;
    o.interval = 1s;
    o.settle = 10s;
    o.sealer = sealer;
    return std::make_unique<Monitoring>(&clock_, o);
  }

  FakeClock clock_{Time(std::chrono::hours(24 * 365 * 50))};
  std::unique_ptr<Monitoring> monitoring_ = NewMonitoring();
  store::Batch batch_;
  Tenant acme_ = Named("tenant-000001");
  Tenant beta_ = Named("tenant-000002");
};

TEST_F(MonitoringTest, AlertRulesGetIdsAndOwnersAreStoredAndEachTenantSeesOnlyItsOwn) {
  auto a = monitoring_->CreateRule(acme_, HotRule("AcmeHot", "", true), batch_);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->id, "rule-000001");
  EXPECT_EQ(a->owner, acme_.id.str());
  EXPECT_EQ(a->created_at, clock_.Now());
  auto stored = SettingOf(batch_, std::string(Monitoring::kRulePrefix) + "rule-000001");
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(json::parse(*stored)["owner"], acme_.id.str());
  EXPECT_EQ(json::parse(*stored)["name"], "AcmeHot");

  auto op = monitoring_->CreateRule(Admin(), HotRule("FleetHot", "", false), batch_);
  ASSERT_TRUE(op.ok());
  EXPECT_EQ(op->id, "rule-000002");
  EXPECT_EQ(op->owner, "") << "the operator's rules have no owner";
  ASSERT_TRUE(SettingOf(batch_, std::string(Monitoring::kRulePrefix) + "rule-000002").has_value());
  EXPECT_TRUE(json::parse(*SettingOf(batch_, "alert_rule/rule-000002"))["owner"].is_null());
  auto b = monitoring_->CreateRule(beta_, HotRule("BetaHot", "", true), batch_);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->id, "rule-000003");
  EXPECT_EQ(SettingOf(batch_, std::string(Monitoring::kNextRule)), "4");

  auto ids = [](const std::vector<alerts::Rule>& rules) {
    std::vector<std::string> out;
    for (const alerts::Rule& r : rules) out.push_back(r.id);
    return out;
  };
  EXPECT_EQ(ids(monitoring_->ListRules(acme_)), std::vector<std::string>{"rule-000001"});
  EXPECT_EQ(ids(monitoring_->ListRules(beta_)), std::vector<std::string>{"rule-000003"});
  EXPECT_EQ(ids(monitoring_->ListRules(Admin())),
            (std::vector<std::string>{"rule-000001", "rule-000002", "rule-000003"}));

  EXPECT_EQ(monitoring_->GetRule(acme_, "rule-000001")->name, "AcmeHot");
  auto peek = monitoring_->GetRule(beta_, "rule-000001");
  EXPECT_EQ(peek.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(peek.status().message(), "alert rule 'rule-000001' not found");
  EXPECT_EQ(monitoring_->GetRule(acme_, "rule-000002").status().code(), StatusCode::kNotFound)
      << "the operator's rules are not a tenant's to read";
  EXPECT_TRUE(monitoring_->GetRule(Admin(), "rule-000003").ok());

  EXPECT_EQ(monitoring_->DeleteRule(beta_, "rule-000001", batch_).code(), StatusCode::kNotFound);
  EXPECT_TRUE(batch_.deleted_settings.empty());
  ASSERT_TRUE(monitoring_->GetRule(acme_, "rule-000001").ok()) << "beta's delete did nothing";
  ASSERT_TRUE(monitoring_->DeleteRule(acme_, "rule-000001", batch_).ok());
  EXPECT_EQ(batch_.deleted_settings, std::vector<std::string>{"alert_rule/rule-000001"});
  EXPECT_EQ(monitoring_->GetRule(acme_, "rule-000001").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(monitoring_->ListRules(acme_).empty());
  EXPECT_EQ(monitoring_->DeleteRule(acme_, "rule-000001", batch_).code(), StatusCode::kNotFound);
}

TEST_F(MonitoringTest, ATenantHasAtMostMaxRulesPerTenantAndOthersAreNotCounted) {
  for (size_t i = 0; i < alerts::kMaxRulesPerTenant; ++i) {
    ASSERT_TRUE(monitoring_->CreateRule(acme_, HotRule("Hot", "", true), batch_).ok()) << i;
  }
  const size_t stored = KeysWithPrefix(batch_, Monitoring::kRulePrefix).size();
  auto refused = monitoring_->CreateRule(acme_, HotRule("Hot", "", true), batch_);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("200"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(KeysWithPrefix(batch_, Monitoring::kRulePrefix).size(), stored) << "nothing stored";
  EXPECT_EQ(monitoring_->ListRules(acme_).size(), alerts::kMaxRulesPerTenant);

  auto other = monitoring_->CreateRule(beta_, HotRule("Hot", "", true), batch_);
  ASSERT_TRUE(other.ok()) << "another tenant's limit is its own";
  EXPECT_EQ(other->id, "rule-000201") << "a refused rule uses no id";
  EXPECT_TRUE(monitoring_->CreateRule(Admin(), HotRule("Hot", "", false), batch_).ok());

  ASSERT_TRUE(monitoring_->DeleteRule(acme_, "rule-000007", batch_).ok());
  EXPECT_TRUE(monitoring_->CreateRule(acme_, HotRule("Hot", "", true), batch_).ok())
      << "a deleted rule frees its place";
}

// Tenants together cannot fill the rule table and lock the operator out: their cap and the
// operator's are apart.
TEST_F(MonitoringTest, TenantsRulesAndTheOperatorsAreCappedApart) {
  const size_t tenants = alerts::kMaxTenantRules / alerts::kMaxRulesPerTenant;
  for (size_t t = 0; t < tenants; ++t) {
    const Tenant tenant = Named(fmt::format("tenant-{:06d}", 100 + t));
    for (size_t i = 0; i < alerts::kMaxRulesPerTenant; ++i) {
      ASSERT_TRUE(monitoring_->CreateRule(tenant, HotRule("Hot", "", true), batch_).ok()) << t;
    }
  }
  auto full = monitoring_->CreateRule(acme_, HotRule("Hot", "", true), batch_);
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("for all tenants together"), std::string::npos)
      << full.status().message();
  EXPECT_TRUE(monitoring_->CreateRule(Admin(), HotRule("Hot", "", false), batch_).ok())
      << "the operator's rules are not tenants' to take";
}

TEST_F(MonitoringTest, AStoreSeededBeforeTheBudgetRulesGetsThemOnce) {
  // Seeded by a release without the budget rules: only those are added, once.
  ASSERT_TRUE(
      monitoring_->Restore({}, {}, {{std::string(Monitoring::kBuiltinSeeded), "1"}}, batch_).ok());
  std::vector<std::string> names;
  for (const alerts::Rule& r : monitoring_->ListRules(Admin())) names.push_back(r.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names,
            (std::vector<std::string>{"BudgetAlmostSpent", "BudgetSpent", "InstanceInterrupted"}));
  EXPECT_EQ(SettingOf(batch_, std::string(Monitoring::kBudgetRulesSeeded)), "1");
  EXPECT_EQ(SettingOf(batch_, std::string(Monitoring::kInterruptedRuleSeeded)), "1");
  // Seeded by a release with the budget rules but not the interrupted one: that one alone.
  monitoring_ = NewMonitoring();
  batch_ = {};
  ASSERT_TRUE(monitoring_
                  ->Restore({}, {},
                            {{std::string(Monitoring::kBuiltinSeeded), "1"},
                             {std::string(Monitoring::kBudgetRulesSeeded), "1"}},
                            batch_)
                  .ok());
  ASSERT_EQ(monitoring_->ListRules(Admin()).size(), 1u);
  EXPECT_EQ(monitoring_->ListRules(Admin())[0].name, "InstanceInterrupted");
  monitoring_ = NewMonitoring();
  batch_ = {};
  ASSERT_TRUE(monitoring_
                  ->Restore({}, {},
                            {{std::string(Monitoring::kBuiltinSeeded), "1"},
                             {std::string(Monitoring::kBudgetRulesSeeded), "1"},
                             {std::string(Monitoring::kInterruptedRuleSeeded), "1"}},
                            batch_)
                  .ok());
  EXPECT_TRUE(monitoring_->ListRules(Admin()).empty()) << "nothing is seeded twice";
}

TEST_F(MonitoringTest, ACorruptStoredRuleIsDataLossNamingItsKey) {
  auto s = monitoring_->Restore({{"alert_rule/rule-000003", "{not json"}}, {}, {}, batch_);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("alert_rule/rule-000003"), std::string::npos) << s.message();
}

TEST_F(MonitoringTest, AnEvaluationIsDueOnceAnIntervalAndOnlyWithSomethingToEvaluate) {
  EXPECT_FALSE(monitoring_->Due()) << "no rule and no alert: nothing to evaluate";
  auto rule = monitoring_->CreateRule(Admin(), HotRule("Hot", "", false), batch_);
  ASSERT_TRUE(rule.ok());
  EXPECT_TRUE(monitoring_->Due());
  monitoring_->Evaluate({}, batch_);
  EXPECT_EQ(monitoring_->evaluations(), 1);
  EXPECT_FALSE(monitoring_->Due());
  clock_.Advance(999ms);
  EXPECT_FALSE(monitoring_->Due());
  clock_.Advance(1ms);
  EXPECT_TRUE(monitoring_->Due());
  monitoring_->Evaluate({}, batch_);
  ASSERT_TRUE(monitoring_->DeleteRule(Admin(), rule->id, batch_).ok());
  EXPECT_FALSE(monitoring_->Due()) << "no rule and no alert left";
}

TEST_F(MonitoringTest, ATenantsRuleFiresOnItsOwnSeriesOnlyIsStoredAndSendsItsWebhookOnce) {
  clock_.Advance(11s);  // Past the start's settling period.
  Sealer* sealer = TestSealer();
  monitoring_ = NewMonitoring(sealer);
  auto rule = monitoring_->CreateRule(acme_, HotRule("AcmeHot", "http://hook/acme", true), batch_);
  ASSERT_TRUE(rule.ok()) << rule.status().message();
  const std::vector<telemetry::Target> hot = {Gpu(0, 90, acme_.id.str()),
                                              Gpu(1, 95, beta_.id.str()), Gpu(2, 99)};
  monitoring_->Evaluate(hot, batch_);
  auto firing = monitoring_->ListAlerts(acme_);
  ASSERT_EQ(firing.size(), 1u) << "acme's rule sees acme's GPU only";
  EXPECT_EQ(firing[0].state, alerts::AlertState::kFiring);
  EXPECT_EQ(firing[0].labels.at("gpu"), "0");
  EXPECT_TRUE(monitoring_->ListAlerts(beta_).empty());
  EXPECT_TRUE(SettingOf(batch_, std::string(Monitoring::kAlertPrefix) + firing[0].key));
  auto out = monitoring_->TakeOutbox();
  ASSERT_EQ(out.deliveries.size(), 1u);
  EXPECT_EQ(out.deliveries[0].receiver.target, "http://hook/acme");
  EXPECT_TRUE(monitoring_->TakeOutbox().deliveries.empty()) << "taken once";

  clock_.Advance(1s);
  monitoring_->Evaluate(hot, batch_);
  EXPECT_TRUE(monitoring_->TakeOutbox().deliveries.empty()) << "still firing: no second notice";
  clock_.Advance(1s);
  monitoring_->Evaluate({Gpu(0, 60, acme_.id.str())}, batch_);
  firing = monitoring_->ListAlerts(acme_);
  ASSERT_EQ(firing.size(), 1u);
  EXPECT_EQ(firing[0].state, alerts::AlertState::kResolved);
  EXPECT_EQ(monitoring_->TakeOutbox().deliveries.size(), 1u) << "the resolved notice";
}

TEST_F(MonitoringTest, WhileSettlingAfterAStartAMissingSeriesDoesNotResolveItsAlert) {
  auto rule = monitoring_->CreateRule(Admin(), HotRule("Hot", "", false), batch_);
  ASSERT_TRUE(rule.ok());
  clock_.Advance(11s);
  monitoring_->Evaluate({Gpu(0, 90)}, batch_);
  ASSERT_EQ(monitoring_->ListAlerts(Admin()).size(), 1u);
  // A restart: the rule and the firing alert come back, and the node has not reported yet.
  std::vector<std::pair<std::string, std::string>> rules, alerts;
  for (const auto& [k, v] : batch_.settings) {
    if (k.starts_with(Monitoring::kRulePrefix)) rules.emplace_back(k, v);
    if (k.starts_with(Monitoring::kAlertPrefix)) alerts.emplace_back(k, v);
  }
  monitoring_ = NewMonitoring();
  store::Batch restored;
  ASSERT_TRUE(monitoring_
                  ->Restore(rules, alerts,
                            {{std::string(Monitoring::kBuiltinSeeded), "1"},
                             {std::string(Monitoring::kBudgetRulesSeeded), "1"},
                             {std::string(Monitoring::kInterruptedRuleSeeded), "1"}},
                            restored)
                  .ok());
  monitoring_->Evaluate({}, restored);
  ASSERT_EQ(monitoring_->ListAlerts(Admin()).size(), 1u);
  EXPECT_EQ(monitoring_->ListAlerts(Admin())[0].state, alerts::AlertState::kFiring)
      << "its node's agent has its lease's time to report";
  clock_.Advance(10s);
  monitoring_->Evaluate({}, restored);
  EXPECT_EQ(monitoring_->ListAlerts(Admin())[0].state, alerts::AlertState::kResolved)
      << "settled, the series is gone";
}

TEST_F(MonitoringTest, AnInterruptionShowsForFifteenMinutesAndAtMostTheNewestAreKept) {
  monitoring_->NoteInterruption(
      {clock_.Now(), acme_.id.str(), "inst-000001", "node-1", "gpu_unhealthy", "XID_79", 3});
  std::vector<telemetry::Target> out;
  monitoring_->InterruptionTargets(out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tenant, acme_.id.str());
  EXPECT_EQ(*out[0].label("tessera_instance"), "inst-000001");
  EXPECT_EQ(*out[0].label("cause"), "gpu_unhealthy");
  EXPECT_EQ(*out[0].label("fault"), "XID_79");
  EXPECT_EQ(*out[0].label("gpu"), "3");
  EXPECT_EQ(out[0].get(Field::kInstanceInterrupted), 1);

  clock_.Advance(Monitoring::kInterruptionShown);
  monitoring_->Sweep();
  out.clear();
  monitoring_->InterruptionTargets(out);
  EXPECT_EQ(out.size(), 1u) << "shown for 15 minutes";
  clock_.Advance(1s);
  monitoring_->Sweep();
  out.clear();
  monitoring_->InterruptionTargets(out);
  EXPECT_TRUE(out.empty());

  for (size_t i = 0; i <= Monitoring::kMaxInterruptions; ++i) {
    monitoring_->NoteInterruption({clock_.Now(), acme_.id.str(), fmt::format("inst-{:06d}", i),
                                   "node-1", "node_lost", "", -1});
  }
  monitoring_->InterruptionTargets(out);
  ASSERT_EQ(out.size(), Monitoring::kMaxInterruptions);
  EXPECT_EQ(*out.front().label("tessera_instance"), "inst-000001") << "the oldest left";
  EXPECT_EQ(out.front().label("gpu"), nullptr) << "a node's loss names no GPU";
}

TEST_F(MonitoringTest, AWebhookIsSealedAtRestOpenedAtRestoreAndResealedByARotation) {
  EXPECT_EQ(monitoring_->CreateRule(acme_, HotRule("Hot", "http://hook/t0k3n", true), batch_)
                .status()
                .code(),
            StatusCode::kFailedPrecondition)
      << "no keyring: a webhook cannot be stored";
  Sealer sealer(TestKeyring(TestKeyLine("k1", 'a')));
  monitoring_ = NewMonitoring(&sealer);
  batch_ = {};
  auto rule = monitoring_->CreateRule(acme_, HotRule("Hot", "http://hook/t0k3n", true), batch_);
  ASSERT_TRUE(rule.ok()) << rule.status().message();
  const std::string key = std::string(Monitoring::kRulePrefix) + rule->id;
  auto stored = SettingOf(batch_, key);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->find("t0k3n"), std::string::npos) << *stored;
  std::map<std::string, int64_t> keys;
  monitoring_->CountKeys(keys);
  EXPECT_EQ(keys, (std::map<std::string, int64_t>{{"k1", 1}}));

  sealer.SetKeyring(TestKeyring(TestKeyLine("k2", 'b') + "\n" + TestKeyLine("k1", 'a')));
  store::Batch rotation;
  ResealStep step;
  std::string after;
  auto end = monitoring_->Reseal("k2", after, 10, step, rotation);
  ASSERT_TRUE(end.ok()) << end.status().message();
  EXPECT_TRUE(*end);
  EXPECT_EQ(step.examined, 1u);
  EXPECT_EQ(step.resealed, 1u);
  keys.clear();
  monitoring_->CountKeys(keys);
  EXPECT_EQ(keys, (std::map<std::string, int64_t>{{"k2", 1}}));

  // Opened under the new key alone, after a restart.
  Sealer only_new(TestKeyring(TestKeyLine("k2", 'b')));
  monitoring_ = NewMonitoring(&only_new);
  store::Batch restored;
  ASSERT_TRUE(monitoring_->Restore({{key, *SettingOf(rotation, key)}}, {}, {}, restored).ok());
  auto back = monitoring_->GetRule(acme_, rule->id);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->notify.size(), 1u);
  EXPECT_EQ(back->notify[0].target, "http://hook/t0k3n");
}

}  // namespace
}  // namespace tessera::core
