// The agent protocol's bodies (docs/agent.md): registration and reports, every field checked,
// unknown fields refused, errors on one line naming the field.
#include <fmt/format.h>

#include "api/codec.h"
#include "common/json.h"
#include "common/text.h"
#include "fleet/fleet.h"
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

constexpr size_t kMaxMigDevices = fleet::kMaxGpusPerNode * 8;

// "mig": the node's MIG devices, each {"gpu", "uuid", "profile", "start", "owner"}.
Result<std::vector<core::MigReport>> ParseMigLayout(const json& list) {
  if (!list.is_array() || list.size() > kMaxMigDevices) {
    return Status::InvalidArgument(
        fmt::format("field 'mig': expected a list of at most {} MIG devices", kMaxMigDevices));
  }
  std::vector<core::MigReport> out;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonFields m(list[i], fmt::format("mig[{}]", i));
    m.RejectUnknown({"gpu", "uuid", "profile", "start", "owner"});
    core::MigReport r;
    r.gpu = static_cast<int>(m.Int("gpu", 0, fleet::kMaxGpusPerNode - 1));
    r.uuid = m.String("uuid");
    r.profile = m.String("profile", false);
    r.start = static_cast<int>(m.Int("start", -1, 7));
    r.owner = m.String("owner", false);
    for (auto [key, value] :
         {std::pair{"uuid", &r.uuid}, {"profile", &r.profile}, {"owner", &r.owner}}) {
      if (m.ok() && (value->size() > 96 || !IsPrintableAscii(*value) ||
                     (key == std::string_view("uuid") && value->empty()))) {
        m.Fail(key, "must be at most 96 printable ASCII characters");
      }
    }
    TESSERA_RETURN_IF_ERROR(m.first_error());  // "mig[0]: field ...".
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

Result<core::AgentRegistration> ParseRegistration(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"protocol", "agent_id", "inventory", "advertise_address", "mig"});
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
  if (const json* mig = body.is_object() && body.contains("mig") ? &body["mig"] : nullptr) {
    TESSERA_ASSIGN_OR_RETURN(r.mig, ParseMigLayout(*mig));
  }
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
  f.RejectUnknown({"id", "attempt", "state", "exit_code", "reason", "lost", "started_at", "port",
                   "pull", "endpoints"});
  core::AgentReport r;
  r.instance = f.String("id");
  r.attempt = static_cast<int>(f.Int("attempt", 0, INT32_MAX));
  const std::string state = f.String("state");
  if (f.Get("exit_code", false)) r.exit_code = static_cast<int>(f.Int("exit_code", -1, 1024));
  r.reason = f.String("reason", false);
  r.lost = f.Bool("lost", false);
  if (f.Get("port", false)) r.port = static_cast<int>(f.Int("port", 1, 65535));
  if (const json* eps = f.Get("endpoints", false)) {
    if (!eps->is_array() || eps->size() > core::kMaxPorts) {
      f.Fail("endpoints", fmt::format("expected a list of at most {}", core::kMaxPorts));
    } else {
      for (size_t i = 0; i < eps->size(); ++i) {
        JsonFields e((*eps)[i], fmt::format("{}: endpoints[{}]", where, i));
        e.RejectUnknown({"port", "host_port"});
        const int port = static_cast<int>(e.Int("port", 1, 65535));
        const int host_port = static_cast<int>(e.Int("host_port", 1, 65535));
        TESSERA_RETURN_IF_ERROR(e.first_error());
        r.endpoints.emplace_back(port, host_port);
      }
    }
  }
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

constexpr size_t kMaxModeResults = 64;

// "gpu_mode_results": what the agent did with the GPU mode changes it was sent, each
// {"id", "gpu", "state": "applied" | "pending_reset" | "refused" | "failed", "reason"}.
Status ParseModeResults(const json& list, core::AgentSync& s) {
  if (!list.is_array()) {
    return Status::InvalidArgument("field 'gpu_mode_results': expected a list");
  }
  if (list.size() > kMaxModeResults) {
    return Status::InvalidArgument(fmt::format("field 'gpu_mode_results': {} entries; at most {}",
                                               list.size(), kMaxModeResults));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    JsonFields r(list[i], fmt::format("gpu_mode_results[{}]", i));
    r.RejectUnknown({"id", "gpu", "state", "reason"});
    core::GpuModeResult m;
    m.id = r.Int("id", 1, INT64_MAX);
    m.gpu = static_cast<int>(r.Int("gpu", 0, fleet::kMaxGpusPerNode - 1));
    const std::string state = r.String("state");
    m.reason = r.String("reason", false);
    if (r.ok()) {
      const auto parsed = core::ParseModeChangeState(state);
      if (!parsed || *parsed == core::ModeChangeState::kRequested) {
        r.Fail("state",
               fmt::format("'{}' is not applied, pending_reset, refused or failed", Quote(state)));
      } else {
        m.state = *parsed;
      }
    }
    if (m.reason.size() > core::kMaxModeReason) {
      r.Fail("reason", fmt::format("is longer than {} bytes", core::kMaxModeReason));
    }
    TESSERA_RETURN_IF_ERROR(r.first_error());  // "gpu_mode_results[0]: field ...".
    s.gpu_mode_results.push_back(std::move(m));
  }
  return Status::Ok();
}

}  // namespace

