// NodeHealth (node_health.h): a node removed by an operator, a node gone silent and its lease
// run out, and a GPU taken out of service.
#include "core/node_health.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/text.h"
#include "core/gpu_health.h"
#include "core/invariant.h"

namespace tessera::core {

namespace {

// How often leases are checked.
constexpr auto kLeaseCheckEvery = std::chrono::milliseconds(200);

}  // namespace

Result<NodeHealth::Removal> NodeHealth::RemoveNode(const std::string& name, bool force,
                                                   store::Batch& batch) {
  AgentNode* node = agents_->Find(name);
  if (!node || node->simulated) {
    if (fleet_->Find(name).ok()) {
      return Status::FailedPrecondition(fmt::format(
          "node '{}' comes from the fleet file (--fleet): take it out of the file and restart the "
          "server",
          name));
    }
    return Status::NotFound(fmt::format("node '{}' not found", Quote(name)));
  }
  // Up to 5 names, and how many in all.
  auto named = [](const std::vector<std::string>& ids) {
    std::vector<std::string> shown(ids.begin(), ids.begin() + std::min<size_t>(ids.size(), 5));
    return fmt::format("{}{}", fmt::join(shown, ", "), ids.size() > 5 ? ", ..." : "");
  };
  std::vector<std::string> volumes;
  for (const Volume* v : volumes_->All()) {
    if (v->node == name && !v->deleting) volumes.push_back(v->tenant + "/" + v->name);
  }
  if (!volumes.empty()) {
    return Status::FailedPrecondition(fmt::format(
        "node '{}' holds {} volume(s) ({}): a volume lives on its node and cannot move; delete "
        "them first",
        name, volumes.size(), named(volumes)));
  }
  if (!node->removing) {
    const std::vector<std::string> work(node->assigned.begin(), node->assigned.end());
    if (!work.empty() && !force) {
      return Status::FailedPrecondition(fmt::format(
          "node '{}' runs {} instance(s) ({}): stop them, or remove it with force, which moves "
          "them",
          name, work.size(), named(work)));
    }
    spdlog::warn("node {} being removed by an operator; {} instance(s) move", name, work.size());
    node->removing = true;
    node->drained = true;
    lifecycle_->ApplyNodeState(*node);
    AgentSupervisor::Save(*node, batch);
    if (!node->lost) {
      // Its agent is heard: moved at once, as for a GPU fault, and told to stop the old copies.
      const std::string why = fmt::format("node {} removed by an operator", name);
      for (const std::string& id : work) {
        Instance* inst = instances_->Find(id);
        if (!inst || !inst->assignment || inst->node != name) continue;
        NoteInterruption(*inst, "node_removed", -1, "");
        lifecycle_->Displace(*inst, why, batch);
      }
    }  // A lost node's work moves at its fence time, as any lost node's (ExpireLeases).
    agents_->Changed(*node);
    // With copies to stop, it waits until its agent has received the order.
    node->remove_after = !work.empty() && !node->lost ? node->generation : 0;
    removing_.insert(name);
  }
  if (FinishRemoval(*node, batch)) return Removal{true, ""};
  return Removal{false, node->assigned.empty()
                            ? "waiting for its agent to receive the order to stop its work"
                            : fmt::format("{} instance(s) move once the lost node's lease has "
                                          "run out",
                                          node->assigned.size())};
}

void NodeHealth::FinishRemovals(store::Batch& batch) {
  if (removing_.empty()) return;
  const std::set<std::string> removing = removing_;
  for (const std::string& name : removing) {
    AgentNode* node = agents_->Find(name);
    if (!node) {
      removing_.erase(name);
    } else {
      FinishRemoval(*node, batch);
    }
  }
}

bool NodeHealth::FinishRemoval(AgentNode& node, store::Batch& batch) {
  if (!node.assigned.empty()) return false;
  // A move under way may still hold a place here (Instance::move_to): it is let go when its share
  // stops, since the node is no longer ready (Instances::FinishMove).
  if (auto n = fleet_->Find(node.name); n.ok() && fleet_->node(*n).workloads > 0) return false;
  // Its agent has received the desired state without its work (so the copies are stopping, the
  // shims see to it), or there is no agent to tell.
  if (node.registered() && !node.lost && node.acked_generation < node.remove_after) return false;
  const std::string name = node.name;
  node_gpus_->ReleaseMigHolds(node);
  std::vector<std::pair<std::string, std::string>> gone;  // Nothing is left to remove their data.
  for (const Volume* v : volumes_->Deleting()) {
    if (v->node == name) gone.emplace_back(v->tenant, v->name);
  }
  for (const auto& [tenant, volume] : gone) volumes_->Erase(tenant, volume, batch);
  if (auto n = fleet_->Find(name); n.ok()) {
    CheckInvariant(fleet_->RemoveNode(*n), fmt::format("removing node {}", name));
    admission_->FleetChanged();
    accounts_->FleetChanged();  // The fleet's GPUs by model are counted again.
  }
  tenants_->SetNodeToken(name, "");
  batch.deleted_settings.push_back(AgentSupervisor::Record(node).first);
  batch.deleted_settings.push_back("node_state/" + name);
  agents_->nodes().erase(name);
  removing_.erase(name);
  spdlog::info("node {} removed from the fleet", name);
  return true;
}

void NodeHealth::ExpireLeases(store::Batch& batch) {
  const Time now = clock_->Now();
  if (now - last_lease_check_ < kLeaseCheckEvery) return;
  if (now - last_lease_check_ > options_->node_timeout) {
    // No check for a whole node timeout: the server was stopped, suspended or stalled, and heard
    // nobody meanwhile. Silence counts only from now, as after a start. (The what-if
    // simulator's clock jumps too; it has no joined nodes to say it for.)
    if (!agents_->nodes().empty()) {
      spdlog::warn(
          "no lease check for {:.1f} s: the server was not running; every node gets a "
          "whole node timeout to report",
          Seconds(now - last_lease_check_));
    }
    up_since_ = now;
  }
  last_lease_check_ = now;
  const AgentTiming t = timing();
  for (auto& [name, node] : agents_->nodes()) {
    if (!node.registered()) continue;
    const Time heard = std::max(node.last_seen, up_since_);
    if (!node.lost && now - heard > t.node_timeout) NodeSilent(node, heard, batch);
    if (!node.lost || node.assigned.empty() || now - heard < t.fence()) continue;
    // Its lease ran out and its workloads' kill grace passed: no copy can still run there.
    spdlog::warn("node {} lost: no report for {:.1f} s; moving its {} instance(s)", name,
                 Seconds(now - heard), node.assigned.size());
    const std::string why =
        fmt::format("node lost: no report since {}", FormatRfc3339(node.last_seen));
    const std::set<std::string> held = node.assigned;
    for (const std::string& id : held) {
      Instance* inst = instances_->Find(id);
      if (!inst) continue;
      if (inst->assignment && inst->node == name) NoteInterruption(*inst, "node_lost", -1, "");
      lifecycle_->Displace(*inst, why, batch);
    }
    agents_->Changed(node);
  }
}

void NodeHealth::NodeSilent(AgentNode& node, Time heard, store::Batch& batch) {
  node.lost = true;
  ++counters_->nodes_lost;
  const Time moves_at = heard + timing().fence();
  spdlog::warn(
      "node {} not_ready: no report for {:.1f} s (node timeout {:.1f} s); its {} instance(s) "
      "move at {} unless it reports again",
      node.name, Seconds(clock_->Now() - heard), Seconds(options_->node_timeout),
      node.assigned.size(), FormatRfc3339(moves_at));
  // What ran there is billed to the last report that showed it running.
  const int64_t last = billing::UnixSeconds(node.last_seen);
  const std::string why = fmt::format(
      "node {} not_ready: no report since {}; billed to then; moves at {} unless the "
      "node reports again",
      node.name, FormatRfc3339(node.last_seen), FormatRfc3339(moves_at));
  for (const std::string& id : node.assigned) {
    Instance* inst = instances_->Find(id);
    if (!inst || inst->node != node.name) continue;
    if (inst->meter) {
      accounts_->Close(*inst, billing::Ending::kPlatform, batch,
                       std::max(inst->meter->since, last));
    }
    lifecycle_->Note(*inst, why, batch);
  }
  lifecycle_->ApplyNodeState(node);
  agents_->Changed(node);
  AgentSupervisor::Save(node, batch);
}

void NodeHealth::NodeHeardAgain(AgentNode& node, store::Batch& batch) {
  node.lost = false;
  spdlog::info("node {} reports again: ready", node.name);
  const Time now = clock_->Now();
  for (const std::string& id : node.assigned) {
    Instance* inst = instances_->Find(id);
    if (!inst || inst->node != node.name || inst->state != InstanceState::kRunning || inst->meter) {
      continue;
    }
    accounts_->Open(*inst, now);
    inst->meter->billed = billing::kMinimumSeconds;  // A resumption is not a start.
    lifecycle_->Note(*inst, fmt::format("node {} reports again; billing resumes", node.name),
                     batch);
  }
  lifecycle_->ApplyNodeState(node);
  lifecycle_->CapacityFreed();
  agents_->Changed(node);
  AgentSupervisor::Save(node, batch);
}

void NodeHealth::CheckGpuHealth(AgentNode& node, store::Batch& batch) {
  if (!node.telemetry) return;
  for (const GpuFault& f : FindGpuFaults(*node.telemetry, node.dbe_cleared)) {
    if (f.gpu < 0 || static_cast<size_t>(f.gpu) >= node.gpu_count()) continue;
    if (node.unhealthy.contains(f.gpu)) continue;
    TakeGpuOutOfService(node, f.gpu, f.reason, batch);
    if (f.node_restart && !node.drained) {
      spdlog::warn("node {} drained: {} on GPU {}", node.name, f.reason, f.gpu);
      (void)SetNodeDrained(node.name, true, batch);
    }
  }
}

void NodeHealth::TakeGpuOutOfService(AgentNode& node, int gpu, const std::string& reason,
                                     store::Batch& batch) {
  node.unhealthy[gpu] = {reason, clock_->Now()};
  ++counters_->gpus_unhealthy;
  spdlog::warn("node {}: GPU {} out of service: {}", node.name, gpu, reason);
  GpuHealthChanged(node, batch);
  const std::string why =
      fmt::format("GPU {} of node {} out of service: {}", gpu, node.name, reason);
  const std::set<std::string> held = node.assigned;
  for (const std::string& id : held) {
    Instance* inst = instances_->Find(id);
    if (!inst || !inst->assignment || inst->node != node.name) continue;
    const bool on_it = std::any_of(inst->gpus.begin(), inst->gpus.end(),
                                   [gpu](const GpuRef& g) { return g.index == gpu; });
    if (!on_it) continue;
    NoteInterruption(*inst, "gpu_unhealthy", gpu, reason);
    lifecycle_->Displace(*inst, why, batch);
  }
}

void NodeHealth::NoteInterruption(const Instance& inst, std::string cause, int gpu,
                                  std::string fault) {
  monitoring_->NoteInterruption({clock_->Now(), inst.tenant.str(), inst.id.str(), inst.node,
                                 std::move(cause), std::move(fault), gpu});
}

void NodeHealth::GpuHealthChanged(AgentNode& node, store::Batch& batch) {
  node.info = node.SeriesInfo();  // Its series' tessera_gpu_healthy.
  lifecycle_->ApplyNodeState(node);
  agents_->Changed(node);
  AgentSupervisor::Save(node, batch);
}

Status NodeHealth::SetGpuHealth(const std::string& name, int gpu, bool healthy,
                                const std::string& reason, store::Batch& batch) {
  AgentNode* node = agents_->Find(name);
  if (!node || !node->registered()) {
    return Status::NotFound(fmt::format("node '{}' has no agent", name));
  }
  if (gpu < 0 || static_cast<size_t>(gpu) >= node->gpu_count()) {
    return Status::NotFound(
        fmt::format("node '{}' has no GPU {} (it has {})", name, gpu, node->gpu_count()));
  }
  if (!healthy) {
    if (!node->unhealthy.contains(gpu)) {
      TakeGpuOutOfService(*node, gpu, reason.empty() ? "taken out by an operator" : reason, batch);
    }
    return Status::Ok();
  }
  if (node->unhealthy.erase(gpu) == 0) return Status::Ok();
  // The driver's double-bit count lasts until the GPU is reset: what it says now is accepted.
  if (node->telemetry) {
    for (const telemetry::GpuSample& g : node->telemetry->gpus) {
      if (g.index == gpu) node->dbe_cleared[gpu] = g.ecc_dbe_total;
    }
  }
  spdlog::info("node {}: GPU {} back in service", name, gpu);
  GpuHealthChanged(*node, batch);
  lifecycle_->CapacityFreed();
  return Status::Ok();
}

Status NodeHealth::SetNodeDrained(const std::string& node, bool drained, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex n, fleet_->Find(node));
  if (AgentNode* joined = agents_->Find(node)) {
    // A lost node stays down until its agent reports; the flag applies then.
    joined->drained = drained;
    lifecycle_->ApplyNodeState(*joined);
    AgentSupervisor::Save(*joined, batch);
  } else {
    TESSERA_RETURN_IF_ERROR(
        fleet_->SetNodeState(n, drained ? fleet::NodeState::kDraining : fleet::NodeState::kReady));
  }
  batch.settings.emplace_back("node_state/" + node, drained ? "draining" : "ready");
  if (!drained) lifecycle_->CapacityFreed();
  return Status::Ok();
}

}  // namespace tessera::core
