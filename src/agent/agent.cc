#include "agent/agent.h"

#include <fmt/format.h>
#include <httplib.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "agent/container_exec.h"
#include "agent/gpu_devices.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/server_list.h"
#include "common/text.h"

namespace tessera::agent {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;

constexpr int kProtocol = 1;
// Retries of an unreachable server: from the first delay, doubling, to the last.
constexpr milliseconds kFirstRetry{200};
constexpr milliseconds kLastRetry{2000};
// How long a request may take beyond the wait the server was asked for.
constexpr milliseconds kSlack{5000};
// Reports between two telemetry samples sent.
constexpr int64_t kTelemetryEvery = 5;

std::string RandomId() {
  unsigned char bytes[8];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return fmt::format("{:x}", std::chrono::steady_clock::now().time_since_epoch().count());
  }
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

// The server's error message in an answer, or the body as it is.
std::string ErrorMessage(const HttpAnswer& a) {
  auto j = json::parse(a.body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    return j["error"].value("message", a.body);
  }
  return a.body;
}

}  // namespace

std::string WorkloadKey(const std::string& instance, int attempt) {
  return fmt::format("{}-a{}", instance, attempt);
}

bool ParseWorkloadKey(const std::string& key, std::string& instance, int& attempt) {
  const size_t dash = key.rfind("-a");
  if (dash == std::string::npos || dash == 0 || dash + 2 >= key.size()) return false;
  int n = 0;
  for (size_t i = dash + 2; i < key.size(); ++i) {
    if (key[i] < '0' || key[i] > '9' || n > 100'000'000) return false;
    n = n * 10 + (key[i] - '0');
  }
  instance = key.substr(0, dash);
  attempt = n;
  return true;
}

json InventoryJson(const Inventory& inv) {
  json gpus = json::array();
  for (const GpuInfo& g : inv.gpus) {
    json mig = json::array();
    for (const MigDevice& m : g.mig_devices) {
      mig.push_back({{"uuid", m.uuid}, {"profile", m.profile}, {"start", m.start}});
    }
    gpus.push_back({{"index", g.index},
                    {"uuid", g.uuid},
                    {"name", g.name},
                    {"model", g.model},
                    {"memory_mib", g.memory_mib},
                    {"mig_enabled", g.mig_enabled},
                    {"mig_devices", std::move(mig)},
                    {"nvlink_peers", g.nvlink_peers},
                    {"pci_bus_id", g.pci_bus_id}});
  }
  return {{"backend", inv.backend},     {"driver_version", inv.driver_version},
          {"cpu_milli", inv.cpu_milli}, {"memory_mib", inv.memory_mib},
          {"gpus", std::move(gpus)},    {"nvlink_islands", inv.nvlink_islands}};
}

Result<Transport> HttpTransport(const std::string& url, const std::string& token,
                                const std::string& ca_file, const std::string& client_cert,
                                const std::string& client_key) {
  if (client_cert.empty() != client_key.empty()) {
    return Status::InvalidArgument("give --client-cert and --client-key together");
  }
  TESSERA_ASSIGN_OR_RETURN(ServerList list, ServerList::Parse(url, "--server"));
  struct Servers {
    ServerList list;
    std::vector<std::unique_ptr<httplib::Client>> clients;  // One per URL, in the list's order.
  };
  auto servers = std::make_shared<Servers>(Servers{std::move(list), {}});
  for (const std::string& u : servers->list.urls()) {
    // The client certificate proves the node to a server with --client-ca (mutual TLS).
    auto client = client_cert.empty()
                      ? std::make_unique<httplib::Client>(u)
                      : std::make_unique<httplib::Client>(u, client_cert, client_key);
    if (!client->is_valid()) {
      return Status::InvalidArgument(fmt::format(
          "--server: '{}' is not a server URL (http://HOST:PORT or https://HOST:PORT)", Quote(u)));
    }
    if (!ca_file.empty()) client->set_ca_cert_path(ca_file);
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(5);
    client->set_keep_alive(true);
    client->set_tcp_nodelay(true);  // A report is headers then body: no 40 ms Nagle stall.
    servers->clients.push_back(std::move(client));
  }
  // One agent thread uses the clients at a time. A follower's 307 leads to the leader when it
  // is a listed server; an unreachable server, or one that knows no leader, to the next.
  return Transport([servers, token](const std::string& path, const std::string& body,
                                    milliseconds timeout) -> Result<HttpAnswer> {
    const size_t n = servers->clients.size();
    Status last = Status::Unavailable("no server answered");
    for (size_t tries = 0; tries < (n > 1 ? 2 * n : 1); ++tries) {
      httplib::Client& client = *servers->clients[servers->list.index()];
      client.set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(timeout).count() +
                              1);
      httplib::Headers headers = {{"Authorization", "Bearer " + token}};
      httplib::Result r = client.Post(path, headers, body, "application/json");
      if (!r) {
        last = Status::Unavailable(
            fmt::format("{}: {}", servers->list.current(), httplib::to_string(r.error())));
        servers->list.Next();
        continue;
      }
      if (r->status == 307) {
        const std::string location = r->get_header_value("Location");
        last = Status::Unavailable(
            fmt::format("{} follows and sends the agent to {}, which --server does not list",
                        servers->list.current(), Quote(location)));
        if (!servers->list.Follow(location)) servers->list.Next();
        continue;
      }
      if (r->status == 503 && r->body.find("\"no_leader\"") != std::string::npos) {
        last =
            Status::Unavailable(fmt::format("{}: no replica leads yet", servers->list.current()));
        servers->list.Next();
        continue;
      }
      return HttpAnswer{r->status, std::move(r->body)};
    }
    return last;
  });
}

