#include "alerts/evaluator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/json.h"

namespace tessera::alerts {
namespace {

using std::chrono::seconds;
using telemetry::Field;
using telemetry::Target;

Target Gpu(const std::string& host, int gpu, double temp, const std::string& tenant = "") {
  Target t;
  t.labels = {{"gpu", std::to_string(gpu)},
              {"UUID", "GPU-" + host + std::to_string(gpu)},
              {"Hostname", host},
              {"tenant", tenant}};
  t.tenant = tenant;
  t.set(Field::kGpuTemp, temp);
  return t;
}

Rule TempRule(const std::string& id, int64_t for_s, int64_t keep_s = 0) {
  Rule r;
  r.id = id;
  r.name = "Hot";
  r.metric = Field::kGpuTemp;
  r.op = Op::kGt;
  r.threshold = 85;
  r.for_seconds = for_s;
  r.keep_firing_for_seconds = keep_s;
  r.severity = "critical";
  r.annotations = {{"summary", "GPU {{ $labels.gpu }} on {{$labels.Hostname}} at {{ $value }} C"}};
  r.notify = {Receiver{Receiver::Kind::kWebhook, "http://hooks.example/x", false}};
  return r;
}

class EvaluatorTest : public ::testing::Test {
 protected:
  Time now_{seconds(1'767'225'600)};
  Evaluator ev_{EvaluatorOptions{"http://tessera:8080", true}};

  Evaluation At(int second, const std::vector<Target>& targets) {
    return ev_.Evaluate(now_ + seconds(second), targets);
  }
  const Alert* Only() { return ev_.alerts().size() == 1 ? &ev_.alerts().begin()->second : nullptr; }
};

TEST_F(EvaluatorTest, PendingThenFiringThenResolved) {
  ev_.Put(TempRule("rule-1", 60));
  Evaluation e = At(0, {Gpu("n1", 0, 90)});
  ASSERT_NE(Only(), nullptr);
  EXPECT_EQ(Only()->state, AlertState::kPending);
  EXPECT_TRUE(e.deliveries.empty());
  EXPECT_EQ(e.changed.size(), 1u);  // A new pending alert is stored.

  e = At(30, {Gpu("n1", 0, 91)});
  EXPECT_EQ(Only()->state, AlertState::kPending);
  EXPECT_TRUE(e.changed.empty());  // Nothing durable moved.

  e = At(60, {Gpu("n1", 0, 92)});
  ASSERT_EQ(Only()->state, AlertState::kFiring);
  ASSERT_EQ(e.deliveries.size(), 1u);
  const AlertMessage& m = e.deliveries[0].alert;
  EXPECT_TRUE(m.firing);
  EXPECT_EQ(m.labels.at("alertname"), "Hot");
  EXPECT_EQ(m.labels.at("severity"), "critical");
  EXPECT_EQ(m.labels.at("Hostname"), "n1");
  EXPECT_EQ(m.labels.count("tenant"), 0u);  // Empty labels are left out.
  EXPECT_EQ(m.annotations.at("summary"), "GPU 0 on n1 at 92 C");
  EXPECT_EQ(m.generator_url, "http://tessera:8080/v1/alert-rules/rule-1");
  EXPECT_EQ(m.fingerprint.size(), 16u);
  ASSERT_TRUE(e.alertmanager.has_value());
  EXPECT_EQ(e.alertmanager->size(), 1u);

  // While it fires, its annotation says the value now; nothing is stored for that alone.
  e = At(62, {Gpu("n1", 0, 97.5)});
  EXPECT_EQ(Only()->annotations.at("summary"), "GPU 0 on n1 at 97.5 C");
  EXPECT_TRUE(e.changed.empty());

  e = At(65, {Gpu("n1", 0, 70)});
  EXPECT_EQ(Only()->state, AlertState::kResolved);
  ASSERT_EQ(e.deliveries.size(), 1u);
  EXPECT_FALSE(e.deliveries[0].alert.firing);
  EXPECT_TRUE(e.deliveries[0].alert.ends_at.has_value());

  // Kept a while for the record, then dropped.
  At(65 + 14 * 60, {Gpu("n1", 0, 70)});
  EXPECT_NE(Only(), nullptr);
  e = At(65 + 15 * 60, {Gpu("n1", 0, 70)});
  EXPECT_EQ(ev_.alerts().size(), 0u);
  EXPECT_EQ(e.removed.size(), 1u);
}

TEST_F(EvaluatorTest, PendingThatStopsHoldingIsDropped) {
  ev_.Put(TempRule("rule-1", 60));
  At(0, {Gpu("n1", 0, 90)});
  Evaluation e = At(30, {Gpu("n1", 0, 80)});
  EXPECT_EQ(ev_.alerts().size(), 0u);
  EXPECT_EQ(e.removed.size(), 1u);
  EXPECT_TRUE(e.deliveries.empty());
  // Holding again starts the wait afresh.
  At(40, {Gpu("n1", 0, 90)});
  At(99, {Gpu("n1", 0, 90)});
  EXPECT_EQ(Only()->state, AlertState::kPending);
  At(100, {Gpu("n1", 0, 90)});
  EXPECT_EQ(Only()->state, AlertState::kFiring);
}

TEST_F(EvaluatorTest, KeepFiringForBridgesGaps) {
  ev_.Put(TempRule("rule-1", 0, 120));
  Evaluation e = At(0, {Gpu("n1", 0, 90)});
  EXPECT_EQ(Only()->state, AlertState::kFiring);  // for 0: fires at once.
  EXPECT_EQ(e.deliveries.size(), 1u);
  e = At(60, {Gpu("n1", 0, 70)});
  EXPECT_EQ(Only()->state, AlertState::kFiring);
  EXPECT_TRUE(e.deliveries.empty());
  e = At(119, {});  // The series is gone: counts as not holding.
  EXPECT_EQ(Only()->state, AlertState::kFiring);
  e = At(120, {});
  EXPECT_EQ(Only()->state, AlertState::kResolved);
  EXPECT_EQ(e.deliveries.size(), 1u);
}

TEST_F(EvaluatorTest, RepeatsWhileFiringAndNotAfterARestart) {
  Rule r = TempRule("rule-1", 0);
  r.repeat_interval_seconds = 3600;
  ev_.Put(r);
  EXPECT_EQ(At(0, {Gpu("n1", 0, 90)}).deliveries.size(), 1u);
  EXPECT_EQ(At(1800, {Gpu("n1", 0, 90)}).deliveries.size(), 0u);
  Evaluation e = At(3600, {Gpu("n1", 0, 90)});
  EXPECT_EQ(e.deliveries.size(), 1u);
  ASSERT_EQ(e.changed.size(), 1u);  // notified_at moved: stored.

  // A restart: the stored alert comes back and does not notify again.
  auto stored = AlertFromStored("alert/x", DumpJson(AlertJson(*e.changed[0])));
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  Evaluator again(EvaluatorOptions{"http://tessera:8080", false});
  again.Put(r);
  again.Restore(*stored);
  EXPECT_EQ(again.Evaluate(now_ + seconds(3700), {Gpu("n1", 0, 90)}).deliveries.size(), 0u);
  EXPECT_EQ(again.alerts().begin()->second.state, AlertState::kFiring);
  EXPECT_EQ(again.Evaluate(now_ + seconds(7200), {Gpu("n1", 0, 90)}).deliveries.size(), 1u);
}

TEST_F(EvaluatorTest, WhileSettlingAbsentSeriesDoNotResolve) {
  ev_.Put(TempRule("rule-1", 0));
  At(0, {Gpu("n1", 0, 90), Gpu("n1", 1, 90)});
  ASSERT_EQ(ev_.alerts().size(), 2u);
  // After a restart, n1's GPU 0 reported again and cooled; GPU 1 has not reported yet.
  Evaluation e = ev_.Evaluate(now_ + seconds(5), {Gpu("n1", 0, 70)}, /*settling=*/true);
  std::map<std::string, AlertState> states;
  for (const auto& [k, a] : ev_.alerts()) states[a.labels.at("gpu")] = a.state;
  EXPECT_EQ(states["0"], AlertState::kResolved);
  EXPECT_EQ(states["1"], AlertState::kFiring);
  EXPECT_EQ(e.deliveries.size(), 1u);
  // Settled: still absent, it resolves.
  At(10, {Gpu("n1", 0, 70)});
  for (const auto& [k, a] : ev_.alerts()) EXPECT_EQ(a.state, AlertState::kResolved);
}

TEST_F(EvaluatorTest, TenantRulesSeeOnlyTheirSeriesAndNeverTheAlertmanager) {
  Rule r = TempRule("rule-1", 0);
  r.owner = "acme";
  ev_.Put(r);
  Evaluation e = At(0, {Gpu("n1", 0, 90, "beta"), Gpu("n1", 1, 90, ""), Gpu("n1", 2, 90, "acme")});
  ASSERT_EQ(ev_.alerts().size(), 1u);
  EXPECT_EQ(Only()->labels.at("gpu"), "2");
  EXPECT_EQ(Only()->owner, "acme");
  EXPECT_EQ(e.deliveries.size(), 1u);
  EXPECT_FALSE(e.alertmanager.has_value() && !e.alertmanager->empty());
}

TEST_F(EvaluatorTest, MatchersAndOperators) {
  Rule r = TempRule("rule-1", 0);
  r.matchers = {{"Hostname", "n2"}};
  r.op = Op::kLe;
  r.threshold = 40;
  ev_.Put(r);
  At(0, {Gpu("n1", 0, 30), Gpu("n2", 0, 30), Gpu("n2", 1, 50), Gpu("n2", 2, 40)});
  std::set<std::string> gpus;
  for (const auto& [k, a] : ev_.alerts()) gpus.insert(a.labels.at("gpu") + a.labels.at("Hostname"));
  EXPECT_EQ(gpus, (std::set<std::string>{"0n2", "2n2"}));
  for (auto [op, v, want] : {std::tuple{Op::kGt, 2.0, true},
                             {Op::kGe, 1.0, true},
                             {Op::kLt, 1.0, false},
                             {Op::kEq, 1.0, true},
                             {Op::kNe, 1.0, false}}) {
    EXPECT_EQ(Holds(op, v, 1.0), want) << OpName(op);
  }
}

TEST_F(EvaluatorTest, RemovingARuleResolvesItsFiringAlerts) {
  ev_.Put(TempRule("rule-1", 0));
  ev_.Put(TempRule("rule-2", 600));
  At(0, {Gpu("n1", 0, 90)});
  EXPECT_EQ(ev_.alerts().size(), 2u);  // One firing, one pending.
  EXPECT_TRUE(ev_.Remove("rule-1", now_ + seconds(5)));
  EXPECT_TRUE(ev_.Remove("rule-2", now_ + seconds(5)));
  EXPECT_FALSE(ev_.Remove("rule-2", now_ + seconds(5)));
  Evaluation e = At(10, {Gpu("n1", 0, 90)});
  ASSERT_EQ(e.deliveries.size(), 1u);
  EXPECT_FALSE(e.deliveries[0].alert.firing);
  EXPECT_EQ(e.removed.size(), 1u);  // The pending one.
  ASSERT_EQ(ev_.alerts().size(), 1u);
  EXPECT_EQ(Only()->state, AlertState::kResolved);
}

TEST(AlertIndexTest, AgreesWithAMapUnderRandomInsertsAndErases) {
  AlertIndex index;
  std::map<uint64_t, Alert*> model;
  std::vector<Alert> alerts(64);
  uint64_t state = 7;
  for (int step = 0; step < 200'000; ++step) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    // Few distinct keys with colliding low bits, so probe runs wrap and shift.
    const uint64_t key = ((state >> 33) % 3000) * 1024 + 1;
    Alert* a = &alerts[(state >> 20) % alerts.size()];
    if ((state >> 60) < 9) {
      index.Put(key, a);
      model[key] = a;
    } else {
      index.Erase(key);
      model.erase(key);
    }
    if (step % 9973 == 0) {
      ASSERT_EQ(index.size(), model.size());
      for (const auto& [k, v] : model) {
        ASSERT_NE(index.Find(k), nullptr) << k;
        EXPECT_EQ(index.Find(k)->alert, v);
      }
    }
  }
  size_t live = 0;
  for (const AlertIndex::Slot& s : index.slots()) live += s.key != 0 ? 1 : 0;
  EXPECT_EQ(live, model.size());
  EXPECT_EQ(index.Find(5), nullptr);
}

TEST(RuleTest, ParsesAndNamesBadFields) {
  auto parse = [](const std::string& text) {
    auto j = ParseJson(text, "test");
    EXPECT_TRUE(j.ok()) << text;
    return ParseRule(*j, true);
  };
  auto ok = parse(R"({"name":"Hot","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":85,
      "for_seconds":60,"keep_firing_for_seconds":30,"severity":"critical",
      "matchers":{"Hostname":"n1"},"annotations":{"summary":"hot"},
      "notify":[{"webhook":"https://hooks.example/a"},{"email":"ops@example.com"}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->metric, Field::kGpuTemp);
  EXPECT_EQ(ok->notify.size(), 2u);
  EXPECT_TRUE(ok->notify[0].tenant_owned);
  // The stored form comes back the same.
  Rule r = *ok;
  r.id = "rule-000007";
  r.owner = "acme";
  auto back = RuleFromStored("alert_rule/rule-000007", DumpJson(RuleJson(r)));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(DumpJson(RuleJson(*back)), DumpJson(RuleJson(r)));

  struct Case {
    std::string body, field;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"name":"A","metric":"DCGM_NOPE","op":">","threshold":1})", "metric"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":"=>","threshold":1})", "op"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":"x"})",
            "threshold"},
           {R"({"name":"A B","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1})", "name"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,
               "notify":[{"webhook":"ftp://x"}]})",
            "notify[0]"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,
               "notify":[{"email":"nobody"}]})",
            "notify[0]"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,
               "notify":[{"pager":"x"}]})",
            "notify[0]"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,
               "for_seconds":-1})",
            "for_seconds"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,
               "severity":"page"})",
            "severity"},
           {R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,"x":1})", "x"},
       }) {
    auto bad = parse(c.body);
    ASSERT_FALSE(bad.ok()) << c.body;
    EXPECT_NE(bad.status().message().find(c.field), std::string::npos)
        << c.body << " -> " << bad.status().message();
  }
  // What the caller sent comes back escaped: a DEL or an ESC in a metric, operator, severity or
  // label name never reaches an operator's terminal raw.
  for (const std::string& body : {
           std::string(R"({"name":"A","metric":"DCGM_FI_DEV_GPU)") + "\\u007f" +
               R"(TEMP","op":">","threshold":1})",
           std::string(R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":")") + "\\u001b" +
               R"(","threshold":1})",
           std::string(R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,)") +
               R"("severity":"x\u007f"})",
           std::string(R"({"name":"A","metric":"DCGM_FI_DEV_GPU_TEMP","op":">","threshold":1,)") +
               R"("matchers":{"a\u007f":"b"}})",
       }) {
    auto bad = parse(body);
    ASSERT_FALSE(bad.ok()) << body;
    const std::string& m = bad.status().message();
    EXPECT_EQ(m.find('\x7f'), std::string::npos) << m;
    EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;
    EXPECT_TRUE(m.find("\\x7f") != std::string::npos || m.find("\\e") != std::string::npos) << m;
  }
}

