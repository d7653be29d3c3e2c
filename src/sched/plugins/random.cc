#include "sched/plugins/random.h"

namespace tessera::sched {

namespace {

class RandomPolicy final : public Policy {
 public:
  explicit RandomPolicy(Rng* rng) : rng_(rng) {}
  std::string_view Name() const override { return "random"; }
  bool NeedsEveryNode() const override { return true; }

  void Score(const Need&, const NodeTable&, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    const size_t chosen = RandomPick(*rng_, feasible.size());
    for (size_t i = 0; i < feasible.size(); ++i) {
      scores[i] = i == chosen ? kRandomChosenScore : 0;
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    if (need.kind != Kind::kShare) return GrantNonShare(need, nodes, n, a);
    const NodeGpus& g = nodes.gpus(n);
    size_t eligible = 0;
    for (int i = 0; i < g.count; ++i) eligible += ShareEligible(need, g, i) ? 1 : 0;
    if (eligible == 0) return false;
    size_t pick = RandomPick(*rng_, eligible);
    for (int i = 0; i < g.count; ++i) {
      if (ShareEligible(need, g, i) && pick-- == 0) {
        GrantShare(need, i, a);
        return true;
      }
    }
    return false;
  }

 private:
  Rng* rng_;
};

}  // namespace

std::unique_ptr<Policy> NewRandomPolicy(const PolicyEnv& env) {
  return std::make_unique<RandomPolicy>(env.rng);
}

}  // namespace tessera::sched
