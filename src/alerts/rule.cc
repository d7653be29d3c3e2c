#include "alerts/rule.h"

#include <fmt/format.h>

#include "common/json.h"
#include "common/text.h"

namespace tessera::alerts {
namespace {

using nlohmann::json;

constexpr int64_t kMaxSeconds = 7 * 24 * 3600;
constexpr size_t kMaxEntries = 16;
constexpr size_t kMaxText = 1024;

bool IsName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::optional<Op> ParseOp(const std::string& s) {
  static const std::pair<const char*, Op> kOps[] = {{">", Op::kGt},  {">=", Op::kGe},
                                                    {"<", Op::kLt},  {"<=", Op::kLe},
                                                    {"==", Op::kEq}, {"!=", Op::kNe}};
  for (const auto& [name, op] : kOps) {
    if (s == name) return op;
  }
  return std::nullopt;
}

// A map of at most kMaxEntries short strings whose keys are label names.
std::map<std::string, std::string> ReadMap(JsonFields& f, std::string_view key) {
  std::map<std::string, std::string> m = f.StringMap(key, false);
  if (m.size() > kMaxEntries) f.Fail(key, fmt::format("at most {} entries", kMaxEntries));
  for (const auto& [k, v] : m) {
    if (!IsName(k)) {
      f.Fail(key, fmt::format("'{}' is not a label name ([A-Za-z_][A-Za-z0-9_]*)", Quote(k)));
    } else if (v.size() > kMaxText) {
      f.Fail(fmt::format("{}.{}", key, k), fmt::format("longer than {} bytes", kMaxText));
    }
  }
  return m;
}

}  // namespace

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kEq:
      return "==";
    case Op::kNe:
      return "!=";
  }
  return "?";
}

Result<Rule> ParseRule(const json& body, bool tenant_owned, bool allow_private) {
  if (!body.is_object()) return Status::InvalidArgument("body: expected a JSON object");
  JsonFields f(body, "alert rule");
  f.RejectUnknown({"name", "metric", "matchers", "op", "threshold", "for_seconds",
                   "keep_firing_for_seconds", "severity", "annotations", "notify",
                   "repeat_interval_seconds"});
  Rule r;
  r.name = f.String("name");
  if (f.ok() && !IsName(r.name)) {
    f.Fail("name", "want [A-Za-z_][A-Za-z0-9_]*, at most 128 bytes (it is the alertname label)");
  }
  const std::string metric = f.String("metric");
  if (f.Get("metric", false) && !metric.empty()) {
    if (auto field = telemetry::FindField(metric)) {
      r.metric = *field;
    } else {
      f.Fail("metric", fmt::format("unknown metric '{}'; known: {}", Quote(metric, 128),
                                   telemetry::FieldNames()));
    }
  }
  r.matchers = ReadMap(f, "matchers");
  const std::string op = f.String("op");
  if (f.Get("op", false) && f.ok()) {
    if (auto parsed = ParseOp(op)) {
      r.op = *parsed;
    } else {
      f.Fail("op", fmt::format("'{}' is not one of > >= < <= == !=", Quote(op, 16)));
    }
  }
  r.threshold = f.Number("threshold", -1e15, 1e15);
  r.for_seconds = f.Int("for_seconds", 0, kMaxSeconds, false);
  r.keep_firing_for_seconds = f.Int("keep_firing_for_seconds", 0, kMaxSeconds, false);
  r.repeat_interval_seconds =
      f.Int("repeat_interval_seconds", 60, kMaxSeconds, false, r.repeat_interval_seconds);
  r.severity = f.String("severity", false, "warning");
  if (r.severity != "critical" && r.severity != "warning" && r.severity != "info") {
    f.Fail("severity", fmt::format("'{}' is not critical, warning or info", Quote(r.severity, 32)));
  }
  r.annotations = ReadMap(f, "annotations");
  if (const json* notify = f.Get("notify", false)) {
    if (!notify->is_array() || notify->size() > kMaxEntries) {
      f.Fail("notify", fmt::format("expected a list of at most {} receivers", kMaxEntries));
    } else {
      for (size_t i = 0; i < notify->size(); ++i) {
        const std::string where = fmt::format("notify[{}]", i);
        const json& n = (*notify)[i];
        if (!n.is_object() || n.size() != 1 || !(n.contains("webhook") || n.contains("email")) ||
            !n.begin()->is_string()) {
          f.Fail(where, "expected {\"webhook\": URL} or {\"email\": ADDRESS}");
          continue;
        }
        Receiver rcv;
        rcv.kind = n.contains("webhook") ? Receiver::Kind::kWebhook : Receiver::Kind::kEmail;
        rcv.target = n.begin()->get<std::string>();
        rcv.tenant_owned = tenant_owned;
        const std::string field =
            where + (rcv.kind == Receiver::Kind::kWebhook ? ".webhook" : ".email");
        Status s = ValidateReceiver(rcv, field);
        if (s.ok() && tenant_owned && !allow_private && rcv.kind == Receiver::Kind::kWebhook) {
          s = CheckPublicHost(rcv.target, field);
        }
        if (!s.ok()) {
          std::string why = s.message();
          if (why.rfind(field + ": ", 0) == 0) why = why.substr(field.size() + 2);
          f.Fail(field, why);
          continue;
        }
        r.notify.push_back(std::move(rcv));
      }
    }
  }
  if (!f.ok()) return f.first_error();
  return r;
}