Result<core::AgentSync> ParseSync(json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"protocol", "agent_id", "seq", "generation", "wait_ms", "workloads", "logs",
                   "limits", "isolation", "telemetry", "gpu_mode_results", "mig",
                   "mig_repartitions", "shares", "volumes"});
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
  JsonFields shares = f.Object("shares", false);
  if (!shares.absent()) {
    shares.RejectUnknown({"mps", "note"});
    s.shares_mps = shares.Bool("mps");
    s.shares_note = shares.String("note", false);
    if (s.shares_note.size() > 512) shares.Fail("note", "is longer than 512 bytes");
  }
  JsonFields volumes = f.Object("volumes", false);
  if (!volumes.absent()) {
    volumes.RejectUnknown({"enforced", "note", "held"});
    core::VolumeReport report;
    report.enforced = volumes.Bool("enforced");
    report.note = volumes.String("note", false);
    if (report.note.size() > 512) volumes.Fail("note", "is longer than 512 bytes");
    const json* held = volumes.Get("held");
    if (held && !held->is_array()) {
      volumes.Fail("held", "expected a list");
    } else if (held && held->size() > core::Volumes::kMaxPerTenant * 16) {
      volumes.Fail("held", fmt::format("{} entries; too many", held->size()));
    } else if (held) {
      for (size_t i = 0; i < held->size(); ++i) {
        JsonFields v((*held)[i], fmt::format("volumes.held[{}]", i));
        v.RejectUnknown({"id", "used_bytes", "size_bytes", "enforced"});
        std::string id = v.String("id");
        core::VolumeUse use;
        use.used_bytes = v.Int("used_bytes", 0, INT64_MAX);
        use.size_bytes = v.Int("size_bytes", 0, INT64_MAX);
        use.enforced = v.Bool("enforced");
        TESSERA_RETURN_IF_ERROR(v.first_error());
        report.held.emplace_back(std::move(id), use);
      }
    }
    s.volumes = std::move(report);
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
  if (const json* results = f.Get("gpu_mode_results", false)) {
    TESSERA_RETURN_IF_ERROR(ParseModeResults(*results, s));
  }
  if (const json* mig = f.Get("mig", false)) {
    TESSERA_ASSIGN_OR_RETURN(s.mig, ParseMigLayout(*mig));
    s.mig_repartitions = f.Int("mig_repartitions", 0, INT64_MAX, false, 0);
    TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  }
  return s;
}

json DesiredStateJson(const core::DesiredState& d) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  json workloads = json::array();
  for (const core::DesiredWorkload& w : d.workloads) {
    json j = {{"id", w.id},
              {"attempt", w.attempt},
              {"name", w.name},
              {"tenant", w.tenant},
              {"command", w.command},
              {"env", w.env},
              {"cpu_milli", w.cpu_milli},
              {"memory_mib", w.memory_mib},
              {"stop_grace_ms", w.stop_grace_ms}};
    core::AddImageJson(w.image, core::Secrets::kIncluded, j);
    if (!w.volumes.empty()) {
      json volumes = json::array();
      for (const core::DesiredVolume& v : w.volumes) {
        volumes.push_back(
            {{"id", v.id}, {"name", v.name}, {"path", v.path}, {"size_gib", v.size_gib}});
      }
      j["volumes"] = std::move(volumes);
    }
    if (!w.ports.empty()) j["ports"] = w.ports;
    switch (w.action) {
      case core::DesiredWorkload::Action::kStop:
        j["action"] = "stop";
        break;
      case core::DesiredWorkload::Action::kPreempt:
        j["action"] = "preempt";
        j["deadline"] = FormatRfc3339(w.deadline);
        j["reason"] = w.reason;
        break;
      case core::DesiredWorkload::Action::kRun:
        j["action"] = "run";
        if (!w.reserve_port.empty()) j["reserve_port"] = w.reserve_port;
        if (!w.port_env.empty()) j["port_env"] = w.port_env;
        break;
    }
    json load = json::array();
    for (const core::DesiredGpu& g : w.gpus) {
      json l = {{"index", g.index}, {"milli", g.milli}};
      if (!g.mig_profile.empty()) {
        l["mig_profile"] = g.mig_profile;
        l["mig_start"] = g.mig_start;
        l["uuid"] = g.uuid;
      }
      if (g.memory_mib) l["memory_mib"] = *g.memory_mib;
      load.push_back(std::move(l));
    }
    j["gpu_load"] = std::move(load);
    j["log_offset"] = w.log_offset;
    workloads.push_back(std::move(j));
  }
  json faults = json::array();
  for (const core::InjectedFault& f : d.faults)
    faults.push_back({{"id", f.id}, {"fault", f.fault}});
  json mode_requests = json::array();
  for (const core::GpuModeChange& c : d.mode_requests) mode_requests.push_back(c.RequestJson());
  json exec = json::array();
  for (const core::ExecSession& e : d.exec) {
    exec.push_back({{"id", e.id},
                    {"instance", e.instance},
                    {"attempt", e.attempt},
                    {"command", e.command},
                    {"tty", e.tty},
                    {"cols", e.cols},
                    {"rows", e.rows}});
  }
  return {{"protocol", kProtocol},
          {"node", d.node},
          {"faults", std::move(faults)},
          {"generation", d.generation},
          {"lease_ms", duration_cast<milliseconds>(d.lease).count()},
          {"heartbeat_ms", duration_cast<milliseconds>(d.heartbeat).count()},
          {"workloads", std::move(workloads)},
          {"volumes", {{"delete", d.volumes_to_delete}}},
          {"gpu_mode_requests", std::move(mode_requests)},
          {"exec", std::move(exec)}};
}

}  // namespace tessera::api
