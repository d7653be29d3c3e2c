// BestFit (FGD baseline 05-BestFit): node-level best fit on what would be left,
//   raw = int(100 * (1 - [0.5 * (cpu_free - cpu) / 128000 + 0.5 * (gpu_free - gpu) / 8000])),
// so the node left with the least CPU and GPU (in those units) wins. The Go plugin then rescales
// raw scores to 0..100 per decision; that keeps order and the argmax set, so the raw score is
// what the framework compares. GPUs: gpusel "best".
// Thread-safety: see plugin.h.
#pragma once

#include <cstdint>
#include <memory>

#include "sched/plugin.h"

namespace tessera::sched {

// The raw score for a node with `cpu_free` and `gpu_free` (milli) and a request of `cpu_req` and
// `gpu_req` (gpu_count * gpu_milli). Bit-identical to the Go float64 arithmetic.
int BestFitScore(int64_t cpu_free, int64_t gpu_free, int64_t cpu_req, int64_t gpu_req);

std::unique_ptr<Policy> NewBestFitPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
