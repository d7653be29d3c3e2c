#include "sched/plugins/fgd.h"

#include <array>
#include <cmath>
#include <vector>

#include "sched/score_cache.h"

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

class FgdPolicy final : public Policy {
 public:
  explicit FgdPolicy(const FragModel* model) : model_(model) {}
  std::string_view Name() const override { return "fgd"; }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    auto& cache = cache_.For(need, nodes.size());
    for (size_t i = 0; i < feasible.size(); ++i) {
      const uint32_t n = feasible[i];
      scores[i] = NodeScoreCache<int8_t>::Get(cache[n], nodes.epoch(n), [&] {
        return static_cast<int8_t>(
            FgdNodeScore(need, *model_, nodes.fit(n), nodes.gpus(n), nodes.frag(n)).score);
      });
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
  const FragModel* model_;
  NodeScoreCache<int8_t> cache_;
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
  const std::array<int16_t, fleet::kMaxGpusPerNode> free = FreeAfterTakingWhole(need, g);
  return {FgdScore(frag_before, model.NodeFrag(fit.model_bit, cpu_after, Free(free, g.count))), -1};
}

std::unique_ptr<Policy> NewFgdPolicy(const PolicyEnv& env) {
  return std::make_unique<FgdPolicy>(env.frag);
}

}  // namespace tessera::sched
