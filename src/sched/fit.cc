#include "sched/fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "mig/mig.h"

namespace tessera::sched {

using catalog::SharingMode;

namespace {

// The lowest-numbered NVLink island with at least need.count eligible GPUs; -1 when none.
int IslandFor(const Need& need, const NodeGpus& g) {
  std::array<int, fleet::kMaxGpusPerNode> in_island{};
  for (int i = 0; i < g.count; ++i) {
    const int island = g.island[static_cast<size_t>(i)];
    if (island >= 0 && island < fleet::kMaxGpusPerNode && WholeEligible(need, g, i)) {
      ++in_island[static_cast<size_t>(island)];
    }
  }
  for (int island = 0; island < fleet::kMaxGpusPerNode; ++island) {
    if (in_island[static_cast<size_t>(island)] >= need.count) return island;
  }
  return -1;
}

// Whether `g` has need.count eligible GPUs.
bool EnoughWhole(const Need& need, const NodeGpus& g) {
  int eligible = 0;
  for (int i = 0; i < g.count; ++i) eligible += WholeEligible(need, g, i) ? 1 : 0;
  return eligible >= need.count;
}

// The first mig-mode GPU of node n where one instance of the profile fits, and its start.
bool PlanMig(const Need& need, const NodeTable& t, uint32_t n, int* gpu, int* start,
             const mig::Profile** profile) {
  const fleet::Node& node = t.fleet().node(fleet::NodeIndex(n));
  if (!node.model.valid()) return false;
  const mig::Table* table = t.fleet().catalog().gpu(node.model).mig;
  if (table == nullptr) return false;
  const mig::Profile* p = table->Find(need.mig_profile);
  if (p == nullptr) return false;
  std::vector<mig::Placement> existing;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const fleet::Gpu& g = node.gpus[i];
    if (g.mode != SharingMode::kMig || !g.grantable()) continue;
    existing.clear();
    for (const fleet::MigInstance& m : g.mig_instances) existing.push_back({m.profile, m.start});
    Result<std::vector<mig::Placement>> plan = mig::Plan(*table, existing, {p});
    if (!plan.ok() || plan->empty()) continue;
    *gpu = static_cast<int>(i);
    *start = plan->back().start;
    *profile = p;
    return true;
  }
  return false;
}

}  // namespace

Status ValidateRequest(const Request& r) {
  auto bad = [](std::string message) { return Status::InvalidArgument(std::move(message)); };
  if (r.cpu_milli < 0) return bad(fmt::format("cpu_milli {} is negative", r.cpu_milli));
  if (r.memory_mib < 0) return bad(fmt::format("memory_mib {} is negative", r.memory_mib));
  if (r.gpu_memory_mib < 0) {
    return bad(fmt::format("gpu_memory_mib {} is negative", r.gpu_memory_mib));
  }
  if (!r.mig_profile.empty()) {
    if (r.gpu_count != 1) {
      return bad(fmt::format("a MIG request takes gpu_count 1 (one slice), not {}", r.gpu_count));
    }
    return Status::Ok();
  }
  if (r.gpu_count < 0 || r.gpu_count > fleet::kMaxGpusPerNode) {
    return bad(
        fmt::format("gpu_count {} is out of range [0, {}]", r.gpu_count, fleet::kMaxGpusPerNode));
  }
  if (r.gpu_count == 0 && r.gpu_milli != 0) {
    return bad(fmt::format("gpu_milli {} asked with gpu_count 0", r.gpu_milli));
  }
  if (r.gpu_count == 1 && (r.gpu_milli < 1 || r.gpu_milli > fleet::kMilliPerGpu)) {
    return bad(
        fmt::format("gpu_milli {} is out of range [1, {}]", r.gpu_milli, fleet::kMilliPerGpu));
  }
  if (r.gpu_count > 1 && r.gpu_milli != fleet::kMilliPerGpu) {
    return bad(fmt::format("{} GPUs must be whole (gpu_milli {}), not gpu_milli {}", r.gpu_count,
                           fleet::kMilliPerGpu, r.gpu_milli));
  }
  return Status::Ok();
}

Need Prepare(const Request& r) {
  Need need;
  need.cpu = r.cpu_milli;
  need.mem = r.memory_mib;
  need.source = r.source;
  if (!r.mig_profile.empty()) {
    need.kind = Kind::kMig;
    need.count = 1;
    need.mig_profile = r.mig_profile;
    need.detail = true;
  } else if (r.gpu_count == 0) {
    need.kind = Kind::kCpuOnly;
  } else if (r.gpu_milli < fleet::kMilliPerGpu) {
    need.kind = Kind::kShare;
    need.milli = r.gpu_milli;
    need.count = 1;
    need.gpu_mem = r.gpu_memory_mib;
    need.detail = r.gpu_memory_mib > 0;
  } else {
    need.kind = Kind::kWhole;
    need.milli = fleet::kMilliPerGpu;
    need.count = r.gpu_count;
    need.nvlink = r.nvlink && r.gpu_count > 1;
    need.exclusive_mode = r.exclusive_mode;
    need.detail = need.nvlink || need.exclusive_mode;
  }
  if (need.kind != Kind::kCpuOnly) need.mask = r.allowed_models;
  return need;
}

