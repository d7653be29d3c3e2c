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

Result<Volume> State::DeleteVolume(const Tenant& caller, std::string_view name,
                                   store::Batch& batch) {
  Volume* v = volumes_.Find(caller.id.str(), name);
  if (!v) return Status::NotFound(fmt::format("volume '{}' not found", name));
  if (v->deleting) return *v;
  if (const auto users = mounts_.Users(caller.id.str(), name); !users.empty()) {
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

}  // namespace tessera::core
