#include "sched/plugins/adaptive_fgd.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <vector>

#include "sched/plugins/fgd.h"

namespace tessera::sched {

namespace {

using FreeArray = std::array<int16_t, fleet::kMaxGpusPerNode>;

std::span<const int16_t> Span(const FreeArray& free, int count) {
  return {free.data(), static_cast<size_t>(count)};
}

// The classes seen so far and the fragmentation model built from them.
class LearnedWorkload {
 public:
  // Counts `need`; true when the model was rebuilt (scores computed before are stale).
  bool Add(const Need& need) {
    if (need.kind == Kind::kMig) return false;
    ++counts_[{need.cpu, need.milli, need.count, need.mask}];
    if (++seen_ < next_rebuild_) return false;
    Rebuild();
    next_rebuild_ = std::max(seen_ + 64, seen_ + seen_ / 4);
    return true;
  }
  const FragModel& model() const { return model_; }

 private:
  using Key = std::tuple<int64_t, int, int, ModelMask>;  // cpu, milli, count, mask.

  void Rebuild() {
    std::vector<std::pair<int64_t, Key>> by_count;
    for (const auto& [key, count] : counts_) by_count.emplace_back(count, key);
    std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second > b.second;
    });
    Workload w;
    int64_t kept = 0;
    for (const auto& [count, key] : by_count) {
      if (static_cast<double>(kept) >= kCoverage * static_cast<double>(seen_)) break;
      kept += count;
      const auto& [cpu, milli, gpus, mask] = key;
      w.push_back({cpu, gpus, milli, mask, static_cast<double>(count)});
    }
    for (WorkloadClass& c : w) c.weight /= static_cast<double>(kept);
    model_ = FragModel(w);
  }

  static constexpr double kCoverage = 0.95;
  std::map<Key, int64_t> counts_;
  int64_t seen_ = 0;
  int64_t next_rebuild_ = 1;
  FragModel model_{Workload{}};
};

struct Choice {
  double delta = 0;
  int gpu = -1;  // A share's GPU.
};

Choice Evaluate(const Need& need, const FragModel& model, const NodeFit& fit, const NodeGpus& g) {
  FreeArray free = g.free;
  const int64_t cpu_after = fit.cpu_free - need.cpu;
  const double before = model.NodeFrag(fit.model_bit, fit.cpu_free, Span(free, g.count));
  Choice best;
  if (need.kind == Kind::kShare) {
    bool found = false;
    for (int i = 0; i < g.count; ++i) {
      if (!ShareEligible(need, g, i)) continue;
      const auto k = static_cast<size_t>(i);
      const int16_t v = free[k];
      free[k] = static_cast<int16_t>(v - need.milli);
      const double d = model.NodeFrag(fit.model_bit, cpu_after, Span(free, g.count)) - before;
      free[k] = v;
      if (!found || AdaptiveFgdScore(d) > AdaptiveFgdScore(best.delta)) {
        best.delta = d;
        best.gpu = i;
        found = true;
      }
    }
    return best;
  }
  if (need.kind == Kind::kWhole) free = g.FreeAfterTakingWhole(need.count);
  best.delta = model.NodeFrag(fit.model_bit, cpu_after, Span(free, g.count)) - before;
  return best;
}

class AdaptiveFgdPolicy final : public Policy {
 public:
  std::string_view Name() const override { return "adaptive-fgd"; }

  void Observe(const Need& need) override { workload_.Add(need); }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    for (size_t i = 0; i < feasible.size(); ++i) {
      const uint32_t n = feasible[i];
      const Choice c = Evaluate(need, workload_.model(), nodes.fit(n), nodes.gpus(n));
      scores[i] = AdaptiveFgdScore(c.delta);
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    if (need.kind != Kind::kShare) return GrantNonShare(need, nodes, n, a);
    const Choice c = Evaluate(need, workload_.model(), nodes.fit(n), nodes.gpus(n));
    if (c.gpu < 0) return false;
    GrantShare(need, c.gpu, a);
    return true;
  }

 private:
  LearnedWorkload workload_;
};

}  // namespace

int32_t AdaptiveFgdScore(double delta) { return FgdScore(0, delta); }

std::unique_ptr<Policy> NewAdaptiveFgdPolicy(const PolicyEnv&) {
  return std::make_unique<AdaptiveFgdPolicy>();
}

}  // namespace tessera::sched
