// End-to-end tests of GPU telemetry and alerts: a real `tessera server` with simulated agents,
// and the ecosystem around it started by the tests themselves: a real Prometheus (Debian's
// `prometheus`) scraping it, a real Alertmanager (`prometheus-alertmanager`), a webhook receiver
// and an SMTP sink on loopback.
#include <fmt/format.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/text.h"
#include "server_test_util.h"
#include "testing/http_server.h"
#include "testing/smtp_sink.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string Dump(const json& j) { return j.dump(); }

json GetJson(const std::string& base, const std::string& path) {
  httplib::Client c(base);
  c.set_read_timeout(10);
  auto r = c.Get(path);
  json j = r ? json::parse(r->body, nullptr, false) : json::object();
  return j.is_discarded() || j.is_null() ? json::object() : j;
}

// A webhook receiver: every POST to /hook, parsed.
class Webhook {
 public:
  Webhook() {
    server_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      bodies_.push_back(json::parse(req.body, nullptr, false));
      res.status = 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = testing::ServeInBackground(server_);
  }
  ~Webhook() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}/hook", port_); }
  std::vector<json> bodies() const {
    std::lock_guard lock(mu_);
    return bodies_;
  }
  // The messages whose status is `status` ("firing", "resolved").
  std::vector<json> With(const std::string& status) const {
    std::vector<json> out;
    for (const json& b : bodies()) {
      if (b.value("status", "") == status) out.push_back(b);
    }
    return out;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<json> bodies_;
};

bool Installed(const char* path) { return access(path, X_OK) == 0; }

// A real Alertmanager on a free port, routing everything to nowhere: the test reads alerts back
// from its API.
class Alertmanager {
 public:
  explicit Alertmanager(const testing::TempDir& dir) {
    port_ = testing::FreeTcpPort();
    const std::string config = dir.Write("alertmanager.yml",
                                         "route:\n  receiver: none\n  group_wait: 1s\n"
                                         "receivers:\n  - name: none\n");
    process_ = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{"/usr/bin/prometheus-alertmanager", "--config.file=" + config,
                                 "--storage.path=" + dir.File("am-data"),
                                 fmt::format("--web.listen-address=127.0.0.1:{}", port_),
                                 "--cluster.listen-address="},
        dir.File("alertmanager.log"));
    ready_ = WaitFor(
        [&] {
          httplib::Client c(url());
          auto r = c.Get("/-/ready");
          return r && r->status == 200;
        },
        20s);
  }
  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  bool ready() const { return ready_; }
  // The active alerts named `alertname`.
  json Alerts(const std::string& alertname) const {
    json out = json::array();
    json all = GetJson(url(), "/api/v2/alerts");
    if (!all.is_array()) return out;
    for (const json& a : all) {
      if (a["labels"].value("alertname", "") == alertname) out.push_back(a);
    }
    return out;
  }

 private:
  int port_ = 0;
  bool ready_ = false;
  std::unique_ptr<testing::ChildProcess> process_;
};

class TelemetryTest : public ServerTest {
 protected:
  void SetUp() override { fleet_path_ = dir_.Write("fleet.json", kSmallFleet); }

  // The first node of the fleet with an H100, as /v1/nodes names it.
  std::string H100Node() {
    const json nodes = Get("/v1/nodes", kAdminToken).body["nodes"];
    for (const json& n : nodes) {
      if (n.value("gpu_model", "") == "H100-80GB") return n.value("id", "");
    }
    return "";
  }
  std::string Metrics() { return Get("/metrics", kAdminToken).raw; }
  json Alerts(const std::string& token, const std::string& query = "") {
    const json body = Get("/v1/alerts" + query, token).body;
    return body.contains("alerts") ? body["alerts"] : json::array();
  }
  json HotRule(const std::string& node, const json& notify) {
    return {
        {"name", "GpuTooHot"},
        {"metric", "DCGM_FI_DEV_GPU_TEMP"},
        {"op", ">"},
        {"threshold", 85},
        {"for_seconds", 1},
        {"severity", "critical"},
        {"matchers", {{"Hostname", node}, {"gpu", "0"}}},
        {"annotations", {{"summary", "GPU {{ $labels.gpu }} of {{ $labels.Hostname }} is hot"}}},
        {"notify", notify}};
  }
};

