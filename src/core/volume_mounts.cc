#include "core/volume_mounts.h"

#include <fmt/format.h>

#include <utility>

namespace tessera::core {

void VolumeMounts::Track(const Instance& inst) {
  if (inst.volumes.empty()) return;
  if (IsActive(inst.state)) {
    holders_.insert(inst.id.str());
  } else {
    holders_.erase(inst.id.str());
  }
}

std::vector<const Instance*> VolumeMounts::Holders(const std::string& tenant,
                                                   std::string_view name) const {
  std::vector<const Instance*> out;
  for (const std::string& id : holders_) {
    const Instance* inst = instances_->Find(id);
    if (!inst || inst->tenant.str() != tenant || !IsActive(inst->state)) continue;
    for (const VolumeMount& m : inst->volumes) {
      if (m.name == name) out.push_back(inst);
    }
  }
  return out;
}

std::vector<std::string> VolumeMounts::Users(const std::string& tenant,
                                             std::string_view name) const {
  std::vector<std::string> out;
  for (const Instance* inst : Holders(tenant, name)) out.push_back(inst->id.str());
  return out;
}

Status VolumeMounts::Check(const std::string& tenant, const CreateInstanceRequest& req, int count,
                           std::string_view group) const {
  std::string node, node_of;
  for (size_t i = 0; i < req.volumes.size(); ++i) {
    const VolumeMount& m = req.volumes[i];
    const Volume* v = volumes_->Find(tenant, m.name);
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
      for (const Instance* other : Holders(tenant, m.name)) {
        if (!group.empty() && other->group == group) continue;  // A restart's own.
        return Status::FailedPrecondition(fmt::format(
            "volume '{}' is attached to {}, and it is not shared (create it with \"shared\": "
            "true to mount it from several instances on its node)",
            m.name, other->id.str()));
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

std::string VolumeMounts::NodeOf(const Instance& inst) const {
  for (const VolumeMount& m : inst.volumes) {
    const Volume* v = volumes_->Find(inst.tenant.str(), m.name);
    if (v && !v->node.empty()) return v->node;
  }
  return "";
}

void VolumeMounts::Settle(const Instance& inst, store::Batch& batch) {
  for (const VolumeMount& m : inst.volumes) {
    Volume* v = volumes_->Find(inst.tenant.str(), m.name);
    if (!v || !v->node.empty()) continue;
    v->node = inst.node;
    volumes_->Save(*v, batch);
  }
}

void VolumeMounts::ApplyReport(const std::string& node, const VolumeReport& report,
                               store::Batch& batch) {
  std::set<std::string> held;
  for (const auto& [id, use] : report.held) {
    held.insert(id);
    const Volume* found = volumes_->FindById(id);
    if (!found || found->node != node) continue;  // Not this node's to report.
    volumes_->Find(found->tenant, found->name)->use = use;
  }
  std::vector<std::pair<std::string, std::string>> removed;
  for (const Volume* v : volumes_->Deleting()) {
    if (v->node == node && !held.count(v->id)) removed.emplace_back(v->tenant, v->name);
  }
  for (const auto& [tenant, name] : removed) {
    volumes_->Erase(tenant, name, batch);  // Its agent removed its data.
  }
}

}  // namespace tessera::core
