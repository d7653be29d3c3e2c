// The GPUs of joined nodes: mode changes and MIG layouts (node_gpus.h).
#include "core/node_gpus.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/json.h"

namespace tessera::core {

namespace {

// The most instances a refusal names.
constexpr size_t kNamedHolders = 10;

}  // namespace

Result<GpuModeChange> NodeGpus::SetMode(const std::string& name, int gpu, catalog::SharingMode mode,
                                        bool allow_reset, store::Batch& batch, Effects& effects) {
  AgentNode* node = agents_->Find(name);
  auto index = fleet_->Find(name);
  if (!node && !index.ok()) return Status::NotFound(fmt::format("node '{}' not found", name));
  if (!node || !node->registered() || !index.ok()) {
    return Status::FailedPrecondition(fmt::format(
        "node '{}' has no registered agent: a GPU's mode changes through its agent", name));
  }
  const fleet::Node& n = fleet_->node(*index);
  if (gpu < 0 || static_cast<size_t>(gpu) >= n.gpus.size()) {
    return Status::InvalidArgument(fmt::format("field 'index': node '{}' has no GPU {} (it has {})",
                                               name, gpu, n.gpus.size()));
  }
  const catalog::GpuModel& model = catalog_->gpu(n.model);
  if (mode == catalog::SharingMode::kMig && model.mig == nullptr) {
    return Status::InvalidArgument(
        fmt::format("field 'mode': the {} has no MIG mode; give exclusive or shared", model.id));
  }
  const Time now = clock_->Now();
  if (auto open = node->mode_changes.find(gpu);
      open != node->mode_changes.end() && open->second.outstanding()) {
    GpuModeChange& c = open->second;
    if (c.mode != mode) {
      return Status::FailedPrecondition(fmt::format(
          "GPU {} of node '{}' is changing to {} mode (request {}, {}); ask again once it ended",
          gpu, name, catalog::SharingModeName(c.mode), c.id, ModeChangeStateName(c.state)));
    }
    // The operator allows the reset the agent waits for: the same request, asked again.
    if (allow_reset && !c.allow_reset) {
      c.allow_reset = true;
      c.state = ModeChangeState::kRequested;
      c.reason.clear();
      agents_->Changed(*node);
      AgentSupervisor::Save(*node, batch);
    }
    return c;
  }
  const catalog::SharingMode current = n.gpus[static_cast<size_t>(gpu)].mode;
  if (current == mode) {
    return GpuModeChange{
        0,
        gpu,
        mode,
        allow_reset,
        ModeChangeState::kApplied,
        fmt::format("GPU {} is in {} mode already", gpu, catalog::SharingModeName(mode)),
        now};
  }
  TESSERA_RETURN_IF_ERROR(CheckGpuFree(*node, gpu));
  if (current != catalog::SharingMode::kMig && mode != catalog::SharingMode::kMig) {
    // Time-slicing or not is the server's to decide: no agent needs to act.
    TESSERA_RETURN_IF_ERROR(fleet_->SetGpuMode(*index, gpu, mode));
    node->gpu_sharing[gpu] = mode;
    spdlog::info("node {}: GPU {} is in {} mode", name, gpu, catalog::SharingModeName(mode));
    admission_->FleetChanged();
    effects.capacity_freed = true;
    AgentSupervisor::Save(*node, batch);
    return GpuModeChange{0, gpu, mode, allow_reset, ModeChangeState::kApplied, "", now};
  }
  GpuModeChange c{node->next_mode_change++,    gpu, mode, allow_reset,
                  ModeChangeState::kRequested, "",  now};
  node->mode_changes[gpu] = c;
  spdlog::info("node {}: GPU {} to {} mode: request {} sent to its agent", name, gpu,
               catalog::SharingModeName(mode), c.id);
  effects.hold_changed = true;  // Holds the GPU.
  agents_->Changed(*node);
  AgentSupervisor::Save(*node, batch);
  return c;
}

Status NodeGpus::CheckGpuFree(const AgentNode& node, int gpu) const {
  std::vector<std::string> holders;
  for (const std::string& id : node.assigned) {
    const Instance* inst = instances_->Find(id);
    if (!inst || !inst->assignment || inst->node != node.name) continue;
    if (std::any_of(inst->gpus.begin(), inst->gpus.end(),
                    [gpu](const GpuRef& g) { return g.index == gpu; })) {
      holders.push_back(id);
    }
  }
  if (!holders.empty()) {
    const size_t more = holders.size() > kNamedHolders ? holders.size() - kNamedHolders : 0;
    holders.resize(std::min(holders.size(), kNamedHolders));
    return Status::FailedPrecondition(fmt::format(
        "GPU {} of node '{}' holds work: {}{}; its mode changes only once that has ended or moved "
        "(tessera nodes drain {} stops new work there)",
        gpu, node.name, fmt::join(holders, ", "),
        more ? fmt::format(" and {} more", more) : std::string(), node.name));
  }
  // Capacity booked that no instance of the node names: still work (a restart's recovery may
  // book it before its instance is listed).
  auto index = fleet_->Find(node.name);
  if (!index.ok()) return Status::Ok();
  const fleet::Gpu& g = fleet_->node(*index).gpus[static_cast<size_t>(gpu)];
  // An operator's MIG devices are booked too (ApplyMigLayout), but are not Tessera's work: the
  // driver says whether the mode can change with them there.
  const auto unmanaged =
      std::count_if(node.mig_held.begin(), node.mig_held.end(),
                    [gpu](const fleet::Assignment& a) { return a.gpus[0].gpu == gpu; });
  if ((g.mode != catalog::SharingMode::kMig && g.free_milli != fleet::kMilliPerGpu) ||
      static_cast<int64_t>(g.mig_instances.size()) > unmanaged) {
    return Status::FailedPrecondition(fmt::format(
        "GPU {} of node '{}' is allocated; its mode changes only once nothing is", gpu, node.name));
  }
  return Status::Ok();
}

Status NodeGpus::CheckResults(const AgentNode& node,
                              const std::vector<GpuModeResult>& results) const {
  const size_t gpus = node.gpu_count();
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].gpu < 0 || static_cast<size_t>(results[i].gpu) >= gpus) {
      return Status::InvalidArgument(
          fmt::format("field 'gpu_mode_results[{}].gpu': {} is not a GPU of node '{}' ({} GPUs)", i,
                      results[i].gpu, node.name, gpus));
    }
  }
  return Status::Ok();
}

