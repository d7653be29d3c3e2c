// Trace loaders for the simulator. An openb pod list (alibaba/clusterdata cluster-trace-gpu-v2023)
// becomes a vector of Pods: what each pod asks for, with its gpu_spec resolved through the catalog
// into a scheduler ModelMask. Every variant of the trace is accepted, including the 5-column
// multigpu* files that lack gpu_spec, qos and the times. Every defect is an error naming the file
// and line ("file:line: what is wrong"); nothing is skipped silently.
// gpu_spec is resolved by sched::ParseGpuSpec; node lists are loaded by fleet::LoadFleetFile.
// Thread-safety: pure functions; a loaded trace is a value and may be shared read-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "common/result.h"
#include "sched/scheduler.h"
#include "sched/target_workload.h"

namespace tessera::sim {

struct Pod {
  std::string name;  // e.g. "openb-pod-0001"; the protocol sorts by it.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int num_gpu = 0;    // 0..8.
  int gpu_milli = 0;  // Per GPU: 1..999 a share (num_gpu == 1), 1000 whole, 0 CPU-only.
  // The raw gpu_spec text (e.g. "V100M16|V100M32|V100M32"). FGD keys typical pods on the raw
  // string, duplicates and all, so it is kept as read.
  std::string gpu_spec;
  sched::ModelMask allowed_models = 0;  // gpu_spec resolved; 0 = any model.
  // The optional columns the what-if simulator replays (seconds in the trace's own time); -1 or
  // empty where the file lacks them.
  std::string qos{};         // "LS", "BE", "Burstable", "Guaranteed".
  int64_t creation_s = -1;   // When it was submitted.
  int64_t deletion_s = -1;   // When it left.
  int64_t scheduled_s = -1;  // When it was placed; -1 also for a pod never placed.
  int line = 0;              // Its line in the file.

  // Total GPU demand in milli-GPU: num_gpu * gpu_milli.
  int64_t demand_milli() const { return static_cast<int64_t>(num_gpu) * gpu_milli; }
};

// The scheduler request for `pod`.
sched::Request ToRequest(const Pod& pod);

// The target workload of `pods` for fragmentation and FGD: their typical pods, built by
// sched::BuildTypicalWorkload (95% popularity, CPU-only pods included, raw gpu_spec keys).
sched::TypicalWorkload TypicalWorkloadOf(const std::vector<Pod>& pods);

// Reads an openb pod list. Required columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli;
// gpu_spec, qos, pod_phase, creation_time, deletion_time and scheduled_time are optional. Errors:
// NotFound for a missing file, InvalidArgument "file:line: ..." for a bad header or row (values
// out of range, a share on more than one GPU, an unknown GPU model in gpu_spec).
Result<std::vector<Pod>> LoadOpenbPods(const catalog::Catalog& catalog, const std::string& path);

// As LoadOpenbPods, from text already in memory; `name` labels errors.
Result<std::vector<Pod>> ParseOpenbPods(const catalog::Catalog& catalog, std::string name,
                                        std::string text);

}  // namespace tessera::sim