TEST_F(TelemetryTest, OverheatingFiresToWebhookEmailAndAlertmanagerAndCoolingResolves) {
  if (!Installed("/usr/bin/prometheus-alertmanager")) {
    GTEST_SKIP() << "prometheus-alertmanager is not installed (scripts/bootstrap.sh installs it)";
  }
  Alertmanager am(dir_);
  ASSERT_TRUE(am.ready()) << "Alertmanager did not start";
  Webhook hook;
  testing::SmtpSink smtp;
  ASSERT_GT(smtp.port(), 0);
  StartServer({"--sim-agents", "--alertmanager", am.url(), "--smtp",
               fmt::format("127.0.0.1:{}", smtp.port()), "--smtp-from", "tessera@example.com",
               "--allow-private-receivers", "--alert-interval", "200ms"});
  const std::string node = H100Node();
  ASSERT_FALSE(node.empty()) << Get("/v1/nodes", kAdminToken).raw;
  auto rule = Post(
      "/v1/alert-rules", kAdminToken,
      HotRule(node, json::array({{{"webhook", hook.url()}}, {{"email", "oncall@example.com"}}})));
  ASSERT_EQ(rule.status, 201) << rule.raw;
  const std::string rule_id = rule.body.value("id", "");
  // The built-in rules are there too, for the operator.
  std::set<std::string> names;
  const json rules = Get("/v1/alert-rules", kAdminToken).body["rules"];
  for (const json& r : rules) names.insert(r["name"]);
  for (const char* builtin : {"GpuTemperatureHigh", "GpuXidError", "NodeNotReady",
                              "GpuFramebufferFull", "GpuEccDoubleBitError"}) {
    EXPECT_TRUE(names.count(builtin)) << builtin;
  }
  const std::string series = fmt::format("DCGM_FI_DEV_GPU_TEMP{{gpu=\"0\"");
  ASSERT_TRUE(WaitFor(
      [&] { return Metrics().find("Hostname=\"" + node + "\"") != std::string::npos; }, 10s))
      << Metrics();

  auto fault = Post("/v1/nodes/" + node + "/faults", kAdminToken, {{"fault", "overheat:0"}});
  ASSERT_EQ(fault.status, 202) << fault.raw;
  ASSERT_TRUE(WaitFor([&] { return !hook.With("firing").empty(); }, 15s))
      << Dump(Alerts(kAdminToken));
  const json firing = hook.With("firing")[0];
  EXPECT_EQ(firing["version"], "4");
  EXPECT_EQ(firing["receiver"], "webhook:" + hook.url());
  EXPECT_EQ(firing["truncatedAlerts"], 0);
  for (const char* key :
       {"groupKey", "groupLabels", "commonLabels", "commonAnnotations", "externalURL", "alerts"}) {
    EXPECT_TRUE(firing.contains(key)) << key;
  }
  const json& alert = firing["alerts"][0];
  EXPECT_EQ(alert["status"], "firing");
  EXPECT_EQ(alert["labels"]["alertname"], "GpuTooHot");
  EXPECT_EQ(alert["labels"]["Hostname"], node);
  EXPECT_EQ(alert["labels"]["gpu"], "0");
  EXPECT_EQ(alert["labels"]["modelName"], "Simulated H100-80GB");
  EXPECT_EQ(alert["annotations"]["summary"], "GPU 0 of " + node + " is hot");
  EXPECT_EQ(alert["endsAt"], "0001-01-01T00:00:00Z");
  EXPECT_NE(alert["generatorURL"].get<std::string>().find("/v1/alert-rules/" + rule_id),
            std::string::npos);
  EXPECT_EQ(alert["fingerprint"].get<std::string>().size(), 16u);

  // The email, a person's reading of it.
  ASSERT_TRUE(smtp.WaitForMessages(1, 15s));
  const auto mail = smtp.messages()[0];
  EXPECT_EQ(mail.from, "tessera@example.com");
  EXPECT_EQ(mail.recipients, std::vector<std::string>{"oncall@example.com"});
  EXPECT_NE(mail.Header("Subject").find("[FIRING] GpuTooHot"), std::string::npos)
      << mail.Header("Subject");
  EXPECT_NE(mail.Body().find("GPU 0 of " + node + " is hot"), std::string::npos) << mail.Body();

  // The Alertmanager has it, with Prometheus's fields.
  ASSERT_TRUE(WaitFor([&] { return !am.Alerts("GpuTooHot").empty(); }, 15s));
  const json in_am = am.Alerts("GpuTooHot")[0];
  EXPECT_EQ(in_am["labels"]["Hostname"], node);
  EXPECT_EQ(in_am["labels"]["severity"], "critical");
  EXPECT_EQ(in_am["status"]["state"], "active");
  EXPECT_NE(in_am["generatorURL"].get<std::string>().find(rule_id), std::string::npos);

  // GET /v1/alerts: firing, and delivered to both receivers.
  json listed = Alerts(kAdminToken, "?state=firing");
  const json* mine = nullptr;
  for (const json& a : listed) {
    if (a["rule_id"] == rule_id) mine = &a;
  }
  ASSERT_NE(mine, nullptr) << Dump(listed);
  EXPECT_GE((*mine)["value"].get<double>(), 85);
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const json& a : Alerts(kAdminToken, "?state=firing")) {
          if (a["rule_id"] != rule_id) continue;
          int sent = 0;
          for (const json& d : a["deliveries"]) sent += d.value("sent", 0) > 0 ? 1 : 0;
          return sent == 2;
        }
        return false;
      },
      10s))
      << Dump(Alerts(kAdminToken));

  // Cooling resolves it: one resolved message to each receiver, and the Alertmanager's copy ends.
  ASSERT_EQ(Post("/v1/nodes/" + node + "/faults", kAdminToken, {{"fault", "cool:0"}}).status, 202);
  ASSERT_TRUE(WaitFor([&] { return !hook.With("resolved").empty(); }, 15s));
  const json resolved = hook.With("resolved")[0]["alerts"][0];
  EXPECT_EQ(resolved["status"], "resolved");
  EXPECT_NE(resolved["endsAt"], "0001-01-01T00:00:00Z");
  ASSERT_TRUE(smtp.WaitForMessages(2, 15s));
  EXPECT_NE(smtp.messages()[1].Header("Subject").find("[RESOLVED] GpuTooHot"), std::string::npos);
  EXPECT_TRUE(WaitFor([&] { return am.Alerts("GpuTooHot").empty(); }, 15s));
  std::this_thread::sleep_for(1s);  // Several more evaluations: no more messages.
  EXPECT_EQ(hook.bodies().size(), 2u);
  EXPECT_EQ(smtp.messages().size(), 2u);

  // Delivery counts show in /metrics.
  const std::string m = Metrics();
  EXPECT_NE(m.find("tessera_alert_notifications_total{receiver=\"webhook\",result=\"sent\"} 2"),
            std::string::npos);
  EXPECT_NE(m.find("tessera_alert_notifications_total{receiver=\"email\",result=\"sent\"} 2"),
            std::string::npos);
}

