#include "fleet/fleet.h"

#include <fmt/format.h>

#include "common/text.h"

namespace tessera::fleet {

namespace {

// One bit per GPU of a node: finds a GPU named twice without touching the heap.
using GpuMask = uint32_t;
static_assert(kMaxGpusPerNode <= 32, "GpuMask holds one bit per GPU");

bool ProfileInTable(const mig::Table& table, const mig::Profile* p) {
  for (const mig::Profile& q : table.profiles) {
    if (&q == p) return true;
  }
  return false;
}

// What is wrong with `islands` on a node of `gpus` GPUs, or "" when they are valid.
std::string IslandProblem(const std::vector<std::vector<int>>& islands, int gpus) {
  GpuMask seen = 0;
  for (size_t i = 0; i < islands.size(); ++i) {
    const std::vector<int>& island = islands[i];
    if (island.size() < 2) {
      return fmt::format("island {} has {} GPU(s); an island links at least 2", i, island.size());
    }
    for (int g : island) {
      if (g < 0 || g >= gpus) {
        return fmt::format("island {}: gpu {} is out of range [0, {}]", i, g, gpus - 1);
      }
      if (seen & (GpuMask{1} << g)) return fmt::format("island {}: gpu {} is in two islands", i, g);
      seen |= GpuMask{1} << g;
    }
  }
  return "";
}

std::string Where(const Node& n, int gpu) { return fmt::format("node '{}': gpu {}", n.name, gpu); }

}  // namespace

std::string_view NodeStateName(NodeState s) {
  switch (s) {
    case NodeState::kReady:
      return "ready";
    case NodeState::kDraining:
      return "draining";
    case NodeState::kDown:
      return "down";
  }
  return "unknown";
}

int UsedComputeSlices(const Gpu& gpu) {
  int used = 0;
  for (const MigInstance& m : gpu.mig_instances) used += m.profile->compute_slices;
  return used;
}

Status Fleet::ValidateSpec(const NodeSpec& spec, const catalog::GpuModel** model) const {
  const std::string where = fmt::format("node '{}'", spec.name);
  auto bad = [&](std::string_view field, std::string_view what) {
    return Status::InvalidArgument(fmt::format("{}: {}: {}", where, field, what));
  };
  if (!IsValidIdBody(spec.name)) {
    return bad("name", "must be 1-63 characters of [a-z0-9._-], starting with a letter or digit");
  }
  if (by_name_.contains(spec.name)) {
    return Status::AlreadyExists(where + ": a node with this name exists already");
  }
  if (spec.gpus < 0 || spec.gpus > kMaxGpusPerNode) {
    return bad("gpus", fmt::format("{} is out of range [0, {}]", spec.gpus, kMaxGpusPerNode));
  }
  if (spec.cpu_milli < 0) return bad("cpu_milli", fmt::format("{} is negative", spec.cpu_milli));
  if (spec.memory_mib < 0) {
    return bad("memory_mib", fmt::format("{} is negative", spec.memory_mib));
  }
  *model = nullptr;
  if (spec.gpus == 0) {
    if (!spec.gpu_model.empty()) {
      return bad("gpu_model", fmt::format("'{}' given for a node without GPUs", spec.gpu_model));
    }
    if (!spec.nvlink_islands.empty()) return bad("nvlink_islands", "given for a node without GPUs");
    if (!spec.gpu_modes.empty()) return bad("gpu_modes", "given for a node without GPUs");
    return Status::Ok();
  }
  if (spec.gpu_model.empty()) return bad("gpu_model", "is required for a node with GPUs");
  *model = catalog_->FindGpu(spec.gpu_model);
  if (*model == nullptr) {
    return bad("gpu_model", fmt::format("unknown GPU model '{}'", spec.gpu_model));
  }
  if (!spec.gpu_uuids.empty() && spec.gpu_uuids.size() != static_cast<size_t>(spec.gpus)) {
    return bad("gpu_uuids",
               fmt::format("{} entries for {} GPUs", spec.gpu_uuids.size(), spec.gpus));
  }
  if (!spec.gpu_modes.empty() && spec.gpu_modes.size() != static_cast<size_t>(spec.gpus)) {
    return bad("gpu_modes",
               fmt::format("{} entries for {} GPUs", spec.gpu_modes.size(), spec.gpus));
  }
  for (int g = 0; g < spec.gpus; ++g) {
    const SharingMode m = spec.gpu_modes.empty() ? spec.default_mode : spec.gpu_modes[g];
    if (m == SharingMode::kMig && (*model)->mig == nullptr) {
      return bad(fmt::format("gpu {}", g),
                 fmt::format("mig mode on {}, which does not support MIG", (*model)->id));
    }
  }
  if (std::string what = IslandProblem(spec.nvlink_islands, spec.gpus); !what.empty()) {
    return bad("nvlink_islands", what);
  }
  return Status::Ok();
}

Result<NodeIndex> Fleet::AddNode(const NodeSpec& spec) {
  const catalog::GpuModel* model = nullptr;
  TESSERA_RETURN_IF_ERROR(ValidateSpec(spec, &model));
  Node n;
  n.name = spec.name;
  if (model != nullptr) n.model = *catalog_->FindGpuIndex(spec.gpu_model);
  n.cpu_milli = n.cpu_milli_free = spec.cpu_milli;
  n.memory_mib = n.memory_mib_free = spec.memory_mib;
  n.gpus.resize(static_cast<size_t>(spec.gpus));
  for (int g = 0; g < spec.gpus; ++g) {
    Gpu& gpu = n.gpus[static_cast<size_t>(g)];
    gpu.mode = spec.gpu_modes.empty() ? spec.default_mode : spec.gpu_modes[g];
    if (gpu.mode == SharingMode::kShared) gpu.free_memory_mib = model->memory_mib;
    if (!spec.gpu_uuids.empty()) gpu.uuid = spec.gpu_uuids[static_cast<size_t>(g)];
  }
  for (size_t i = 0; i < spec.nvlink_islands.size(); ++i) {
    for (int g : spec.nvlink_islands[i])
      n.gpus[static_cast<size_t>(g)].island = static_cast<int>(i);
  }
  const NodeIndex index(static_cast<uint32_t>(nodes_.size()));
  by_name_.emplace(n.name, index);
  nodes_.push_back(std::move(n));
  versions_.push_back(0);
  ++changes_;
  total_gpus_ += spec.gpus;
  return index;
}

Status Fleet::RemoveNode(NodeIndex ni) {
  if (!ni.valid() || ni.value >= nodes_.size()) {
    return Status::InvalidArgument(fmt::format("node index {} is out of range", ni.value));
  }
  Node& n = nodes_[ni.value];
  if (n.removed) return Status::Ok();
  if (n.workloads > 0) {
    return Status::FailedPrecondition(
        fmt::format("node '{}' still holds {} assignment(s)", n.name, n.workloads));
  }
  n.removed = true;
  n.state = NodeState::kDown;
  by_name_.erase(n.name);
  total_gpus_ -= static_cast<int64_t>(n.gpus.size());
  ++versions_[ni.value];
  ++changes_;
  return Status::Ok();
}

Result<NodeIndex> Fleet::Find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return Status::NotFound(fmt::format("no node named '{}'", Quote(name)));
  return it->second;
}

