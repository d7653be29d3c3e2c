#include "core/endpoint_table.h"

#include <utility>

namespace tessera::core {

void EndpointTable::Index(const Instance& inst) {
  const auto it = instances_.find(inst.id.str());
  const bool had = it != instances_.end();
  const bool serving = inst.state == InstanceState::kRunning;
  if (!had && inst.endpoints.empty()) return;
  if (had && it->second.endpoints == inst.endpoints && it->second.serving == serving) return;
  if (inst.endpoints.empty()) {
    instances_.erase(it);
  } else {
    instances_[inst.id.str()] = {inst.tenant.str(), inst.endpoints, serving};
  }
  changed_ = true;
}

std::shared_ptr<const EndpointIndex> EndpointTable::Snapshot(
    const std::map<std::string, Group>& groups) {
  if (!changed_) return snapshot_;
  auto next = std::make_shared<EndpointIndex>();
  next->instances = instances_;
  for (const auto& [id, g] : groups) {
    if (g.spec.service && !Ended(g.state)) {
      next->services[id] = {g.tenant.str(), *g.spec.service, g.members};
    }
  }
  snapshot_ = std::move(next);
  changed_ = false;
  return snapshot_;
}

}  // namespace tessera::core
