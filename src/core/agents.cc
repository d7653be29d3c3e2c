#include "core/agents.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "common/json.h"

namespace tessera::core {

std::string_view IsolationName(Isolation isolation) {
  return isolation == Isolation::kUid ? "uid" : "none";
}

std::optional<Isolation> ParseIsolation(std::string_view name) {
  if (name == "uid") return Isolation::kUid;
  if (name == "none") return Isolation::kNone;
  return std::nullopt;
}

Status CheckAgentTiming(const AgentTiming& timing) {
  using std::chrono::milliseconds;
  if (timing.report_period < milliseconds(100) || timing.report_period > std::chrono::seconds(30)) {
    return Status::InvalidArgument(fmt::format("--report-period {:.1f}s: must be 100ms to 30s",
                                               Seconds(timing.report_period)));
  }
  if (timing.node_timeout < 2 * timing.report_period) {
    return Status::InvalidArgument(fmt::format(
        "--node-timeout {:.1f}s: must be at least twice the report period ({:.1f}s), so that one "
        "late report never makes a node not_ready",
        Seconds(timing.node_timeout), Seconds(timing.report_period)));
  }
  if (timing.outage_bound < Duration::zero() || timing.outage_bound > std::chrono::days(7)) {
    return Status::InvalidArgument(
        fmt::format("--outage-bound {:.1f}s: must be 0 to 7 days", Seconds(timing.outage_bound)));
  }
  return Status::Ok();
}

void AgentSupervisor::Notify(const Instance& inst, const std::string& node) {
  if (AgentNode* joined = Find(node)) {
    if (inst.node == node && IsActive(inst.state)) {
      joined->assigned.insert(inst.id.str());
    } else {
      joined->assigned.erase(inst.id.str());
    }
    Changed(*joined);
    return;
  }
  if (!simulated_ || inst.node != node) return;
  // A simulated agent does at once what it is told.
  if (inst.state == InstanceState::kScheduled) {
    reports_.push_back(
        {inst.id.str(), inst.restarts, InstanceState::kRunning, {}, "", false, {}, {}});
  } else if (inst.state == InstanceState::kStopping ||
             (inst.state == InstanceState::kPreempting && !notice_)) {
    reports_.push_back({inst.id.str(),
                        inst.restarts,
                        InstanceState::kTerminated,
                        {},
                        "stopped by its agent",
                        false,
                        {},
                        {}});
  }
}

void AgentSupervisor::Exited(const Instance& inst, int exit_code) {
  if (!simulated_ || Find(inst.node)) return;
  reports_.push_back({inst.id.str(),
                      inst.restarts,
                      InstanceState::kTerminated,
                      exit_code,
                      "exited",
                      false,
                      {},
                      {}});
}

std::vector<AgentReport> AgentSupervisor::Collect() {
  std::vector<AgentReport> out;
  out.swap(reports_);
  return out;
}

AgentNode* AgentSupervisor::Find(const std::string& name) {
  return const_cast<AgentNode*>(std::as_const(*this).Find(name));
}

const AgentNode* AgentSupervisor::Find(const std::string& name) const {
  auto it = joined_.find(name);
  return it == joined_.end() ? nullptr : &it->second;
}

void AgentSupervisor::Changed(AgentNode& node) {
  ++node.generation;
  changed_.insert(node.name);
}

Result<int64_t> AgentSupervisor::InjectFault(const std::string& name, const std::string& fault) {
  AgentNode* node = Find(name);
  if (!node || !node->registered()) {
    return Status::NotFound(fmt::format("node '{}' has no agent", name));
  }
  const int64_t id = node->next_fault++;
  node->faults.push_back({id, fault});
  if (node->faults.size() > kMaxFaults) node->faults.erase(node->faults.begin());
  Changed(*node);
  return id;
}

Status AgentSupervisor::QueueExec(AgentNode& node, const ExecSession& request, Time now) {
  std::erase_if(node.exec, [now](const ExecSession& e) { return e.expires <= now; });
  if (node.exec.size() >= kMaxWaitingExec) {
    return Status::Unavailable(fmt::format(
        "node '{}' has {} exec sessions waiting for its agent already; try again in a few seconds",
        node.name, node.exec.size()));
  }
  node.exec.push_back(request);
  Changed(node);
  return Status::Ok();
}

void AgentSupervisor::CloseExec(const std::string& node, std::string_view id) {
  AgentNode* n = Find(node);
  if (!n) return;
  std::erase_if(n->exec, [id](const ExecSession& e) { return e.id == id; });
}

void AgentSupervisor::Save(const AgentNode& node, store::Batch& batch) {
  if (!node.simulated) batch.settings.push_back(Record(node));
}

std::pair<std::string, std::string> AgentSupervisor::Record(const AgentNode& node) {
  nlohmann::json j = {{"name", node.name},
                      {"labels", node.labels},
                      {"sharing", catalog::SharingModeName(node.sharing)},
                      {"token_hash", node.token_hash},
                      {"created_at", FormatRfc3339(node.created_at)},
                      {"drained", node.drained},
                      {"inventory", node.inventory}};
  if (node.lost) j["lost"] = true;
  if (!node.address.empty()) j["address"] = node.address;
  if (!node.unhealthy.empty()) j["unhealthy"] = node.UnhealthyJson();
  if (!node.dbe_cleared.empty()) {
    nlohmann::json cleared = nlohmann::json::array();
    for (const auto& [gpu, count] : node.dbe_cleared) {
      cleared.push_back({{"gpu", gpu}, {"count", count}});
    }
    j["dbe_cleared"] = std::move(cleared);
  }
  if (!node.gpu_sharing.empty()) {
    nlohmann::json modes = nlohmann::json::array();
    for (const auto& [gpu, mode] : node.gpu_sharing) {
      modes.push_back({{"gpu", gpu}, {"mode", catalog::SharingModeName(mode)}});
    }
    j["gpu_sharing"] = std::move(modes);
  }
  if (!node.mode_changes.empty()) {
    nlohmann::json changes = nlohmann::json::array();
    for (const auto& [_, change] : node.mode_changes) changes.push_back(change.ToJson());
    j["mode_changes"] = std::move(changes);
    j["next_mode_change"] = node.next_mode_change;
  }
  return {std::string(kRecordPrefix) + node.name, DumpJson(j)};
}

nlohmann::json AgentNode::UnhealthyJson() const {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& [gpu, u] : unhealthy) {
    gpus.push_back({{"gpu", gpu}, {"reason", u.reason}, {"since", FormatRfc3339(u.since)}});
  }
  return gpus;
}