Agent::Agent(AgentOptions options, Transport transport, std::unique_ptr<GpuBackend> gpus,
             std::unique_ptr<WorkloadSupervisor> workloads)
    : options_(options),
      transport_(std::move(transport)),
      gpus_(std::move(gpus)),
      workloads_(std::move(workloads)),
      agent_id_(RandomId()),
      period_(options_.heartbeat) {
  if (options_.exec_dialer) exec_ = std::make_unique<ExecSessions>(options_.exec_dialer);
  if (!options_.mps_control.empty()) {
    // Whether the program is here: an MpsDaemons looks it up once.
    MpsOptions probe;
    probe.control = options_.mps_control;
    probe.root = options_.mps_root;
    probe.stop_at_exit = false;
    MpsDaemons daemons(probe);
    mps_available_ = daemons.available();
    mps_note_ = daemons.note();
  }
  Adopt();
}

void Agent::Adopt() {
  for (const WorkloadStatus& w : workloads_->Poll()) {
    Known k;
    if (!ParseWorkloadKey(w.id, k.instance, k.attempt)) continue;
    k.stop_sent = w.stopping;
    known_[w.id] = std::move(k);
    spdlog::info("adopted workload {} ({})", w.id,
                 w.phase == WorkloadPhase::kRunning ? "running" : "ended");
  }
}

Result<json> Agent::Post(const std::string& path, const json& body, milliseconds timeout) {
  TESSERA_ASSIGN_OR_RETURN(HttpAnswer a, transport_(path, DumpJson(body), timeout));
  if (a.status == 401 || a.status == 403) {
    return Status::PermissionDenied(
        fmt::format("the server refused the node token: {}", ErrorMessage(a)));
  }
  if (a.status == 409) return Status::FailedPrecondition(ErrorMessage(a));
  if (a.status >= 500)
    return Status::Unavailable(fmt::format("HTTP {}: {}", a.status, ErrorMessage(a)));
  if (a.status >= 400) {
    return Status::InvalidArgument(fmt::format("HTTP {}: {}", a.status, ErrorMessage(a)));
  }
  return ParseJson(a.body, "the server's answer");
}

