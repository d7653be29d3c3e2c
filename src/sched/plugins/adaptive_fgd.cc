#include "sched/plugins/adaptive_fgd.h"

#include <algorithm>
#include <array>
#include <limits>
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

// What guarded-fgd learns beyond the workload: the CPU GPU requests ask per milli-GPU, and how much
// of the demand is pinned to which GPU models.
class Guard {
 public:
  void Observe(const Need& need) {
    if (need.kind == Kind::kMig) return;
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

  // Called once per decision, before Cost: refreshes each model's scarcity from the fleet.
  void Prepare(const NodeTable& nodes) {
    if (pinned_.empty()) return;
    models_.clear();
    double cluster_free = 0;
    for (uint32_t n = 0; n < nodes.size(); ++n) {
      const NodeFit& f = nodes.fit(n);
      if (f.model_bit == 0) continue;
      Model& m = ModelOf(f.model_bit);
      m.capacity += static_cast<double>(nodes.gpus(n).count) * fleet::kMilliPerGpu;
      m.free += f.gpu_free;
      cluster_free += f.gpu_free;
    }
    for (const auto& [mask, demand] : pinned_) {
      double capacity = 0;
      for (const Model& m : models_) capacity += (mask & m.bit) ? m.capacity : 0;
      if (capacity <= 0) continue;
      for (Model& m : models_) {
        if (mask & m.bit) m.pinned += demand * m.capacity / capacity;
      }
    }
    for (Model& m : models_) {
      const double to_come = m.pinned / demand_ * cluster_free;
      m.scarcity = m.free > 0 ? std::min(1.0, to_come / m.free) : 1.0;
    }
  }

  // The guard's part of the cost of placing `need` on node n (milli-GPU), before the scarcity
  // penalty is made relative to the feasible nodes' least.
  double Stranding(const Need& need, const NodeFit& f) const {
    if (gpu_request_cpu_ <= 0) return 0;
    const double kappa = gpu_request_cpu_ / demand_;
    const double g = f.gpu_free, c = static_cast<double>(f.cpu_free);
    const double take = static_cast<double>(need.milli) * need.count;
    return StrandedMilli(g - take, c - static_cast<double>(need.cpu), kappa) -
           StrandedMilli(g, c, kappa);
  }
  double Scarcity(const Need& need, ModelMask bit) const {
    if (pinned_.empty()) return 0;
    for (const Model& m : models_) {
      if (m.bit == bit) return static_cast<double>(need.milli) * need.count * m.scarcity;
    }
    return 0;
  }

 private:
  struct Model {
    ModelMask bit = 0;
    double capacity = 0, free = 0, pinned = 0, scarcity = 0;
  };
  Model& ModelOf(ModelMask bit) {
    for (Model& m : models_) {
      if (m.bit == bit) return m;
    }
    return models_.emplace_back(Model{.bit = bit});
  }

  double demand_ = 0;           // Milli-GPU requested, every GPU request seen.
  double gpu_request_cpu_ = 0;  // CPU milli those requests asked.
  std::vector<std::pair<ModelMask, double>> pinned_;  // Demand seen per allowed-model mask.
  std::vector<Model> models_;
};

class OnlineFgdPolicy final : public Policy {
 public:
  explicit OnlineFgdPolicy(bool guarded) : guarded_(guarded) {}
  std::string_view Name() const override { return guarded_ ? "guarded-fgd" : "adaptive-fgd"; }

  void Observe(const Need& need) override {
    workload_.Add(need);
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
    for (size_t i = 0; i < feasible.size(); ++i) {
      const uint32_t n = feasible[i];
      const Choice c = Evaluate(need, workload_.model(), nodes.fit(n), nodes.gpus(n));
      scores[i] = AdaptiveFgdScore(c.delta + cost_[i]);
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
  const bool guarded_;
  LearnedWorkload workload_;
  Guard guard_;
  std::vector<double> cost_;  // Per feasible node, reused across decisions.
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
