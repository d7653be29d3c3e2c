// The FGD authors' published per-run results (fgd_expected_results/analysis_allo_discrete.csv):
// one row per (workload, sc_policy, tune, seed) with the GPU allocation % at arrived buckets
// 0..130. Used to put our reproduction beside theirs.
// Thread-safety: immutable once loaded; share freely.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sim/curve.h"

namespace tessera::sim {

struct FgdRun {
  std::string workload;  // e.g. "openb_pod_list_default".
  std::string policy;    // e.g. "06-FGD".
  double tune = 0;
  int seed = 0;
  int total_gpus = 0;
  // Allocation % per arrived bucket; nullopt for an empty cell.
  std::array<std::optional<double>, kMaxArrivedPct + 1> allocated_pct;
};

class FgdExpected {
 public:
  // Loads the CSV. Errors name the file and line: missing columns, non-numeric cells, cells
  // outside [0, 100].
  static Result<FgdExpected> Load(const std::string& path);
  // As Load, from text already in memory; `name` labels errors as the path does.
  static Result<FgdExpected> Parse(std::string name, std::string text);

  const std::vector<FgdRun>& runs() const { return runs_; }

  // The mean over seeds of 100 - allocation % at bucket `pct` for the runs of `workload`
  // ("default" and "openb_pod_list_default" both match) under `policy` (our name, e.g.
  // "gpu-packing", or theirs, "04-GpuPacking"). nullopt when no run has that cell.
  std::optional<double> MeanUnallocated(std::string_view workload, std::string_view policy,
                                        int pct) const;

  // How many runs match, as MeanUnallocated counts them (before dropping empty cells).
  int CountRuns(std::string_view workload, std::string_view policy) const;

 private:
  std::vector<FgdRun> runs_;
};

// A policy name reduced for matching across naming schemes: the authors' "NN-" prefix dropped,
// lower case, '-' and '_' removed. "04-GpuPacking" and "gpu-packing" both give "gpupacking".
std::string CanonicalPolicyName(std::string_view name);

// A trace name reduced for matching: "openb_pod_list_" prefix and ".csv" suffix dropped, and any
// directory. "/x/openb_pod_list_cpu050.csv" and "cpu050" both give "cpu050".
std::string CanonicalTraceName(std::string_view name);

}  // namespace tessera::sim
