// The what-if simulator's jobs (docs/cost-simulation.md): what arrives when, for how long, and
// asking for what, from the Microsoft Philly job summary (philly_sia/philly.csv). Every defect is
// an error naming the file and line; nothing is skipped silently.
// Thread-safety: pure functions; a loaded trace is a value and may be shared read-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace tessera::whatif {

struct Job {
  std::string name;          // "philly-000001": the trace's row.
  int64_t submit_s = 0;      // Seconds after the trace's first submission.
  int64_t duration_s = 0;    // Run time once placed, at least 1.
  int gpus = 1;              // Whole GPUs, all on one node (a gang of one).
  bool best_effort = false;  // May run as spot (openb's BE class).
  bool checkpoints = false;  // A preempted run resumes where it was instead of starting over.
};

// Reads a Philly job summary: columns timestamp ("YYYY-MM-DD HH:MM:SS", UTC), duration (seconds),
// num_gpus; gpu_time and cluster are read and checked for shape only. Jobs come out in submission
// order (ties by row), their submit times relative to the first.
Result<std::vector<Job>> LoadPhillyJobs(const std::string& path);
// As LoadPhillyJobs, from text already in memory; `name` labels errors.
Result<std::vector<Job>> ParsePhillyJobs(std::string name, std::string text);

}  // namespace tessera::whatif
