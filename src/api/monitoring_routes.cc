// Telemetry and alerts: /metrics (Tessera's series and the GPUs' in dcgm-exporter's format),
// per-instance and per-node GPU history, `top`, alert rules and alerts (docs/telemetry.md,
// docs/alerts.md).
#include <fmt/format.h>

#include "alerts/rule.h"
#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "common/json.h"
#include "common/text.h"
#include "telemetry/series.h"

namespace tessera::api {
namespace {

using nlohmann::json;

// Query parameter `window`: "90s", "15m", "1h" or plain seconds, 1 s up to the history kept.
Status WindowParam(const Target& target, Duration& window) {
  const std::string* text = target.Param("window");
  if (!text) return Status::Ok();
  const std::string& w = *text;
  int64_t n = 0;
  size_t i = 0;
  for (; i < w.size() && i < 8 && w[i] >= '0' && w[i] <= '9'; ++i) n = n * 10 + (w[i] - '0');
  const std::string unit = w.substr(i);
  const int64_t scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
  if (i == 0 || scale == 0 || n * scale < 1 || n * scale > 3600) {
    return Status::InvalidArgument(fmt::format(
        "query parameter 'window': '{}' is not a duration from 1s to 1h (e.g. 90s, 15m, 1h)",
        Quote(w.substr(0, 32))));
  }
  window = std::chrono::seconds(n * scale);
  return Status::Ok();
}

json PointsJson(const std::vector<telemetry::Point>& points) {
  json out = json::array();
  for (const telemetry::Point& p : points) {
    out.push_back({{"t", FormatRfc3339(Time(std::chrono::milliseconds(p.t_ms)))},
                   {"gpu_util", p.gpu_util},
                   {"fb_used_mib", p.fb_used_mib},
                   {"power_w", p.power_w},
                   {"temperature_c", p.temperature_c}});
  }
  return out;
}

// A GPU's latest reading: null when its node's report lacks it, {"lost": true} when it stopped
// answering.
json LatestJson(const std::optional<telemetry::HolderReading>& r) {
  if (!r) return nullptr;
  if (r->lost) return {{"lost", true}};
  return {{"gpu_util", r->gpu_util},
          {"fb_used_mib", r->fb_used_mib},
          {"fb_total_mib", r->fb_total_mib},
          {"power_w", r->power_w},
          {"temperature_c", r->temperature_c}};
}

// An instance's GPU: its index, and its MIG profile or share where it has one.
json InstanceGpuJson(const core::GpuReadings& r) {
  json j = {{"index", r.gpu.index}};
  if (!r.gpu.mig_profile.empty()) j["mig_profile"] = r.gpu.mig_profile;
  if (r.gpu.milli_gpu > 0) j["milli_gpu"] = r.gpu.milli_gpu;
  return j;
}

// GET /v1/instances/{id}/metrics.
json InstanceMetricsJson(const core::InstanceReadings& r, Duration window) {
  json gpus = json::array();
  for (const core::GpuReadings& g : r.gpus) {
    json gj = InstanceGpuJson(g);
    gj["uuid"] = g.gpu.uuid;
    gj["model"] = g.gpu.model;
    gj["points"] = PointsJson(g.points);
    gpus.push_back(std::move(gj));
  }
  return {{"id", r.id},
          {"state", core::StateName(r.state)},
          {"node", r.node.empty() ? json(nullptr) : json(r.node)},
          {"window_seconds", std::chrono::duration_cast<std::chrono::seconds>(window).count()},
          {"gpus", std::move(gpus)}};
}

// GET /v1/metrics/instances (tessera instances top); the admin's shows each one's tenant.
json TopJson(const std::vector<core::InstanceReadings>& top, bool admin) {
  json out = json::array();
  for (const core::InstanceReadings& r : top) {
    json gpus = json::array();
    for (const core::GpuReadings& g : r.gpus) {
      json gj = InstanceGpuJson(g);
      gj["latest"] = LatestJson(g.latest);
      gpus.push_back(std::move(gj));
    }
    json j = {{"id", r.id},
              {"name", r.name},
              {"state", core::StateName(r.state)},
              {"node", r.node},
              {"gpus", std::move(gpus)}};
    if (admin) j["tenant"] = r.tenant;
    if (r.sampled_at) j["sampled_at"] = FormatRfc3339(*r.sampled_at);
    out.push_back(std::move(j));
  }
  return {{"instances", std::move(out)}};
}

// Adds a node's GPUs' readings to GET /v1/nodes/{id}'s "gpus".
void AddNodeMetrics(const std::vector<core::GpuReadings>& metrics, json& gpus) {
  for (size_t i = 0; i < gpus.size() && i < metrics.size(); ++i) {
    const core::GpuReadings& m = metrics[i];
    gpus[i]["metrics"] = PointsJson(m.points);
    if (m.sampled) gpus[i]["latest"] = LatestJson(m.latest);
    json mig = json::array();
    for (const core::GpuReadings& slice : m.mig) {
      mig.push_back({{"profile", slice.gpu.mig_profile},
                     {"start", slice.gpu.mig_start},
                     {"points", PointsJson(slice.points)}});
    }
    if (!mig.empty()) gpus[i]["mig_metrics"] = std::move(mig);
  }
}

// One alert as GET /v1/alerts shows it, with what became of its messages.
json AlertView(const alerts::Alert& a, const alerts::Notifier* notifier) {
  json j = alerts::AlertJson(a);
  json deliveries = json::array();
  if (notifier) {
    for (const alerts::DeliveryStatus& d : notifier->Statuses(a.key)) {
      deliveries.push_back(
          {{"receiver", d.receiver},
           {"sent", d.sent},
           {"failed", d.failed},
           {"attempts", d.attempts},
           {"last_sent_at", d.last_sent_at ? json(FormatRfc3339(*d.last_sent_at)) : json(nullptr)},
           {"last_error", d.last_error}});
    }
  }
  j["deliveries"] = std::move(deliveries);
  return j;
}

// Tessera's alerting series for /metrics: alerts by state, evaluations, notifier outcomes.
std::string AlertMetrics(const core::State& s, const alerts::Notifier* notifier) {
  std::map<std::string, int64_t> states = {{"pending", 0}, {"firing", 0}, {"resolved", 0}};
  for (const auto& [key, a] : s.monitoring().evaluator().alerts()) {
    ++states[std::string(alerts::AlertStateName(a.state))];
  }
  std::string out = "# HELP tessera_alerts Alerts by state.\n# TYPE tessera_alerts gauge\n";
  for (const auto& [state, n] : states)
    out += fmt::format("tessera_alerts{{state=\"{}\"}} {}\n", state, n);
  out += fmt::format(
      "# HELP tessera_alert_rules Alert rules.\n# TYPE tessera_alert_rules gauge\n"
      "tessera_alert_rules {}\n"
      "# HELP tessera_alert_evaluations_total Alert rule evaluation rounds.\n"
      "# TYPE tessera_alert_evaluations_total counter\ntessera_alert_evaluations_total {}\n",
      s.monitoring().evaluator().rules().size(), s.monitoring().evaluations());
  if (!notifier) return out;
  const alerts::NotifierCounters c = notifier->counters();
  out +=
      "# HELP tessera_alert_notifications_total Alert messages by receiver kind and outcome "
      "(failed: given up after retries; refused: a tenant's receiver at a private address; "
      "dropped: the queue was full; limited: a tenant's email beyond its hourly rate).\n"
      "# TYPE tessera_alert_notifications_total counter\n";
  for (const char* kind : {"alertmanager", "webhook", "email"}) {
    for (const auto& [result, m] : {std::pair{"sent", &c.sent},
                                    {"failed", &c.failed},
                                    {"refused", &c.refused},
                                    {"dropped", &c.dropped},
                                    {"limited", &c.limited}}) {
      auto it = m->find(kind);
      out += fmt::format("tessera_alert_notifications_total{{receiver=\"{}\",result=\"{}\"}} {}\n",
                         kind, result, it == m->end() ? 0 : it->second);
    }
  }
  out += fmt::format(
      "# HELP tessera_alert_notifications_queued Alert messages waiting to be delivered.\n"
      "# TYPE tessera_alert_notifications_queued gauge\ntessera_alert_notifications_queued {}\n",
      c.queued);
  return out;
}

// A replica's view of leadership (docs/ha.md).
std::string ReplicaMetrics(const core::ReplicaStatus& r) {
  return fmt::format(
      "# HELP tessera_replica_leader Whether this replica leads (1) or follows (0).\n"
      "# TYPE tessera_replica_leader gauge\ntessera_replica_leader {}\n"
      "# HELP tessera_replica_epoch The leadership lease's epoch as this replica knows it.\n"
      "# TYPE tessera_replica_epoch gauge\ntessera_replica_epoch {}\n"
      "# HELP tessera_replica_lag_seconds How long a follower's state has been behind the "
      "leader's commits (0 when current, and on the leader).\n"
      "# TYPE tessera_replica_lag_seconds gauge\ntessera_replica_lag_seconds {:.3f}\n"
      "# HELP tessera_replica_takeovers_total Times this replica took the lease.\n"
      "# TYPE tessera_replica_takeovers_total counter\ntessera_replica_takeovers_total {}\n",
      r.leader ? 1 : 0, r.epoch, r.lag_s, r.takeovers);
}

void AddMetricsRoutes(Api& table) {
  // Metrics name tenants and count their instances, so only the operator may read them
  // (Prometheus sends the admin token with `authorization: {credentials: ...}`). The core
  // gathers; the exposition is rendered on the I/O thread.
  struct Scrape {
    std::string text;
    std::vector<telemetry::Target> targets;
  };
  table.Add("GET", "/metrics", Access::kAdmin, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              Api* a = &api;
              api.core().Submit<std::shared_ptr<Scrape>>(
                  [call, a](core::State& s, store::Batch&) -> Result<std::shared_ptr<Scrape>> {
                    TESSERA_RETURN_IF_ERROR(s.tenants().Authenticate(call->token_hash).status());
                    auto scrape = std::make_shared<Scrape>();
                    scrape->text = a->metrics().Render(s, a->http_stats());
                    scrape->text += AlertMetrics(s, a->core().notifier());
                    if (a->replica()) scrape->text += ReplicaMetrics(a->replica()->view());
                    scrape->targets = s.Targets();
                    return scrape;
                  },
                  [call, a](Result<std::shared_ptr<Scrape>> scrape) {
                    if (!scrape.ok()) return a->ReplyError(*call, scrape.status());
                    call->responder.SendLater([call, a, scrape = std::move(*scrape)] {
                      HttpResponse r;
                      r.content_type = std::string(telemetry::kExpositionContentType);
                      r.body = std::move(scrape->text);
                      telemetry::RenderExposition(scrape->targets, r.body);
                      a->metrics().CountRequest(call->request.method, call->route, 200);
                      return r;
                    });
                  });
            });
  table.Add("GET", "/v1/instances/{id}/metrics?window", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              Duration window = std::chrono::minutes(15);
              Status refusal = WindowParam(call->request.parsed, window);
              const std::string id = call->params[0];
              api.Run<json>(call, refusal,
                            {[id, window](core::State& s, store::Batch&,
                                          const core::Tenant& caller) -> Result<json> {
                               TESSERA_ASSIGN_OR_RETURN(
                                   core::InstanceReadings r,
                                   s.readings().OfInstance(caller, id, window));
                               return InstanceMetricsJson(r, window);
                             },
                             200, Passthrough, nullptr});
            });
  table.Add("GET", "/v1/metrics/instances", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<json>(
                  call, Status::Ok(),
                  {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     return TopJson(s.readings().Top(caller), caller.admin);
                   },
                   200, Passthrough, nullptr});
            });
  table.Add(
      "GET", "/v1/nodes/{id}?window", Access::kAdmin, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        Duration window = std::chrono::minutes(15);
        Status refusal = WindowParam(call->request.parsed, window);
        const std::string node = call->params[0];
        api.Run<json>(
            call, refusal,
            {[node, window](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
               auto index = s.fleet().Find(node);
               if (!index.ok()) {
                 json agent = AgentJson(s, node);
                 if (agent.is_null()) {
                   return Status::NotFound(fmt::format("node '{}' not found", Quote(node)));
                 }
                 json waiting = {{"id", node}, {"state", "waiting_for_agent"}};
                 AddAgentFields(waiting, std::move(agent));
                 return waiting;
               }
               json j = NodesJson(s.fleet(), index->value, 1).at(0);
               TESSERA_ASSIGN_OR_RETURN(auto metrics, s.readings().OfNode(node, window));
               AddNodeMetrics(metrics, j["gpus"]);
               json agent = AgentJson(s, node);
               if (!agent.is_null()) agent.erase("telemetry");  // Shown per GPU above.
               AddAgentFields(j, std::move(agent));
               j["window_seconds"] =
                   std::chrono::duration_cast<std::chrono::seconds>(window).count();
               return j;
             },
             200, Passthrough, nullptr});
      });
}