Status Fleet::CheckShape(const Assignment& a) const {
  if (!a.node.valid() || a.node.value >= nodes_.size()) {
    return Status::InvalidArgument(
        fmt::format("node index {} is out of range (the fleet has {} nodes)",
                    a.node.valid() ? int64_t{a.node.value} : -1, nodes_.size()));
  }
  const Node& n = nodes_[a.node.value];
  if (a.gpu_count < 0 || a.gpu_count > kMaxGpusPerNode) {
    return Status::InvalidArgument(fmt::format("node '{}': gpu_count {} is out of range [0, {}]",
                                               n.name, a.gpu_count, kMaxGpusPerNode));
  }
  if (a.cpu_milli < 0 || a.memory_mib < 0) {
    return Status::InvalidArgument(
        fmt::format("node '{}': cpu_milli {} and memory_mib {} must not be negative", n.name,
                    a.cpu_milli, a.memory_mib));
  }
  GpuMask seen = 0;
  for (int i = 0; i < a.gpu_count; ++i) {
    const int g = a.gpus[static_cast<size_t>(i)].gpu;
    if (g < 0 || static_cast<size_t>(g) >= n.gpus.size()) {
      return Status::InvalidArgument(
          fmt::format("node '{}': gpu {} is out of range (it has {})", n.name, g, n.gpus.size()));
    }
    if (seen & (GpuMask{1} << g)) {
      return Status::InvalidArgument(
          fmt::format("node '{}': gpu {} appears twice in one assignment", n.name, g));
    }
    seen |= GpuMask{1} << g;
  }
  return Status::Ok();
}