void NodeGpus::ApplyResults(AgentNode& node, const std::vector<GpuModeResult>& results,
                            store::Batch& batch, Effects& effects) {
  for (const GpuModeResult& r : results) {
    auto it = node.mode_changes.find(r.gpu);
    // An agent repeats a result until the request leaves its desired state: once is enough.
    if (it == node.mode_changes.end() || it->second.id != r.id || !it->second.outstanding()) {
      continue;
    }
    GpuModeChange& c = it->second;
    if (r.state == ModeChangeState::kRequested) continue;
    if (r.state == ModeChangeState::kPendingReset) {
      // Said before the operator allowed the reset (a report in flight), or said again.
      if (c.allow_reset || c.state == ModeChangeState::kPendingReset) continue;
      c.state = ModeChangeState::kPendingReset;
      c.reason = r.reason;
      Audit(node, c, batch);
      AgentSupervisor::Save(node, batch);
      continue;
    }
    c.state = r.state;
    c.reason = r.reason;
    if (r.state == ModeChangeState::kApplied) EnterMode(node, c);
    Audit(node, c, batch);
    effects.hold_changed = true;  // Releases the GPU.
    effects.capacity_freed = true;
    agents_->Changed(node);  // Its desired state no longer asks.
    AgentSupervisor::Save(node, batch);
  }
}

void NodeGpus::EnterMode(AgentNode& node, const GpuModeChange& c) {
  if (c.mode != catalog::SharingMode::kMig) node.gpu_sharing[c.gpu] = c.mode;
  // At once, not at the registration its agent sends next: the GPU is released now, and work of
  // its old mode placed there meanwhile would keep it in the wrong mode.
  auto index = fleet_->Find(node.name);
  if (!index.ok()) return;
  if (Status s = fleet_->SetGpuMode(*index, c.gpu, c.mode); !s.ok()) {
    spdlog::warn("node {}: GPU {}'s agent applied {} mode, which the fleet cannot take yet: {}",
                 node.name, c.gpu, catalog::SharingModeName(c.mode), s.message());
    return;
  }
  admission_->FleetChanged();
}

