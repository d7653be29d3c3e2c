// State's volumes (docs/volumes.md): who may create, mount and delete them, where the instances
// that mount them go, what they cost, and what the nodes' agents are told to keep or remove.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/state.h"

namespace tessera::core {

Result<Volume> State::CreateVolume(const Tenant& caller, const Volumes::Request& req,
                                   const std::string& user, store::Batch& batch) {
  if (!req.node.empty() && !fleet_->Find(req.node).ok()) {
    return Status::InvalidArgument(
        fmt::format("field 'node': node '{}' is not in the fleet", req.node));
  }
  if (caller.quota_volumes_gib) {
    const int64_t used = volumes_.GibOf(caller.id.str());
    if (used + req.size_gib > *caller.quota_volumes_gib) {
      return Status::ResourceExhausted(fmt::format(
          "quota exceeded by {} GiB: tenant '{}' has a volumes quota of {} GiB, holds {}, and "
          "asks for {}",
          used + req.size_gib - *caller.quota_volumes_gib, caller.name, *caller.quota_volumes_gib,
          used, req.size_gib));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(
      Volume * v,
      volumes_.Create(caller.id.str(), req, user, clock_->Now(),
                      VolumeRate(req.size_gib, options_.volume_price_per_gib_month), batch));
  return *v;
}

Result<Volume> State::GetVolume(const Tenant& caller, std::string_view name) const {
  const Volume* v = volumes_.Find(caller.id.str(), name);
  if (!v) return Status::NotFound(fmt::format("volume '{}' not found", name));
  return *v;
}

std::vector<std::string> State::VolumeUsers(const std::string& tenant,
                                            std::string_view name) const {
  std::vector<std::string> out;
  for (const std::string& id : volume_holders_) {
    const Instance* inst = instances_.Find(id);
    if (!inst || inst->tenant.str() != tenant || !IsActive(inst->state)) continue;
    for (const VolumeMount& m : inst->volumes) {
      if (m.name == name) out.push_back(id);
    }
  }
  return out;
}

Result<Volume> State::DeleteVolume(const Tenant& caller, std::string_view name,
                                   store::Batch& batch) {
  Volume* v = volumes_.Find(caller.id.str(), name);
  if (!v) return Status::NotFound(fmt::format("volume '{}' not found", name));
  if (v->deleting) return *v;
  if (const auto users = VolumeUsers(caller.id.str(), name); !users.empty()) {
    return Status::FailedPrecondition(fmt::format(
        "volume '{}' is attached to {}: delete them first (an instance waiting to restart "
        "holds its volumes too)",
        name, fmt::join(users, ", ")));
  }
  accounts_.CloseVolume(*v, billing::UnixSeconds(clock_->Now()), billing::Ending::kPlatform, batch);
  AgentNode* agent = agents_.Find(v->node);
  if (!agent || agent->simulated) {
    // No agent of ours made its data: nothing to wait for.
    Volume gone = *v;
    volumes_.Erase(gone.tenant, gone.name, batch);
    return gone;
  }
  volumes_.MarkDeleting(*v, batch);
  agents_.Changed(*agent);
  return *v;
}

Status State::RestoreVolumes(const std::vector<std::pair<std::string, std::string>>& records) {
  return volumes_.Restore(records);
}

Status State::CheckVolumes(const Tenant& caller, const CreateInstanceRequest& req, int count,
                           std::string_view group) const {
  std::string node, node_of;
  for (size_t i = 0; i < req.volumes.size(); ++i) {
    const VolumeMount& m = req.volumes[i];
    const Volume* v = volumes_.Find(caller.id.str(), m.name);
    if (!v) {
      return Status::InvalidArgument(fmt::format(
          "field 'volumes[{}].name': volume '{}' does not exist (POST /v1/volumes makes it)", i,
          m.name));
    }
    if (v->deleting) {
      return Status::FailedPrecondition(fmt::format("volume '{}' is being deleted", m.name));
    }
    if (!v->shared) {
      if (count > 1) {
        return Status::FailedPrecondition(fmt::format(
            "volume '{}' is not shared: {} instances cannot mount it at once (create it with "
            "\"shared\": true)",
            m.name, count));
      }
      for (const std::string& id : VolumeUsers(caller.id.str(), m.name)) {
        const Instance* other = instances_.Find(id);
        if (!group.empty() && other && other->group == group) continue;  // A restart's own.
        return Status::FailedPrecondition(fmt::format(
            "volume '{}' is attached to {}, and it is not shared (create it with \"shared\": "
            "true to mount it from several instances on its node)",
            m.name, id));
      }
    }
    if (!v->node.empty()) {
      if (!node.empty() && node != v->node) {
        return Status::FailedPrecondition(
            fmt::format("volumes '{}' (on node '{}') and '{}' (on node '{}') are on different "
                        "nodes; an instance runs on one",
                        node_of, node, m.name, v->node));
      }
      node = v->node;
      node_of = m.name;
    }
  }
  return Status::Ok();
}

std::string State::VolumeNodeOf(const Instance& inst) const {
  for (const VolumeMount& m : inst.volumes) {
    const Volume* v = volumes_.Find(inst.tenant.str(), m.name);
    if (v && !v->node.empty()) return v->node;
  }
  return "";
}

void State::SettleVolumes(const Instance& inst, store::Batch& batch) {
  for (const VolumeMount& m : inst.volumes) {
    Volume* v = volumes_.Find(inst.tenant.str(), m.name);
    if (!v || !v->node.empty()) continue;
    v->node = inst.node;
    volumes_.Save(*v, batch);
  }
}

void State::ApplyVolumeReport(const std::string& node, const AgentSync& sync, store::Batch& batch) {
  if (!sync.volumes) return;  // An agent that predates volumes holds none.
  std::set<std::string> held;
  for (const auto& [id, use] : sync.volumes->held) {
    held.insert(id);
    const Volume* found = volumes_.FindById(id);
    if (!found || found->node != node) continue;  // Not this node's to report.
    volumes_.Find(found->tenant, found->name)->use = use;
  }
  std::vector<std::pair<std::string, std::string>> removed;
  for (const Volume* v : volumes_.Deleting()) {
    if (v->node == node && !held.count(v->id)) removed.emplace_back(v->tenant, v->name);
  }
  for (const auto& [tenant, name] : removed) {
    volumes_.Erase(tenant, name, batch);  // Its agent removed its data.
  }
}

}  // namespace tessera::core