Status Fleet::CheckGrantMode(const Node& n, const GpuGrant& grant) const {
  const Gpu& gpu = n.gpus[static_cast<size_t>(grant.gpu)];
  const bool is_mig = gpu.mode == SharingMode::kMig;
  if (!is_mig && grant.mig_profile != nullptr) {
    return Status::InvalidArgument(
        fmt::format("{}: a MIG profile was given but the GPU is in {} mode", Where(n, grant.gpu),
                    catalog::SharingModeName(gpu.mode)));
  }
  if (is_mig) {
    if (grant.mig_profile == nullptr) {
      return Status::InvalidArgument(fmt::format(
          "{}: the GPU is in mig mode; the grant needs a MIG profile", Where(n, grant.gpu)));
    }
    const mig::Table& table = *catalog_->gpu(n.model).mig;
    if (!ProfileInTable(table, grant.mig_profile)) {
      return Status::InvalidArgument(fmt::format("{}: profile '{}' is not in the {} MIG table",
                                                 Where(n, grant.gpu), grant.mig_profile->name,
                                                 table.model));
    }
    return Status::Ok();
  }
  if (gpu.mode == SharingMode::kExclusive && grant.milli != kMilliPerGpu) {
    return Status::InvalidArgument(
        fmt::format("{}: exclusive mode grants whole GPUs only (milli {}), not milli {}",
                    Where(n, grant.gpu), kMilliPerGpu, grant.milli));
  }
  if (grant.milli < 1 || grant.milli > kMilliPerGpu || grant.memory_mib < 0) {
    return Status::InvalidArgument(
        fmt::format("{}: milli {} must be in [1, {}] and memory_mib {} not negative",
                    Where(n, grant.gpu), grant.milli, kMilliPerGpu, grant.memory_mib));
  }
  return Status::Ok();
}

Status Fleet::CanGrant(const Node& n, const GpuGrant& grant) const {
  TESSERA_RETURN_IF_ERROR(CheckGrantMode(n, grant));
  const Gpu& gpu = n.gpus[static_cast<size_t>(grant.gpu)];
  if (!gpu.healthy) {
    return Status::Unavailable(
        fmt::format("{}: is unhealthy, out of service", Where(n, grant.gpu)));
  }
  if (gpu.held) {
    return Status::Unavailable(
        fmt::format("node '{}': GPU {} is changing its mode", n.name, grant.gpu));
  }
  switch (gpu.mode) {
    case SharingMode::kExclusive:
      if (gpu.free_milli != kMilliPerGpu) {
        return Status::ResourceExhausted(fmt::format("{}: is allocated", Where(n, grant.gpu)));
      }
      return Status::Ok();
    case SharingMode::kShared:
      if (grant.milli > gpu.free_milli) {
        return Status::ResourceExhausted(fmt::format(
            "{}: {} milli asked, {} free", Where(n, grant.gpu), grant.milli, gpu.free_milli));
      }
      if (grant.memory_mib > gpu.free_memory_mib) {
        return Status::ResourceExhausted(fmt::format("{}: {} MiB of GPU memory asked, {} free",
                                                     Where(n, grant.gpu), grant.memory_mib,
                                                     gpu.free_memory_mib));
      }
      return Status::Ok();
    case SharingMode::kMig: {
      std::vector<mig::Placement> layout;
      layout.reserve(gpu.mig_instances.size() + 1);
      for (const MigInstance& m : gpu.mig_instances) layout.push_back({m.profile, m.start});
      layout.push_back({grant.mig_profile, grant.mig_start});
      const Status s = mig::CheckLayout(*catalog_->gpu(n.model).mig, layout);
      if (!s.ok()) return s.WithPrefix(Where(n, grant.gpu));
      return Status::Ok();
    }
  }
  return Status::Internal(fmt::format("{}: unknown sharing mode", Where(n, grant.gpu)));
}

