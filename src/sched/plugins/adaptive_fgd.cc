#include "sched/plugins/adaptive_fgd.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "sched/plugins/fgd.h"
#include "sched/plugins/learned_workload.h"
#include "sched/score_cache.h"

namespace tessera::sched {

namespace {

using FreeArray = std::array<int16_t, fleet::kMaxGpusPerNode>;

std::span<const int16_t> Span(const FreeArray& free, int count) {
  return {free.data(), static_cast<size_t>(count)};
}

struct Choice {
  double delta = 0;
  int gpu = -1;  // A share's GPU.
};

// The fragmentation change of placing `need` on a node; for a share, the best GPU's, where a
// non-empty `hole_waste` (guarded-fgd) also counts the change in the expected waste of the hole.
// frag_before() gives the node's F as it is (the caller may have it cached).
template <typename FragBefore>
Choice Evaluate(const Need& need, const FragModel& model, std::span<const double> hole_waste,
                const NodeFit& fit, const NodeGpus& g, FragBefore&& frag_before) {
  FreeArray free = g.free;
  const int64_t cpu_after = fit.cpu_free - need.cpu;
  Choice best;
  if (need.kind != Kind::kShare && need.kind != Kind::kWhole &&
      !model.CpuChangeMatters(fit.cpu_free, cpu_after)) {
    return best;  // Only the CPU changes, and no class's CPU test with it: F is bitwise the same.
  }
  const double before = frag_before();
  if (need.kind == Kind::kShare) {
    // F depends on the multiset of free milli and the hole's waste on the GPU's free milli, so
    // GPUs with equal free milli give bitwise the same change: each value is evaluated once (a
    // later GPU with the same change never beats the first).
    std::array<int16_t, fleet::kMaxGpusPerNode> tried{};
    int tries = 0;
    bool found = false;
    for (int i = 0; i < g.count; ++i) {
      if (!ShareEligible(need, g, i)) continue;
      const auto k = static_cast<size_t>(i);
      const int16_t v = free[k];
      if (std::find(tried.begin(), tried.begin() + tries, v) != tried.begin() + tries) continue;
      tried[static_cast<size_t>(tries++)] = v;
      free[k] = static_cast<int16_t>(v - need.milli);
      double d = model.NodeFrag(fit.model_bit, cpu_after, Span(free, g.count)) - before;
      if (!hole_waste.empty()) {
        d += hole_waste[static_cast<size_t>(v - need.milli)] - hole_waste[static_cast<size_t>(v)];
      }
      free[k] = v;
      if (!found || AdaptiveFgdScore(d) > AdaptiveFgdScore(best.delta)) {
        best.delta = d;
        best.gpu = i;
        found = true;
      }
    }
    return best;
  }
  if (need.kind == Kind::kWhole) free = FreeAfterTakingWhole(need, g);
  best.delta = model.NodeFrag(fit.model_bit, cpu_after, Span(free, g.count)) - before;
  return best;
}

// guarded-fgd's view of the fleet before each decision: the CPU a free milli-GPU should keep and
// each model's scarcity, from what the learned workload summed and the node table's fleet-wide
// sums (no pass over the nodes).
class Guard {
 public:
  // Called once per decision, before the costs.
  void Prepare(const NodeTable& nodes, const LearnedWorkload& learned) {
    const auto free_cpu = static_cast<double>(nodes.total_cpu_free());
    const auto free_gpu = static_cast<double>(nodes.total_gpu_free());
    const LearnedSums seen = learned.sums();
    kappa_ = 0;
    if (seen.gpu_milli > 0) {
      // GPU requests need kg CPU per milli-GPU; with CPU-only requests the workload needs ka. The
      // fleet's free CPU per free milli-GPU is kf. pressure = the share of the free CPU beyond
      // the GPU requests' need that CPU-only requests would take: near 0, CPU-only requests fit
      // in the slack and a GPU only needs kg; at 1, CPU is as scarce as GPU and every free GPU
      // must keep its share of all the CPU asked. The square keeps kg until CPU truly runs short.
      const double kg = seen.gpu_request_cpu / seen.gpu_milli, ka = seen.cpu / seen.gpu_milli;
      const double kf = free_gpu > 0 ? free_cpu / free_gpu : 0;
      const double pressure = kf > kg ? std::clamp((ka - kg) / (kf - kg), 0.0, 1.0) : 1.0;
      kappa_ = kg + (ka - kg) * pressure * pressure;
    }
    pinned_ = learned.any_pinned();
    if (!pinned_) return;
    for (size_t m = 0; m < models_.size(); ++m) {
      models_[m] = Model{.capacity = static_cast<double>(nodes.model_gpus(static_cast<int>(m)) *
                                                         fleet::kMilliPerGpu),
                         .free = static_cast<double>(nodes.model_gpu_free(static_cast<int>(m)))};
    }
    // Each model's pinned demand rate: pinned milli seen per milli seen, a request pinned to
    // several models split over them by capacity.
    learned.ForEachPinned([&](ModelMask mask, double demand) {
      double capacity = 0;
      for (ModelMask rest = mask; rest != 0; rest &= rest - 1) {
        capacity += models_[static_cast<size_t>(std::countr_zero(rest))].capacity;
      }
      if (capacity <= 0) return;
      for (ModelMask rest = mask; rest != 0; rest &= rest - 1) {
        Model& m = models_[static_cast<size_t>(std::countr_zero(rest))];
        m.pinned += demand * m.capacity / capacity;
      }
    });
    for (Model& m : models_) {
      const double to_come = m.pinned / seen.gpu_milli * free_gpu;
      m.scarcity = m.free > 0 ? std::min(1.0, to_come / m.free) : 1.0;
    }
  }