void AddAlertRoutes(Api& table) {
  table.Add("POST", "/v1/alert-rules", Access::kAnyToken, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              // A tenant's receivers are checked against private addresses now when they are
              // numeric, and at every send after DNS.
              const bool tenant = !call->principal.admin;
              Result<alerts::Rule> rule =
                  call->body_status.ok()
                      ? alerts::ParseRule(call->body, tenant, api.allow_private_receivers())
                      : Result<alerts::Rule>(call->body_status);
              api.Run<json>(call, rule.status(),
                            {[rule](core::State& s, store::Batch& b,
                                    const core::Tenant& caller) -> Result<json> {
                               TESSERA_ASSIGN_OR_RETURN(
                                   alerts::Rule r, s.monitoring().CreateRule(caller, *rule, b));
                               return alerts::RuleJson(r);
                             },
                             201, Passthrough, [](const json& j) { return j.value("id", ""); }});
            });
  table.Add("GET", "/v1/alert-rules", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<json>(
                  call, Status::Ok(),
                  {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     json rules = json::array();
                     for (const alerts::Rule& r : s.monitoring().ListRules(caller)) {
                       rules.push_back(alerts::RuleJson(r));
                     }
                     return json{{"rules", std::move(rules)}};
                   },
                   200, Passthrough, nullptr});
            });
  table.Add("GET", "/v1/alert-rules/{id}", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              const std::string id = call->params[0];
              api.Run<json>(
                  call, Status::Ok(),
                  {[id](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     TESSERA_ASSIGN_OR_RETURN(alerts::Rule r, s.monitoring().GetRule(caller, id));
                     return alerts::RuleJson(r);
                   },
                   200, Passthrough, nullptr});
            });
  table.Add("DELETE", "/v1/alert-rules/{id}", Access::kAnyToken, BodyKind::kNone, true,
            [](Api& api, std::shared_ptr<Call> call) {
              const std::string id = call->params[0];
              api.Run<json>(call, Status::Ok(),
                            {[id](core::State& s, store::Batch& b,
                                  const core::Tenant& caller) -> Result<json> {
                               TESSERA_RETURN_IF_ERROR(s.monitoring().DeleteRule(caller, id, b));
                               return json{{"id", id}, {"deleted", true}};
                             },
                             200, Passthrough, [](const json& j) { return j.value("id", ""); }});
            });
  table.Add("GET", "/v1/alerts?state", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              std::optional<std::string> state;
              Status refusal;
              if (const std::string* text = call->request.parsed.Param("state")) {
                state = *text;
                if (*state != "pending" && *state != "firing" && *state != "resolved") {
                  refusal = Status::InvalidArgument(fmt::format(
                      "query parameter 'state': '{}' is not pending, firing or resolved",
                      Quote(text->substr(0, 32))));
                }
              }
              const alerts::Notifier* notifier = api.core().notifier();
              api.Run<json>(call, refusal,
                            {[state, notifier](core::State& s, store::Batch&,
                                               const core::Tenant& caller) -> Result<json> {
                               json out = json::array();
                               for (const alerts::Alert& a : s.monitoring().ListAlerts(caller)) {
                                 if (state && alerts::AlertStateName(a.state) != *state) continue;
                                 out.push_back(AlertView(a, notifier));
                               }
                               return json{{"alerts", std::move(out)}};
                             },
                             200, Passthrough, nullptr});
            });
}

}  // namespace

void AddMonitoringRoutes(Api& table) {
  AddMetricsRoutes(table);
  AddAlertRoutes(table);
}

}  // namespace tessera::api
