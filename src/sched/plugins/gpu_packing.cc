#include "sched/plugins/gpu_packing.h"

#include <algorithm>
#include <array>

namespace tessera::sched {

namespace {

class GpuPackingPolicy final : public Policy {
 public:
  std::string_view Name() const override { return "gpu-packing"; }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    for (size_t i = 0; i < feasible.size(); ++i) {
      scores[i] = need.kind == Kind::kCpuOnly ? 0 : NodeScore(need, nodes.gpus(feasible[i]));
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    return GrantBest(need, nodes, n, a);
  }

 private:
  // The GPUs this kind of request can use: shared-mode ones for a share, those WholeGpuMode allows
  // for whole GPUs. With every GPU in shared mode, as in the openb fleet, that is every GPU.
  static int NodeScore(const Need& need, const NodeGpus& g) {
    std::array<int16_t, fleet::kMaxGpusPerNode> usable{};
    size_t n = 0;
    for (int i = 0; i < g.count; ++i) {
      const auto k = static_cast<size_t>(i);
      const bool ok = need.kind == Kind::kShare ? g.mode[k] == catalog::SharingMode::kShared
                                                : WholeGpuMode(g.mode[k], need.exclusive_mode);
      if (ok) usable[n++] = g.free[k];
    }
    const int milli = need.kind == Kind::kMig ? fleet::kMilliPerGpu : need.milli;
    return std::max(0,
                    GpuPackingScore(std::span<const int16_t>(usable.data(), n), milli, need.count));
  }
};

}  // namespace

int GpuPackingScore(std::span<const int16_t> free, int milli, int count) {
  if (milli <= 0) return 0;
  const auto gpus = static_cast<int64_t>(free.size());
  int64_t fully_free = 0;
  for (int16_t v : free) fully_free += v == fleet::kMilliPerGpu ? 1 : 0;
  if (fully_free == gpus)
    return static_cast<int>(std::max<int64_t>(100 / 3 - fully_free, fully_free));
  std::array<int16_t, fleet::kMaxGpusPerNode> sorted{};
  const size_t n = std::min(free.size(), sorted.size());
  std::copy_n(free.begin(), n, sorted.begin());
  std::stable_sort(sorted.begin(), sorted.begin() + static_cast<ptrdiff_t>(n));
  int need = count;
  int64_t fully_free_taken = 0, free_ratio_sum = 0;
  for (size_t i = 0; i < n && need > 0; ++i) {
    if (sorted[i] < milli) continue;
    --need;
    if (sorted[i] == fleet::kMilliPerGpu) ++fully_free_taken;
    free_ratio_sum += int64_t{sorted[i]} * 100 / fleet::kMilliPerGpu;
  }
  if (need > 0) return -1;
  if (fully_free_taken > 0)
    return static_cast<int>(std::max<int64_t>(100 / 2 - fully_free_taken, 100 / 3));
  return static_cast<int>(std::max<int64_t>(100 - free_ratio_sum / 10, 100 / 2));
}

std::unique_ptr<Policy> NewGpuPackingPolicy(const PolicyEnv&) {
  return std::make_unique<GpuPackingPolicy>();
}

}  // namespace tessera::sched
