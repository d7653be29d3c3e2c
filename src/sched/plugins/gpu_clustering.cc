#include "sched/plugins/gpu_clustering.h"

#include "sched/plugins/dotprod.h"

namespace tessera::sched {

namespace {

class GpuClusteringPolicy final : public Policy {
 public:
  std::string_view Name() const override { return "gpu-clustering"; }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    const int tag = TagOf(need.count, need.milli, need.kind == Kind::kMig);
    for (size_t i = 0; i < feasible.size(); ++i) {
      const uint32_t n = feasible[i];
      scores[i] = GpuClusteringScore(tag, nodes.tags(n), nodes.fit(n).gpu_free);
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    return GrantBest(need, nodes, n, a);
  }
};

}  // namespace

int GpuClusteringScore(int tag, const NodeTags& tags, int64_t gpu_free) {
  if (tag == kNoTag) return 0;
  // Integer arithmetic in the Go code's order: (100/4 * (8000 - free)) / 8000, truncated.
  const int64_t f = (100 / 4) * (kMaxSpecGpuMilli - gpu_free) / kMaxSpecGpuMilli;
  int64_t tier = 0;
  if (tags.count[static_cast<size_t>(tag)] > 0) {
    tier = tags.kinds == 1 ? 75 : 50;
  } else if (tags.kinds == 0) {
    tier = 25;
  }
  return static_cast<int>(f + tier);
}

std::unique_ptr<Policy> NewGpuClusteringPolicy(const PolicyEnv&) {
  return std::make_unique<GpuClusteringPolicy>();
}

}  // namespace tessera::sched
