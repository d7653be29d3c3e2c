// Alert rules: a threshold on one series (DCGM's or Tessera's, telemetry/series.h), held for a
// while, with Prometheus's semantics (docs/alerts.md). The operator's rules see every series; a
// tenant's rules see only the series of its own instances and notify only its own receivers.
// Thread-safety: values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "alerts/notifier.h"
#include "common/clock.h"
#include "common/result.h"
#include "telemetry/series.h"

namespace tessera::alerts {

enum class Op { kGt, kGe, kLt, kLe, kEq, kNe };
std::string_view OpName(Op op);  // ">", ">=", ...
inline bool Holds(Op op, double v, double threshold) {
  switch (op) {
    case Op::kGt:
      return v > threshold;
    case Op::kGe:
      return v >= threshold;
    case Op::kLt:
      return v < threshold;
    case Op::kLe:
      return v <= threshold;
    case Op::kEq:
      return v == threshold;
    case Op::kNe:
      return v != threshold;
  }
  return false;
}

struct Rule {
  std::string id;     // "rule-000001", or "builtin-..." for the operator's defaults.
  std::string owner;  // The tenant's id; empty for the operator.
  std::string name;   // The alertname label.
  telemetry::Field metric = telemetry::Field::kGpuTemp;
  std::map<std::string, std::string> matchers;  // Label -> value, all equal.
  Op op = Op::kGt;
  double threshold = 0;
  int64_t for_seconds = 0;
  int64_t keep_firing_for_seconds = 0;
  std::string severity = "warning";                // "critical", "warning" or "info".
  std::map<std::string, std::string> annotations;  // May use {{ $value }}, {{ $labels.NAME }}.
  std::vector<Receiver> notify;
  int64_t repeat_interval_seconds = 4 * 3600;  // Re-notify while firing.
  bool builtin = false;
  Time created_at;

  bool operator_owned() const { return owner.empty(); }
};

inline constexpr size_t kMaxRulesPerTenant = 200;
inline constexpr size_t kMaxTenantRules = 10'000;  // All tenants' together.
// The operator's own (the built-in ones included), never taken by tenants' rules.
inline constexpr size_t kMaxOperatorRules = 1'000;

// A rule from a POST /v1/alert-rules body (id, owner and created_at are the caller's to set).
// InvalidArgument naming the field: an unknown metric (listing the known ones), a bad op, a
// severity not critical/warning/info, a bad receiver URL or address, durations out of
// 0..604800 s, a name not [A-Za-z_][A-Za-z0-9_]* of at most 128 bytes, more than 16 matchers,
// annotations or receivers. Receivers of a tenant's rule (`tenant_owned`) are marked so.
// A tenant's webhook whose host is a numeric address outside the public ranges (or
// "localhost") is refused here unless `allow_private`; names are checked at every send.
Result<Rule> ParseRule(const nlohmann::json& body, bool tenant_owned, bool allow_private = false);
// The API's and the store's form.
nlohmann::json RuleJson(const Rule& r);
// A stored rule; DataLoss naming `key` when malformed.
Result<Rule> RuleFromStored(const std::string& key, const std::string& value);

// The operator's defaults: GPU temperature above 85 C for 60 s, any XID error, a GPU out of
// service (lost or unhealthy), a node not ready, framebuffer use above 90% for 60 s, an ECC
// double-bit error.
std::vector<Rule> BuiltinRules(Time now);

// Expands {{ $value }} and {{ $labels.NAME }} (spaces inside the braces optional).
std::string ExpandTemplate(const std::string& text,
                           const std::map<std::string, std::string>& labels, double value);

}  // namespace tessera::alerts
