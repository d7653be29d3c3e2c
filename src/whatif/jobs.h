// The what-if simulator's jobs (docs/cost-simulation.md): what arrives when, for how long, and
// asking for what, from the Microsoft Philly job summary (philly_sia/philly.csv) or an openb pod
// list with its times (openb/openb_pod_list_*.csv). Every defect is an error naming the file and
// line; nothing is skipped silently.
// Thread-safety: pure functions; a loaded trace is a value and may be shared read-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "common/result.h"

namespace tessera::whatif {

struct Job {
  std::string name;        // "philly-000001": the trace's row.
  int64_t submit_s = 0;    // Seconds after the trace's first submission.
  int64_t duration_s = 0;  // Run time once placed, at least 1.
  int gpus = 1;            // GPUs, all on one node (a gang of one); 0 for a CPU-only pod.
  int gpu_milli = 1000;    // Per GPU: 1000 whole, 1..999 a share of one GPU (openb).
  // What an openb pod asks for beside its GPUs, vCPUs rounded up to whole ones as a cloud rents
  // them; 0 for Philly's jobs, which get the fleet's vCPUs and memory per GPU.
  int64_t vcpus = 0;
  int64_t memory_mib = 0;
  bool best_effort = false;  // May run as spot (openb's BE class).
  bool checkpoints = false;  // A preempted run resumes where it was instead of starting over.
};

// Reads a Philly job summary: columns timestamp ("YYYY-MM-DD HH:MM:SS", UTC), duration (seconds),
// num_gpus; gpu_time and cluster are read and checked for shape only. Jobs come out in submission
// order (ties by row), their submit times relative to the first.
Result<std::vector<Job>> LoadPhillyJobs(const std::string& path);
// As LoadPhillyJobs, from text already in memory; `name` labels errors.
Result<std::vector<Job>> ParsePhillyJobs(std::string name, std::string text);

// Reads an openb pod list with its times (sim::ParseOpenbPods checks each row): a pod arrives at
// its creation_time, runs from its placement for deletion_time minus scheduled_time (minus
// creation_time for a pod the trace never placed), and is best-effort when its qos is BE; the
// other classes are services, which resume rather than start over when preempted. A list
// without creation_time and deletion_time (the multigpu* variants), or a pod with a gpu_spec
// (model constraints: the simulator prices openb's GPUs as one stand-in model, see whatif/openb.h),
// is refused naming the file and line.
Result<std::vector<Job>> ParseOpenbJobs(const catalog::Catalog& catalog, std::string name,
                                        std::string text);

// Reads `path` as an openb pod list when its header starts "name,cpu_milli", else as a Philly
// job summary.
Result<std::vector<Job>> LoadJobs(const catalog::Catalog& catalog, const std::string& path);
// Whether `jobs` came from an openb pod list (they ask for their own vCPUs).
bool AreOpenbJobs(const std::vector<Job>& jobs);

}  // namespace tessera::whatif
