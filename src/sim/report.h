// Reports of `tessera sim`: a summary of the runs per policy (mean and standard deviation over
// seeds), and the files written to the output directory:
//   curve.csv          the bucketed curve (mean over seeds) when one policy ran;
//   curve-<policy>.csv the same per policy when several ran;
//   runs.csv           one row per run;
//   summary.json       the setup, every run and the per-policy figures;
//   report.html        a self-contained page (inline SVG, no external resources) plotting the
//                      unallocated GPU and fragmentation curves of every policy.
// Thread-safety: pure functions, apart from the files WriteReports writes.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "sim/run.h"
#include "sim/svg_chart.h"

namespace tessera::sim {

// Mean and sample standard deviation (0 for fewer than two values) of `n` values.
struct Figure {
  double mean = 0;
  double sd = 0;
  int n = 0;
};
Figure Describe(const std::vector<double>& values);

struct PolicySummary {
  std::string policy;
  std::vector<uint64_t> seeds;
  Figure unallocated_at_100, unallocated_at_130;  // Over runs whose bucket is not empty.
  Figure pods, placed, failed, wall_seconds, placements_per_second;
  Curve mean_curve;
};

// Groups `runs` by policy, in first-seen order.
std::vector<PolicySummary> Summarize(const std::vector<RunStats>& runs);

// A policy's distance to the offline bound (policy - bound, unallocated GPU pp) at arrived = 100%
// and 130%, from the summaries' means; NaN where the bound did not run or a bucket is empty.
struct BoundDistance {
  double at_100 = 0, at_130 = 0;
};
BoundDistance DistanceToBound(const std::vector<PolicySummary>& summaries, const PolicySummary& s);

// What the runs were about, for the reports' headers.
struct ReportInfo {
  std::string trace;  // The pod list.
  std::string nodes;  // The node list.
  int64_t node_count = 0;
  int64_t gpu_count = 0;
  double inflate = 1.3;
  int64_t trace_pods = 0;       // In the original trace.
  int64_t typical_classes = 0;  // Of the target workload.
};

// One line per policy (its mean curve over seeds) against arrived %: unallocated GPU %,
// fragmentation % of capacity, or fragmentation % of idle GPU. Arrived 0-130%; callers narrow the
// range and set the id, title and y label.
enum class CurveMetric { kUnallocated, kFrag, kFragRatio };
ChartSpec CurveChart(const std::vector<PolicySummary>& summaries, CurveMetric metric);

// A plain-text table for the terminal: one line per policy.
std::string SummaryText(const ReportInfo& info, const std::vector<PolicySummary>& summaries);

// summary.json's content. With exactly one run, its fields also appear at the top level.
nlohmann::json SummaryJson(const ReportInfo& info, const std::vector<RunStats>& runs,
                           const std::vector<PolicySummary>& summaries);

// runs.csv's content.
std::string RunsCsv(const std::vector<RunStats>& runs);

// report.html's content.
std::string ReportHtml(const ReportInfo& info, const std::vector<PolicySummary>& summaries);

// Creates `dir` if needed and writes every file listed above. Errors name the file.
Status WriteReports(const std::string& dir, const ReportInfo& info,
                    const std::vector<RunStats>& runs);

}  // namespace tessera::sim
