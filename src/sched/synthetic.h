// Synthetic fleets and request streams shaped like the openb traces, shared by the scheduler's
// tests and benchmarks (one workload description for both, as in kube-scheduler's
// scheduler_perf) when the real traces are absent. The node shapes are those of
// openb_node_list_gpu_node.csv (1,213 nodes, 6,212 GPUs); the request mix follows the default
// pod list: about 13% CPU-only, 38% GPU shares, 48% one whole GPU, 1% multi-GPU.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "fleet/fleet.h"
#include "sched/rng.h"
#include "sched/scheduler.h"

namespace tessera::sched {

// The openb GPU fleet's node shapes, `scale` times over (scale 1: 1,213 nodes, 6,212 GPUs), every
// GPU in shared mode, named "openb-node-NNNNN".
std::vector<fleet::NodeSpec> OpenbLikeNodes(int scale = 1);

// `nodes` 8-GPU nodes of the openb 8-GPU shapes (G2, G3, V100M32, V100M16), every GPU shared.
std::vector<fleet::NodeSpec> EightGpuNodes(int nodes);

// One request drawn from the openb-like mix.
Request OpenbLikeRequest(Rng& rng);

// Adds `specs` to `fleet`; the first error, if any.
Status AddNodes(fleet::Fleet& fleet, const std::vector<fleet::NodeSpec>& specs);

}  // namespace tessera::sched