TEST_F(TelemetryTest, RulesAndFiringAlertsSurviveARestartWithoutNotifyingAgain) {
  Webhook hook;
  const std::vector<std::string> flags = {"--sim-agents", "--allow-private-receivers",
                                          "--alert-interval", "200ms"};
  StartServer(flags);
  // Always true: every GPU's power draw is positive.
  auto rule = Post("/v1/alert-rules", kAdminToken,
                   {{"name", "Powered"},
                    {"metric", "DCGM_FI_DEV_POWER_USAGE"},
                    {"op", ">"},
                    {"threshold", 0},
                    {"matchers", {{"Hostname", H100Node()}, {"gpu", "1"}}},
                    {"notify", json::array({{{"webhook", hook.url()}}})}});
  ASSERT_EQ(rule.status, 201) << rule.raw;
  ASSERT_TRUE(WaitFor([&] { return hook.With("firing").size() == 1; }, 15s));
  const json before = Alerts(kAdminToken, "?state=firing");
  ASSERT_FALSE(before.empty());

  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  StartServer(flags);
  const json rules = Get("/v1/alert-rules/" + rule.body.value("id", ""), kAdminToken).body;
  EXPECT_EQ(rules.value("name", ""), "Powered");
  json after;
  ASSERT_TRUE(WaitFor(
      [&] {
        after = Alerts(kAdminToken, "?state=firing");
        return !after.empty();
      },
      5s));
  std::this_thread::sleep_for(2s);  // Ten evaluations on the restarted server.
  EXPECT_EQ(hook.bodies().size(), 1u) << Dump(hook.bodies());
  after = Alerts(kAdminToken, "?state=firing");
  ASSERT_FALSE(after.empty());
  EXPECT_EQ(after[0]["fired_at"], before[0]["fired_at"]);
  EXPECT_EQ(after[0]["key"], before[0]["key"]);
}

