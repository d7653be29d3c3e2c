// AgentHub (agent_hub.h): nodes joined by agents, their registrations and reports, and what each
// agent is told. What the reports say about instances is applied in instance_reports.cc; a node's
// loss, removal and GPU faults in node_health.cc.
#include "core/agent_hub.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/json.h"
#include "common/text.h"
#include "core/inventory.h"

namespace tessera::core {

Result<AgentNode> AgentHub::CreateNode(const std::string& name,
                                       std::map<std::string, std::string> labels,
                                       catalog::SharingMode sharing, const std::string& token_hash,
                                       store::Batch& batch) {
  if (!IsValidIdBody(name)) {
    return Status::InvalidArgument(fmt::format(
        "field 'name': '{}' must be 1-63 characters of [a-z0-9._-], starting with a letter or "
        "digit",
        Quote(name)));
  }
  if (sharing == catalog::SharingMode::kMig) {
    return Status::InvalidArgument(
        "field 'sharing': GPUs in MIG mode are found by the agent; give exclusive or shared");
  }
  if (agents_->Find(name) || fleet_->Find(name).ok()) {
    return Status::AlreadyExists(fmt::format("a node named '{}' exists", name));
  }
  AgentNode node;
  node.name = name;
  node.labels = std::move(labels);
  node.sharing = sharing;
  node.token_hash = token_hash;
  node.created_at = clock_->Now();
  node.last_seen = node.created_at;
  AgentNode& stored = agents_->nodes().emplace(name, std::move(node)).first->second;
  AgentSupervisor::Save(stored, batch);
  tenants_->SetNodeToken(name, token_hash);
  return stored;
}

Status AgentHub::AttachSimulated(const std::string& name, const std::string& token_hash) {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex index, fleet_->Find(name));
  AgentNode node;
  node.name = name;
  node.simulated = true;
  node.token_hash = token_hash;
  node.created_at = node.last_seen = clock_->Now();
  AgentNode& attached = agents_->nodes().insert_or_assign(name, std::move(node)).first->second;
  attached.drained = fleet_->node(index).state == fleet::NodeState::kDraining;
  // What recovery booked on the node is its agent's to run.
  instances_->ForEach([&](const Instance& inst) {
    if (inst.node != name || !IsActive(inst.state)) return;
    attached.assigned.insert(inst.id.str());
    // Its billing stopped when the node went silent before the restart: it resumes with a report.
    if (inst.state == InstanceState::kRunning && !inst.meter) attached.lost = true;
  });
  // Its agent runs real processes: one tenant until it says more.
  lifecycle_->ApplyNodeState(attached);
  tenants_->SetNodeToken(name, token_hash);
  return Status::Ok();
}

Status AgentHub::RotateToken(const std::string& name, const std::string& token_hash,
                             store::Batch& batch) {
  AgentNode* node = agents_->Find(name);
  if (!node) return Status::NotFound(fmt::format("node '{}' not found", name));
  node->token_hash = token_hash;
  AgentSupervisor::Save(*node, batch);
  tenants_->SetNodeToken(name, token_hash);  // The previous token stops at once.
  return Status::Ok();
}

