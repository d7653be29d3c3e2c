#include "sched/plugins/adaptive_fgd.h"

#include <algorithm>
#include <array>
#include <bit>
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
Choice Evaluate(const Need& need, const FragModel& model, std::span<const double> hole_waste,
                const NodeFit& fit, const NodeGpus& g) {
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
  if (need.kind == Kind::kWhole) free = g.FreeAfterTakingWhole(need.count);
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

class OnlineFgdPolicy final : public Policy {
 public:
  explicit OnlineFgdPolicy(bool guarded) : guarded_(guarded) {}
  std::string_view Name() const override { return guarded_ ? "guarded-fgd" : "adaptive-fgd"; }

  void Observe(const Need& need, uint32_t source) override {
    if (workload_.Add(need, source)) cache_.Clear();  // Scores against the old model are stale.
  }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    cost_.assign(feasible.size(), 0.0);
    if (guarded_) {
      guard_.Prepare(nodes, workload_);
      double least = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < feasible.size(); ++i) {
        cost_[i] = guard_.Scarcity(need, nodes.fit(feasible[i]).model_bit);
        least = std::min(least, cost_[i]);
      }
      for (size_t i = 0; i < feasible.size(); ++i) {
        cost_[i] += guard_.Stranding(need, nodes.fit(feasible[i])) - least;
      }
    }
    auto& cache = cache_.For(need, nodes.size());
    for (size_t i = 0; i < feasible.size(); ++i) {
      const uint32_t n = feasible[i];
      const double delta = NodeScoreCache<double>::Get(cache[n], nodes.epoch(n), [&] {
        return Evaluate(need, workload_.model(), HoleWaste(), nodes.fit(n), nodes.gpus(n)).delta;
      });
      scores[i] = AdaptiveFgdScore(delta + cost_[i]);
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    if (need.kind != Kind::kShare) return GrantNonShare(need, nodes, n, a);
    const Choice c = Evaluate(need, workload_.model(), HoleWaste(), nodes.fit(n), nodes.gpus(n));
    if (c.gpu < 0) return false;
    GrantShare(need, c.gpu, a);
    return true;
  }

 private:
  std::span<const double> HoleWaste() const {
    return guarded_ ? workload_.hole_waste() : std::span<const double>{};
  }

  const bool guarded_;
  LearnedWorkload workload_;
  Guard guard_;
  std::vector<double> cost_;      // Per feasible node, reused across decisions.
  NodeScoreCache<double> cache_;  // Fragmentation deltas against the current learned model.
};

}  // namespace

int32_t AdaptiveFgdScore(double delta) { return FgdScore(0, delta); }

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
