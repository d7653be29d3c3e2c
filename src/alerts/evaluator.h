// The alert evaluator: every few seconds, each rule over the series it may see, with
// Prometheus's alerting semantics:
//   inactive -> pending      the condition holds (for_seconds 0: straight to firing);
//   pending  -> firing       it held for for_seconds;
//   pending  -> inactive     it stopped holding (the alert is dropped);
//   firing   -> resolved     it stopped holding, and keep_firing_for_seconds passed since it last
//                            held (a series that disappears counts as not holding);
//   resolved                 kept kResolvedRetention for GET /v1/alerts and the resolved
//                            notices, then dropped.
// An alert is one rule and one series; its labels are the series' labels (empty ones left out),
// alertname and severity. The evaluator decides what to notify: a webhook or email receiver gets
// a message when the alert fires, again every repeat interval while it fires, and one when it
// resolves; the operator's alerts go to the Alertmanager on every change and every
// kAlertmanagerResend, as Prometheus sends them. It does no I/O: the caller stores what changed
// and hands the messages to a Notifier after the store committed.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "alerts/alert_index.h"
#include "alerts/notifier.h"
#include "alerts/rule.h"
#include "common/clock.h"
#include "telemetry/series.h"

namespace tessera::alerts {

enum class AlertState { kPending, kFiring, kResolved };
std::string_view AlertStateName(AlertState s);

struct Alert {
  std::string key;  // rule id + "/" + fingerprint.
  std::string rule_id;
  std::string owner;  // The rule's: a tenant id, or empty for the operator.
  std::string fingerprint;
  uint64_t series = 0;  // The series' identity (its labels' hash).
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  AlertState state = AlertState::kPending;
  double value = 0;
  Time active_at;  // When the condition started to hold.
  Time last_true_at;
  std::optional<Time> fired_at;
  std::optional<Time> resolved_at;
  std::optional<Time> notified_at;  // Last firing message handed to the receivers.
};

// The API's and the store's form, and back (DataLoss naming `key` when malformed).
nlohmann::json AlertJson(const Alert& a);
Result<Alert> AlertFromStored(const std::string& key, const std::string& value);

struct Evaluation {
  std::vector<const Alert*> changed;  // Alerts whose stored form changed: store them.
  std::vector<std::string> removed;   // Keys of alerts dropped: delete them from the store.
  std::vector<Delivery> deliveries;   // Webhook and email messages to send once stored.
  std::optional<std::vector<AlertMessage>> alertmanager;  // A post to the Alertmanager, if due.
};

struct EvaluatorOptions {
  std::string external_url;   // The server's URL, for generatorURL.
  bool alertmanager = false;  // Whether operator alerts are posted to an Alertmanager.
};

class Evaluator {
 public:
  static constexpr std::chrono::minutes kResolvedRetention{15};
  static constexpr std::chrono::seconds kAlertmanagerResend{60};

  explicit Evaluator(EvaluatorOptions options = {}) : options_(std::move(options)) {}

  // Adds or replaces a rule. A replaced rule keeps its alerts.
  void Put(Rule rule);
  // Removes a rule: its firing alerts resolve (and say so, in the next Evaluate), its pending
  // ones are dropped. False when there is no such rule.
  bool Remove(const std::string& id, Time now);
  const Rule* Find(const std::string& id) const;
  const std::map<std::string, Rule>& rules() const { return rules_; }
  size_t rules_of(const std::string& owner) const;

  // An alert as stored before a restart. One that was firing does not notify again until its
  // repeat interval, counted from notified_at, passes.
  void Restore(Alert alert);

  // Evaluates every rule over `targets` at `now`. While `settling` (after a start, before every
  // node reported again), an alert whose series is absent is left as it is, not lapsed.
  Evaluation Evaluate(Time now, const std::vector<telemetry::Target>& targets,
                      bool settling = false);

  // Alerts by key.
  const std::map<std::string, Alert>& alerts() const { return alerts_; }

 private:
  AlertMessage Message(const Alert& a) const;
  // Queues `a`'s messages (its state says firing or resolved) to `rule`'s receivers.
  void Notify(const Rule& rule, Alert& a, Time now, std::vector<Delivery>& out);
  // The alert of `rule` on target `t` (their hashes given) whose condition holds with `v`.
  void Hold(const Rule& rule, uint64_t rule_hash, const telemetry::Target& t, uint64_t series_hash,
            double v, Time now, Evaluation& out);
  // An alert whose condition did not hold this round. True when it is to be dropped.
  bool Lapse(Alert& a, Time now, Evaluation& out);

  EvaluatorOptions options_;
  std::map<std::string, Rule> rules_;
  std::map<std::string, Alert> alerts_;
  AlertIndex index_;                  // alerts_ by fingerprint.
  std::vector<std::string> dropped_;  // Removed outside Evaluate, for its `removed`.
  std::vector<std::string> touched_;  // Changed outside Evaluate, for its `changed`.
  std::vector<Delivery> pending_;     // Messages decided outside Evaluate.
  uint64_t round_ = 0;
  bool operator_changed_ = false;  // An operator alert changed since the last post.
  std::optional<Time> last_alertmanager_;
};

}  // namespace tessera::alerts