json RuleJson(const Rule& r) {
  json notify = json::array();
  for (const Receiver& n : r.notify) {
    notify.push_back({{n.kind == Receiver::Kind::kWebhook ? "webhook" : "email", n.target}});
  }
  return {{"id", r.id},
          {"owner", r.owner.empty() ? json(nullptr) : json(r.owner)},
          {"name", r.name},
          {"metric", telemetry::Info(r.metric).name},
          {"matchers", r.matchers},
          {"op", OpName(r.op)},
          {"threshold", r.threshold},
          {"for_seconds", r.for_seconds},
          {"keep_firing_for_seconds", r.keep_firing_for_seconds},
          {"repeat_interval_seconds", r.repeat_interval_seconds},
          {"severity", r.severity},
          {"annotations", r.annotations},
          {"notify", std::move(notify)},
          {"builtin", r.builtin},
          {"created_at", FormatRfc3339(r.created_at)}};
}

Result<Rule> RuleFromStored(const std::string& key, const std::string& value) {
  auto j = ParseJson(value, key);
  if (!j.ok() || !j->is_object()) {
    return Status::DataLoss(fmt::format("stored alert rule {} is not a JSON object", key));
  }
  json body = *j;
  const bool tenant_owned = body.contains("owner") && body["owner"].is_string();
  json fields = body;
  for (const char* k : {"id", "owner", "builtin", "created_at"}) fields.erase(k);
  // A stored rule passed the check it was made under; the flag may have changed since, and the
  // send-time check still applies.
  auto r = ParseRule(fields, tenant_owned, /*allow_private=*/true);
  if (!r.ok()) {
    return Status::DataLoss(fmt::format("stored alert rule {}: {}", key, r.status().message()));
  }
  r->id = body.value("id", "");
  if (tenant_owned) r->owner = body["owner"].get<std::string>();
  r->builtin = body.value("builtin", false);
  auto created = ParseRfc3339(body.value("created_at", ""));
  if (r->id.empty() || !created.ok()) {
    return Status::DataLoss(fmt::format("stored alert rule {}: no id or created_at", key));
  }
  r->created_at = *created;
  return r;
}

