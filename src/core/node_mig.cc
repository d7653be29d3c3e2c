// The server's view of the MIG devices on joined nodes, as their agents report them
// (agent/mig_manager.h, docs/agent.md).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/state.h"

namespace tessera::core {

void State::ReleaseMigHolds(AgentNode& node) {
  for (const fleet::Assignment& a : node.mig_held) {
    if (Status s = fleet_->Release(a); !s.ok()) {
      spdlog::error("node {}: releasing an unmanaged MIG device's slices: {}", node.name,
                    s.message());
    }
  }
  node.mig_held.clear();
}

void State::ApplyMigLayout(AgentNode& node, const std::vector<MigReport>& mig, int64_t repartitions,
                           store::Batch& batch) {
  if (repartitions >= 0) node.mig_repartitions = repartitions;
  if (mig == node.mig) return;
  auto index = fleet_->Find(node.name);
  if (!index.ok()) return;
  const size_t gpus = node.gpu_count();
  // The inventory's list of each GPU's devices becomes the report's.
  nlohmann::json& inventory_gpus = node.inventory["gpus"];
  for (size_t g = 0; g < gpus && g < inventory_gpus.size(); ++g) {
    nlohmann::json devices = nlohmann::json::array();
    for (const MigReport& m : mig) {
      if (static_cast<size_t>(m.gpu) == g) {
        devices.push_back({{"uuid", m.uuid}, {"profile", m.profile}, {"start", m.start}});
      }
    }
    inventory_gpus[g]["mig_devices"] = std::move(devices);
  }
  // The unmanaged devices' slices: booked afresh, so a device an operator removed frees them.
  const bool freed = !node.mig_held.empty();
  ReleaseMigHolds(node);
  const fleet::Node& n = fleet_->node(*index);
  const mig::Table* table = n.model.valid() ? catalog_->gpu(n.model).mig : nullptr;
  for (const MigReport& m : mig) {
    if (m.owner != "unmanaged") continue;
    const mig::Profile* profile = table ? table->Find(m.profile) : nullptr;
    if (static_cast<size_t>(m.gpu) >= n.gpus.size() ||
        n.gpus[static_cast<size_t>(m.gpu)].mode != catalog::SharingMode::kMig || !profile ||
        m.start < 0) {
      spdlog::warn("node {}: MIG device {} on GPU {} ({}@{}) is not one the fleet can book",
                   node.name, m.uuid, m.gpu, m.profile, m.start);
      continue;
    }
    fleet::Assignment a;
    a.node = *index;
    a.gpu_count = 1;
    a.gpus[0] = {.gpu = m.gpu, .mig_profile = profile, .mig_start = m.start};
    if (Status s = fleet_->Allocate(a); !s.ok()) {
      spdlog::warn("node {}: unmanaged MIG device {}: {}", node.name, m.uuid, s.message());
      continue;
    }
    node.mig_held.push_back(a);
  }
  node.mig = mig;
  if (freed) CapacityFreed();  // Booked again at once if still there; else freed for good.
  // Instances on the node take the UUIDs their devices have now.
  for (const std::string& id : node.assigned) {
    Instance* inst = instances_.Find(id);
    if (!inst || inst->node != node.name) continue;
    std::vector<std::string> before;
    for (const GpuRef& g : inst->gpus) before.push_back(g.uuid);
    UseReportedMigUuids(*inst);
    for (size_t i = 0; i < inst->gpus.size(); ++i) {
      if (inst->gpus[i].uuid != before[i]) {
        Save(*inst, batch);
        break;
      }
    }
  }
}

}  // namespace tessera::core
