// The FGD reproduction: our runs of the paper's grid (17 openb traces x 6 policies x seeds
// 42-51) set beside the authors' published results, as docs/fgd-reproduction.md. The figure
// compared is the unallocated GPU % at arrived = 100% (the paper's bar charts) and at 130% (the
// end of a run), each a mean over seeds.
// Thread-safety: pure functions over values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/fgd_expected.h"
#include "sim/report.h"
#include "sim/run.h"

namespace tessera::sim {

// The 17 traces the paper uses, by their short names ("default", "cpu050", ...).
const std::vector<std::string>& PaperTraces();

// One (trace, policy) cell of the comparison.
struct ReproCell {
  std::string trace;   // Short name, e.g. "gpuspec33".
  std::string policy;  // Our name, e.g. "gpu-packing".
  Figure ours_100, ours_130;
  std::optional<double> theirs_100, theirs_130;
  int their_runs = 0;

  // ours - theirs, when both exist.
  std::optional<double> Diff100() const;
  std::optional<double> Diff130() const;
};

// Groups `runs` by (trace, policy) in first-seen order and looks up the authors' figures. Each
// run's `trace` must name the trace as the authors' CSV does, in short or long form.
std::vector<ReproCell> CompareWithAuthors(const std::vector<RunStats>& runs,
                                          const FgdExpected& expected);

struct ReproSetup {
  std::string command;  // How the document was produced, quoted in it.
  std::string nodes;    // The node list.
  int64_t node_count = 0;
  int64_t gpus = 0;
  double inflate = 1.3;
  std::string seeds;  // As given, e.g. "42-51".
  int64_t runs = 0;
  int jobs = 1;
  double wall_seconds = 0;      // The whole grid.
  double mean_run_seconds = 0;  // One run, on average.
  double tolerance_pct = 1.0;   // |ours - theirs| above this at 130% is flagged.
};

// The file name, beside the markdown, of the chart ReproMarkdown links to.
inline constexpr char kReproChartFile[] = "fgd-default-unallocated.svg";

// An SVG chart of the unallocated GPU % against arrived demand (mean over seeds) of every policy
// that ran on `trace` (short name), the offline bound included; empty when none did.
std::string ReproChartSvg(const std::vector<RunStats>& runs, const std::string& trace);

// The markdown document: a summary (cells within tolerance at 130% and at 100%, per policy),
// then one table row per cell with ours, theirs and the difference, flagged cells marked. Only
// the paper's policies (cells with an authors' figure) enter that comparison; a last section sets
// FGD and adaptive-fgd beside the offline bound at arrived = 100% (distance = policy - bound)
// and links the chart.
std::string ReproMarkdown(const ReproSetup& setup, const std::vector<ReproCell>& cells);

}  // namespace tessera::sim