Status Fleet::CanAllocate(const Assignment& a) const {
  TESSERA_RETURN_IF_ERROR(CheckShape(a));
  const Node& n = nodes_[a.node.value];
  if (n.state != NodeState::kReady) {
    return Status::FailedPrecondition(
        fmt::format("node '{}' is {}; it takes no new work", n.name, NodeStateName(n.state)));
  }
  if (a.cpu_milli > n.cpu_milli_free) {
    return Status::ResourceExhausted(fmt::format("node '{}': {} milli-CPU asked, {} free", n.name,
                                                 a.cpu_milli, n.cpu_milli_free));
  }
  if (a.memory_mib > n.memory_mib_free) {
    return Status::ResourceExhausted(fmt::format("node '{}': {} MiB of memory asked, {} free",
                                                 n.name, a.memory_mib, n.memory_mib_free));
  }
  for (int i = 0; i < a.gpu_count; ++i) {
    TESSERA_RETURN_IF_ERROR(CanGrant(n, a.gpus[static_cast<size_t>(i)]));
  }
  return Status::Ok();
}

Status Fleet::CanRelease(const Assignment& a) const {
  TESSERA_RETURN_IF_ERROR(CheckShape(a));
  const Node& n = nodes_[a.node.value];
  if (n.workloads <= 0) {
    return Status::FailedPrecondition(fmt::format("node '{}' holds no assignment", n.name));
  }
  if (a.cpu_milli > n.cpu_milli - n.cpu_milli_free) {
    return Status::FailedPrecondition(
        fmt::format("node '{}': releasing {} milli-CPU but {} are in use", n.name, a.cpu_milli,
                    n.cpu_milli - n.cpu_milli_free));
  }
  if (a.memory_mib > n.memory_mib - n.memory_mib_free) {
    return Status::FailedPrecondition(
        fmt::format("node '{}': releasing {} MiB of memory but {} are in use", n.name, a.memory_mib,
                    n.memory_mib - n.memory_mib_free));
  }
  for (int i = 0; i < a.gpu_count; ++i) {
    TESSERA_RETURN_IF_ERROR(CanReturn(n, a.gpus[static_cast<size_t>(i)]));
  }
  return Status::Ok();
}

Status Fleet::CanReturn(const Node& n, const GpuGrant& grant) const {
  TESSERA_RETURN_IF_ERROR(CheckGrantMode(n, grant));
  const Gpu& gpu = n.gpus[static_cast<size_t>(grant.gpu)];
  if (gpu.mode == SharingMode::kMig) {
    if (FindMigInstance(gpu, grant) < 0) {
      return Status::FailedPrecondition(fmt::format("{}: holds no MIG instance {}@{}",
                                                    Where(n, grant.gpu), grant.mig_profile->name,
                                                    grant.mig_start));
    }
    return Status::Ok();
  }
  const int used = kMilliPerGpu - gpu.free_milli;
  if (grant.milli > used) {
    return Status::FailedPrecondition(fmt::format("{}: releasing {} milli but {} are allocated",
                                                  Where(n, grant.gpu), grant.milli, used));
  }
  if (gpu.mode == SharingMode::kShared) {
    const int64_t used_mib = catalog_->gpu(n.model).memory_mib - gpu.free_memory_mib;
    if (grant.memory_mib > used_mib) {
      return Status::FailedPrecondition(
          fmt::format("{}: releasing {} MiB of GPU memory but {} are promised", Where(n, grant.gpu),
                      grant.memory_mib, used_mib));
    }
  }
  return Status::Ok();
}

int Fleet::FindMigInstance(const Gpu& gpu, const GpuGrant& grant) {
  for (size_t i = 0; i < gpu.mig_instances.size(); ++i) {
    const MigInstance& m = gpu.mig_instances[i];
    if (m.profile == grant.mig_profile && m.start == grant.mig_start) return static_cast<int>(i);
  }
  return -1;
}

