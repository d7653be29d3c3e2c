// State's telemetry and alerts: the series of the nodes agents serve, per-GPU history for
// tenants and operators, and the alert rules with their evaluation.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/envelope.h"
#include "common/json.h"
#include "core/sealing.h"
#include "core/state.h"

namespace tessera::core {
namespace {

using nlohmann::json;

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

// The latest readings of one GPU (or MIG instance) of a report.
json LatestJson(const telemetry::Telemetry& t, const GpuRef& g) {
  const auto r = telemetry::ReadHolder(t, g.index, g.mig_profile, g.mig_start);
  if (!r) return nullptr;
  if (r->lost) return {{"lost", true}};
  return {{"gpu_util", r->gpu_util},
          {"fb_used_mib", r->fb_used_mib},
          {"fb_total_mib", r->fb_total_mib},
          {"power_w", r->power_w},
          {"temperature_c", r->temperature_c}};
}

}  // namespace

std::vector<telemetry::Target> State::Targets() const {
  std::vector<telemetry::Target> out;
  std::vector<telemetry::Holder> holders;
  for (const auto& [name, node] : agents_.nodes()) {
    if (!node.registered() || !node.info) continue;
    holders.clear();
    for (const std::string& id : node.assigned) {
      const Instance* inst = instances_.Find(id);
      if (!inst || inst->node != name) continue;
      for (const GpuRef& g : inst->gpus) {
        holders.push_back(telemetry::Holder{g.index, inst->id.str(), inst->tenant.str(),
                                            g.milli_gpu > 0 ? g.milli_gpu : 1000, g.mig_profile,
                                            g.mig_start, -1});
      }
    }
    telemetry::NodeTargets(*node.info, node.telemetry.get(), holders, !node.lost, out);
  }
  // One series per instance a fault moved lately: its owner's to see and alert on.
  for (const Interruption& i : interruptions_) {
    telemetry::Target t;
    t.labels = {{"Hostname", i.node}, {"cause", i.cause}};
    if (!i.fault.empty()) t.labels.push_back({"fault", i.fault});
    if (i.gpu >= 0) t.labels.push_back({"gpu", std::to_string(i.gpu)});
    t.labels.push_back({"tenant", i.tenant});
    t.labels.push_back({"tessera_instance", i.instance});
    t.tenant = i.tenant;
    t.set(telemetry::Field::kInstanceInterrupted, 1);
    out.push_back(std::move(t));
  }
  // One series per budget: the tenant's spend this month in percent of it.
  for (const auto& [tenant, budget] : budgets_) {
    telemetry::Target t;
    t.labels = {{"tenant", tenant}};
    t.tenant = tenant;
    t.set(telemetry::Field::kBudgetUsedPercent,
          static_cast<double>(UseOf(tenant, budget).basis_points) / 100);
    out.push_back(std::move(t));
  }
  return out;
}

Result<json> State::InstanceMetrics(const Tenant& caller, std::string_view id,
                                    Duration window) const {
  const Instance* inst = instances_.Find(id);
  if (!inst || !Visible(caller, *inst)) {
    return Status::NotFound(fmt::format("instance '{}' not found", id));
  }
  const Time now = clock_->Now();
  json gpus = json::array();
  for (const GpuRef& g : inst->gpus) {
    json gj = {{"index", g.index}, {"uuid", g.uuid}, {"model", g.model}};
    if (!g.mig_profile.empty()) gj["mig_profile"] = g.mig_profile;
    if (g.milli_gpu > 0) gj["milli_gpu"] = g.milli_gpu;
    gj["points"] = PointsJson(history_.Points(
        inst->node, g.index, g.mig_profile.empty() ? -1 : g.mig_start, now - window));
    gpus.push_back(std::move(gj));
  }
  return json{{"id", inst->id.str()},
              {"state", StateName(inst->state)},
              {"node", inst->node.empty() ? json(nullptr) : json(inst->node)},
              {"window_seconds", std::chrono::duration_cast<std::chrono::seconds>(window).count()},
              {"gpus", std::move(gpus)}};
}

Result<json> State::NodeMetrics(const std::string& node, Duration window) const {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex index, fleet_->Find(node));
  const fleet::Node& n = fleet_->node(index);
  const Time since = clock_->Now() - window;
  json gpus = json::array();
  auto agent = agents_.nodes().find(node);
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    const int gpu = static_cast<int>(i);
    json gj = {{"index", gpu}, {"points", PointsJson(history_.Points(node, gpu, -1, since))}};
    if (agent != agents_.nodes().end() && agent->second.telemetry) {
      GpuRef whole;
      whole.index = gpu;
      gj["latest"] = LatestJson(*agent->second.telemetry, whole);
    }
    json mig = json::array();
    for (const fleet::MigInstance& m : n.gpus[i].mig_instances) {
      mig.push_back({{"profile", m.profile->name},
                     {"start", m.start},
                     {"points", PointsJson(history_.Points(node, gpu, m.start, since))}});
    }
    if (!mig.empty()) gj["mig_instances"] = std::move(mig);
    gpus.push_back(std::move(gj));
  }
  return gpus;
}

