#include "sched/plugins/fgd.h"

#include <array>
#include <cmath>
#include <unordered_map>
#include <vector>

namespace tessera::sched {

namespace {

std::span<const int16_t> Free(const std::array<int16_t, fleet::kMaxGpusPerNode>& free, int count) {
  return {free.data(), static_cast<size_t>(count)};
}

FgdChoice ShareScore(const Need& need, const FragModel& model, const NodeFit& fit,
                     const NodeGpus& g, double before) {
  std::array<int16_t, fleet::kMaxGpusPerNode> free = g.free;
  const int64_t cpu_after = fit.cpu_free - need.cpu;
  // GPUs with the same free milli give the same after-state (F depends on the multiset of free
  // milli), so each distinct value is evaluated once.
  std::array<int16_t, fleet::kMaxGpusPerNode> seen_free{};
  std::array<int, fleet::kMaxGpusPerNode> seen_score{};
  int seen = 0;
  FgdChoice best;
  for (int i = 0; i < g.count; ++i) {
    if (!ShareEligible(need, g, i)) continue;
    const auto k = static_cast<size_t>(i);
    const int16_t v = free[k];
    int score = -1;
    for (int s = 0; s < seen; ++s) {
      if (seen_free[static_cast<size_t>(s)] == v) score = seen_score[static_cast<size_t>(s)];
    }
    if (score < 0) {
      free[k] = static_cast<int16_t>(v - need.milli);
      score = FgdScore(before, model.NodeFrag(fit.model_bit, cpu_after, Free(free, g.count)));
      free[k] = v;
      seen_free[static_cast<size_t>(seen)] = v;
      seen_score[static_cast<size_t>(seen++)] = score;
    }
    if (best.gpu < 0 || score > best.score) best = {score, i};
  }
  return best;
}

// One cached score per node for one request shape; valid while the node's epoch is unchanged.
struct ShapeKey {
  int64_t cpu = 0;
  int64_t gpu_mem = 0;
  int milli = 0;
  int count = 0;
  Kind kind = Kind::kCpuOnly;
  bool operator==(const ShapeKey&) const = default;
};
struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.cpu) * 0x9e3779b97f4a7c15ULL;
    h ^= (static_cast<uint64_t>(k.milli) << 20 | static_cast<uint64_t>(k.count) << 8 |
          static_cast<uint64_t>(k.kind)) *
         0xc2b2ae3d27d4eb4fULL;
    h ^= static_cast<uint64_t>(k.gpu_mem) * 0x165667b19e3779f9ULL;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
struct ScoreCache {
  std::vector<uint32_t> epoch;  // 0: nothing cached.
  std::vector<int8_t> score;
};

class FgdPolicy final : public Policy {
 public:
  explicit FgdPolicy(const FragModel* model) : model_(model) {}
  std::string_view Name() const override { return "fgd"; }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    ScoreCache& cache = CacheFor(need, nodes.size());
    for (size_t i = 0; i < feasible.size(); ++i) {
      const uint32_t n = feasible[i];
      const uint32_t epoch = nodes.epoch(n);
      if (cache.epoch[n] != epoch) {
        cache.score[n] = static_cast<int8_t>(
            FgdNodeScore(need, *model_, nodes.fit(n), nodes.gpus(n), nodes.frag(n)).score);
        cache.epoch[n] = epoch;
      }
      scores[i] = cache.score[n];
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    if (need.kind != Kind::kShare) return GrantNonShare(need, nodes, n, a);
    const FgdChoice c = FgdNodeScore(need, *model_, nodes.fit(n), nodes.gpus(n), nodes.frag(n));
    if (c.gpu < 0) return false;
    GrantShare(need, c.gpu, a);
    return true;
  }

 private:
  // A bound on distinct shapes kept; past it the caches start over (the openb traces have at
  // most a few hundred shapes, so this never happens there).
  static constexpr size_t kMaxShapes = 1024;

  ScoreCache& CacheFor(const Need& need, size_t nodes) {
    const ShapeKey key{need.cpu, need.gpu_mem, need.milli, need.count, need.kind};
    auto it = caches_.find(key);
    if (it == caches_.end()) {
      if (caches_.size() >= kMaxShapes) caches_.clear();
      it = caches_.emplace(key, ScoreCache{}).first;
    }
    ScoreCache& cache = it->second;
    if (cache.epoch.size() < nodes) {
      cache.epoch.resize(nodes, 0);
      cache.score.resize(nodes, 0);
    }
    return cache;
  }

  const FragModel* model_;
  std::unordered_map<ShapeKey, ScoreCache, ShapeKeyHash> caches_;
};

}  // namespace

int FgdScore(double frag_before, double frag_after) {
  const double x = (frag_before - frag_after) / 1000;
  const double sigmoid = 1.0 / (1.0 + std::exp(-x));
  return static_cast<int>(static_cast<int64_t>(sigmoid * 100.0));
}

FgdChoice FgdNodeScore(const Need& need, const FragModel& model, const NodeFit& fit,
                       const NodeGpus& g, double frag_before) {
  if (need.kind == Kind::kShare) return ShareScore(need, model, fit, g, frag_before);
  const int64_t cpu_after = fit.cpu_free - need.cpu;
  if (need.kind != Kind::kWhole) {
    // Only the CPU changes; unless that flips some class's CPU test, F is bitwise unchanged.
    if (!model.CpuChangeMatters(fit.cpu_free, cpu_after)) return {FgdScore(0, 0), -1};
    return {FgdScore(frag_before, model.NodeFrag(fit.model_bit, cpu_after, Free(g.free, g.count))),
            -1};
  }
  const std::array<int16_t, fleet::kMaxGpusPerNode> free = g.FreeAfterTakingWhole(need.count);
  return {FgdScore(frag_before, model.NodeFrag(fit.model_bit, cpu_after, Free(free, g.count))), -1};
}

std::unique_ptr<Policy> NewFgdPolicy(const PolicyEnv& env) {
  return std::make_unique<FgdPolicy>(env.frag);
}

}  // namespace tessera::sched
