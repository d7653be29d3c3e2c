// The offline bound ("offline-bound" in `tessera sim`): for every prefix of a run's arrival order,
// an upper bound on the GPU milli that any policy, online or offline, could have allocated from
// that prefix on the empty cluster, nothing departing. docs/offline-bound.md gives the argument.
// The bound is a max flow: pod groups (same allowed models and whole-GPU count) send their GPU
// demand to node kinds (same GPU model and GPU count); a group reaches a kind when the model is
// allowed and the nodes have enough GPUs, and can use at most floor(g / k) * k of a g-GPU node's
// GPUs for k-GPU pods; a kind takes at most its GPU milli. Any placement is such a flow, so the
// maximum flow bounds every placement. The flow is grown pod by pod (augmenting paths), so a whole
// run's curve costs about one search per GPU pod.
// The flow treats a GPU's milli as fluid, so it misses what packing shares into GPUs wastes (two
// 600-milli shares never share a GPU). PackingBound adds that: for a dual feasible function u
// (any set of shares that fits on one GPU has u-sizes summing to at most one GPU), every placement
// has total u-size at most the fleet's GPUs, and the best fractional knapsack under that budget
// bounds the milli placed. The bound is the least of the flow and every such knapsack.
// Thread-safety: OfflineBound is a value owned by one thread; BoundCurve is a pure function.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fleet/fleet.h"
#include "sim/curve.h"
#include "sim/trace.h"

namespace tessera::sim {

// The policy name under which `tessera sim` runs the bound instead of a scheduler.
inline constexpr char kOfflineBoundPolicy[] = "offline-bound";

// The knapsack bound over a family of dual feasible functions, grown pod by pod. Whole GPUs are
// their own u-size under every function; only shares are rounded.
class PackingBound {
 public:
  explicit PackingBound(int64_t total_gpus);

  void Add(const Pod& pod);
  // The least, over the family, of the most milli the pods added so far could place.
  int64_t Bound() const;

 private:
  // u-sizes are in units of 1/kScale milli, so that u = 1000 / k is exact for every k <= 10.
  static constexpr int64_t kScale = 2520;
  struct Function {
    std::vector<int64_t> u;          // u[m] for m = 0..1000 milli, scaled.
    std::vector<int> by_value;       // The sizes seen, by milli per u ascending: the first to drop.
    bool Worse(int a, int b) const;  // Size a comes before size b in by_value.
  };
  void AddFunction(std::vector<int64_t> u);
  void AddSize(int milli);

  int64_t capacity_;                 // GPUs * 1000 * kScale.
  std::vector<int64_t> count_;       // count_[m]: GPUs held at m milli; m = 1000 for whole GPUs.
  std::vector<int> sizes_;           // The m with count_[m] > 0, as they first appeared.
  std::vector<Function> functions_;  // The family; grows as new share sizes appear.
};

class OfflineBound {
 public:
  // `fleet` is the empty cluster; only its nodes' GPU models and counts are read.
  explicit OfflineBound(const fleet::Fleet& fleet);

  // Adds one arrived pod and returns the bound on allocated GPU milli for every pod added so far.
  int64_t Add(const Pod& pod);

  int64_t bound_milli() const { return std::min(flow_, packing_.Bound()); }

 private:
  struct Group {
    sched::ModelMask mask = 0;
    int count = 0;  // GPUs per pod; a share counts 1.
  };
  struct Kind {
    sched::ModelMask model_bit = 0;
    int gpus = 0;
    int64_t nodes = 0;
  };
  size_t GroupOf(const Pod& pod);
  void Grow(size_t vertices);
  int64_t Augment();  // One shortest augmenting path from the source; its flow, 0 when none.

  std::vector<Kind> kinds_;
  std::vector<Group> groups_;
  // Vertices: 0 source, 1 sink, then kinds, then groups (added as they appear). cap_ is the
  // residual capacity matrix, n_ x n_.
  size_t n_ = 0;
  std::vector<int64_t> cap_;
  std::vector<size_t> group_vertex_;
  int64_t flow_ = 0;
  PackingBound packing_;
};

// The bound's curve over `order` (indices into `pods`), bucketed as a policy's run is
// (BucketSamples), so it sits beside the policies' curves; frag figures are 0.
Curve BoundCurve(const std::vector<Pod>& pods, const std::vector<uint32_t>& order,
                 const fleet::Fleet& fleet);

}  // namespace tessera::sim
