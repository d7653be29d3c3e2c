#include "alerts/evaluator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include "common/json.h"

namespace tessera::alerts {
namespace {

using nlohmann::json;
using telemetry::Target;

uint64_t Fnv(uint64_t h, std::string_view s) {
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h * 0x100000001B3ULL;  // A separator, so ("ab","c") and ("a","bc") differ.
}

// A series' identity: its non-empty labels.
uint64_t SeriesHash(const Target& t) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (const telemetry::Label& l : t.labels) {
    if (l.value.empty()) continue;
    h = Fnv(Fnv(h, l.name), l.value);
  }
  return h;
}

// An alert's identity: its rule and its series (a 64-bit fingerprint, as Prometheus's).
uint64_t AlertHash(uint64_t rule_hash, uint64_t series_hash) {
  uint64_t h =
      rule_hash ^ (series_hash + 0x9E3779B97F4A7C15ULL + (rule_hash << 6) + (rule_hash >> 2));
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  return h;
}

uint64_t ParseHex(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 16); }

bool Matches(const Rule& rule, const Target& t) {
  for (const auto& [name, value] : rule.matchers) {
    const std::string* v = t.label(name);
    if (!v || *v != value) return false;
  }
  return true;
}

std::optional<Time> OptionalTime(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_string()) return std::nullopt;
  auto t = ParseRfc3339(j[key].get<std::string>());
  return t.ok() ? std::optional<Time>(*t) : std::nullopt;
}

json TimeOrNull(const std::optional<Time>& t) {
  return t ? json(FormatRfc3339(*t)) : json(nullptr);
}

}  // namespace

std::string_view AlertStateName(AlertState s) {
  switch (s) {
    case AlertState::kPending:
      return "pending";
    case AlertState::kFiring:
      return "firing";
    case AlertState::kResolved:
      return "resolved";
  }
  return "?";
}

json AlertJson(const Alert& a) {
  return {{"key", a.key},
          {"rule_id", a.rule_id},
          {"owner", a.owner.empty() ? json(nullptr) : json(a.owner)},
          {"fingerprint", a.fingerprint},
          {"series", fmt::format("{:016x}", a.series)},
          {"state", AlertStateName(a.state)},
          {"labels", a.labels},
          {"annotations", a.annotations},
          {"value", a.value},
          {"active_at", FormatRfc3339(a.active_at)},
          {"last_true_at", FormatRfc3339(a.last_true_at)},
          {"fired_at", TimeOrNull(a.fired_at)},
          {"resolved_at", TimeOrNull(a.resolved_at)},
          {"notified_at", TimeOrNull(a.notified_at)}};
}

Result<Alert> AlertFromStored(const std::string& key, const std::string& value) {
  auto j = ParseJson(value, key);
  auto bad = [&](std::string_view what) {
    return Status::DataLoss(fmt::format("stored alert {}: {}", key, what));
  };
  if (!j.ok() || !j->is_object()) return bad("not a JSON object");
  Alert a;
  try {
    a.key = j->at("key").get<std::string>();
    a.rule_id = j->at("rule_id").get<std::string>();
    if ((*j)["owner"].is_string()) a.owner = (*j)["owner"].get<std::string>();
    a.fingerprint = j->at("fingerprint").get<std::string>();
    a.series = ParseHex(j->value("series", "0"));
    const std::string state = j->at("state").get<std::string>();
    a.state = state == "firing"     ? AlertState::kFiring
              : state == "resolved" ? AlertState::kResolved
                                    : AlertState::kPending;
    a.labels = j->at("labels").get<std::map<std::string, std::string>>();
    a.annotations = j->at("annotations").get<std::map<std::string, std::string>>();
    a.value = j->at("value").get<double>();
  } catch (const json::exception& e) {
    return bad(e.what());
  }
  auto active = OptionalTime(*j, "active_at");
  auto last = OptionalTime(*j, "last_true_at");
  if (!active || !last) return bad("no active_at or last_true_at");
  a.active_at = *active;
  a.last_true_at = *last;
  a.fired_at = OptionalTime(*j, "fired_at");
  a.resolved_at = OptionalTime(*j, "resolved_at");
  a.notified_at = OptionalTime(*j, "notified_at");
  return a;
}

void Evaluator::Put(Rule rule) {
  std::string id = rule.id;
  rules_[id] = std::move(rule);
}