std::vector<Rule> BuiltinRules(Time now) {
  using telemetry::Field;
  auto make = [&](std::string id, std::string name, Field metric, Op op, double threshold,
                  int64_t for_s, std::string severity, std::string summary) {
    Rule r;
    r.id = "builtin-" + std::move(id);
    r.name = std::move(name);
    r.metric = metric;
    r.op = op;
    r.threshold = threshold;
    r.for_seconds = for_s;
    r.severity = std::move(severity);
    r.annotations = {{"summary", std::move(summary)}};
    r.builtin = true;
    r.created_at = now;
    return r;
  };
  std::vector<Rule> rules;
  rules.push_back(make("gpu-temperature", "GpuTemperatureHigh", Field::kGpuTemp, Op::kGt, 85, 60,
                       "critical",
                       "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is at {{ $value }} C"));
  rules.push_back(make("xid", "GpuXidError", Field::kXidErrors, Op::kGt, 0, 0, "critical",
                       "XID {{ $value }} on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}"));
  rules.back().keep_firing_for_seconds = 300;  // One event reads for one report only.
  // Fires while the GPU is out of service, however long ago the XID that put it there was.
  rules.push_back(make("gpu-unhealthy", "GpuUnhealthy", Field::kGpuHealthy, Op::kEq, 0, 0,
                       "critical",
                       "GPU {{ $labels.gpu }} of {{ $labels.Hostname }} is lost or unhealthy: "
                       "out of service until an operator clears it"));
  rules.push_back(make("node-not-ready", "NodeNotReady", Field::kNodeReady, Op::kEq, 0, 0,
                       "critical",
                       "Node {{ $labels.Hostname }} is not ready: its agent is silent"));
  rules.push_back(make("fb-used", "GpuFramebufferFull", Field::kFbUsedPercent, Op::kGt, 90, 60,
                       "warning",
                       "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} uses {{ $value }}% of its "
                       "framebuffer"));
  rules.push_back(make("ecc-dbe", "GpuEccDoubleBitError", Field::kEccDbeVolTotal, Op::kGt, 0, 0,
                       "critical",
                       "{{ $value }} double-bit ECC errors on GPU {{ $labels.gpu }} of "
                       "{{ $labels.Hostname }}"));
  // A platform fault moved a tenant's instance: its owner sees it (its tenant label).
  rules.push_back(make("instance-interrupted", "InstanceInterrupted", Field::kInstanceInterrupted,
                       Op::kGt, 0, 0, "warning",
                       "Instance {{ $labels.tessera_instance }} of tenant {{ $labels.tenant }} was "
                       "interrupted on {{ $labels.Hostname }}: {{ $labels.cause }}; it restarts "
                       "elsewhere"));
  // Budgets: the notices at 80% and 100% of a tenant's monthly budget.
  rules.push_back(make("budget-80", "BudgetAlmostSpent", Field::kBudgetUsedPercent, Op::kGe, 80, 0,
                       "warning",
                       "Tenant {{ $labels.tenant }} spent {{ $value }}% of its monthly budget"));
  rules.push_back(make("budget-100", "BudgetSpent", Field::kBudgetUsedPercent, Op::kGe, 100, 0,
                       "critical",
                       "Tenant {{ $labels.tenant }} spent its monthly budget ({{ $value }}%)"));
  return rules;
}

std::string ExpandTemplate(const std::string& text,
                           const std::map<std::string, std::string>& labels, double value) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find("{{", pos);
    const size_t close = open == std::string::npos ? open : text.find("}}", open + 2);
    if (close == std::string::npos) {
      out.append(text, pos);
      break;
    }
    out.append(text, pos, open - pos);
    std::string expr = text.substr(open + 2, close - open - 2);
    const size_t a = expr.find_first_not_of(' '), b = expr.find_last_not_of(' ');
    expr = a == std::string::npos ? "" : expr.substr(a, b - a + 1);
    if (expr == "$value") {
      out += fmt::format("{:.4g}", value);
    } else if (expr.rfind("$labels.", 0) == 0) {
      auto it = labels.find(expr.substr(8));
      if (it != labels.end()) out += it->second;
    } else {
      out.append(text, open, close + 2 - open);  // Not ours: left as written.
    }
    pos = close + 2;
  }
  return out;
}

}  // namespace tessera::alerts