Status Agent::Register() {
  TESSERA_ASSIGN_OR_RETURN(Inventory inv, gpus_->ReadInventory());
  json body = {{"protocol", kProtocol}, {"agent_id", agent_id_}, {"inventory", InventoryJson(inv)}};
  if (!options_.advertise_address.empty()) body["advertise_address"] = options_.advertise_address;
  gpu_count_ = static_cast<int>(inv.gpus.size());
  gpu_uuids_.clear();
  backend_ = inv.backend;
  for (const GpuInfo& g : inv.gpus) gpu_uuids_.push_back(g.uuid);
  if (!options_.mig_record.empty() && options_.catalog != nullptr && gpus_->CanChangeMig()) {
    if (!mig_) {
      mig_ = std::make_unique<MigManager>(
          *gpus_, *options_.catalog, MigManagerOptions{options_.mig_record, options_.mig_adopt});
    }
    TESSERA_RETURN_IF_ERROR(mig_->Load(inv));
    body["mig"] = mig_->LayoutJson();
  }
  register_again_ = false;
  TESSERA_ASSIGN_OR_RETURN(json desired, Exchange("/v1/agent/register", body, kSlack));
  node_ = desired.value("node", "");
  seq_ = 0;
  {
    std::lock_guard lock(metrics_mu_);
    metrics_node_ = telemetry::NodeInfo{node_, inv.driver_version, {}};
    for (const GpuInfo& g : inv.gpus) {
      metrics_node_.gpus.push_back({g.index, g.uuid, g.name, g.pci_bus_id, g.mig_enabled});
    }
  }
  registered_ = true;
  return Status::Ok();
}

std::string Agent::MetricsText() const {
  std::vector<telemetry::Target> targets;
  {
    std::lock_guard lock(metrics_mu_);
    if (metrics_node_.hostname.empty()) return "";
    telemetry::NodeTargets(metrics_node_, metrics_sample_ ? &*metrics_sample_ : nullptr,
                           metrics_holders_, true, targets);
  }
  std::string out;
  telemetry::RenderExposition(targets, out);
  return out;
}

Result<json> Agent::Exchange(const std::string& path, const json& body, milliseconds timeout) {
  const auto sent = std::chrono::steady_clock::now();
  TESSERA_ASSIGN_OR_RETURN(json desired, Post(path, body, timeout));
  lease_ = milliseconds(desired.value("lease_ms", lease_.count()));
  // The server's report period bounds the agent's: it renews leases no later than that.
  period_ = std::min(
      options_.heartbeat,
      std::max(milliseconds(100), milliseconds(desired.value("heartbeat_ms", period_.count()))));
  // The lease counts from when the report was sent: the server saw it no earlier.
  workloads_->RenewLease(
      lease_ - std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - sent));
  Apply(desired);
  return desired;
}