bool Evaluator::Remove(const std::string& id, Time now) {
  auto rule = rules_.find(id);
  if (rule == rules_.end()) return false;
  for (auto it = alerts_.begin(); it != alerts_.end();) {
    Alert& a = it->second;
    if (a.rule_id != id) {
      ++it;
      continue;
    }
    if (a.state == AlertState::kFiring) {
      a.state = AlertState::kResolved;
      a.resolved_at = now;
      Notify(rule->second, a, now, pending_);
      touched_.push_back(a.key);
      ++it;
    } else if (a.state == AlertState::kPending) {
      dropped_.push_back(a.key);
      index_.Erase(ParseHex(a.fingerprint));
      it = alerts_.erase(it);
    } else {
      ++it;
    }
  }
  rules_.erase(rule);
  return true;
}

const Rule* Evaluator::Find(const std::string& id) const {
  auto it = rules_.find(id);
  return it == rules_.end() ? nullptr : &it->second;
}

size_t Evaluator::rules_of(const std::string& owner) const {
  size_t n = 0;
  for (const auto& [id, r] : rules_) n += r.owner == owner ? 1 : 0;
  return n;
}

void Evaluator::Restore(Alert alert) {
  std::string key = alert.key;
  const uint64_t id = ParseHex(alert.fingerprint);
  Alert& a = alerts_[key] = std::move(alert);
  index_.Put(id, &a);
}

AlertMessage Evaluator::Message(const Alert& a) const {
  AlertMessage m;
  m.firing = a.state != AlertState::kResolved;
  m.labels = a.labels;
  m.annotations = a.annotations;
  m.starts_at = a.fired_at.value_or(a.active_at);
  m.ends_at = a.resolved_at;
  m.generator_url = options_.external_url + "/v1/alert-rules/" + a.rule_id;
  m.fingerprint = a.fingerprint;
  return m;
}

void Evaluator::Notify(const Rule& rule, Alert& a, Time now, std::vector<Delivery>& out) {
  if (a.state == AlertState::kFiring) a.notified_at = now;
  if (rule.operator_owned()) operator_changed_ = true;
  if (rule.notify.empty()) return;
  const AlertMessage m = Message(a);
  for (const Receiver& r : rule.notify) out.push_back(Delivery{a.key, r, m, rule.owner});
}

void Evaluator::Hold(const Rule& rule, uint64_t rule_hash, const Target& t, uint64_t series_hash,
                     double v, Time now, Evaluation& out) {
  const uint64_t id = AlertHash(rule_hash, series_hash) | 1;  // Never 0: AlertIndex's empty key.
  AlertIndex::Slot* slot = index_.Find(id);
  Alert* held = slot ? slot->alert : nullptr;
  if (!held || held->state == AlertState::kResolved) {
    Alert a;
    a.fingerprint = fmt::format("{:016x}", id);
    a.key = rule.id + "/" + a.fingerprint;
    a.rule_id = rule.id;
    a.owner = rule.owner;
    a.series = series_hash;
    for (const telemetry::Label& l : t.labels) {
      if (!l.value.empty()) a.labels[l.name] = l.value;
    }
    a.labels["alertname"] = rule.name;
    a.labels["severity"] = rule.severity;
    a.active_at = now;
    std::string key = a.key;
    held = &(alerts_[key] = std::move(a));
    slot = &index_.Put(id, held);
    out.changed.push_back(held);
  }
  slot->seen = round_;
  Alert& a = *held;
  a.value = v;
  a.last_true_at = now;
  const auto since = now - a.active_at;
  const bool fires =
      a.state == AlertState::kPending && since >= std::chrono::seconds(rule.for_seconds);
  if (fires) {
    a.state = AlertState::kFiring;
    a.fired_at = now;
  }
  if (a.state != AlertState::kFiring) return;
  // As Prometheus does, a firing alert's annotations say its value now, not when it fired (a
  // budget's percent goes on growing). In memory only: the value is not worth a write a round.
  for (const auto& [k, text] : rule.annotations) {
    a.annotations[k] = ExpandTemplate(text, a.labels, v);
  }
  // Notified as it fires, and again every repeat interval.
  if (fires || !a.notified_at ||
      now - *a.notified_at >= std::chrono::seconds(rule.repeat_interval_seconds)) {
    Notify(rule, a, now, out.deliveries);
    if (out.changed.empty() || out.changed.back() != &a) out.changed.push_back(&a);
  }
}

bool Evaluator::Lapse(Alert& a, Time now, Evaluation& out) {
  const Rule* rule = Find(a.rule_id);
  switch (a.state) {
    case AlertState::kPending:
      out.removed.push_back(a.key);
      return true;
    case AlertState::kFiring: {
      if (!rule) return false;
      if (now - a.last_true_at < std::chrono::seconds(rule->keep_firing_for_seconds)) {
        if (now - a.notified_at.value_or(Time{}) >=
            std::chrono::seconds(rule->repeat_interval_seconds)) {
          Notify(*rule, a, now, out.deliveries);
          out.changed.push_back(&a);
        }
        return false;
      }
      a.state = AlertState::kResolved;
      a.resolved_at = now;
      Notify(*rule, a, now, out.deliveries);
      out.changed.push_back(&a);
      return false;
    }
    case AlertState::kResolved:
      if (now - a.resolved_at.value_or(now) < kResolvedRetention) return false;
      out.removed.push_back(a.key);
      return true;
  }
  return false;
}