TEST_F(TelemetryTest, TenantsSeeOnlyTheirOwnRulesAlertsAndMetrics) {
  Webhook hook;
  StartServer({"--sim-agents", "--alert-interval", "200ms"});  // Private receivers refused.
  const std::string acme = NewTenant("acme", 8), beta = NewTenant("beta", 8);
  json busy = H100(1, "on_demand");
  busy["env"] = {{"TESSERA_SIM_LOAD", "90"}};  // Its GPU reads busy (an idle one reads 0%).
  auto inst = Post("/v1/instances", acme, busy);
  ASSERT_EQ(inst.status, 201) << inst.raw;
  const std::string id = inst.body.value("id", "");
  const std::string acme_id = inst.body.value("tenant", "");
  ASSERT_EQ(AwaitState(acme, id, "running"), "running");
  auto other = Post("/v1/instances", beta, H100(1, "on_demand"));
  ASSERT_EQ(other.status, 201) << other.raw;
  const std::string other_id = other.body.value("id", "");
  const std::string beta_id = other.body.value("tenant", "");

  // Bad rules: 400 naming the field.
  for (const auto& [body, field] : std::vector<std::pair<json, std::string>>{
           {{{"name", "A"}, {"metric", "DCGM_FI_DEV_NOPE"}, {"op", ">"}, {"threshold", 1}},
            "metric"},
           {{{"name", "A"}, {"metric", "DCGM_FI_DEV_GPU_TEMP"}, {"op", "~"}, {"threshold", 1}},
            "op"},
           {{{"name", "A"},
             {"metric", "DCGM_FI_DEV_GPU_TEMP"},
             {"op", ">"},
             {"threshold", 1},
             {"notify", json::array({{{"webhook", "gopher://x"}}})}},
            "notify[0]"}}) {
    auto r = Post("/v1/alert-rules", acme, body);
    EXPECT_EQ(r.status, 400) << r.raw;
    EXPECT_NE(r.raw.find(field), std::string::npos) << r.raw;
  }

  // acme's rule matches every GPU's temperature, but sees only acme's GPU. Its webhook on the
  // server's loopback is refused when the rule is made (names are checked at every send).
  json always = {{"name", "Warm"},
                 {"metric", "DCGM_FI_DEV_GPU_TEMP"},
                 {"op", ">"},
                 {"threshold", 0},
                 {"notify", json::array({{{"webhook", hook.url()}}})}};
  auto refused = Post("/v1/alert-rules", acme, always);
  EXPECT_EQ(refused.status, 400) << refused.raw;
  EXPECT_NE(refused.raw.find("notify[0].webhook"), std::string::npos) << refused.raw;
  EXPECT_NE(refused.raw.find("loopback"), std::string::npos) << refused.raw;
  always.erase("notify");
  auto mine = Post("/v1/alert-rules", acme, always);
  ASSERT_EQ(mine.status, 201) << mine.raw;
  EXPECT_EQ(mine.body["owner"], acme_id);
  auto theirs = Post("/v1/alert-rules", beta, always);
  ASSERT_EQ(theirs.status, 201);
  ASSERT_TRUE(WaitFor([&] { return !Alerts(acme, "?state=firing").empty(); }, 15s));
  for (const json& a : Alerts(acme)) {
    EXPECT_EQ(a["owner"], acme_id);
    EXPECT_EQ(a["labels"]["tessera_instance"], id);
    EXPECT_EQ(a["labels"]["tenant"], acme_id);
  }
  for (const json& a : Alerts(beta)) EXPECT_EQ(a["labels"]["tenant"], beta_id);
  EXPECT_EQ(Get("/v1/alert-rules", acme).body["rules"].size(), 1u);
  EXPECT_EQ(Get("/v1/alert-rules/" + theirs.body.value("id", ""), acme).status, 404);
  EXPECT_EQ(Call("DELETE", "/v1/alert-rules/" + theirs.body.value("id", ""), acme).status, 404);
  EXPECT_GE(Get("/v1/alert-rules", kAdminToken).body["rules"].size(), 7u);

  EXPECT_TRUE(hook.bodies().empty());

  // Metrics: the operator's alone; a tenant reads its own instance's history only.
  EXPECT_EQ(Get("/metrics", acme).status, 403);
  EXPECT_EQ(Get("/v1/instances/" + other_id + "/metrics", acme).status, 404);
  json history;
  ASSERT_TRUE(WaitFor(
      [&] {
        // The first report after the start shows the load (the sim backend follows it).
        history = Get("/v1/instances/" + id + "/metrics?window=15m", acme).body;
        return history.contains("gpus") && !history["gpus"][0]["points"].empty() &&
               history["gpus"][0]["points"].back()["gpu_util"].get<double>() > 50;
      },
      15s))
      << Dump(history);
  EXPECT_EQ(history["window_seconds"], 900);
  const json& point = history["gpus"][0]["points"].back();
  for (const char* key : {"t", "gpu_util", "fb_used_mib", "power_w", "temperature_c"}) {
    EXPECT_TRUE(point.contains(key)) << key;
  }
  auto bad_window = Get("/v1/instances/" + id + "/metrics?window=2d", acme);
  EXPECT_EQ(bad_window.status, 400);
  EXPECT_NE(bad_window.raw.find("window"), std::string::npos);

  // `top` for each tenant: its own instances only.
  auto top = Get("/v1/metrics/instances", acme).body["instances"];
  ASSERT_EQ(top.size(), 1u) << Dump(top);
  EXPECT_EQ(top[0]["id"], id);
  EXPECT_FALSE(top[0].contains("tenant")) << "a tenant is not told its own id again";
  EXPECT_TRUE(top[0].contains("sampled_at")) << Dump(top);
  EXPECT_TRUE(top[0]["gpus"][0]["latest"].contains("temperature_c")) << Dump(top);
  bool tenant_shown = false;
  auto all_top_reply = Get("/v1/metrics/instances", kAdminToken);
  ASSERT_EQ(all_top_reply.status, 200) << all_top_reply.raw;
  const json& all_top = all_top_reply.body;
  for (const json& j : all_top["instances"]) {
    if (j["id"] == id) tenant_shown = j.value("tenant", "") == acme_id;
  }
  EXPECT_TRUE(tenant_shown) << "the operator's view names each instance's tenant: " << acme_id
                            << " " << Dump(all_top);
  auto cli = testing::RunTessera({"instances", "top", "--url", server_->url(), "--token", acme});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NE(cli.out.find(id), std::string::npos) << cli.out;
  EXPECT_EQ(cli.out.find(other_id), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("GPU UTIL"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("%"), std::string::npos) << cli.out;

  // The same through the command line.
  auto created =
      testing::RunTessera({"alerts", "rules", "create", "--url", server_->url(), "--token", acme,
                           "--name", "WarmCli", "--metric", "DCGM_FI_DEV_GPU_TEMP", "--op", ">",
                           "--threshold", "1", "--summary", "warm at {{ $value }}"});
  EXPECT_EQ(created.exit_code, 0) << created.err;
  EXPECT_NE(created.out.find("DCGM_FI_DEV_GPU_TEMP > 1"), std::string::npos) << created.out;
  auto bad_cli =
      testing::RunTessera({"alerts", "rules", "create", "--url", server_->url(), "--token", acme,
                           "--name", "Bad", "--metric", "NOPE", "--op", ">", "--threshold", "1"});
  EXPECT_NE(bad_cli.exit_code, 0);
  EXPECT_NE(bad_cli.err.find("metric"), std::string::npos) << bad_cli.err;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto listed = testing::RunTessera(
            {"alerts", "list", "--url", server_->url(), "--token", acme, "--state", "firing"});
        return listed.out.find("WarmCli") != std::string::npos &&
               listed.out.find("warm at ") != std::string::npos;
      },
      10s));

  // The operator's node view carries each GPU's history.
  json node = Get("/v1/nodes/" + history["node"].get<std::string>(), kAdminToken).body;
  ASSERT_TRUE(node.contains("gpus")) << Dump(node);
  EXPECT_FALSE(node["gpus"][0]["metrics"].empty()) << Dump(node);
  EXPECT_TRUE(node["gpus"][0]["latest"].contains("gpu_util")) << Dump(node);
  EXPECT_EQ(Get("/v1/nodes/no-such-node", kAdminToken).status, 404);
}

