// GpuPacking (FGD baseline 04-GpuPacking): prefers, in order, GPUs already shared, then free GPUs
// on nodes already in use, then empty nodes with few GPUs. For a GPU request on a node whose
// usable GPUs have `free` milli:
//   all fully free                    max(33 - G, G)          (G the number of those GPUs)
//   else take, in ascending free milli (stable), the first `count` GPUs with enough free:
//     any taken GPU fully free        max(50 - fully free taken, 33)
//     otherwise                       max(100 - (sum of floor(free * 100 / 1000)) / 10, 50)
// A CPU-only request scores 0 everywhere. GPUs: gpusel "best".
// Thread-safety: see plugin.h.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "sched/plugin.h"

namespace tessera::sched {

// The score of a request for `count` GPUs of `milli` each (0 for CPU-only) on a node whose
// usable GPUs have `free` milli free. -1 when they cannot host it.
int GpuPackingScore(std::span<const int16_t> free, int milli, int count);

std::unique_ptr<Policy> NewGpuPackingPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