json State::TopInstances(const Tenant& caller) const {
  json out = json::array();
  instances_.ForEach([&](const Instance& inst) {
    if (!Visible(caller, inst) || inst.gpus.empty() || inst.node.empty()) return;
    if (inst.state != InstanceState::kRunning && inst.state != InstanceState::kPreempting &&
        inst.state != InstanceState::kScheduled && inst.state != InstanceState::kStopping) {
      return;
    }
    auto node = agents_.nodes().find(inst.node);
    const telemetry::Telemetry* t =
        node != agents_.nodes().end() ? node->second.telemetry.get() : nullptr;
    json gpus = json::array();
    for (const GpuRef& g : inst.gpus) {
      json gj = {{"index", g.index}, {"latest", t ? LatestJson(*t, g) : json(nullptr)}};
      if (!g.mig_profile.empty()) gj["mig_profile"] = g.mig_profile;
      if (g.milli_gpu > 0) gj["milli_gpu"] = g.milli_gpu;
      gpus.push_back(std::move(gj));
    }
    json j = {{"id", inst.id.str()},
              {"name", inst.name},
              {"state", StateName(inst.state)},
              {"node", inst.node},
              {"gpus", std::move(gpus)}};
    if (caller.admin) j["tenant"] = inst.tenant.str();
    if (node != agents_.nodes().end() && node->second.telemetry) {
      j["sampled_at"] = FormatRfc3339(node->second.telemetry_at);
    }
    out.push_back(std::move(j));
  });
  return json{{"instances", std::move(out)}};
}

Result<alerts::Rule> State::CreateAlertRule(const Tenant& caller, alerts::Rule rule,
                                            store::Batch& batch) {
  rule.owner = caller.admin ? "" : caller.id.str();
  // Tenants' rules and the operator's are capped apart: tenants cannot lock the operator out.
  const size_t operators = evaluator_.rules_of("");
  if (caller.admin && operators >= alerts::kMaxOperatorRules) {
    return Status::ResourceExhausted(
        fmt::format("too many alert rules: the operator has at most {}; delete one first",
                    alerts::kMaxOperatorRules));
  }
  if (!caller.admin && (evaluator_.rules().size() - operators >= alerts::kMaxTenantRules ||
                        evaluator_.rules_of(rule.owner) >= alerts::kMaxRulesPerTenant)) {
    return Status::ResourceExhausted(fmt::format(
        "too many alert rules: at most {} a tenant and {} for all tenants together; delete one "
        "first",
        alerts::kMaxRulesPerTenant, alerts::kMaxTenantRules));
  }
  rule.id = fmt::format("rule-{:06d}", next_rule_);
  rule.created_at = clock_->Now();
  TESSERA_ASSIGN_OR_RETURN(std::string stored, SealRule(rule));
  ++next_rule_;
  batch.settings.emplace_back(std::string(kRulePrefix) + rule.id, std::move(stored));
  batch.settings.emplace_back(std::string(kNextRule), std::to_string(next_rule_));
  evaluator_.Put(rule);
  return rule;
}

std::vector<alerts::Rule> State::ListAlertRules(const Tenant& caller) const {
  std::vector<alerts::Rule> out;
  for (const auto& [id, r] : evaluator_.rules()) {
    if (caller.admin || r.owner == caller.id.str()) out.push_back(r);
  }
  return out;
}

