// FGD, Fragmentation Gradient Descent (Weng et al., ATC'23; baseline 06-FGD): place where the
// node's fragmentation against the target workload (frag.h) grows least. With Δ = F(before) -
// F(after) in milli-GPU,
//   score = int(sigmoid(Δ / 1000) * 100),        0..100; Δ = 0 gives exactly 50.
// The "after" state takes the request's CPU and, for a share, its milli from one GPU: every GPU
// that can take it is tried, the node scores the best of them, and the share goes to the
// lowest-index GPU with that (truncated) score. Whole GPUs are the lowest-index free ones. A MIG
// slice is scored on its CPU alone.
// F(after) is the expensive part, so scores are cached per (request shape, node) and kept while
// the node's epoch is unchanged; in the openb replay most decisions read the cache.
// Thread-safety: see plugin.h.
#pragma once

#include <memory>

#include "sched/frag.h"
#include "sched/plugin.h"

namespace tessera::sched {

// int(sigmoid((before - after) / 1000) * 100), as the Go code computes it.
int FgdScore(double frag_before, double frag_after);

struct FgdChoice {
  int score = 0;
  int gpu = -1;  // For a share: the GPU to take. -1 otherwise.
};

// FGD's score of node (fit, gpus), whose fragmentation is `frag_before`, for `need`.
FgdChoice FgdNodeScore(const Need& need, const FragModel& model, const NodeFit& fit,
                       const NodeGpus& gpus, double frag_before);

std::unique_ptr<Policy> NewFgdPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
