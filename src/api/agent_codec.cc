// The agent protocol's bodies (docs/agent.md): registration and reports, every field checked,
// unknown fields refused, errors on one line naming the field.
#include <fmt/format.h>

#include "api/codec.h"
#include "common/json.h"
#include "common/text.h"
#include "telemetry/sample.h"

namespace tessera::api {

using nlohmann::json;

namespace {

constexpr int64_t kProtocol = 1;
constexpr size_t kMaxReports = 4096;
constexpr size_t kMaxLogBytes = 256 << 10;  // Per workload per report, decoded.

Status CheckProtocol(JsonFields& f) {
  const int64_t protocol = f.Int("protocol", 0, INT64_MAX);
  if (f.ok() && protocol != kProtocol) {
    return Status::InvalidArgument(
        fmt::format("field 'protocol': {} is not spoken here; this server speaks protocol {}",
                    protocol, kProtocol));
  }
  return Status::Ok();
}

}  // namespace

Result<core::AgentRegistration> ParseRegistration(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"protocol", "agent_id", "inventory", "advertise_address"});
  TESSERA_RETURN_IF_ERROR(CheckProtocol(f));
  core::AgentRegistration r;
  r.agent_id = f.String("agent_id");
  r.address = f.String("advertise_address", false);
  if (const json* inv = f.Get("inventory")) {
    if (!inv->is_object()) {
      f.Fail("inventory", "expected an object");
    } else {
      r.inventory = *inv;
    }
  }
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

namespace {

// `pull` of a report whose state is "pulling": {bytes, total_bytes (0: unknown), percent}.
core::PullProgress ParsePull(JsonFields& pull) {
  pull.RejectUnknown({"bytes", "total_bytes", "percent"});
  core::PullProgress p;
  p.bytes = pull.Int("bytes", 0, INT64_MAX);
  p.total_bytes = pull.Int("total_bytes", 0, INT64_MAX);
  // Rounded down, so a pull shows 100% only once its agent says so.
  p.percent = static_cast<int>(pull.Number("percent", 0, 100));
  return p;
}

// One entry of `workloads`: what happened to the workload (into s.reports), or how far the pull
// of its image has come (into s.pulls).
Status ParseReport(const json& j, const std::string& where, core::AgentSync& s) {
  JsonFields f(j, where);
  f.RejectUnknown(
      {"id", "attempt", "state", "exit_code", "reason", "lost", "started_at", "port", "pull"});
  core::AgentReport r;
  r.instance = f.String("id");
  r.attempt = static_cast<int>(f.Int("attempt", 0, INT32_MAX));
  const std::string state = f.String("state");
  if (f.Get("exit_code", false)) r.exit_code = static_cast<int>(f.Int("exit_code", -1, 1024));
  r.reason = f.String("reason", false);
  r.lost = f.Bool("lost", false);
  if (f.Get("port", false)) r.port = static_cast<int>(f.Int("port", 1, 65535));
  const std::string started = f.String("started_at", false);
  const bool pulling = state == "pulling";
  JsonFields pull = f.Object("pull", pulling);
  core::PullProgress progress;
  if (!pull.absent()) progress = ParsePull(pull);
  if (state == "running") {
    r.state = core::InstanceState::kRunning;
  } else if (state == "exited") {
    r.state = core::InstanceState::kTerminated;
  } else if (!pulling && f.ok()) {
    f.Fail("state", fmt::format("'{}' is not running, pulling or exited", Quote(state)));
  }
  if (!pulling && !pull.absent()) f.Fail("pull", "applies only to state pulling");
  if (r.reason.size() > 256) f.Fail("reason", "is longer than 256 bytes");
  TESSERA_RETURN_IF_ERROR(f.first_error());  // Naming the entry: "workloads[3]: field ...".
  if (pulling) {
    s.pulls.push_back({std::move(r.instance), r.attempt, progress});
    return Status::Ok();
  }
  if (!started.empty()) {
    auto t = ParseRfc3339(started);
    // Naming the entry and the field, with the text quoted (control characters escaped).
    if (!t.ok()) {
      return Status::InvalidArgument(fmt::format(
          "{}: field 'started_at': '{}' is not an RFC 3339 time", where, Quote(started, 40)));
    }
    r.started_at = *t;
  }
  s.reports.push_back(std::move(r));
  return Status::Ok();
}

}  // namespace