Status AgentHub::Register(const std::string& name, const AgentRegistration& reg,
                          store::Batch& batch) {
  AgentNode* node = agents_->Find(name);
  if (!node) return Status::NotFound(fmt::format("node '{}' not found", name));
  if (reg.agent_id.empty() || reg.agent_id.size() > 64 || !IsPrintableAscii(reg.agent_id)) {
    return Status::InvalidArgument("field 'agent_id': must be 1-64 printable ASCII characters");
  }
  if (!reg.address.empty() && !IsHostAddress(reg.address)) {
    return Status::InvalidArgument(fmt::format(
        "field 'advertise_address': {} is not an IP address or a DNS name", Quote(reg.address)));
  }
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeSpec spec, NodeSpecOf(*catalog_, *node, reg.inventory));
  NodeGpus::Effects effects;
  // A GPU is in one node: a UUID another node holds is a copied inventory or a lying agent.
  for (size_t n = 0; n < fleet_->size(); ++n) {
    const fleet::Node& other = fleet_->node(fleet::NodeIndex(static_cast<uint32_t>(n)));
    if (other.name == name) continue;
    for (const fleet::Gpu& g : other.gpus) {
      if (g.uuid.empty()) continue;
      if (auto it = std::find(spec.gpu_uuids.begin(), spec.gpu_uuids.end(), g.uuid);
          it != spec.gpu_uuids.end()) {
        return Status::FailedPrecondition(fmt::format(
            "field 'inventory.gpus[{}].uuid': '{}' is a GPU of node '{}'; a GPU is in one node",
            it - spec.gpu_uuids.begin(), Quote(g.uuid), other.name));
      }
    }
  }
  if (auto existing = fleet_->Find(name); existing.ok()) {
    const fleet::Node& n = fleet_->node(*existing);
    const bool same = node->simulated
                          ? spec.gpus == static_cast<int>(n.gpus.size()) &&
                                spec.gpu_model == (n.model.valid() ? catalog_->gpu(n.model).id : "")
                          : SameHardware(spec, n, *catalog_);
    if (!same && node->simulated) {
      return Status::FailedPrecondition(
          fmt::format("node '{}' of the fleet file has {} GPUs; its simulated agent reports {}",
                      name, n.gpus.size(), DescribeNode(spec)));
    }
    if (!same) {
      return Status::FailedPrecondition(fmt::format(
          "node '{}' joined with {}; its agent now reports {} (GPU uuids or sizes changed): a "
          "node's hardware cannot change while it is in the fleet",
          name, DescribeNode(NodeSpecOf(*catalog_, *node, node->inventory).value()),
          DescribeNode(spec)));
    }
    // The operator's MIG devices are booked again from this registration's report, after the
    // GPUs took their modes.
    node_gpus_->ReleaseMigHolds(*node);
    node->mig.clear();
    node_gpus_->FollowInventory(*node, spec, effects);  // A GPU whose MIG mode changed.
  } else {
    auto added = fleet_->AddNode(spec);
    if (!added.ok()) return added.status().WithPrefix("inventory");
    admission_->FleetChanged();
    lifecycle_->CapacityFreed();
    spdlog::info("node {} joined: {}", name, DescribeNode(spec));
  }
  node->inventory = reg.inventory;
  node->mig.clear();  // The inventory's devices are the registration's until the report's.
  if (reg.mig) {
    node_gpus_->ApplyMigLayout(*node, *reg.mig, -1, batch, effects);
  } else {
    node_gpus_->ReleaseMigHolds(*node);  // An agent that does not report them.
  }
  Follow(*node, effects);
  node->info = node->SeriesInfo();
  node->address = reg.address;
  if (node->agent_id != reg.agent_id) {
    spdlog::info("node {}: agent run {} registered", name, Quote(reg.agent_id));
    // A new run may have lost its powers (restarted as another user): what the last one said
    // about isolation holds for it only once it says so too.
    node->isolation.reset();
    node->isolation_note.clear();
  }
  node->agent_id = reg.agent_id;
  node->report_seq = -1;
  node->last_seen = clock_->Now();
  if (node->lost) health_->NodeHeardAgain(*node, batch);
  lifecycle_->ApplyNodeState(*node);
  agents_->Changed(*node);
  AgentSupervisor::Save(*node, batch);
  return Status::Ok();
}

