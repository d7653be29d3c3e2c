// The offline bound ("offline-bound" in `tessera sim`): for every prefix of a run's arrival order,
// an upper bound on the GPU milli that any policy, online or offline, could have allocated from
// that prefix on the empty cluster, nothing departing. docs/offline-bound.md gives the argument.
// The bound is a max flow: pod groups (same allowed models and whole-GPU count) send their GPU
// demand to node kinds (same GPU model and GPU count); a group reaches a kind when the model is
// allowed and the nodes have enough GPUs, and can use at most floor(g / k) * k of a g-GPU node's
// GPUs for k-GPU pods; a kind takes at most its GPU milli. Any placement is such a flow, so the
// maximum flow bounds every placement. The flow is grown pod by pod (augmenting paths), so a whole
// run's curve costs about one search per GPU pod.
// Thread-safety: OfflineBound is a value owned by one thread; BoundCurve is a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "fleet/fleet.h"
#include "sim/curve.h"
#include "sim/trace.h"

namespace tessera::sim {

// The policy name under which `tessera sim` runs the bound instead of a scheduler.
inline constexpr char kOfflineBoundPolicy[] = "offline-bound";

class OfflineBound {
 public:
  // `fleet` is the empty cluster; only its nodes' GPU models and counts are read.
  explicit OfflineBound(const fleet::Fleet& fleet);

  // Adds one arrived pod and returns the bound on allocated GPU milli for every pod added so far.
  int64_t Add(const Pod& pod);

  int64_t bound_milli() const { return flow_; }

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
};

// The bound's curve over `order` (indices into `pods`), bucketed as a policy's run is
// (BucketSamples), so it sits beside the policies' curves; frag figures are 0.
Curve BoundCurve(const std::vector<Pod>& pods, const std::vector<uint32_t>& order,
                 const fleet::Fleet& fleet);

}  // namespace tessera::sim
