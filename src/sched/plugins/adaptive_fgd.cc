#include "sched/plugins/adaptive_fgd.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <map>
#include <tuple>
#include <vector>

#include "sched/plugins/fgd.h"
#include "sched/score_cache.h"

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
  std::span<const double> hole_waste() const { return hole_waste_; }

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
    std::map<int, double> per_gpu;  // Per-GPU milli -> GPUs asked; every request, rare ones too.
    for (const auto& [key, count] : counts_) {
      const auto& [cpu, milli, gpus, mask] = key;
      if (milli > 0) per_gpu[milli] += static_cast<double>(count * gpus);
    }
    hole_waste_ = HoleWaste({per_gpu.begin(), per_gpu.end()});
  }

  static constexpr double kCoverage = 0.95;
  std::map<Key, int64_t> counts_;
  int64_t seen_ = 0;
  int64_t next_rebuild_ = 1;
  FragModel model_{Workload{}};
  std::vector<double> hole_waste_ = std::vector<double>(fleet::kMilliPerGpu + 1, 0.0);
};

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

// What guarded-fgd learns beyond the workload (the CPU requests ask, per milli-GPU asked, and how
// much of the demand is pinned to which GPU models) and what it reads from the fleet before each
// decision.
class Guard {
 public:
  void Observe(const Need& need) {
    if (need.kind == Kind::kMig) return;
    cpu_ += static_cast<double>(need.cpu);
    const double demand = static_cast<double>(need.milli) * need.count;
    if (demand <= 0) return;
    demand_ += demand;
    gpu_request_cpu_ += static_cast<double>(need.cpu);
    if (need.mask == 0) return;
    auto it = std::find_if(pinned_.begin(), pinned_.end(),
                           [&](const auto& p) { return p.first == need.mask; });
    if (it == pinned_.end()) {
      pinned_.emplace_back(need.mask, demand);
    } else {
      it->second += demand;
    }
  }

  // Called once per decision, before the costs: the CPU each free milli-GPU should keep, and each
  // model's scarcity, from the node table's fleet-wide sums (no pass over the nodes).
  void Prepare(const NodeTable& nodes) {
    const auto free_cpu = static_cast<double>(nodes.total_cpu_free());
    const auto free_gpu = static_cast<double>(nodes.total_gpu_free());
    kappa_ = 0;
    if (demand_ > 0) {
      // GPU requests need kg CPU per milli-GPU; with CPU-only requests the workload needs ka. The
      // fleet's free CPU per free milli-GPU is kf. pressure = the share of the free CPU beyond
      // the GPU requests' need that CPU-only requests would take: near 0, CPU-only requests fit
      // in the slack and a GPU only needs kg; at 1, CPU is as scarce as GPU and every free GPU
      // must keep its share of all the CPU asked. The square keeps kg until CPU truly runs short.
      const double kg = gpu_request_cpu_ / demand_, ka = cpu_ / demand_;
      const double kf = free_gpu > 0 ? free_cpu / free_gpu : 0;
      const double pressure = kf > kg ? std::clamp((ka - kg) / (kf - kg), 0.0, 1.0) : 1.0;
      kappa_ = kg + (ka - kg) * pressure * pressure;
    }
    if (pinned_.empty()) return;
    for (size_t m = 0; m < models_.size(); ++m) {
      models_[m] = Model{.capacity = static_cast<double>(nodes.model_gpus(static_cast<int>(m)) *
                                                         fleet::kMilliPerGpu),
                         .free = static_cast<double>(nodes.model_gpu_free(static_cast<int>(m)))};
    }
    for (const auto& [mask, demand] : pinned_) {
      double capacity = 0;
      for (ModelMask rest = mask; rest != 0; rest &= rest - 1) {
        capacity += models_[static_cast<size_t>(std::countr_zero(rest))].capacity;
      }
      if (capacity <= 0) continue;
      for (ModelMask rest = mask; rest != 0; rest &= rest - 1) {
        Model& m = models_[static_cast<size_t>(std::countr_zero(rest))];
        m.pinned += demand * m.capacity / capacity;
      }
    }
    for (Model& m : models_) {
      const double to_come = m.pinned / demand_ * free_gpu;
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
    if (pinned_.empty() || bit == 0) return 0;
    const Model& m = models_[static_cast<size_t>(std::countr_zero(bit))];
    return static_cast<double>(need.milli) * need.count * m.scarcity;
  }

 private:
  struct Model {
    double capacity = 0, free = 0, pinned = 0, scarcity = 0;
  };

  double cpu_ = 0;              // CPU milli asked by every request seen, CPU-only included.
  double demand_ = 0;           // Milli-GPU asked by the GPU requests seen.
  double gpu_request_cpu_ = 0;  // CPU milli those GPU requests asked.
  std::vector<std::pair<ModelMask, double>> pinned_;  // Demand seen per allowed-model mask.
  double kappa_ = 0;                // CPU milli a free milli-GPU should keep; 0 = no estimate yet.
  std::array<Model, 64> models_{};  // By GPU model index; only while pinned demand has been seen.
};

class OnlineFgdPolicy final : public Policy {
 public:
  explicit OnlineFgdPolicy(bool guarded) : guarded_(guarded) {}
  std::string_view Name() const override { return guarded_ ? "guarded-fgd" : "adaptive-fgd"; }

  void Observe(const Need& need, uint32_t /*source*/) override {
    if (workload_.Add(need)) cache_.Clear();  // Scores against the old model are stale.
    if (guarded_) guard_.Observe(need);
  }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    cost_.assign(feasible.size(), 0.0);
    if (guarded_) {
      guard_.Prepare(nodes);
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

std::vector<double> HoleWaste(const std::vector<std::pair<int, double>>& sizes) {
  std::vector<double> waste(fleet::kMilliPerGpu + 1, 0.0);
  for (int h = 1; h <= fleet::kMilliPerGpu; ++h) {
    double fitting = 0, after = 0;
    for (const auto& [milli, weight] : sizes) {
      if (milli > h || weight <= 0) continue;
      fitting += weight;
      after += weight * waste[static_cast<size_t>(h - milli)];
    }
    waste[static_cast<size_t>(h)] = fitting > 0 ? after / fitting : h;
  }
  return waste;
}

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