Result<Fleet::GpuChange> Fleet::PlanChange(const Node& n, const GpuGrant& grant,
                                           bool allocate) const {
  const Gpu& gpu = n.gpus[static_cast<size_t>(grant.gpu)];
  const int sign = allocate ? 1 : -1;
  GpuChange c;
  c.free_milli = gpu.free_milli;
  c.free_memory_mib = gpu.free_memory_mib;
  int64_t memory_cap = 0;
  bool broken = false;
  switch (gpu.mode) {
    case SharingMode::kExclusive:
      c.free_milli = allocate ? 0 : kMilliPerGpu;
      c.used_milli_delta = sign * kMilliPerGpu;
      broken = gpu.free_milli != (allocate ? kMilliPerGpu : 0);
      break;
    case SharingMode::kShared:
      c.free_milli -= sign * grant.milli;
      c.free_memory_mib -= sign * grant.memory_mib;
      c.used_milli_delta = sign * grant.milli;
      memory_cap = catalog_->gpu(n.model).memory_mib;
      break;
    case SharingMode::kMig: {
      const mig::Table& table = *catalog_->gpu(n.model).mig;
      const int before = UsedComputeSlices(gpu);
      const int after = before + sign * grant.mig_profile->compute_slices;
      c.mig_index = allocate ? 0 : FindMigInstance(gpu, grant);
      const size_t left = gpu.mig_instances.size() - (allocate ? 0 : 1);
      c.free_milli = allocate || left > 0 ? 0 : kMilliPerGpu;
      c.mig_slices_delta = sign * grant.mig_profile->compute_slices;
      broken = after < 0 || after > table.compute_slices || c.mig_index < 0;
      break;
    }
  }
  if (broken || c.free_milli < 0 || c.free_milli > kMilliPerGpu || c.free_memory_mib < 0 ||
      c.free_memory_mib > memory_cap) {
    return Status::Internal(fmt::format(
        "{}: {} would break the GPU's capacity invariant (a bug: the check should have refused "
        "it)",
        Where(n, grant.gpu), allocate ? "allocating" : "releasing"));
  }
  return c;
}

Status Fleet::Apply(const Assignment& a, bool allocate) {
  Node& n = nodes_[a.node.value];
  const int64_t sign = allocate ? 1 : -1;
  const int64_t cpu_free = n.cpu_milli_free - sign * a.cpu_milli;
  const int64_t mem_free = n.memory_mib_free - sign * a.memory_mib;
  if (cpu_free < 0 || cpu_free > n.cpu_milli || mem_free < 0 || mem_free > n.memory_mib ||
      (!allocate && n.workloads <= 0)) {
    return Status::Internal(fmt::format(
        "node '{}': would break the node's capacity invariant (a bug: the check should have "
        "refused it)",
        n.name));
  }
  // Plan every GPU first so that a broken invariant is found before anything changes.
  std::array<GpuChange, kMaxGpusPerNode> changes{};
  for (int i = 0; i < a.gpu_count; ++i) {
    TESSERA_ASSIGN_OR_RETURN(changes[static_cast<size_t>(i)],
                             PlanChange(n, a.gpus[static_cast<size_t>(i)], allocate));
  }
  for (int i = 0; i < a.gpu_count; ++i) {
    const GpuGrant& grant = a.gpus[static_cast<size_t>(i)];
    const GpuChange& c = changes[static_cast<size_t>(i)];
    Gpu& gpu = n.gpus[static_cast<size_t>(grant.gpu)];
    gpu.free_milli = c.free_milli;
    gpu.free_memory_mib = c.free_memory_mib;
    if (gpu.mode == SharingMode::kMig) {
      if (allocate) {
        gpu.mig_instances.push_back({grant.mig_profile, grant.mig_start});
      } else {
        gpu.mig_instances.erase(gpu.mig_instances.begin() + c.mig_index);
      }
    }
    used_gpu_milli_ += c.used_milli_delta;
    mig_slices_used_[n.model.value] += c.mig_slices_delta;
  }
  n.cpu_milli_free = cpu_free;
  n.memory_mib_free = mem_free;
  n.workloads += allocate ? 1 : -1;
  ++versions_[a.node.value];
  ++changes_;
  return Status::Ok();
}

