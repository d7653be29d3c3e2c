// Monitoring: the alert rules and their alerts (docs/alerts.md), what their evaluations send,
// the GPUs' recent history for the metrics endpoints, and the instances faults moved lately.
// It owns the memory of each and its retention: rules and alerts live until deleted or resolved
// (alerts::Evaluator), history for History's window, interruptions for kInterruptionShown.
// It does not gather the series it evaluates: the state does, from the nodes, the instances
// and the budgets, and hands them to Evaluate when Due says a round is due.
//
// Stored records (settings): "alert_rule/<id>" (a rule, its webhook URLs sealed under
// "alert_rule/<id>/notify/<i>"), "alert/<key>" (an alert's state), and "alerts/..." (the next
// rule number and which built-ins were seeded).
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "alerts/evaluator.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/instance.h"
#include "core/secrets.h"
#include "core/tenants.h"
#include "store/store.h"
#include "telemetry/history.h"
#include "telemetry/sample.h"
#include "telemetry/series.h"

namespace tessera {
class Sealer;
}  // namespace tessera

namespace tessera::core {

// An instance a platform fault moved (a GPU out of service, a lost or removed node): its owner's
// tessera_instance_interrupted series shows it.
struct Interruption {
  Time at;
  std::string tenant, instance, node;
  std::string cause;  // gpu_unhealthy, node_lost, node_removed.
  std::string fault;  // The XID's name, or "".
  int gpu = -1;       // -1: the whole node.
};

// What a GPU (a whole one, a MIG instance or a share of one) read lately, as the metrics
// endpoints show it.
struct GpuReadings {
  GpuRef gpu;  // Its index, and for an instance's GPU its uuid, model, profile or share.
  std::vector<telemetry::Point> points;  // Oldest first, within the window asked.
  // False when its node's agent has sent no telemetry; else `latest` is its last reading, none
  // when that report lacks the GPU.
  bool sampled = false;
  std::optional<telemetry::HolderReading> latest;
  std::vector<GpuReadings> mig;  // A node's GPU: each MIG instance's points.
};

// An instance that holds GPUs, with their readings.
struct InstanceReadings {
  std::string id, name, tenant, node;
  InstanceState state = InstanceState::kPending;
  std::optional<Time> sampled_at;  // When its node's last telemetry was taken.
  std::vector<GpuReadings> gpus;
};

class Monitoring {
 public:
  struct Options {
    // How often the rules are evaluated.
    Duration interval = std::chrono::seconds(5);
    // After a start, a node's series are missing until its agent reports again (within its
    // lease): for this long no alert resolves because its series is missing.
    Duration settle = std::chrono::seconds(10);
    alerts::EvaluatorOptions alerts;
    // Seals rules' webhook URLs at rest; null: a rule with a webhook cannot be stored.
    Sealer* sealer = nullptr;
  };

  // `clock` must outlive it; its start is the clock's now.
  Monitoring(const Clock* clock, Options options);

  // Alert rules: the operator's (caller.admin) see every series, a tenant's only its own. A
  // tenant has at most alerts::kMaxRulesPerTenant, tenants together kMaxTenantRules, and the
  // operator kMaxOperatorRules (ResourceExhausted beyond). FailedPrecondition for a webhook
  // without a sealer.
  Result<alerts::Rule> CreateRule(const Tenant& caller, alerts::Rule rule, store::Batch& batch);
  std::vector<alerts::Rule> ListRules(const Tenant& caller) const;
  // NotFound for an unknown id and for another tenant's rule alike.
  Result<alerts::Rule> GetRule(const Tenant& caller, std::string_view id) const;
  // Deletes a rule; its firing alerts resolve (and notify so) at the next evaluation, which is
  // due at once.
  Status DeleteRule(const Tenant& caller, std::string_view id, store::Batch& batch);
  // The caller's alerts, firing first: a tenant sees its own rules' and the built-ins' on its
  // own series (never an operator's own rule's); the operator sees all.
  std::vector<alerts::Alert> ListAlerts(const Tenant& caller) const;