  // How much more GPU milli node f strands for want of CPU once `need` is placed on it.
  double Stranding(const Need& need, const NodeFit& f) const {
    const double g = f.gpu_free, c = static_cast<double>(f.cpu_free);
    const double take = static_cast<double>(need.milli) * need.count;
    return StrandedMilli(g - take, c - static_cast<double>(need.cpu), kappa_) -
           StrandedMilli(g, c, kappa_);
  }
  // True once pinned demand has been seen; until then every Scarcity() is 0.
  bool pinned() const { return pinned_; }
  // The milli of pinned demand still to come that `need` would displace on a node of model `bit`.
  double Scarcity(const Need& need, ModelMask bit) const {
    if (!pinned_ || bit == 0) return 0;
    const Model& m = models_[static_cast<size_t>(std::countr_zero(bit))];
    return static_cast<double>(need.milli) * need.count * m.scarcity;
  }

 private:
  struct Model {
    double capacity = 0, free = 0, pinned = 0, scarcity = 0;
  };

  double kappa_ = 0;                // CPU milli a free milli-GPU should keep; 0 = no estimate yet.
  bool pinned_ = false;             // Pinned demand has been seen.
  std::array<Model, 64> models_{};  // By GPU model index; only while pinned demand has been seen.
};

// AdaptiveFgdScore without exp. The score is a non-increasing step function of delta: it is at
// least k exactly when delta is at most the k-th step's end, found once by bisection over doubles
// against FgdScore itself. A delta within a hair of a step's end, where a last-bit difference in
// exp could tell, is handed to FgdScore, so the result is always FgdScore's.
class ScoreSteps {
 public:
  ScoreSteps() {
    end_.fill(-std::numeric_limits<double>::infinity());  // Past 100: no delta reaches them.
    for (int k = 1; k <= kMax; ++k) {
      double lo = -1e7, hi = 1e7;  // Score 100 and 0.
      for (;;) {
        const double mid = lo + (hi - lo) / 2;
        if (mid == lo || mid == hi) break;
        (FgdScore(0, mid) >= k ? lo : hi) = mid;
      }
      end_[static_cast<size_t>(k)] = lo;
    }
    end_[0] = std::numeric_limits<double>::infinity();
    for (size_t b = 0; b < kBuckets; ++b) {
      bucket_[b] = static_cast<uint8_t>(Search(kLow + static_cast<double>(b) * kWidth));
    }
  }