json Agent::Report(milliseconds wait) {
  FinishPulls();
  json workloads = json::array();
  json logs = json::array();
  for (const WorkloadStatus& w : workloads_->Poll()) {
    auto it = known_.find(w.id);
    if (it == known_.end()) continue;
    Known& k = it->second;
    // The log's new bytes first; an exit is reported once they are all shipped.
    bool log_done = true;
    if (k.log_next >= 0) {
      int64_t next = k.log_next;
      auto data = workloads_->ReadLog(w.id, k.log_next, options_.log_chunk_bytes, &next);
      if (data.ok() && !data->empty()) {
        logs.push_back({{"id", k.instance},
                        {"attempt", k.attempt},
                        {"offset", next - static_cast<int64_t>(data->size())},
                        {"data_base64", Base64Encode(*data)}});
        k.log_next = next;
        log_done = data->size() < options_.log_chunk_bytes;
      }
    }
    json r = {{"id", k.instance}, {"attempt", k.attempt}};
    if (w.phase == WorkloadPhase::kRunning || !log_done) {
      r["state"] = "running";
      if (w.started_at_unix_ms > 0) {
        r["started_at"] = FormatRfc3339(Time(std::chrono::milliseconds(w.started_at_unix_ms)));
      }
      if (w.port > 0) r["port"] = w.port;
      if (!w.endpoints.empty()) {
        r["endpoints"] = json::array();
        for (const auto& [port, host_port] : w.endpoints) {
          r["endpoints"].push_back({{"port", port}, {"host_port", host_port}});
        }
      }
    } else {
      r["state"] = "exited";
      r["exit_code"] = w.exit_code;
      r["reason"] = w.reason;
      if (w.lost) r["lost"] = true;
      // A workload may end before any report saw it run: rank 0's port still frees its group.
      if (w.port > 0) r["port"] = w.port;
    }
    workloads.push_back(std::move(r));
  }
  const int64_t now_ms =
      std::chrono::duration_cast<milliseconds>(SystemClock::Get().Now().time_since_epoch()).count();
  for (const auto& [key, k] : known_) {
    if (!k.noop) continue;
    // Nothing runs: it ends when told to stop, or at its notice's deadline, or at once when it
    // could not start.
    const bool ended = (k.stop_sent && now_ms >= k.stop_at_unix_ms) || !k.start_error.empty();
    json r = {{"id", k.instance}, {"attempt", k.attempt}, {"state", ended ? "exited" : "running"}};
    if (k.pull && !ended) {
      std::lock_guard lock(k.pull->mu);
      r["state"] = "pulling";
      r["pull"] = {{"bytes", k.pull->progress.bytes_done},
                   {"total_bytes", k.pull->progress.bytes_total},
                   {"percent", k.pull->progress.percent}};
    } else if (!k.start_error.empty()) {
      r["reason"] = ToValidUtf8("not started: " + k.start_error.substr(0, 240));
    } else if (ended) {
      r["exit_code"] = 0;
      r["reason"] = "stopped";
    }
    workloads.push_back(std::move(r));
  }
  json body = {{"protocol", kProtocol},
               {"agent_id", agent_id_},
               {"seq", ++seq_},
               {"generation", generation_},
               {"wait_ms", wait.count()},
               {"workloads", workloads},
               {"logs", logs}};
  body["limits"] = {{"enforced", workloads_->limits_enforced()},
                    {"note", workloads_->limits_note()}};
  // The server hosts one tenant at a time on a node whose workloads are not apart ("none").
  body["isolation"] = {{"mode", workloads_->isolation()}, {"note", workloads_->isolation_note()}};
  if (mig_) {
    // At each telemetry turn the layout is read again: an operator may have changed it.
    if (seq_ % kTelemetryEvery == 1) mig_->Rescan();
    body["mig"] = mig_->LayoutJson();
    body["mig_repartitions"] = mig_->repartitions();
  }
  body["shares"] = {{"mps", mps_available_}, {"note", mps_note_}};
  if (options_.volumes) {
    json held = json::array();
    for (const HeldVolume& v : options_.volumes->List()) {
      held.push_back({{"id", v.id},
                      {"used_bytes", v.used_bytes},
                      {"size_bytes", v.size_bytes},
                      {"enforced", v.enforced}});
    }
    body["volumes"] = {{"enforced", options_.volumes->enforced()},
                       {"note", options_.volumes->note()},
                       {"held", std::move(held)}};
  }
  if (!mode_results_.empty()) {
    json results = json::array();
    for (const auto& [id, r] : mode_results_) {
      results.push_back({{"id", id}, {"gpu", r.gpu}, {"state", r.state}, {"reason", r.reason}});
    }
    body["gpu_mode_results"] = std::move(results);
  }
  // Telemetry every kTelemetryEvery reports (10 s at the default heartbeat, finer than
  // dcgm-exporter's default 30 s), and at once when a GPU reports an XID event, is lost or found,
  // or counts a new double-bit error: the server takes a sick GPU out of service, and bills its
  // work, as of the report that shows it. An injected fault shows in the next report too.
  auto t = gpus_->Sample();
  if (t.ok()) {
    std::lock_guard lock(metrics_mu_);
    metrics_sample_ = *t;
  }
  if (t.ok()) {
    std::vector<std::pair<bool, int64_t>> faults;
    for (const telemetry::GpuSample& g : t->gpus) faults.emplace_back(g.lost, g.ecc_dbe_total);
    if (seq_ % kTelemetryEvery == 1 || !t->xids.empty() || telemetry_due_ ||
        faults != sent_faults_) {
      body["telemetry"] = telemetry::ToJson(*t);
      telemetry_due_ = false;
      sent_faults_ = std::move(faults);
    }
  }
  return body;
}

Status Agent::SyncOnce(milliseconds wait) {
  return Exchange("/v1/agent/sync", Report(wait), wait + kSlack).status();
}

