// DotProd (FGD baseline 02-DotProd, "-dimext merge -norm max"): the node's free resources and the
// request as 2-vectors (milli-CPU over 128,000; milli-GPU over 8,000), and
//   score = int(100 * (1 - dot(node, request) / 2)),
// so the node with the smallest normalised dot product wins, which packs. GPUs: gpusel "best".
// Thread-safety: see plugin.h.
#pragma once

#include <cstdint>
#include <memory>

#include "sched/plugin.h"

namespace tessera::sched {

// The FGD simulator's constants: the largest node's CPU and GPU, not per-node capacities.
inline constexpr int64_t kMaxSpecCpuMilli = 128000;
inline constexpr int64_t kMaxSpecGpuMilli = 8000;

// The score for a node with `cpu_free` milli-CPU and `gpu_free` milli-GPU free and a request of
// `cpu_req` and `gpu_req` (gpu_count * gpu_milli). Bit-identical to the Go float64 arithmetic.
int DotProductScore(int64_t cpu_free, int64_t gpu_free, int64_t cpu_req, int64_t gpu_req);

std::unique_ptr<Policy> NewDotProductPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