void NodeGpus::FollowInventory(const AgentNode& node, const fleet::NodeSpec& spec,
                               Effects& effects) {
  // A simulated agent's node is as its fleet file says.
  if (node.simulated) return;
  auto index = fleet_->Find(node.name);
  if (!index.ok()) return;
  bool changed = false;
  for (size_t g = 0; g < spec.gpu_modes.size() && g < fleet_->node(*index).gpus.size(); ++g) {
    const catalog::SharingMode was = fleet_->node(*index).gpus[g].mode;
    const catalog::SharingMode mode = spec.gpu_modes[g];
    if (was == mode) continue;
    if (Status s = fleet_->SetGpuMode(*index, static_cast<int>(g), mode); !s.ok()) {
      spdlog::warn("node {}: its agent reports GPU {} in {} mode; it stays in {} mode here: {}",
                   node.name, g, catalog::SharingModeName(mode), catalog::SharingModeName(was),
                   s.message());
      continue;
    }
    spdlog::info("node {}: GPU {} is in {} mode, as its agent reports", node.name, g,
                 catalog::SharingModeName(mode));
    changed = true;
  }
  if (changed) {
    admission_->FleetChanged();
    effects.capacity_freed = true;
  }
}

void NodeGpus::Audit(const AgentNode& node, const GpuModeChange& c, store::Batch& batch) const {
  spdlog::info("node {}: GPU {} to {} mode (request {}): {}{}{}", node.name, c.gpu,
               catalog::SharingModeName(c.mode), c.id, ModeChangeStateName(c.state),
               c.reason.empty() ? "" : ": ", c.reason);
  const nlohmann::json detail = {{"gpu", c.gpu},
                                 {"request", c.id},
                                 {"mode", catalog::SharingModeName(c.mode)},
                                 {"state", ModeChangeStateName(c.state)},
                                 {"reason", c.reason}};
  batch.audit.push_back({0, FormatRfc3339(clock_->Now()), "agent", "gpu mode change", node.name,
                         200, DumpJson(detail)});
}

void NodeGpus::ReleaseMigHolds(AgentNode& node) {
  for (const fleet::Assignment& a : node.mig_held) {
    if (Status s = fleet_->Release(a); !s.ok()) {
      spdlog::error("node {}: releasing an unmanaged MIG device's slices: {}", node.name,
                    s.message());
    }
  }
  node.mig_held.clear();
}

void NodeGpus::ApplyMigLayout(AgentNode& node, const std::vector<MigReport>& mig,
                              int64_t repartitions, store::Batch& batch, Effects& effects) {
  if (repartitions >= 0) node.mig_repartitions = repartitions;
  auto index = fleet_->Find(node.name);
  if (!index.ok()) return;
  const fleet::Node& n = fleet_->node(*index);
  const mig::Table* table = n.model.valid() ? catalog_->gpu(n.model).mig : nullptr;
  // The slices booked here: every device but idle ones (free capacity) and those whose instance
  // holds that slice. So an operator's device, and one whose instance ended while a process
  // still uses it, are never placed over.
  auto holds = [&](const MigReport& m) {
    const Instance* inst = m.owner.empty() ? nullptr : instances_->Find(m.owner);
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
    // What is still there was booked again at once.
    if (freed) effects.capacity_freed = true;
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
    Instance* inst = instances_->Find(id);
    if (!inst || inst->node != node.name) continue;
    std::vector<std::string> before;
    for (const GpuRef& g : inst->gpus) before.push_back(g.uuid);
    UseReportedMigUuids(*inst);
    for (size_t i = 0; i < inst->gpus.size(); ++i) {
      if (inst->gpus[i].uuid != before[i]) {
        batch.instances.push_back(StoredRecord(*inst, *fleet_, documents_));
        break;
      }
    }
  }
}

void NodeGpus::UseReportedMigUuids(Instance& inst) const {
  const AgentNode* node = agents_->Find(inst.node);
  if (!node || !node->registered()) return;
  const nlohmann::json& gpus = node->inventory.value("gpus", nlohmann::json::array());
  for (GpuRef& ref : inst.gpus) {
    if (ref.mig_profile.empty() || ref.index < 0 || static_cast<size_t>(ref.index) >= gpus.size()) {
      continue;
    }
    const nlohmann::json& devices =
        gpus[static_cast<size_t>(ref.index)].value("mig_devices", nlohmann::json::array());
    // Registration checked each device's fields (NodeSpecOf, inventory.h).
    for (const nlohmann::json& d : devices) {
      if (d["profile"] == ref.mig_profile && d["start"] == ref.mig_start) {
        ref.uuid = d["uuid"].get<std::string>();
        break;
      }
    }
  }
}

}  // namespace tessera::core
