// The server's view of the MIG devices on joined nodes, as their agents report them
// (agent/mig_manager.h, docs/agent.md).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

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
  auto index = fleet_->Find(node.name);
  if (!index.ok()) return;
  const fleet::Node& n = fleet_->node(*index);
  const mig::Table* table = n.model.valid() ? catalog_->gpu(n.model).mig : nullptr;
  // The slices booked here: every device but idle ones (free capacity) and those whose instance
  // holds that slice. So an operator's device, and one whose instance ended while a process
  // still uses it, are never placed over.
  auto holds = [&](const MigReport& m) {
    const Instance* inst = m.owner.empty() ? nullptr : instances_.Find(m.owner);
    if (!inst || inst->node != node.name || !node.assigned.contains(m.owner)) return false;
    return std::any_of(inst->gpus.begin(), inst->gpus.end(), [&](const GpuRef& g) {
      return g.index == m.gpu && g.mig_profile == m.profile && g.mig_start == m.start;
    });
  };
  std::vector<fleet::Assignment> want;
  for (const MigReport& m : mig) {
    if (m.owner.empty() || holds(m)) continue;
    const mig::Profile* profile = table ? table->Find(m.profile) : nullptr;
    if (static_cast<size_t>(m.gpu) >= n.gpus.size() ||
        n.gpus[static_cast<size_t>(m.gpu)].mode != catalog::SharingMode::kMig || !profile ||
        m.start < 0) {
      if (mig != node.mig) {
        spdlog::warn("node {}: MIG device {} on GPU {} ({}@{}) is not one the fleet can book",
                     node.name, m.uuid, m.gpu, m.profile, m.start);
      }
      continue;
    }
    fleet::Assignment a;
    a.node = *index;
    a.gpu_count = 1;
    a.gpus[0] = {.gpu = m.gpu, .mig_profile = profile, .mig_start = m.start};
    want.push_back(a);
  }
  auto same = [](const fleet::Assignment& a, const fleet::Assignment& b) {
    return a.gpus[0].gpu == b.gpus[0].gpu && a.gpus[0].mig_profile == b.gpus[0].mig_profile &&
           a.gpus[0].mig_start == b.gpus[0].mig_start;
  };
  if (!std::equal(want.begin(), want.end(), node.mig_held.begin(), node.mig_held.end(), same)) {
    const bool freed = !node.mig_held.empty();
    ReleaseMigHolds(node);
    for (const fleet::Assignment& a : want) {
      if (Status s = fleet_->Allocate(a); !s.ok()) {
        spdlog::warn("node {}: a MIG device not Tessera's to place over: {}", node.name,
                     s.message());
        continue;
      }
      node.mig_held.push_back(a);
    }
    if (freed) CapacityFreed();  // What is still there was booked again at once.
  }
  if (mig == node.mig) return;
  // The inventory's list of each GPU's devices becomes the report's.
  nlohmann::json& inventory_gpus = node.inventory["gpus"];
  for (size_t g = 0; g < node.gpu_count() && g < inventory_gpus.size(); ++g) {
    nlohmann::json devices = nlohmann::json::array();
    for (const MigReport& m : mig) {
      if (static_cast<size_t>(m.gpu) == g) {
        devices.push_back({{"uuid", m.uuid}, {"profile", m.profile}, {"start", m.start}});
      }
    }
    inventory_gpus[g]["mig_devices"] = std::move(devices);
  }
  node.mig = mig;
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