Status InjectFault(GpuBackend& gpus, const std::string& spec) {
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t colon = spec.find(':', at);
    parts.push_back(spec.substr(at, colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  auto number = [](const std::string& text, int64_t& out) {
    const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && p == text.data() + text.size();
  };
  int64_t gpu = -1, code = 0;
  const bool xid = !parts.empty() && parts[0] == "xid";
  if (parts.size() != (xid ? 3u : 2u) || !number(parts[1], gpu) || gpu < 0 || gpu > 64 ||
      (xid && !number(parts[2], code))) {
    return Status::InvalidArgument(
        fmt::format("fault '{}' is not xid:GPU:CODE, overheat:GPU, cool:GPU, lost:GPU or found:GPU",
                    Quote(spec)));
  }
  return gpus.InjectFault(parts[0], static_cast<int>(gpu), code);
}

void Agent::Apply(const json& desired) {
  generation_ = desired.value("generation", generation_);
  if (desired.contains("faults") && desired["faults"].is_array()) {
    for (const json& f : desired["faults"]) {
      const int64_t id = f.is_object() ? f.value("id", int64_t{0}) : 0;
      if (id <= last_fault_) continue;
      last_fault_ = id;
      const std::string spec = f.value("fault", "");
      if (Status s = InjectFault(*gpus_, spec); !s.ok()) {
        spdlog::warn("fault {} from the server: {}", Quote(spec), s.message());
      } else {
        spdlog::info("injected fault {}", Quote(spec));
        telemetry_due_ = true;
      }
    }
  }
  const json empty = json::array();
  const json& list = desired.contains("workloads") && desired["workloads"].is_array()
                         ? desired["workloads"]
                         : empty;
  std::set<std::string> wanted;
  std::map<int, int> load;  // GPU index -> milli-GPU its workloads hold.
  if (mig_) {
    // The devices of instances that ended go before new ones are made: a new grant may lie on
    // their slices.
    std::set<std::string> live;
    for (const json& w : list) {
      if (w.is_object()) live.insert(w.value("id", ""));
    }
    for (const WorkloadStatus& s : workloads_->Poll()) {
      auto k = known_.find(s.id);
      if (k != known_.end() && s.phase == WorkloadPhase::kRunning) live.insert(k->second.instance);
    }
    mig_->Release(live);
  }
  // What each tenant's shares add up to per GPU, before any new one starts under MPS.
  share_limits_.clear();
  for (const json& w : list) {
    if (!w.is_object() || w.value("action", "run") != "run" || !w.contains("gpu_load") ||
        !w["gpu_load"].is_array()) {
      continue;
    }
    int64_t uid = workloads_->PlannedUid(w.value("tenant", ""));
    if (uid < 0) uid = geteuid();
    for (const json& g : w["gpu_load"]) {
      if (!g.is_object() || g.contains("mig_profile") || g.value("milli", 1000) >= 1000) continue;
      auto& [pct, mib] = share_limits_[{g.value("index", 0), uid}];
      pct = std::max(pct, std::clamp(g.value("milli", 0) / 10, 1, 100));
      mib += std::max<int64_t>(1, g.value("memory_mib", int64_t{1}));
    }
  }
  std::vector<MigLoad> mig_loads;
  std::vector<telemetry::Holder> holders;
  const bool simulated = gpus_->SimulatesLoad();
  const auto now = std::chrono::steady_clock::now();
  const bool read_cpu = simulated && now - cpu_read_at_ >= std::chrono::seconds(1);
  if (read_cpu) cpu_read_at_ = now;
  const std::map<std::string, double> cpu =
      read_cpu ? workloads_->CpuSeconds() : std::map<std::string, double>{};
  for (const json& w : list) {
    if (!w.is_object()) continue;
    const std::string id = w.value("id", "");
    const int attempt = w.value("attempt", 0);
    const std::string key = WorkloadKey(id, attempt);
    const std::string action = w.value("action", "run");
    wanted.insert(key);
    auto it = known_.find(key);
    if (it == known_.end() && action != "run") {
      // Not started by this agent run (the last one's, or one that died with its server): stop
      // it if the supervisor still holds it, and either way report it ended once stopped, so
      // the server does not wait for it for ever.
      Known k;
      k.instance = id;
      k.attempt = attempt;
      k.stop_sent = true;
      const milliseconds grace(w.value("stop_grace_ms", int64_t{10'000}));
      k.noop = !workloads_->Stop(key, grace).ok();
      known_.emplace(key, std::move(k));
      continue;
    }
    if (it == known_.end()) {
      Known k;
      k.instance = id;
      k.attempt = attempt;
      const std::string command = w.value("command", "");
      const std::string image = w.value("image", "");
      if (command.empty() && image.empty()) {
        k.noop = true;
      } else {
        WorkloadSpec spec;
        spec.id = key;
        spec.tenant = w.value("tenant", "");
        spec.command = command;
        if (w.contains("env") && w["env"].is_object()) {
          for (const auto& [name, value] : w["env"].items()) {
            if (value.is_string()) spec.env.emplace_back(name, value.get<std::string>());
          }
        }
        spec.cpu_milli = w.value("cpu_milli", int64_t{0});
        spec.memory_mib = w.value("memory_mib", int64_t{0});
        spec.reserve_port = w.value("reserve_port", "");
        for (const json& p : w.value("ports", json::array())) {
          if (p.is_number_integer()) spec.ports.push_back(p.get<int>());
        }
        if (w.contains("port_env") && w["port_env"].is_array()) {
          for (const json& name : w["port_env"]) {
            if (name.is_string()) spec.port_env.push_back(name.get<std::string>());
          }
        }
        Status s = PrepareVolumes(w, spec);
        if (s.ok()) s = PrepareMig(id, w, spec);
        if (s.ok()) s = PrepareMps(w, spec);
        if (!s.ok()) {
          spdlog::error("starting {}: {}", key, s.message());
          k.noop = true;
          k.start_error = s.message();
        } else if (image.empty()) {
          StartNow(k, spec);
        } else {
          StartWithImage(k, std::move(spec), w);
        }
      }
      k.sim_load = SimLoadOf(w);
      it = known_.emplace(key, std::move(k)).first;
    }
    Known& k = it->second;
    if (read_cpu && !k.sim_load) UpdateActivity(k, cpu, key, now);
    // The server says how much of the log it holds: ship from there (again, after it restarted
    // or lost a report).
    k.log_next = w.value("log_offset", std::max<int64_t>(k.log_next, 0));
    const milliseconds grace(w.value("stop_grace_ms", int64_t{10'000}));
    if (action == "stop" && !k.stop_sent) {
      k.stop_sent = true;
      if (!k.noop) (void)workloads_->Stop(key, grace);
    } else if (action == "preempt" && !k.stop_sent) {
      k.stop_sent = true;
      auto deadline = ParseRfc3339(w.value("deadline", ""));
      const int64_t at =
          deadline.ok()
              ? std::chrono::duration_cast<milliseconds>(deadline->time_since_epoch()).count()
              : 0;
      k.stop_at_unix_ms = at;
      if (!k.noop) (void)workloads_->Preempt(key, at, w.value("reason", "spot preemption"), grace);
    }
    if (action == "run" && w.contains("gpu_load") && w["gpu_load"].is_array()) {
      for (const json& g : w["gpu_load"]) {
        if (!g.is_object()) continue;
        // A real GPU reports its own use; a simulated one reads what the workload does with it.
        const double busy = !simulated ? 1.0 : k.sim_load ? *k.sim_load : k.activity;
        load[g.value("index", 0)] += static_cast<int>(std::lround(g.value("milli", 0) * busy));
        holders.push_back(telemetry::Holder{g.value("index", 0), id, w.value("tenant", ""),
                                            g.value("milli", 1000), g.value("mig_profile", ""),
                                            g.value("mig_start", 0), -1});
        if (g.contains("mig_profile")) {
          mig_loads.push_back(MigLoad{g.value("index", 0), g.value("mig_start", 0),
                                      g.value("mig_profile", ""),
                                      static_cast<int>(std::lround(1000 * busy))});
        }
      }
    }
  }
  // What the node no longer holds: stopped if it runs, forgotten once ended.
  std::map<std::string, WorkloadPhase> phase;
  for (const WorkloadStatus& w : workloads_->Poll()) phase[w.id] = w.phase;
  for (auto it = known_.begin(); it != known_.end();) {
    if (wanted.count(it->first)) {
      ++it;
      continue;
    }
    Known& k = it->second;
    auto p = phase.find(it->first);
    if (k.noop || p == phase.end() || p->second == WorkloadPhase::kExited) {
      if (!k.noop && p != phase.end()) (void)workloads_->Forget(it->first);
      it = known_.erase(it);
      continue;
    }
    if (!k.stop_sent) {
      k.stop_sent = true;
      spdlog::info("stopping {}: the node no longer holds it", it->first);
      (void)workloads_->Stop(it->first, milliseconds(10'000));
    }
    ++it;
  }
  if (mig_) {
    // A MIG device goes once its instance is no longer the node's and nothing of it runs.
    std::set<std::string> live;
    for (const auto& [key, k] : known_) live.insert(k.instance);
    mig_->Release(live);
  }
  ApplyModeRequests(desired);
  RemoveVolumes(desired);
  ApplyExec(desired, phase);
  if (mps_available_) {
    // Daemons of GPUs, and servers of uids, that hold no share any more are stopped.
    std::map<int64_t, std::map<int, std::set<int64_t>>> by_uid;
    for (const auto& [key, limits] : share_limits_)
      by_uid[key.second][key.first].insert(key.second);
    for (auto& [uid, daemons] : mps_) daemons->Reconcile(by_uid[uid]);
  }
  for (int g = 0; g < gpu_count_; ++g) gpus_->SetLoad(g, std::min(1000, load[g]));
  gpus_->SetMigLoads(std::move(mig_loads));
  std::lock_guard lock(metrics_mu_);
  metrics_holders_ = std::move(holders);
}

// TESSERA_SIM_LOAD in a workload's environment: how busy it keeps a simulated GPU, 0-100 percent.
// Unset, or not a number in range: nullopt (its CPU use decides).
std::optional<double> Agent::SimLoadOf(const json& w) {
  if (!w.contains("env") || !w["env"].is_object()) return std::nullopt;
  const json& v = w["env"].value("TESSERA_SIM_LOAD", json());
  if (!v.is_string()) return std::nullopt;
  const std::string text = v.get<std::string>();
  char* end = nullptr;
  const double pct = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(pct >= 0 && pct <= 100)) return std::nullopt;
  return pct / 100;
}

void Agent::UpdateActivity(Known& k, const std::map<std::string, double>& cpu,
                           const std::string& key, std::chrono::steady_clock::time_point now) {
  auto used = cpu.find(key);
  if (k.noop || used == cpu.end()) {
    k.activity = 0;  // Nothing runs: an idle GPU.
    k.cpu_seconds = -1;
    return;
  }
  if (k.cpu_seconds < 0) {
    k.cpu_seconds = used->second;
    k.cpu_at = now;
    return;
  }
  const double wall = std::chrono::duration<double>(now - k.cpu_at).count();
  if (wall < 1) return;  // Over a second at least, or the reading is noise.
  k.activity = std::clamp((used->second - k.cpu_seconds) / wall, 0.0, 1.0);
  k.cpu_seconds = used->second;
  k.cpu_at = now;
}

Status Agent::Run() {
  milliseconds retry = kFirstRetry;
  bool registered = false;
  while (!stop_) {
    const auto start = std::chrono::steady_clock::now();
    if (register_again_) registered = false;  // A GPU's mode changed: a new inventory.
    Status s = !registered          ? Register()
               : options_.long_poll ? SyncOnce(period_)
                                    : SyncOnce(milliseconds(0));
    if (s.ok()) {
      if (!registered) spdlog::info("registered node {} with the server", node_);
      registered = true;
      retry = kFirstRetry;
      if (!options_.long_poll) std::this_thread::sleep_until(start + period_);
      continue;
    }
    if (s.code() == StatusCode::kPermissionDenied || s.code() == StatusCode::kInvalidArgument ||
        s.code() == StatusCode::kNotFound || s.code() == StatusCode::kDataLoss) {
      return s;
    }
    if (s.code() == StatusCode::kFailedPrecondition && !registered) return s;
    if (s.code() == StatusCode::kFailedPrecondition) {
      // The server restarted or another run took over: register again.
      spdlog::warn("{}; registering again", s.message());
      registered = false;
      continue;
    }
    spdlog::warn("cannot reach the server: {}; retrying in {} ms", s.message(), retry.count());
    std::this_thread::sleep_for(retry);
    retry = std::min(kLastRetry, retry * 2);
  }
  return Status::Ok();
}

}  // namespace tessera::agent