  int32_t operator()(double delta) const {
    const double at = (delta - kLow) * (1.0 / kWidth);
    if (!(at >= 0 && at < static_cast<double>(kBuckets))) return Exact(delta, Search(delta));
    // The bucket's low edge has score k, and the bucket is narrower than the 40 milli between
    // ends, so the score is k, or k - 1 past the end of step k. No branch on the data but the
    // rare one to FgdScore.
    size_t k = bucket_[static_cast<size_t>(at)];
    k -= static_cast<size_t>((k > 0) & (delta > end_[k]));
    return Exact(delta, k);
  }

 private:
  static constexpr int kMax = 100;
  static constexpr size_t kSize = 128;  // A power of two above kMax.
  static constexpr double kLow = -65536, kWidth = 8;
  static constexpr size_t kBuckets = 16384;  // Deltas in [-65536, 65536).
  // Steps are at least 40 milli apart (the sigmoid's slope is at most 1/4); a last-bit effect of
  // exp moves an end by a few units in the last place, far below kHair at these magnitudes.
  static constexpr double kHair = 1e-6;

  // k, unless `delta` lies within a hair of step k's ends, where FgdScore decides.
  int32_t Exact(double delta, size_t k) const {
    if (Near(delta, end_[k]) || Near(delta, end_[k + 1])) [[unlikely]] {
      return FgdScore(0, delta);
    }
    return static_cast<int32_t>(k);
  }

  // The largest k whose end `delta` does not pass, by binary search (the ends fall as k rises;
  // those past 100 are -inf).
  size_t Search(double delta) const {
    size_t k = 0;
    for (size_t step = kSize / 2; step > 0; step /= 2) k += delta <= end_[k + step] ? step : 0;
    return k;
  }
  static bool Near(double a, double b) { return std::abs(a - b) < kHair; }
  std::array<double, kSize + 1> end_{};
  std::array<uint8_t, kBuckets> bucket_{};
};

const ScoreSteps& Steps() {
  static const ScoreSteps steps;
  return steps;
}

class OnlineFgdPolicy final : public Policy {
 public:
  explicit OnlineFgdPolicy(bool guarded) : guarded_(guarded) {}
  std::string_view Name() const override { return guarded_ ? "guarded-fgd" : "adaptive-fgd"; }

  void Observe(const Need& need, uint32_t source) override {
    if (workload_.Add(need, source)) {  // Values computed against the old model are stale.
      cache_.Clear();
      before_.assign(before_.size(), {});
    }
  }

  // The framework lists one node per NodeTable group (nodes in the same state, which would score
  // the same), so each feasible node stands for its group, and the fragmentation change is cached
  // per request shape and group. The costs are summed in the order the per-node form of this
  // policy summed them, so that every score is bitwise the same. In passes, so that the cache
  // reads of one pass overlap instead of waiting on the work of the next.
  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    const size_t count = feasible.size();
    Deltas(need, nodes, feasible);
    if (!guarded_) {
      for (size_t k = 0; k < count; ++k) scores[k] = steps_(delta_[k] + 0.0);
      return;
    }
    guard_.Prepare(nodes, workload_);
    // The least scarcity cost among the feasible nodes; all are 0 until pinned demand is seen.
    double least = guard_.pinned() ? std::numeric_limits<double>::infinity() : 0.0;
    if (guard_.pinned()) {
      for (uint32_t n : feasible) {
        least = std::min(least, guard_.Scarcity(need, nodes.fit(n).model_bit));
      }
    }
    for (size_t k = 0; k < count; ++k) {
      const NodeFit& fit = nodes.fit(feasible[k]);
      double cost = guard_.Scarcity(need, fit.model_bit);
      cost += guard_.Stranding(need, fit) - least;
      scores[k] = steps_(delta_[k] + cost);
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    if (need.kind != Kind::kShare) return GrantNonShare(need, nodes, n, a);
    const NodeFit& fit = nodes.fit(n);
    const NodeGpus& g = nodes.gpus(n);
    const FragModel& model = workload_.model();
    const Choice c = Evaluate(need, model, HoleWaste(), fit, g, [&] {
      return model.NodeFrag(fit.model_bit, fit.cpu_free, Span(g.free, g.count));
    });
    if (c.gpu < 0) return false;
    GrantShare(need, c.gpu, a);
    return true;
  }