Result<core::AgentSync> ParseSync(json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"protocol", "agent_id", "seq", "generation", "wait_ms", "workloads", "logs",
                   "limits", "isolation", "telemetry"});
  TESSERA_RETURN_IF_ERROR(CheckProtocol(f));
  core::AgentSync s;
  s.agent_id = f.String("agent_id");
  s.seq = f.Int("seq", 0, INT64_MAX);
  s.generation = static_cast<uint64_t>(f.Int("generation", 0, INT64_MAX));
  s.wait = std::chrono::milliseconds(
      f.Int("wait_ms", 0, std::chrono::milliseconds(kMaxAgentWait).count(), false, 0));
  JsonFields limits = f.Object("limits", false);
  if (!limits.absent()) {
    limits.RejectUnknown({"enforced", "note"});
    s.limits_enforced = limits.Bool("enforced");
    s.limits_note = limits.String("note", false);
    if (s.limits_note.size() > 512) limits.Fail("note", "is longer than 512 bytes");
  }
  JsonFields isolation = f.Object("isolation", false);
  if (!isolation.absent()) {
    isolation.RejectUnknown({"mode", "note"});
    const std::string mode = isolation.String("mode");
    s.isolation_note = isolation.String("note", false);
    if (isolation.ok()) {
      s.isolation = core::ParseIsolation(mode);
      if (!s.isolation) isolation.Fail("mode", fmt::format("'{}' is not uid or none", Quote(mode)));
    }
    if (s.isolation_note.size() > 512) isolation.Fail("note", "is longer than 512 bytes");
  }
  if (const json* t = f.Get("telemetry", false)) {
    auto parsed = telemetry::FromJson(*t);
    if (!parsed.ok()) {
      std::string why = parsed.status().message();
      if (why.rfind("telemetry: ", 0) == 0) why = why.substr(11);
      f.Fail("telemetry", why);
    } else {
      s.telemetry = std::make_shared<const telemetry::Telemetry>(std::move(*parsed));
    }
  }
  const json* workloads = f.Get("workloads", false);
  const json* logs = f.Get("logs", false);
  for (auto [key, list] : {std::pair{"workloads", workloads}, {"logs", logs}}) {
    if (!list) continue;
    if (!list->is_array()) {
      f.Fail(key, "expected a list");
    } else if (list->size() > kMaxReports) {
      f.Fail(key, fmt::format("{} entries; at most {}", list->size(), kMaxReports));
    }
  }
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  if (workloads) {
    for (size_t i = 0; i < workloads->size(); ++i) {
      TESSERA_RETURN_IF_ERROR(ParseReport((*workloads)[i], fmt::format("workloads[{}]", i), s));
    }
  }
  if (logs) {
    for (size_t i = 0; i < logs->size(); ++i) {
      JsonFields l((*logs)[i], fmt::format("logs[{}]", i));
      l.RejectUnknown({"id", "attempt", "offset", "data_base64"});
      core::WorkloadLog log;
      log.instance = l.String("id");
      log.attempt = static_cast<int>(l.Int("attempt", 0, INT32_MAX));
      // The offset plus a report's bytes stays an int64: a log's end can never overflow.
      log.offset = l.Int("offset", 0, INT64_MAX - static_cast<int64_t>(kMaxLogBytes));
      const std::string text = l.String("data_base64");
      TESSERA_RETURN_IF_ERROR(l.first_error());  // Naming the entry: "logs[0]: field ...".
      auto data = Base64Decode(text);
      if (!data) l.Fail("data_base64", "is not padded standard base64");
      if (data && data->size() > kMaxLogBytes) {
        l.Fail("data_base64",
               fmt::format("holds {} bytes; at most {} per report", data->size(), kMaxLogBytes));
      }
      TESSERA_RETURN_IF_ERROR(l.first_error());
      log.data = std::move(*data);
      s.logs.push_back(std::move(log));
    }
  }
  return s;
}

}  // namespace tessera::api