size_t AgentNode::gpu_count() const {
  if (!inventory.is_object()) return 0;
  auto it = inventory.find("gpus");
  return it != inventory.end() && it->is_array() ? it->size() : 0;
}

Result<AgentNode> AgentSupervisor::FromRecord(const std::string& key, const std::string& value) {
  const std::string where = "stored node '" + key + "'";
  auto j = ParseJson(value, where);
  if (!j.ok()) return Status::DataLoss(j.status().message());
  JsonFields f(*j, where);
  AgentNode n;
  n.name = f.String("name");
  n.labels = f.StringMap("labels", false);
  const auto sharing = catalog::ParseSharingMode(f.String("sharing"));
  n.token_hash = f.String("token_hash");
  const std::string created = f.String("created_at");
  n.drained = f.Bool("drained", false);
  n.lost = f.Bool("lost", false);
  n.address = f.String("address", false);
  if (const nlohmann::json* inv = f.Get("inventory", false)) n.inventory = *inv;
  if (const nlohmann::json* list = f.Get("unhealthy", false); list && list->is_array()) {
    for (size_t i = 0; i < list->size(); ++i) {
      JsonFields g((*list)[i], fmt::format("{}: unhealthy[{}]", where, i));
      const auto gpu = static_cast<int>(g.Int("gpu", 0, 1023));
      const std::string reason = g.String("reason");
      auto since = ParseRfc3339(g.String("since"));
      if (!g.ok()) return Status::DataLoss(g.status().message());
      if (!since.ok()) return Status::DataLoss(since.status().WithPrefix(where).message());
      n.unhealthy[gpu] = {reason, *since};
    }
  }
  if (const nlohmann::json* list = f.Get("dbe_cleared", false); list && list->is_array()) {
    for (size_t i = 0; i < list->size(); ++i) {
      JsonFields g((*list)[i], fmt::format("{}: dbe_cleared[{}]", where, i));
      const auto gpu = static_cast<int>(g.Int("gpu", 0, 1023));
      const int64_t count = g.Int("count", 0, INT64_MAX);
      if (!g.ok()) return Status::DataLoss(g.status().message());
      n.dbe_cleared[gpu] = count;
    }
  }
  if (const nlohmann::json* list = f.Get("gpu_sharing", false); list && list->is_array()) {
    for (size_t i = 0; i < list->size(); ++i) {
      JsonFields g((*list)[i], fmt::format("{}: gpu_sharing[{}]", where, i));
      const auto gpu = static_cast<int>(g.Int("gpu", 0, 1023));
      const auto mode = catalog::ParseSharingMode(g.String("mode"));
      if (g.ok() && (!mode || *mode == catalog::SharingMode::kMig)) {
        g.Fail("mode", "is not exclusive or shared");
      }
      if (!g.ok()) return Status::DataLoss(g.status().message());
      n.gpu_sharing[gpu] = *mode;
    }
  }
  if (const nlohmann::json* list = f.Get("mode_changes", false); list && list->is_array()) {
    for (size_t i = 0; i < list->size(); ++i) {
      auto change =
          GpuModeChange::FromJson((*list)[i], fmt::format("{}: mode_changes[{}]", where, i));
      if (!change.ok()) return Status::DataLoss(change.status().message());
      n.next_mode_change = std::max(n.next_mode_change, change->id + 1);
      n.mode_changes[change->gpu] = std::move(*change);
    }
  }
  n.next_mode_change =
      std::max(n.next_mode_change, f.Int("next_mode_change", 1, INT64_MAX, false, 1));
  if (!sharing) f.Fail("sharing", "is not exclusive, mig or shared");
  if (!f.ok()) return Status::DataLoss(f.status().message());
  n.sharing = *sharing;
  auto t = ParseRfc3339(created);
  if (!t.ok()) return Status::DataLoss(t.status().WithPrefix(where).message());
  n.created_at = *t;
  return n;
}