// A GPU that shows a fatal XID leaves service: the instance on it restarts on the other GPU with
// a reason naming the fault, the node shows it unhealthy, the GpuUnhealthy rule fires while it
// lasts (after the XID itself is long gone from the series), and the operator's CLI puts it back.
TEST_F(TelemetryTest, AFatalXidTakesTheGpuOutOfServiceUntilTheOperatorClearsIt) {
  StartServer({"--sim-agents", "--alert-interval", "200ms"});
  const std::string node = H100Node();
  ASSERT_FALSE(node.empty());
  const std::string acme = NewTenant("acme", 8);
  json body = H100(1, "on_demand");
  body["command"] = "sleep 600";
  auto made = Post("/v1/instances", acme, body);
  ASSERT_EQ(made.status, 201) << made.raw;
  const std::string id = made.body.value("id", "");
  ASSERT_EQ(AwaitState(acme, id, "running"), "running");
  const json before = Get("/v1/instances/" + id, acme).body;
  ASSERT_EQ(before.value("node", ""), node) << before.dump();
  const int sick = before["gpus"][0].value("index", -1);

  auto fault = Post("/v1/nodes/" + node + "/faults", kAdminToken,
                    {{"fault", fmt::format("xid:{}:48", sick)}});
  ASSERT_EQ(fault.status, 202) << fault.raw;
  ASSERT_TRUE(WaitFor(
      [&] {
        const json i = Get("/v1/instances/" + id, acme).body;
        return i.value("state", "") == "running" && i.value("restarts", 0) == 1;
      },
      15s))
      << Get("/v1/instances/" + id, acme).raw;
  const json after = Get("/v1/instances/" + id, acme).body;
  EXPECT_EQ(after["gpus"][0].value("index", -1), 1 - sick) << "it restarted on the healthy GPU";
  bool named = false;
  for (const json& h : after["history"]) {
    named =
        named || h.value("reason", "")
                         .find(fmt::format("GPU {} of node {} out of service: XID 48 (GPU_ECC_DBE)",
                                           sick, node)) != std::string::npos;
  }
  EXPECT_TRUE(named) << after.dump();

  const auto gpu_of = [&](const json& nodes) {
    for (const json& n : nodes) {
      if (n.value("id", "") == node) return n["gpus"][static_cast<size_t>(sick)];
    }
    return json();
  };
  const json gpu = gpu_of(Get("/v1/nodes", kAdminToken).body["nodes"]);
  EXPECT_EQ(gpu.value("health", ""), "unhealthy") << gpu.dump();
  EXPECT_EQ(gpu.value("health_reason", ""), "XID 48 (GPU_ECC_DBE)");
  // The GPU's series: tessera_gpu_healthy{gpu="N",...,Hostname="NODE",...} 0.
  const std::string metrics = Metrics();
  std::string series;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(fmt::format("tessera_gpu_healthy{{gpu=\"{}\"", sick), 0) == 0 &&
        line.find("Hostname=\"" + node + "\"") != std::string::npos) {
      series = line;
    }
  }
  ASSERT_FALSE(series.empty()) << metrics;
  EXPECT_EQ(series.substr(series.size() - 2), " 0") << series;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& a : Alerts(kAdminToken, "?state=firing")) {
          if (a["labels"].value("alertname", "") == "GpuUnhealthy" &&
              a["labels"].value("gpu", "") == std::to_string(sick)) {
            return true;
          }
        }
        return false;
      },
      10s))
      << Dump(Alerts(kAdminToken));
  // Its owner sees it: the built-in InstanceInterrupted alert on its instance, in its own list.
  EXPECT_TRUE(WaitFor(
      [&] {
        for (const json& a : Alerts(acme, "?state=firing")) {
          if (a["labels"].value("alertname", "") == "InstanceInterrupted" &&
              a["labels"].value("tessera_instance", "") == id &&
              a["labels"].value("cause", "") == "gpu_unhealthy") {
            return true;
          }
        }
        return false;
      },
      10s))
      << Dump(Alerts(acme));
  // A whole GPU of the node is free only while the sick one counts: new work for it waits.
  auto more = Post("/v1/instances", acme, H100(1, "on_demand"));
  ASSERT_EQ(more.status, 201) << more.raw;
  EXPECT_EQ(more.body.value("state", ""), "pending") << more.raw;

  // The operator clears it with the CLI: healthy again, and the rule resolves.
  auto cli = testing::RunTessera({"nodes", "gpu-health", node, std::to_string(sick), "ok", "--url",
                                  server_->url(), "--token", kAdminToken});
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NE(cli.out.find(": ok"), std::string::npos) << cli.out;
  EXPECT_EQ(gpu_of(Get("/v1/nodes", kAdminToken).body["nodes"]).value("health", ""), "ok");
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const json& a : Alerts(kAdminToken, "?state=firing")) {
          if (a["labels"].value("alertname", "") == "GpuUnhealthy") return false;
        }
        return true;
      },
      10s))
      << Dump(Alerts(kAdminToken));
  // Bad words are refused, naming what is wrong.
  auto bad = Post("/v1/nodes/" + node + "/gpus/x/health", kAdminToken, {{"state", "ok"}});
  EXPECT_EQ(bad.status, 400) << bad.raw;
  bad = Post(fmt::format("/v1/nodes/{}/gpus/{}/health", node, sick), kAdminToken,
             {{"state", "fine"}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("state"), std::string::npos) << bad.raw;
  bad = Post(fmt::format("/v1/nodes/{}/gpus/9/health", node), kAdminToken, {{"state", "ok"}});
  EXPECT_EQ(bad.status, 404) << bad.raw;
  EXPECT_EQ(Post(fmt::format("/v1/nodes/{}/gpus/0/health", node), acme, {{"state", "ok"}}).status,
            403);
}

