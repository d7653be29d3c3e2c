// FGD made online, and Tessera's default placement policy built on it.
//
// "adaptive-fgd": FGD's fragmentation gradient (plugins/fgd.h) against a target workload learned
// from the requests seen so far (Policy::Observe) and nothing else. FGD is handed the typical pods
// of the whole trace before the first pod arrives; this policy counts classes (cpu, per-GPU milli,
// GPU count, allowed models) as they arrive and keeps the most frequent up to 95% of the requests,
// weighted by frequency, in bounded memory and with no sender (Request::source) outweighing all
// the others together (LearnedWorkload, plugins/learned_workload.h).
//   score = FGD's int(sigmoid(-delta / 1000) * 100), delta = F(after) - F(before) against the
//   learned model; ties go to the framework's seeded node order, as FGD's do. (A finer score, or a
//   best-fit tie-break, measured worse: docs/offline-bound.md.)
//
// "guarded-fgd": adaptive-fgd whose delta also counts, in the same milli-GPU, three losses that
// FGD's one-pod-at-a-time view misses (docs/offline-bound.md measures each):
//   CPU stranding. A node's free GPUs need CPU to be rented out. With kappa the CPU a free
//     milli-GPU should keep, a node with g free milli and c free CPU strands
//     S = max(0, g - c / kappa) milli; delta gains S(after) - S(before). FGD's classes test
//     whether *one* pod still fits, so it lets CPU-only pods drain a node whose GPUs then go
//     unrented. kappa is what the GPU requests seen asked per milli-GPU, rising toward what all
//     requests seen asked (CPU-only included) as the fleet's spare CPU runs short.
//   Scarce models. Requests pinned to some GPU models (gpu_spec) have nowhere else to go. Each
//     model's pinned demand rate (pinned milli seen per milli seen; a request pinned to several
//     models split over them by capacity), times the cluster's free milli, is the pinned demand
//     still to come; over the model's free milli it is the model's scarcity s (capped at 1).
//     delta gains demand * s for the node's model, less the least such penalty among the
//     feasible nodes, so a request that can go elsewhere keeps off models its pinned peers need,
//     and the score of a request with a single choice of model is FGD's.
//   Share holes. FGD asks whether the next pod of each class fits a GPU's free milli; a hole that
//     pods still fit can end as waste all the same, depending on what the sizes seen leave behind.
//     With W(h) the expected milli a hole of h ends up wasting when fillers are drawn from the
//     requests seen (HoleWaste), placing a share on a GPU costs W(free - milli) - W(free) more.
// Every term is zero until requests that need it have been seen; none reads the future.
// Speed: nodes in the same state (a NodeTable group) score the same, so each decision computes
// the costs once per group among the feasible nodes; the fragmentation change is cached per
// request shape and group until the model is rebuilt, and the sigmoid is read from its steps.
// Thread-safety: see plugin.h.
#pragma once

#include <cstdint>
#include <memory>

#include "sched/plugin.h"

namespace tessera::sched {

// The score of a node whose cost (fragmentation change, and for guarded-fgd the stranding and
// scarcity terms; milli-GPU) is `delta`: FGD's truncated sigmoid, 0..100, 50 for no change.
int32_t AdaptiveFgdScore(double delta);

// Milli-GPU that `cpu_free` CPU milli cannot serve out of `gpu_free` free milli, when each
// milli-GPU rented needs `cpu_per_milli` CPU milli; 0 when the CPU covers every free GPU.
double StrandedMilli(double gpu_free, double cpu_free, double cpu_per_milli);

std::unique_ptr<Policy> NewAdaptiveFgdPolicy(const PolicyEnv& env);
std::unique_ptr<Policy> NewGuardedFgdPolicy(const PolicyEnv& env);

}  // namespace tessera::sched
