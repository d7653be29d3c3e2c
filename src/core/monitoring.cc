// Monitoring (monitoring.h): alert rules and their alerts, what evaluations send, the GPUs'
// history and the faults' interruptions.
#include "core/monitoring.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "alerts/rule.h"
#include "common/envelope.h"
#include "common/json.h"
#include "core/sealing.h"

namespace tessera::core {

Monitoring::Monitoring(const Clock* clock, Options options)
    : clock_(clock), options_(options), started_at_(clock->Now()), evaluator_(options.alerts) {}

Result<alerts::Rule> Monitoring::CreateRule(const Tenant& caller, alerts::Rule rule,
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

std::vector<alerts::Rule> Monitoring::ListRules(const Tenant& caller) const {
  std::vector<alerts::Rule> out;
  for (const auto& [id, r] : evaluator_.rules()) {
    if (caller.admin || r.owner == caller.id.str()) out.push_back(r);
  }
  return out;
}

Result<alerts::Rule> Monitoring::GetRule(const Tenant& caller, std::string_view id) const {
  const alerts::Rule* r = evaluator_.Find(std::string(id));
  if (!r || (!caller.admin && r->owner != caller.id.str())) {
    return Status::NotFound(fmt::format("alert rule '{}' not found", id));
  }
  return *r;
}

Status Monitoring::DeleteRule(const Tenant& caller, std::string_view id, store::Batch& batch) {
  TESSERA_RETURN_IF_ERROR(GetRule(caller, id).status());
  evaluator_.Remove(std::string(id), clock_->Now());
  rule_keys_.erase(std::string(id));
  batch.deleted_settings.push_back(std::string(kRulePrefix) + std::string(id));
  // The resolved alerts and their notices are stored and sent with the next evaluation.
  last_evaluation_ = Time{};
  return Status::Ok();
}

std::vector<alerts::Alert> Monitoring::ListAlerts(const Tenant& caller) const {
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

Status Monitoring::Restore(const std::vector<std::pair<std::string, std::string>>& rules,
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

Result<std::string> Monitoring::SealRule(const alerts::Rule& rule) {
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

Result<std::string> Monitoring::OpenRule(const std::string& key, const std::string& value,
                                         bool& plain) {
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

bool Monitoring::Due() const {
  // With no rules, only alerts still to resolve or retire (a deleted rule's) need a round.
  if (evaluator_.rules().empty() && evaluator_.alerts().empty()) return false;
  return clock_->Now() - last_evaluation_ >= options_.interval;
}

void Monitoring::Evaluate(const std::vector<telemetry::Target>& targets, store::Batch& batch) {
  const Time now = clock_->Now();
  last_evaluation_ = now;
  const bool settling = now - started_at_ < options_.settle;
  alerts::Evaluation e = evaluator_.Evaluate(now, targets, settling);
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
  ++evaluations_;
}

void Monitoring::NoteInterruption(Interruption i) {
  if (interruptions_.size() == kMaxInterruptions) interruptions_.pop_front();
  interruptions_.push_back(std::move(i));
}

void Monitoring::InterruptionTargets(std::vector<telemetry::Target>& out) const {
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
}

void Monitoring::Sweep() {
  const Time cutoff = clock_->Now() - kInterruptionShown;
  while (!interruptions_.empty() && interruptions_.front().at < cutoff) {
    interruptions_.pop_front();
  }
}

Result<bool> Monitoring::Reseal(const std::string& key_id, std::string& after, size_t limit,
                                ResealStep& step, store::Batch& batch) {
  auto it = after.empty() ? rule_keys_.begin() : rule_keys_.upper_bound(after);
  std::vector<std::string> stale;
  for (; it != rule_keys_.end() && step.examined + stale.size() < limit; ++it) {
    after = it->first;
    if (it->second != key_id) stale.push_back(it->first);
    ++step.examined;
  }
  const bool end = it == rule_keys_.end();
  for (const std::string& id : stale) {
    const alerts::Rule* r = evaluator_.Find(id);
    if (!r) continue;
    TESSERA_ASSIGN_OR_RETURN(std::string stored, SealRule(*r));
    batch.settings.emplace_back(std::string(kRulePrefix) + id, std::move(stored));
    ++step.resealed;
  }
  return end;
}

void Monitoring::CountKeys(std::map<std::string, int64_t>& by_key) const {
  for (const auto& [id, key] : rule_keys_) ++by_key[key];
}

}  // namespace tessera::core