Result<alerts::Rule> State::GetAlertRule(const Tenant& caller, std::string_view id) const {
  const alerts::Rule* r = evaluator_.Find(std::string(id));
  if (!r || (!caller.admin && r->owner != caller.id.str())) {
    return Status::NotFound(fmt::format("alert rule '{}' not found", id));
  }
  return *r;
}

Status State::DeleteAlertRule(const Tenant& caller, std::string_view id, store::Batch& batch) {
  TESSERA_RETURN_IF_ERROR(GetAlertRule(caller, id).status());
  evaluator_.Remove(std::string(id), clock_->Now());
  rule_keys_.erase(std::string(id));
  batch.deleted_settings.push_back(std::string(kRulePrefix) + std::string(id));
  // The resolved alerts and their notices are stored and sent with the next evaluation.
  last_alert_eval_ = Time{};
  return Status::Ok();
}

std::vector<alerts::Alert> State::ListAlerts(const Tenant& caller) const {
  // A tenant sees its own rules' alerts, and the built-in rules' on its own series (its instance
  // interrupted, its GPU hot, its budget spent): never an operator's own rule's.
  auto sees = [&](const alerts::Alert& a) {
    if (caller.admin || a.owner == caller.id.str()) return true;
    if (!a.owner.empty() || a.rule_id.rfind("builtin-", 0) != 0) return false;
    auto tenant = a.labels.find("tenant");
    return tenant != a.labels.end() && tenant->second == caller.id.str();
  };
  std::vector<alerts::Alert> out;
  for (const auto& [key, a] : evaluator_.alerts()) {
    if (sees(a)) out.push_back(a);
  }
  std::stable_sort(out.begin(), out.end(), [](const alerts::Alert& a, const alerts::Alert& b) {
    return static_cast<int>(a.state == alerts::AlertState::kFiring ? 0 : 1) <
           static_cast<int>(b.state == alerts::AlertState::kFiring ? 0 : 1);
  });
  return out;
}

Status State::RestoreAlerts(const std::vector<std::pair<std::string, std::string>>& rules,
                            const std::vector<std::pair<std::string, std::string>>& alerts,
                            const std::vector<std::pair<std::string, std::string>>& meta,
                            store::Batch& batch) {
  // Each built-in is added once per store, by the mark of the release that brought it: a store
  // seeded before a later one existed gets it on its first start since, and an operator who
  // deleted one keeps it deleted.
  auto seed_key = [](const alerts::Rule& r) {
    switch (r.metric) {
      case telemetry::Field::kBudgetUsedPercent:
        return kBudgetRulesSeeded;
      case telemetry::Field::kInstanceInterrupted:
        return kInterruptedRuleSeeded;
      default:
        return kBuiltinSeeded;
    }
  };
  std::set<std::string_view> seeded;
  for (const auto& [key, value] : meta) {
    for (std::string_view mark : {kBuiltinSeeded, kBudgetRulesSeeded, kInterruptedRuleSeeded}) {
      if (key == mark) seeded.insert(mark);
    }
    if (key == kNextRule) next_rule_ = std::max<int64_t>(next_rule_, std::atoll(value.c_str()));
  }
  for (const auto& [key, value] : rules) {
    bool plain = false;
    TESSERA_ASSIGN_OR_RETURN(std::string opened, OpenRule(key, value, plain));
    TESSERA_ASSIGN_OR_RETURN(alerts::Rule r, alerts::RuleFromStored(key, opened));
    if (plain && options_.sealer) {
      // A webhook URL stored in the clear before envelope encryption: sealed now.
      TESSERA_ASSIGN_OR_RETURN(std::string sealed, SealRule(r));
      batch.settings.emplace_back(key, std::move(sealed));
    }
    int64_t n = 0;
    if (std::sscanf(r.id.c_str(), "rule-%ld", &n) == 1) next_rule_ = std::max(next_rule_, n + 1);
    evaluator_.Put(std::move(r));
  }
  for (const auto& [key, value] : alerts) {
    TESSERA_ASSIGN_OR_RETURN(alerts::Alert a, alerts::AlertFromStored(key, value));
    if (!evaluator_.Find(a.rule_id)) {
      batch.deleted_settings.push_back(key);  // Its rule is gone.
      continue;
    }
    evaluator_.Restore(std::move(a));
  }
  for (alerts::Rule& r : alerts::BuiltinRules(clock_->Now())) {
    if (seeded.contains(seed_key(r))) continue;
    TESSERA_ASSIGN_OR_RETURN(std::string stored, SealRule(r));  // Built-ins have no webhook.
    batch.settings.emplace_back(std::string(kRulePrefix) + r.id, std::move(stored));
    evaluator_.Put(std::move(r));
  }
  for (std::string_view mark : {kBuiltinSeeded, kBudgetRulesSeeded, kInterruptedRuleSeeded}) {
    if (!seeded.contains(mark)) batch.settings.emplace_back(std::string(mark), "1");
  }
  return Status::Ok();
}

