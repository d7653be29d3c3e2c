// Random (FGD baseline 01-Random): a feasible node drawn uniformly (it scores 100, every other
// node 0), and for a share a GPU drawn uniformly among those that can take it; whole GPUs are the
// lowest-index free ones. Draws come from the run's seeded generator, so a seed fixes the run.
// Thread-safety: see plugin.h.
#pragma once

#include <memory>

#include "sched/plugin.h"

namespace tessera::sched {

inline constexpr int kRandomChosenScore = 100;

// The i-th of `n` candidates, uniformly; n > 0.
inline size_t RandomPick(Rng& rng, size_t n) { return static_cast<size_t>(rng.Uniform(n)); }

std::unique_ptr<Policy> NewRandomPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