Result<bool> AgentHub::Sync(const std::string& name, const AgentSync& sync, store::Batch& batch) {
  AgentNode* node = agents_->Find(name);
  if (!node) return Status::NotFound(fmt::format("node '{}' not found", name));
  if (!node->registered() || node->agent_id.empty()) {
    ++counters_->agent_reports_refused;
    return Status::FailedPrecondition(
        "this agent has not registered since the server started: POST /v1/agent/register first");
  }
  if (sync.agent_id != node->agent_id) {
    ++counters_->agent_reports_refused;
    return Status::FailedPrecondition(fmt::format(
        "agent run '{}' was superseded by '{}', which registered this node since; register "
        "again",
        Quote(sync.agent_id), Quote(node->agent_id)));
  }
  if (sync.seq <= node->report_seq) {
    ++counters_->agent_reports_refused;
    return Status::FailedPrecondition(fmt::format(
        "report {} replayed: reports up to {} were applied already", sync.seq, node->report_seq));
  }
  node->acked_generation = std::max(node->acked_generation, sync.generation);
  if (sync.telemetry) {
    // Readings of GPUs the node does not have would become series of GPUs nobody has.
    const size_t gpus = node->gpu_count();
    for (size_t i = 0; i < sync.telemetry->gpus.size(); ++i) {
      if (static_cast<size_t>(sync.telemetry->gpus[i].index) >= gpus) {
        ++counters_->agent_reports_refused;
        return Status::InvalidArgument(
            fmt::format("field 'telemetry.gpus[{}].index': {} is not a GPU of node '{}' ({} GPUs)",
                        i, sync.telemetry->gpus[i].index, name, gpus));
      }
    }
    for (size_t i = 0; i < sync.telemetry->xids.size(); ++i) {
      if (sync.telemetry->xids[i].gpu >= static_cast<int>(gpus)) {
        ++counters_->agent_reports_refused;
        return Status::InvalidArgument(
            fmt::format("field 'telemetry.xids[{}].gpu': {} is not a GPU of node '{}' ({} GPUs)", i,
                        sync.telemetry->xids[i].gpu, name, gpus));
      }
    }
  }
  if (Status bad = node_gpus_->CheckResults(*node, sync.gpu_mode_results); !bad.ok()) {
    ++counters_->agent_reports_refused;
    return bad;
  }
  ++counters_->agent_reports;
  node->report_seq = sync.seq;
  node->last_seen = clock_->Now();
  if (node->lost) health_->NodeHeardAgain(*node, batch);
  if (sync.limits_enforced) {
    node->limits_enforced = sync.limits_enforced;
    node->limits_note = sync.limits_note;
  }
  if (sync.shares_mps) {
    node->shares_mps = sync.shares_mps;
    node->shares_note = sync.shares_note;
  }
  if (sync.volumes) {  // An agent that predates volumes holds none, and says nothing of them.
    node->volumes_enforced = sync.volumes->enforced;
    node->volumes_note = sync.volumes->note;
    mounts_->ApplyReport(name, *sync.volumes, batch);
  }
  if (sync.isolation) {
    const bool opened = sync.isolation != node->isolation && *sync.isolation == Isolation::kUid;
    node->isolation = sync.isolation;
    node->isolation_note = sync.isolation_note;
    lifecycle_->ApplyNodeState(*node);
    if (opened) lifecycle_->CapacityFreed();  // Other tenants' queued work may now share it.
  }
  if (sync.telemetry) {
    node->telemetry = sync.telemetry;
    node->telemetry_at = clock_->Now();
    monitoring_->history().Record(name, node->telemetry_at, *sync.telemetry);
    accounts_->Observe(*node);
    health_->CheckGpuHealth(*node, batch);
  }
  // Logs first: an exit report comes with the workload's last bytes.
  for (const WorkloadLog& log : sync.logs) {
    const Instance* inst = instances_->Find(log.instance);
    if (inst && inst->restarts == log.attempt && node->assigned.count(log.instance)) {
      logs_->Append(inst->id.str(), log);
    }
  }
  // Before the reports: an instance that starts in this one shows the UUID its device has.
  NodeGpus::Effects effects;
  if (sync.mig) node_gpus_->ApplyMigLayout(*node, *sync.mig, sync.mig_repartitions, batch, effects);
  for (const AgentReport& report : sync.reports) {
    Instance* inst = instances_->Find(report.instance);
    // Work the node no longer holds (moved while it was lost, or ended) is not its to report:
    // the desired state leaves it out, so its agent stops it.
    if (!inst || inst->node != name || !node->assigned.count(report.instance)) {
      spdlog::debug("node {}: ignored a report on {}: not assigned to it", name,
                    Quote(report.instance));
      continue;
    }
    lifecycle_->ApplyWorkloadReport(*inst, report, batch);
  }
  // After the reports, so a workload that started in this one shows no stale pull. A pull moves
  // nothing else: the instance stays scheduled, and billing starts with its running report. It
  // is not stored: it changes with every report.
  for (const PullReport& pull : sync.pulls) {
    Instance* inst = instances_->Find(pull.instance);
    if (inst && inst->node == name && node->assigned.count(pull.instance) &&
        inst->restarts == pull.attempt && inst->state == InstanceState::kScheduled) {
      inst->pull = pull.progress;
    }
  }
  node_gpus_->ApplyResults(*node, sync.gpu_mode_results, batch, effects);
  Follow(*node, effects);
  return sync.generation != node->generation || sync.wait <= Duration::zero();
}