namespace {
std::string WebhookContext(const std::string& rule, size_t i) {
  return fmt::format("alert_rule/{}/notify/{}", rule, i);
}
}  // namespace

Result<std::string> State::SealRule(const alerts::Rule& rule) {
  nlohmann::json j = alerts::RuleJson(rule);
  rule_keys_.erase(rule.id);
  for (size_t i = 0; i < j["notify"].size(); ++i) {
    nlohmann::json& n = j["notify"][i];
    if (!n.contains("webhook")) continue;
    TESSERA_ASSIGN_OR_RETURN(
        std::string sealed,
        SealValue(options_.sealer, n["webhook"].get<std::string>(), WebhookContext(rule.id, i),
                  fmt::format("notify[{}].webhook", i)));
    if (auto key = SealedKeyId(sealed); key.ok()) rule_keys_[rule.id] = *key;
    n["webhook"] = {{"sealed", std::move(sealed)}};
  }
  return DumpJson(j);
}

Result<std::string> State::OpenRule(const std::string& key, const std::string& value, bool& plain) {
  auto j = ParseJson(value, key);
  if (!j.ok() || !j->is_object() || !j->contains("notify") || !(*j)["notify"].is_array()) {
    return value;  // RuleFromStored says what is wrong with it.
  }
  const std::string id = j->value("id", "");
  for (size_t i = 0; i < (*j)["notify"].size(); ++i) {
    nlohmann::json& n = (*j)["notify"][i];
    if (!n.is_object() || !n.contains("webhook")) continue;
    if (n["webhook"].is_string()) {
      plain = true;
      continue;
    }
    const std::string sealed =
        n["webhook"].is_object() ? n["webhook"].value("sealed", "") : std::string();
    TESSERA_ASSIGN_OR_RETURN(std::string opened,
                             OpenValue(options_.sealer, sealed, WebhookContext(id, i),
                                       fmt::format("{}: notify[{}].webhook", key, i)));
    if (auto k = SealedKeyId(sealed); k.ok()) rule_keys_[id] = *k;
    n["webhook"] = std::move(opened);
  }
  return DumpJson(*j);
}

void State::EvaluateAlerts(store::Batch& batch) {
  const Time now = clock_->Now();
  // With no rules, only alerts still to resolve or retire (a deleted rule's) need a round.
  if (evaluator_.rules().empty() && evaluator_.alerts().empty()) return;
  if (now - last_alert_eval_ < options_.alert_interval) return;
  last_alert_eval_ = now;
  // After a start, a node's series are missing until its agent reports again (within its
  // lease): their alerts must not resolve for that.
  const bool settling = now - started_at_ < options_.node_timeout;
  alerts::Evaluation e = evaluator_.Evaluate(now, Targets(), settling);
  for (const alerts::Alert* a : e.changed) {
    batch.settings.emplace_back(std::string(kAlertPrefix) + a->key,
                                DumpJson(alerts::AlertJson(*a)));
    if (a->state != alerts::AlertState::kPending) {
      spdlog::info("alert {} {}: {}", a->labels.count("alertname") ? a->labels.at("alertname") : "",
                   alerts::AlertStateName(a->state), a->key);
    }
  }
  for (const std::string& key : e.removed) {
    batch.deleted_settings.push_back(std::string(kAlertPrefix) + key);
  }
  for (alerts::Delivery& d : e.deliveries) outbox_.deliveries.push_back(std::move(d));
  if (e.alertmanager) outbox_.alertmanager.push_back(std::move(*e.alertmanager));
  ++counters_.alert_evaluations;
}

}  // namespace tessera::core