Evaluation Evaluator::Evaluate(Time now, const std::vector<Target>& targets, bool settling) {
  ++round_;
  Evaluation out;
  out.deliveries = std::move(pending_);
  pending_.clear();
  out.removed = std::move(dropped_);
  dropped_.clear();
  for (const std::string& key : touched_) {
    auto it = alerts_.find(key);
    if (it != alerts_.end()) out.changed.push_back(&it->second);
  }
  touched_.clear();

  // Candidates: a tenant's targets, or those carrying a matched label value.
  std::unordered_map<std::string_view, std::vector<uint32_t>> by_tenant;
  std::unordered_map<std::string_view, std::unordered_map<std::string_view, std::vector<uint32_t>>>
      by_label;
  for (uint32_t i = 0; i < targets.size(); ++i) {
    if (!targets[i].tenant.empty()) by_tenant[targets[i].tenant].push_back(i);
  }
  auto labelled = [&](const std::string& name) -> auto& {
    auto [it, fresh] = by_label.try_emplace(name);
    if (fresh) {
      for (uint32_t i = 0; i < targets.size(); ++i) {
        if (const std::string* v = targets[i].label(name)) it->second[*v].push_back(i);
      }
    }
    return it->second;
  };
  static const std::vector<uint32_t> kNone;
  std::vector<uint64_t> series(targets.size(), 0);  // Series hashes, computed when first needed.
  for (const auto& entry : rules_) {
    const Rule& rule = entry.second;  // Not a structured binding: the lambda below captures it.
    const size_t f = static_cast<size_t>(rule.metric);
    const uint64_t rule_hash = Fnv(0xCBF29CE484222325ULL, rule.id);
    auto check = [&](uint32_t i) {
      const Target& t = targets[i];
      const double v = t.values[f];
      if (std::isnan(v) || !Holds(rule.op, v, rule.threshold)) return;
      if (!rule.operator_owned() && t.tenant != rule.owner) return;
      if (!Matches(rule, t)) return;
      if (series[i] == 0) series[i] = SeriesHash(t) | 1;
      Hold(rule, rule_hash, t, series[i], v, now, out);
    };
    if (!rule.operator_owned()) {
      auto it = by_tenant.find(rule.owner);
      for (uint32_t i : it == by_tenant.end() ? kNone : it->second) check(i);
    } else if (!rule.matchers.empty()) {
      const auto& [name, value] = *rule.matchers.begin();
      auto& index = labelled(name);
      auto it = index.find(value);
      for (uint32_t i : it == index.end() ? kNone : it->second) check(i);
    } else {
      for (uint32_t i = 0; i < targets.size(); ++i) check(i);
    }
  }
  // What did not hold this round lapses (unless its series is not back yet after a start); what
  // lapsed for good is dropped (`changed` holds no pointer to it: it was not changed).
  std::unordered_set<uint64_t> present;
  if (settling) {
    // A series is back once its node reported readings again; listed without values, it is not.
    for (uint32_t i = 0; i < targets.size(); ++i) {
      const auto& v = targets[i].values;
      if (std::all_of(v.begin(), v.end(), [](double x) { return std::isnan(x); })) continue;
      present.insert(series[i] != 0 ? series[i] : SeriesHash(targets[i]) | 1);
    }
  }
  std::vector<uint64_t> dropped;
  for (AlertIndex::Slot& slot : index_.slots()) {
    if (slot.key == 0 || slot.seen == round_) continue;
    Alert& a = *slot.alert;
    if ((!settling || present.count(a.series)) && Lapse(a, now, out)) dropped.push_back(slot.key);
  }
  for (uint64_t key : dropped) {
    AlertIndex::Slot* slot = index_.Find(key);
    const std::string name = slot->alert->key;
    index_.Erase(key);
    alerts_.erase(name);
  }

  if (options_.alertmanager && (operator_changed_ || !last_alertmanager_ ||
                                now - *last_alertmanager_ >= kAlertmanagerResend)) {
    std::vector<AlertMessage> batch;
    for (const auto& [key, a] : alerts_) {
      if (a.owner.empty() && a.state != AlertState::kPending) batch.push_back(Message(a));
    }
    if (!batch.empty() || operator_changed_) out.alertmanager = std::move(batch);
    last_alertmanager_ = now;
    operator_changed_ = false;
  }
  return out;
}

}  // namespace tessera::alerts
