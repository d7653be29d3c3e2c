// The FGD experiment protocol (Weng et al., ATC'23, as their simulator runs it): the arrival
// order of a run; sim/run.h logs the run and sim/curve.h buckets the log into curves.
//   1. Sort the trace by pod name (string order) and shuffle it with the run's seed.
//   2. Tune the total GPU demand to `inflate` x cluster capacity. Tune up appends copies drawn
//      uniformly, with replacement, from the name-sorted originals, after the shuffled originals
//      and in drawing order; it stops at the first draw whose per-GPU milli would take demand
//      strictly above the target, discarding that draw. Tune down removes random positions
//      while demand is above the target.
// The draws use our own seeded generator: runs are reproducible here, and agree with the
// authors' Go simulator statistically, not draw for draw.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/result.h"
#include "sim/trace.h"

namespace tessera::sim {

// A uniform integer in [0, n), n > 0, by rejection, so the result depends only on the
// generator's output and not on a standard library's distribution code.
uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n);

// The sum of num_gpu * gpu_milli over `pods`.
int64_t TotalDemandMilli(const std::vector<Pod>& pods);

// The order a run replays: indices into the trace (a tuned copy repeats its original's index).
struct ArrivalOrder {
  std::vector<uint32_t> pods;
  int64_t demand_milli = 0;  // Total GPU demand of `pods`.
  int64_t copies = 0;        // Pods appended by tuning up.
  int64_t removed = 0;       // Pods removed by tuning down.
};

// Builds the order for one run of `trace` (at least one pod). `target_milli` is
// inflate x capacity in milli-GPU. FailedPrecondition when tuning up cannot reach the target
// because no pod asks for a GPU.
Result<ArrivalOrder> BuildArrivalOrder(const std::vector<Pod>& trace, double target_milli,
                                       uint64_t seed);

}  // namespace tessera::sim