Status Fleet::Allocate(const Assignment& a) {
  TESSERA_RETURN_IF_ERROR(CanAllocate(a));
  return Apply(a, /*allocate=*/true);
}

Status Fleet::Release(const Assignment& a) {
  TESSERA_RETURN_IF_ERROR(CanRelease(a));
  return Apply(a, /*allocate=*/false);
}

int64_t Fleet::used_gpu_milli() const {
  int64_t milli = used_gpu_milli_;
  for (size_t m = 0; m < mig_slices_used_.size(); ++m) {
    if (mig_slices_used_[m] == 0) continue;
    const int total =
        catalog_->gpu(catalog::GpuModelIndex(static_cast<uint32_t>(m))).mig->compute_slices;
    milli += mig_slices_used_[m] * kMilliPerGpu / total;
  }
  return milli;
}

Status Fleet::CheckGpuIndex(NodeIndex ni, int gpu_index) const {
  if (!ni.valid() || ni.value >= nodes_.size()) {
    return Status::InvalidArgument(fmt::format("node index {} is out of range", ni.value));
  }
  const Node& n = nodes_[ni.value];
  if (gpu_index < 0 || static_cast<size_t>(gpu_index) >= n.gpus.size()) {
    return Status::InvalidArgument(fmt::format("node '{}': gpu {} is out of range (it has {})",
                                               n.name, gpu_index, n.gpus.size()));
  }
  return Status::Ok();
}

Status Fleet::SetGpuMode(NodeIndex ni, int gpu_index, SharingMode mode) {
  TESSERA_RETURN_IF_ERROR(CheckGpuIndex(ni, gpu_index));
  Node& n = nodes_[ni.value];
  Gpu& gpu = n.gpus[static_cast<size_t>(gpu_index)];
  const catalog::GpuModel& model = catalog_->gpu(n.model);
  if (mode == SharingMode::kMig && model.mig == nullptr) {
    return Status::FailedPrecondition(
        fmt::format("{}: {} does not support MIG", Where(n, gpu_index), model.id));
  }
  if (gpu.free_milli != kMilliPerGpu || !gpu.mig_instances.empty()) {
    return Status::FailedPrecondition(fmt::format(
        "{}: is in use; change its mode when nothing is allocated on it", Where(n, gpu_index)));
  }
  if (gpu.mode == mode) return Status::Ok();
  gpu.mode = mode;
  gpu.free_memory_mib = mode == SharingMode::kShared ? model.memory_mib : 0;
  ++versions_[ni.value];
  ++changes_;
  return Status::Ok();
}

Status Fleet::SetGpuHealthy(NodeIndex ni, int gpu_index, bool healthy) {
  TESSERA_RETURN_IF_ERROR(CheckGpuIndex(ni, gpu_index));
  Node& n = nodes_[ni.value];
  Gpu& gpu = n.gpus[static_cast<size_t>(gpu_index)];
  if (gpu.healthy == healthy) return Status::Ok();
  gpu.healthy = healthy;
  ++versions_[ni.value];
  ++changes_;
  return Status::Ok();
}

Status Fleet::SetGpuHeld(NodeIndex ni, int gpu_index, bool held) {
  TESSERA_RETURN_IF_ERROR(CheckGpuIndex(ni, gpu_index));
  Gpu& gpu = nodes_[ni.value].gpus[static_cast<size_t>(gpu_index)];
  if (gpu.held == held) return Status::Ok();
  gpu.held = held;
  ++versions_[ni.value];
  ++changes_;
  return Status::Ok();
}

Status Fleet::SetNodeState(NodeIndex ni, NodeState state) {
  if (!ni.valid() || ni.value >= nodes_.size()) {
    return Status::InvalidArgument(fmt::format("node index {} is out of range", ni.value));
  }
  Node& n = nodes_[ni.value];
  if (n.removed) {
    return Status::FailedPrecondition(fmt::format("node '{}' was removed", n.name));
  }
  if (n.state == state) return Status::Ok();
  n.state = state;
  ++versions_[ni.value];
  ++changes_;
  return Status::Ok();
}

}  // namespace tessera::fleet