 private:
  // delta_[k]: the fragmentation change of placing `need` on feasible[k], from the cache when its
  // group has not changed since (and the model has not been rebuilt).
  void Deltas(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible) {
    auto& cache = cache_.For(need, nodes.group_ids());
    if (before_.size() < nodes.group_ids()) before_.resize(nodes.group_ids());
    const FragModel& model = workload_.model();
    const size_t count = feasible.size();
    delta_.resize(count);
    const bool cpu_only = need.kind != Kind::kShare && need.kind != Kind::kWhole;
    bool stale = false;
    for (size_t k = 0; k < count; ++k) {
      const uint32_t id = nodes.group(feasible[k]);
      if (cpu_only) {
        // Only the CPU changes: unless a class's CPU test flips, F is bitwise the same and the
        // change is 0 (as Evaluate finds); a test that costs less than the cache's read.
        const int64_t cpu = nodes.fit(feasible[k]).cpu_free;
        if (!model.CpuChangeMatters(cpu, cpu - need.cpu)) {
          delta_[k] = 0;
          continue;
        }
      }
      const NodeScoreCache<double>::Slot& slot = cache[id];
      delta_[k] = slot.value;
      stale |= slot.epoch != nodes.group_generation(id);
    }
    if (!stale) return;
    for (size_t k = 0; k < count; ++k) {
      const uint32_t n = feasible[k], id = nodes.group(n);
      const uint32_t generation = nodes.group_generation(id);
      if (cache[id].epoch == generation) continue;
      const NodeFit& fit = nodes.fit(n);
      if (cpu_only && !model.CpuChangeMatters(fit.cpu_free, fit.cpu_free - need.cpu)) continue;
      delta_[k] = NodeScoreCache<double>::Get(cache[id], generation, [&] {
        const NodeGpus& g = nodes.gpus(n);
        // F before is the same for every shape: cached per group until the model changes.
        return Evaluate(need, model, HoleWaste(), fit, g,
                        [&] {
                          return NodeScoreCache<double>::Get(before_[id], generation, [&] {
                            return model.NodeFrag(fit.model_bit, fit.cpu_free,
                                                  Span(g.free, g.count));
                          });
                        })
            .delta;
      });
    }
  }

  std::span<const double> HoleWaste() const {
    return guarded_ ? workload_.hole_waste() : std::span<const double>{};
  }

  const bool guarded_;
  const ScoreSteps& steps_ = Steps();
  LearnedWorkload workload_;
  Guard guard_;
  std::vector<double> delta_;     // Per feasible node, reused across decisions.
  NodeScoreCache<double> cache_;  // Fragmentation changes per shape and group, current model.
  std::vector<NodeScoreCache<double>::Slot> before_;  // F per group, current model.
};

}  // namespace

int32_t AdaptiveFgdScore(double delta) { return Steps()(delta); }

double StrandedMilli(double gpu_free, double cpu_free, double cpu_per_milli) {
  if (cpu_per_milli <= 0) return 0;
  return std::max(0.0, gpu_free - std::max(0.0, cpu_free) / cpu_per_milli);
}

std::unique_ptr<Policy> NewAdaptiveFgdPolicy(const PolicyEnv&) {
  return std::make_unique<OnlineFgdPolicy>(/*guarded=*/false);
}

std::unique_ptr<Policy> NewGuardedFgdPolicy(const PolicyEnv&) {
  return std::make_unique<OnlineFgdPolicy>(/*guarded=*/true);
}

}  // namespace tessera::sched
