// GpuClustering (FGD baseline 03-GpuClustering): keeps GPU workloads of one kind together. A
// workload's tag is "share-gpu" for any share, "k-gpu" for k whole GPUs; CPU-only ones have none.
// With f = int(25 * (8000 - free GPU milli) / 8000), fuller nodes scoring higher, a GPU request
// scores
//   75 + f  on a node whose only tag is its own,
//   50 + f  on a node that has its tag among others,
//   25 + f  on a node with no GPU workload,
//        f  on a node with other tags only;
// a CPU-only request scores 0 everywhere (so the node order decides). GPUs: gpusel "best".
// Thread-safety: see plugin.h.
#pragma once

#include <cstdint>
#include <memory>

#include "sched/plugin.h"

namespace tessera::sched {

// The score of a request with tag `tag` (kNoTag for CPU-only) on a node with `tags` and
// `gpu_free` idle milli-GPU.
int GpuClusteringScore(int tag, const NodeTags& tags, int64_t gpu_free);

std::unique_ptr<Policy> NewGpuClusteringPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
