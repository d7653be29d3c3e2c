// The shape BestFit and DotProd share: a policy that scores each feasible node from its free CPU
// and free GPU milli alone, with a score function of (cpu_free, gpu_free, cpu_req, gpu_req), and
// takes GPUs with gpusel "best" (GrantBest).
// Thread-safety: see plugin.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "sched/plugin.h"

namespace tessera::sched {

// cpu and GPU in milli; gpu_req = gpu_count * gpu_milli. Higher is better.
using SummaryScore = int (*)(int64_t cpu_free, int64_t gpu_free, int64_t cpu_req, int64_t gpu_req);

// `name` must outlive the policy (the registry's names are literals).
std::unique_ptr<Policy> NewSummaryScorePolicy(std::string_view name, SummaryScore score);

}  // namespace tessera::sched