// A tenant's webhook to a numeric address outside the public ranges is refused when the rule is
// made, naming the receiver; an operator's is not, nor is a tenant's under
// --allow-private-receivers.
TEST(RuleTest, ATenantsWebhookMustNameAPublicHost) {
  const auto rule = [](const std::string& url) {
    return nlohmann::json{{"name", "A"},
                          {"metric", "DCGM_FI_DEV_GPU_TEMP"},
                          {"op", ">"},
                          {"threshold", 1},
                          {"notify", {{{"email", "ops@example.com"}}, {{"webhook", url}}}}};
  };
  const std::pair<const char*, const char*> refused[] = {
      {"http://169.254.169.254/latest", "link-local"},
      {"http://127.0.0.1:9000/", "loopback"},
      {"http://[::1]:8080/", "loopback"},
      {"http://LocalHost:8080/", "loopback"},
      {"http://10.1.2.3/", "private"},
      {"http://198.18.0.1/", "special-purpose"},
      {"http://[2001::1]/", "special-purpose"},
      {"http://[64:ff9b:1::a00:1]/", "special-purpose"},
  };
  for (const auto& [url, why] : refused) {
    auto r = ParseRule(rule(url), /*tenant_owned=*/true);
    ASSERT_FALSE(r.ok()) << url;
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr("notify[1].webhook")) << url;
    EXPECT_THAT(r.status().message(), ::testing::HasSubstr(why)) << url;
    EXPECT_TRUE(ParseRule(rule(url), /*tenant_owned=*/false).ok()) << url;
    EXPECT_TRUE(ParseRule(rule(url), true, /*allow_private=*/true).ok()) << url;
  }
  EXPECT_TRUE(ParseRule(rule("https://hooks.example.com/x"), true).ok());
  EXPECT_TRUE(ParseRule(rule("http://8.8.8.8/x"), true).ok());
}

TEST(RuleTest, BuiltinRulesAndTemplates) {
  auto rules = BuiltinRules(Time{});
  ASSERT_EQ(rules.size(), 9u);
  std::set<std::string> metrics;
  for (const Rule& r : rules) metrics.insert(std::string(telemetry::Info(r.metric).name));
  EXPECT_EQ(metrics, (std::set<std::string>{
                         "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_XID_ERRORS", "tessera_node_ready",
                         "tessera_gpu_healthy", "tessera_gpu_fb_used_percent",
                         "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "tessera_tenant_budget_used_percent",
                         "tessera_instance_interrupted"}));
  EXPECT_EQ(ExpandTemplate("{{$value}} on {{ $labels.x }} {{ other }} {{", {{"x", "y"}}, 85.25),
            "85.25 on y {{ other }} {{");
}

}  // namespace
}  // namespace tessera::alerts