void AgentSupervisor::Park(const std::string& node, SyncWaiter waiter) {
  waiters_[node].push_back(std::move(waiter));
}

void AgentSupervisor::AnswerWaiters(Time now) {
  // Deadlines are checked every kDeadlineScan; changed nodes at once.
  const bool scan = now - last_scan_ >= kDeadlineScan;
  if (scan) last_scan_ = now;
  auto answer = [&](std::map<std::string, std::vector<SyncWaiter>>::iterator it) {
    const AgentNode* node = Find(it->first);
    std::vector<SyncWaiter> keep;
    for (SyncWaiter& w : it->second) {
      // A node that left (its token removed) answers at once.
      if (!node || node->generation > w.after || now >= w.deadline) {
        w.answer();
      } else {
        keep.push_back(std::move(w));
      }
    }
    if (keep.empty()) return waiters_.erase(it);
    it->second = std::move(keep);
    return std::next(it);
  };
  if (scan) {
    for (auto it = waiters_.begin(); it != waiters_.end();) it = answer(it);
  } else {
    for (const std::string& name : changed_) {
      if (auto it = waiters_.find(name); it != waiters_.end()) answer(it);
    }
  }
  changed_.clear();
}

size_t AgentSupervisor::waiting() const {
  size_t n = 0;
  for (const auto& [_, list] : waiters_) n += list.size();
  return n;
}

std::shared_ptr<const telemetry::NodeInfo> AgentNode::SeriesInfo() const {
  auto out = std::make_shared<telemetry::NodeInfo>();
  out->hostname = name;
  out->driver_version = inventory.value("driver_version", "");
  for (const nlohmann::json& g : inventory.value("gpus", nlohmann::json::array())) {
    telemetry::NodeInfo::Gpu gpu;
    gpu.index = g.value("index", 0);
    gpu.uuid = g.value("uuid", "");
    gpu.healthy = !unhealthy.contains(gpu.index);
    gpu.name = g.value("name", "");
    gpu.pci_bus_id = g.value("pci_bus_id", "");
    gpu.mig_enabled = g.value("mig_enabled", false);
    out->gpus.push_back(std::move(gpu));
  }
  return out;
}

std::string_view AgentNode::StateName() const {
  if (!registered()) return "waiting_for_agent";
  return lost || all_gpus_unhealthy() ? "not_ready" : "ready";
}

std::string AgentNode::IsolationNote() const {
  return isolation ? isolation_note
                   : "its agent has not reported how it isolates workloads; until it does, the "
                     "node hosts one tenant's work at a time";
}

}  // namespace tessera::core