  // Rebuilds rules and alerts from their records (kRulePrefix, kAlertPrefix and kMetaPrefix);
  // the first start of a store also adds the built-in rules, each once (an operator who deletes
  // one keeps it deleted). An alert whose rule is gone is deleted; a webhook stored in the clear
  // is sealed. DataLoss naming the record when one is corrupt.
  Status Restore(const std::vector<std::pair<std::string, std::string>>& rules,
                 const std::vector<std::pair<std::string, std::string>>& alerts,
                 const std::vector<std::pair<std::string, std::string>>& meta, store::Batch& batch);

  // Whether an evaluation is due now: the interval passed, and there is a rule, or an alert to
  // resolve or retire.
  bool Due() const;
  // Evaluates every rule over `targets` (every series there is now), stores the alerts that
  // changed, and queues what to send for TakeOutbox.
  void Evaluate(const std::vector<telemetry::Target>& targets, store::Batch& batch);
  // What the evaluations decided to send, taken once stored (after the commit).
  struct Outbox {
    std::vector<alerts::Delivery> deliveries;
    std::vector<std::vector<alerts::AlertMessage>> alertmanager;
  };
  Outbox TakeOutbox() { return std::exchange(outbox_, {}); }
  // Every rule and alert, for counting.
  const alerts::Evaluator& evaluator() const { return evaluator_; }
  int64_t evaluations() const { return evaluations_; }

  // Per-GPU readings for GET /v1/instances/{id}/metrics and /v1/nodes/{id}.
  telemetry::History& history() { return history_; }
  const telemetry::History& history() const { return history_; }

  // Shows `i` in its owner's tessera_instance_interrupted series for kInterruptionShown; at most
  // kMaxInterruptions are kept (a fleet-wide outage shows the newest).
  void NoteInterruption(Interruption i);
  // Appends one series per interruption still shown.
  void InterruptionTargets(std::vector<telemetry::Target>& out) const;
  // Forgets interruptions shown for longer than kInterruptionShown.
  void Sweep();

  // Key rotation (rotation.cc): re-seals, into `batch`, the webhooks of up to `limit` rules after
  // rule id `after` that are not sealed under `key_id`, moving `after` on and counting into
  // `step`. True at the end of the rules.
  Result<bool> Reseal(const std::string& key_id, std::string& after, size_t limit, ResealStep& step,
                      store::Batch& batch);
  // Counts each rule with a sealed webhook under its key id.
  void CountKeys(std::map<std::string, int64_t>& by_key) const;

  static constexpr std::string_view kRulePrefix = "alert_rule/";
  static constexpr std::string_view kAlertPrefix = "alert/";
  static constexpr std::string_view kMetaPrefix = "alerts/";
  static constexpr std::string_view kBuiltinSeeded = "alerts/builtin_seeded";
  static constexpr std::string_view kNextRule = "alerts/next_rule";
  static constexpr std::string_view kBudgetRulesSeeded = "alerts/budget_rules_seeded";
  static constexpr std::string_view kInterruptedRuleSeeded = "alerts/interrupted_rule_seeded";
  static constexpr Duration kInterruptionShown = std::chrono::minutes(15);
  static constexpr size_t kMaxInterruptions = 10'000;

 private:
  // A rule's stored form, its webhook URLs sealed; remembers the key id they are sealed under.
  Result<std::string> SealRule(const alerts::Rule& rule);
  // A stored rule's text with its webhook URLs opened, for RuleFromStored; `plain` is set when
  // one was stored in the clear (before envelope encryption).
  Result<std::string> OpenRule(const std::string& key, const std::string& value, bool& plain);

  const Clock* clock_;
  Options options_;
  Time started_at_;
  alerts::Evaluator evaluator_;
  Outbox outbox_;
  Time last_evaluation_{};
  int64_t evaluations_ = 0;
  int64_t next_rule_ = 1;
  std::map<std::string, std::string> rule_keys_;  // Rules with a sealed webhook: id -> key id.
  telemetry::History history_;
  std::deque<Interruption> interruptions_;  // Oldest first.
};

}  // namespace tessera::core