bool FitsDetail(const Need& need, const NodeTable& t, uint32_t n) {
  const NodeGpus& g = t.gpus(n);
  switch (need.kind) {
    case Kind::kCpuOnly:
      return true;
    case Kind::kShare:
      for (int i = 0; i < g.count; ++i) {
        if (ShareEligible(need, g, i)) return true;
      }
      return false;
    case Kind::kWhole:
      return need.nvlink ? IslandFor(need, g) >= 0 : EnoughWhole(need, g);
    case Kind::kMig: {
      int gpu = 0, start = 0;
      const mig::Profile* profile = nullptr;
      return PlanMig(need, t, n, &gpu, &start, &profile);
    }
  }
  return false;
}

fleet::Assignment BaseAssignment(const Need& need, uint32_t n) {
  fleet::Assignment a;
  a.node = fleet::NodeIndex(n);
  a.cpu_milli = need.cpu;
  a.memory_mib = need.mem;
  return a;
}

void GrantShare(const Need& need, int i, fleet::Assignment* a) {
  fleet::GpuGrant& grant = a->gpus[static_cast<size_t>(a->gpu_count++)];
  grant = fleet::GpuGrant{.gpu = i, .milli = need.milli, .memory_mib = need.gpu_mem};
}

int BestShareGpu(const Need& need, const NodeGpus& g) {
  int best = -1;
  for (int i = 0; i < g.count; ++i) {
    if (ShareEligible(need, g, i) &&
        (best < 0 || g.free[static_cast<size_t>(i)] < g.free[static_cast<size_t>(best)])) {
      best = i;
    }
  }
  return best;
}

bool GrantNonShare(const Need& need, const NodeTable& t, uint32_t n, fleet::Assignment* a) {
  const NodeGpus& g = t.gpus(n);
  switch (need.kind) {
    case Kind::kCpuOnly:
      return true;
    case Kind::kShare:
      return false;
    case Kind::kWhole: {
      const int island = need.nvlink ? IslandFor(need, g) : -1;
      if (need.nvlink && island < 0) return false;
      for (int i = 0; i < g.count && a->gpu_count < need.count; ++i) {
        if (!WholeEligible(need, g, i) ||
            (need.nvlink && g.island[static_cast<size_t>(i)] != island)) {
          continue;
        }
        a->gpus[static_cast<size_t>(a->gpu_count++)] = fleet::GpuGrant{.gpu = i};
      }
      return a->gpu_count == need.count;
    }
    case Kind::kMig: {
      int gpu = 0, start = 0;
      const mig::Profile* profile = nullptr;
      if (!PlanMig(need, t, n, &gpu, &start, &profile)) return false;
      a->gpus[static_cast<size_t>(a->gpu_count++)] =
          fleet::GpuGrant{.gpu = gpu, .mig_profile = profile, .mig_start = start};
      return true;
    }
  }
  return false;
}

size_t Candidates(const Need& need, const NodeTable& t, bool every_node, uint32_t* out) {
  size_t count = 0;
  auto add = [&](const std::vector<uint32_t>& nodes) {
    std::copy(nodes.begin(), nodes.end(), out + count);
    count += nodes.size();
  };
  switch (need.kind) {
    case Kind::kCpuOnly:
    case Kind::kMig:
      add(every_node ? t.used() : t.used_leads());
      break;
    case Kind::kShare:
      for (int b = need.milli / NodeTable::kShareBucketWidth; b < NodeTable::kShareBuckets; ++b) {
        add(every_node ? t.share_bucket(b) : t.share_leads(b));
      }
      break;
    case Kind::kWhole:
      for (int b = need.count; b <= fleet::kMaxGpusPerNode; ++b) {
        add(every_node ? t.whole_bucket(b) : t.whole_leads(b));
      }
      break;
  }
  for (const NodeTable::IdleGroup& g : t.idle_groups()) {
    if (g.members.empty() || !FitsSummary(need, g.fit)) continue;
    if (every_node) {
      add(g.members);
    } else {
      out[count++] = g.members.back();
    }
  }
  return count;
}

bool GrantBest(const Need& need, const NodeTable& t, uint32_t n, fleet::Assignment* a) {
  if (need.kind != Kind::kShare) return GrantNonShare(need, t, n, a);
  const int i = BestShareGpu(need, t.gpus(n));
  if (i < 0) return false;
  GrantShare(need, i, a);
  return true;
}

}  // namespace tessera::sched
