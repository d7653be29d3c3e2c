// Adaptive FGD ("adaptive-fgd"): FGD's fragmentation gradient (plugins/fgd.h), made online.
// FGD is handed its target workload, the typical pods of the whole trace, before the first pod
// arrives; this policy learns it from the requests seen so far (Policy::Observe) and nothing
// else: classes (cpu, per-GPU milli, GPU count, allowed models) counted as they arrive, the most
// frequent kept up to 95% of the requests, weighted by frequency. The model is rebuilt whenever
// the count seen has grown by a quarter (at least 64), so a run rebuilds it a few dozen times.
//   score = FGD's int(sigmoid((F(before) - F(after)) / 1000) * 100), F against the learned model;
//   ties go to the framework's seeded node order, as FGD's do. (A finer score, or a best-fit
//   tie-break, measured worse: docs/offline-bound.md.)
//   A share goes to the lowest-index GPU with the best score, as FGD's does.
// Thread-safety: see plugin.h.
#pragma once

#include <cstdint>
#include <memory>

#include "sched/frag.h"
#include "sched/plugin.h"

namespace tessera::sched {

// The score of a node whose fragmentation against the learned model changes by `delta`
// (F(after) - F(before), milli-GPU): FGD's truncated sigmoid, 0..100, 50 for no change.
int32_t AdaptiveFgdScore(double delta);

std::unique_ptr<Policy> NewAdaptiveFgdPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
