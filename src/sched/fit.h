// The fit filter every policy shares, and the GPU choices ("gpusel") within a node.
// Filter, as the FGD simulator's NodeResourcesFit plus Open-Gpu-Share, extended to Tessera's
// sharing modes: the node is ready; free CPU and memory suffice; and for a GPU request the node's
// model is allowed and
//   a share (1 GPU, 1..999 milli)   fits on one shared-mode GPU (free milli and memory cap),
//   k whole GPUs                    are fully free and not in mig mode (in one NVLink island when
//                                   the request asks for NVLink),
//   a MIG slice                     has a valid placement on a mig-mode GPU (mig::Plan).
// CPU-only requests ignore the model constraint, as in FGD.
// Thread-safety: pure functions over the caller's data.
#pragma once

#include <cstdint>
#include <string_view>

#include "fleet/fleet.h"
#include "sched/node_table.h"
#include "sched/scheduler.h"

namespace tessera::sched {

enum class Kind { kCpuOnly, kShare, kWhole, kMig };

// A request digested once per scheduling decision.
struct Need {
  Kind kind = Kind::kCpuOnly;
  int64_t cpu = 0;
  int64_t mem = 0;
  ModelMask mask = 0;           // 0 = any; always 0 for CPU-only.
  int milli = 0;                // Per GPU: 1..999 for a share, 1000 whole, 0 otherwise.
  int count = 0;                // GPUs (1 for a share or a MIG slice).
  int64_t gpu_mem = 0;          // A share's memory cap.
  bool nvlink = false;          // Whole GPUs, count > 1, on one island.
  bool exclusive_mode = false;  // Whole GPUs from exclusive-mode GPUs only.
  std::string_view mig_profile;
  bool detail = false;  // The NodeFit summary is not enough; FitsDetail decides.
  uint32_t source = 0;  // Request::source: whose work it is (0 = no one's in particular).
};

// Digests a request that passed ValidateRequest (scheduler.h).
Need Prepare(const Request& r);

// The summary test; exact unless need.detail.
inline bool FitsSummary(const Need& need, const NodeFit& f) {
  if (!(f.flags & NodeFit::kReady) || f.cpu_free < need.cpu || f.mem_free < need.mem) return false;
  if (!AllowsModel(need.mask, f.model_bit)) return false;
  switch (need.kind) {
    case Kind::kCpuOnly:
      return true;
    case Kind::kShare:
      return f.share_cap >= need.milli;
    case Kind::kWhole:
      return f.whole_cap >= need.count;
    case Kind::kMig:
      return (f.flags & NodeFit::kHasMig) != 0;
  }
  return false;
}

// Whether GPU i of `g` can be one of the whole GPUs `need` asks for: fully free, not in mig mode,
// and in exclusive mode when the request says so.
inline bool WholeEligible(const Need& need, const NodeGpus& g, int i) {
  const auto k = static_cast<size_t>(i);
  return WholeGpuMode(g.mode[k], need.exclusive_mode) && g.free[k] == fleet::kMilliPerGpu;
}

// The free milli of each GPU of `g` once the whole GPUs `need` asks for are booked: the
// lowest-index eligible ones, which is how whole-GPU grants are chosen (without NVLink).
inline std::array<int16_t, fleet::kMaxGpusPerNode> FreeAfterTakingWhole(const Need& need,
                                                                        const NodeGpus& g) {
  std::array<int16_t, fleet::kMaxGpusPerNode> after = g.free;
  int take = need.count;
  for (int i = 0; i < g.count && take > 0; ++i) {
    if (WholeEligible(need, g, i)) {
      after[static_cast<size_t>(i)] = 0;
      --take;
    }
  }
  return after;
}

// The per-GPU test for what the summary cannot tell: memory caps, NVLink islands, MIG placement,
// exclusive mode.
bool FitsDetail(const Need& need, const NodeTable& t, uint32_t n);

inline bool Fits(const Need& need, const NodeTable& t, uint32_t n) {
  return FitsSummary(need, t.fit(n)) && (!need.detail || FitsDetail(need, t, n));
}

// Writes to `out` (room for t.size() entries) the nodes worth filtering for `need`, from the
// table's index, and returns how many: of each group of identical nodes (idle, or in use with GPU
// capacity that may suffice) only the lowest-ranked, which scores as its peers and wins their
// ties; every node of the groups when `every_node` (a policy that draws among feasible nodes).
// Every node that can host `need` is listed or stood for.
size_t Candidates(const Need& need, const NodeTable& t, bool every_node, uint32_t* out);

// True when GPU i can take the share `need` asks for.
inline bool ShareEligible(const Need& need, const NodeGpus& g, int i) {
  const auto k = static_cast<size_t>(i);
  return g.mode[k] == catalog::SharingMode::kShared && g.free[k] >= need.milli &&
         g.free_memory[k] >= need.gpu_mem;
}

// An assignment of `need` on node n with no GPU grants yet.
fleet::Assignment BaseAssignment(const Need& need, uint32_t n);

// Appends a share grant on GPU i.
void GrantShare(const Need& need, int i, fleet::Assignment* a);

// gpusel "best" for a share: the eligible GPU with the least free milli, lowest index on ties.
// -1 when none.
int BestShareGpu(const Need& need, const NodeGpus& g);

// The GPUs every policy takes for a non-share request: the lowest-index fully free GPUs (within
// the lowest-numbered island that has enough, for NVLink), or the first mig-mode GPU where the
// profile has a valid placement, at the start mig::Plan chooses. False when the node cannot host
// it.
bool GrantNonShare(const Need& need, const NodeTable& t, uint32_t n, fleet::Assignment* a);

// gpusel "best": BestShareGpu for a share, GrantNonShare otherwise.
bool GrantBest(const Need& need, const NodeTable& t, uint32_t n, fleet::Assignment* a);

}  // namespace tessera::sched