DesiredState AgentHub::DesiredState(const std::string& name) const {
  return desired_->For(name, agents_->Find(name), health_->timing(), clock_->Now());
}

Result<const AgentNode*> AgentHub::Authenticate(std::string_view token_hash) const {
  TESSERA_ASSIGN_OR_RETURN(Principal p,
                           core::Authenticate(*tenants_->index(), token_hash, clock_->Now()));
  if (p.node.empty()) {
    return Status::PermissionDenied("the agent routes take a node token (POST /v1/nodes)");
  }
  const AgentNode* node = agents_->Find(p.node);
  if (!node) return Status::Unauthenticated("invalid token");
  return node;
}

Status AgentHub::Restore(const std::vector<std::pair<std::string, std::string>>& records) {
  for (const auto& [key, value] : records) {
    TESSERA_ASSIGN_OR_RETURN(AgentNode node, AgentSupervisor::FromRecord(key, value));
    node.last_seen = clock_->Now();  // Its agent gets a whole timeout to report again.
    if (node.registered()) {
      auto spec = NodeSpecOf(*catalog_, node, node.inventory);
      Status added = spec.ok() ? fleet_->AddNode(*spec).status() : spec.status();
      if (!added.ok()) {
        // The catalog changed under it: the node waits for its agent to register again, and the
        // work it held fails closed at recovery (its node left the fleet).
        spdlog::warn("node {} cannot rejoin the fleet as stored: {}", node.name, added.message());
        node.inventory = nullptr;
      }
    }
    if (node.registered()) node.info = node.SeriesInfo();
    const std::string name = node.name;
    const AgentNode& restored = agents_->nodes().emplace(name, std::move(node)).first->second;
    lifecycle_->ApplyNodeState(restored);
    tenants_->SetNodeToken(name, restored.token_hash);
  }
  return Status::Ok();
}

Result<GpuModeChange> AgentHub::SetGpuMode(const std::string& name, int gpu,
                                           catalog::SharingMode mode, bool allow_reset,
                                           store::Batch& batch) {
  NodeGpus::Effects effects;
  Result<GpuModeChange> change = node_gpus_->SetMode(name, gpu, mode, allow_reset, batch, effects);
  if (const AgentNode* node = agents_->Find(name)) Follow(*node, effects);
  return change;
}

void AgentHub::Follow(const AgentNode& node, const NodeGpus::Effects& effects) {
  if (effects.hold_changed) lifecycle_->ApplyNodeState(node);
  if (effects.capacity_freed) lifecycle_->CapacityFreed();
}

}  // namespace tessera::core
