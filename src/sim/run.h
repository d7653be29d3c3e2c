// Runs of the FGD protocol: one run replays a trace's arrival order (sim/protocol.h) through the
// real scheduler on a private copy of the fleet, logs a Sample after every pod, placed or failed,
// and buckets the log into a Curve (sim/curve.h). Nothing departs; a pod that does not fit is
// counted as failed and the run goes on.
// RunGrid runs many (scenario, policy, seed) runs in parallel, one run per thread at a time.
// Thread-safety: a Scenario is read-only and shared by every run over it (the Catalog behind the
// fleet is immutable); each run owns its Fleet copy and Scheduler. GridProgress is atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"
#include "sim/curve.h"
#include "sim/trace.h"

namespace tessera::sim {

// What the runs over one trace share.
struct Scenario {
  std::string trace;                        // A label, e.g. the pod list's path.
  const fleet::Fleet* fleet = nullptr;      // The empty cluster; each run copies it.
  const std::vector<Pod>* pods = nullptr;   // The original trace.
  const sched::Workload* target = nullptr;  // Typical pods of the original trace.
};

struct RunSpec {
  std::string policy = "fgd";
  uint64_t seed = 42;
  double inflate = 1.3;  // Target GPU demand as a multiple of cluster capacity.
};

struct RunStats {
  std::string trace;
  RunSpec spec;
  int64_t pods = 0;  // Attempted, after tuning.
  int64_t placed = 0;
  int64_t failed = 0;
  int64_t copies = 0;       // Added by tuning up.
  int64_t removed = 0;      // Removed by tuning down.
  int64_t moves = 0;        // Shares moved to make room (POLICY-repack, sim/repack.h).
  int64_t moved_milli = 0;  // Their GPU milli.
  int64_t demand_milli = 0;
  int64_t total_gpus = 0;
  Curve curve;
  double wall_seconds = 0;      // The whole run: copy, tune, schedule, bucket.
  double schedule_seconds = 0;  // The placement loop alone.

  double placements_per_second() const {
    return schedule_seconds > 0 ? static_cast<double>(pods) / schedule_seconds : 0;
  }
};

struct GridProgress {
  std::atomic<int64_t> runs_done{0};
  std::atomic<int64_t> pods_done{0};  // Pods attempted, across every run so far.
};

// One run; with spec.policy == "offline-bound" (sim/bound.h) the curve is the bound's and no pod
// is placed (placed and failed stay 0). Errors: an unknown policy (NotFound, listing the known
// ones), a cluster without GPUs, a trace that cannot be tuned. `progress` may be null.
Result<RunStats> RunOne(const Scenario& scenario, const RunSpec& spec, const Clock& clock,
                        GridProgress* progress = nullptr);

struct GridTask {
  const Scenario* scenario = nullptr;
  RunSpec spec;
};

// Runs every task on up to `jobs` threads (at least 1). Results come back in task order. The
// first failing run's error is returned, and no further runs start after it.
Result<std::vector<RunStats>> RunGrid(const std::vector<GridTask>& tasks, int jobs,
                                      const Clock& clock, GridProgress* progress = nullptr);

// Parses a seed list: "42", "42-51", "1,5,9" or a mix ("1-3,7"). Errors name the bad piece.
Result<std::vector<uint64_t>> ParseSeeds(std::string_view text);

}  // namespace tessera::sim