TEST_F(TelemetryTest, MetricsCarryDcgmSeriesThatPromtoolAccepts) {
  StartServer({"--sim-agents"});
  const std::string acme = NewTenant("acme", 8);
  auto shared = Post("/v1/instances", acme,
                     {{"billing", "on_demand"},
                      {"gpu_model", "L40S-48GB"},
                      {"milli_gpu", 250},
                      {"gpu_memory_mib", 4096},
                      {"vcpus", 2},
                      {"memory_mib", 4096}});
  ASSERT_EQ(shared.status, 201) << shared.raw;
  auto mig = Post("/v1/instances", acme,
                  {{"billing", "on_demand"},
                   {"gpu_model", "A100-40GB"},
                   {"mig_profile", "3g.20gb"},
                   {"vcpus", 2},
                   {"memory_mib", 4096}});
  ASSERT_EQ(mig.status, 201) << mig.raw;
  const std::string shared_id = shared.body.value("id", ""), mig_id = mig.body.value("id", "");
  ASSERT_EQ(AwaitState(acme, shared_id, "running"), "running");
  ASSERT_EQ(AwaitState(acme, mig_id, "running"), "running");
  std::string text;
  ASSERT_TRUE(WaitFor(
      [&] {
        text = Metrics();
        return text.find("GPU_I_PROFILE=\"3g.20gb\"") != std::string::npos &&
               text.find("tessera_instance=\"" + shared_id + "\"") != std::string::npos &&
               text.find("DCGM_FI_PROF_GR_ENGINE_ACTIVE{") != std::string::npos;
      },
      20s))
      << text;
  EXPECT_NE(text.find("fraction=\"0.25\",tenant=\"" + shared.body.value("tenant", "") +
                      "\",tessera_instance=\"" + shared_id + "\""),
            std::string::npos);
  for (const char* name :
       {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_PCIE_TX_BYTES", "DCGM_FI_DEV_PCIE_RX_BYTES", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }
  auto problems = testing::PromtoolProblems(text);
  if (!problems) GTEST_SKIP() << "promtool is not installed (scripts/bootstrap.sh installs it)";
  EXPECT_EQ(*problems, "");
}

// On a fleet-file node (its agent simulated in the server) a workload sees the GPU UUID that its
// series, and so its alerts, carry.
TEST_F(TelemetryTest, OnAFleetFileNodeTheWorkloadSeesTheUuidItsSeriesCarry) {
  StartServer({"--sim-agents"});
  const std::string acme = NewTenant("acme", 8);
  auto made = Post("/v1/instances", acme,
                   {{"billing", "on_demand"},
                    {"instance_type", "gpu.1xh100"},
                    {"command", "echo $CUDA_VISIBLE_DEVICES; exec sleep 60"}});
  ASSERT_EQ(made.status, 201) << made.raw;
  const std::string id = made.body.value("id", "");
  ASSERT_EQ(AwaitState(acme, id, "running"), "running");
  const std::string uuid = Get("/v1/instances/" + id, acme).body["gpus"][0].value("uuid", "");
  ASSERT_EQ(uuid.rfind("GPU-", 0), 0u) << uuid;
  std::string log;
  EXPECT_TRUE(WaitFor(
      [&] {
        log = Call("GET", "/v1/instances/" + id + "/logs", acme).raw;
        return !log.empty();
      },
      10s));
  EXPECT_EQ(log, uuid + "\n");
  std::string text, series;
  ASSERT_TRUE(WaitFor(
      [&] {
        text = Metrics();
        for (std::string_view line : Split(text, '\n')) {
          if (line.rfind("DCGM_FI_DEV_GPU_UTIL{", 0) == 0 &&
              line.find("tessera_instance=\"" + id + "\"") != std::string_view::npos) {
            series = std::string(line);
          }
        }
        return !series.empty();
      },
      20s))
      << text;
  EXPECT_NE(series.find("UUID=\"" + uuid + "\""), std::string::npos) << series;
}

// A real Prometheus scrapes the server with the admin token; the Grafana dashboard for
// dcgm-exporter (id 12239) queries what it stored, unchanged.
TEST_F(TelemetryTest, PrometheusScrapesAndTheDcgmDashboardsQueriesAnswer) {
  if (!Installed("/usr/bin/prometheus")) {
    GTEST_SKIP() << "prometheus is not installed (scripts/bootstrap.sh installs it)";
  }
  StartServer({"--sim-agents"});
  const std::string acme = NewTenant("acme", 8);
  auto inst = Post("/v1/instances", acme, H100(1, "on_demand"));
  ASSERT_EQ(inst.status, 201);
  const std::string id = inst.body.value("id", "");
  const int port = testing::FreeTcpPort();
  const std::string target = server_->url().substr(server_->url().find("://") + 3);
  const std::string config =
      dir_.Write("prometheus.yml", fmt::format("global:\n  scrape_interval: 1s\n"
                                               "scrape_configs:\n  - job_name: tessera\n"
                                               "    authorization:\n      credentials: {}\n"
                                               "    static_configs:\n      - targets: ['{}']\n",
                                               kAdminToken, target));
  testing::ChildProcess prometheus({"/usr/bin/prometheus", "--config.file=" + config,
                                    "--storage.tsdb.path=" + dir_.File("prom-data"),
                                    fmt::format("--web.listen-address=127.0.0.1:{}", port)},
                                   dir_.File("prometheus.log"));
  const std::string api = fmt::format("http://127.0.0.1:{}", port);
  auto query = [&](const std::string& promql) {
    return GetJson(api, "/api/v1/query?query=" + httplib::detail::encode_query_param(promql));
  };
  json temp;
  ASSERT_TRUE(WaitFor(
      [&] {
        temp = query("DCGM_FI_DEV_GPU_TEMP{tessera_instance=\"" + id + "\"}");
        return temp.value("status", "") == "success" && !temp["data"]["result"].empty();
      },
      30s))
      << Dump(temp) << Dump(GetJson(api, "/api/v1/targets"));
  const json& labels = temp["data"]["result"][0]["metric"];
  EXPECT_EQ(labels["instance"], target);
  EXPECT_EQ(labels["job"], "tessera");
  EXPECT_EQ(labels["tenant"], inst.body.value("tenant", ""));
  for (const char* key : {"gpu", "UUID", "device", "modelName", "Hostname", "pci_bus_id"}) {
    EXPECT_TRUE(labels.contains(key)) << key;
  }
  EXPECT_EQ(labels["UUID"].get<std::string>().rfind("GPU-", 0), 0u);

  // The dashboard's template variables and panels (../shared/reference/dcgm-metrics.md).
  const std::string sel = "{instance=~\"" + target + "\", gpu=~\".*\"}";
  for (const std::string& panel :
       {"DCGM_FI_DEV_GPU_TEMP" + sel, "avg(DCGM_FI_DEV_GPU_TEMP" + sel + ")",
        "DCGM_FI_DEV_POWER_USAGE" + sel, "sum(DCGM_FI_DEV_POWER_USAGE" + sel + ")",
        "DCGM_FI_DEV_SM_CLOCK" + sel + " * 1000000", "DCGM_FI_DEV_GPU_UTIL" + sel,
        "DCGM_FI_DEV_FB_USED" + sel, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" + sel}) {
    json r;
    EXPECT_TRUE(WaitFor(
        [&] {
          r = query(panel);
          return r.value("status", "") == "success" && !r["data"]["result"].empty();
        },
        10s))
        << panel << ": " << Dump(r);
  }
  auto values = GetJson(api, "/api/v1/label/gpu/values?match[]=DCGM_FI_DEV_GPU_TEMP");
  EXPECT_GE(values["data"].size(), 2u) << Dump(values);
}

}  // namespace
}  // namespace tessera
