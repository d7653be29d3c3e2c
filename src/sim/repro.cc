#include "sim/repro.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace tessera::sim {

const std::vector<std::string>& PaperTraces() {
  static const std::vector<std::string> kTraces = {
      "default",    "cpu050",     "cpu100",      "cpu200",     "cpu250",    "gpushare40",
      "gpushare60", "gpushare80", "gpushare100", "gpuspec10",  "gpuspec20", "gpuspec25",
      "gpuspec33",  "multigpu20", "multigpu30",  "multigpu40", "multigpu50"};
  return kTraces;
}

namespace {

std::optional<double> Minus(const Figure& ours, std::optional<double> theirs) {
  if (ours.n == 0 || !theirs) return std::nullopt;
  return ours.mean - *theirs;
}

}  // namespace

std::optional<double> ReproCell::Diff100() const { return Minus(ours_100, theirs_100); }
std::optional<double> ReproCell::Diff130() const { return Minus(ours_130, theirs_130); }

std::vector<ReproCell> CompareWithAuthors(const std::vector<RunStats>& runs,
                                          const FgdExpected& expected) {
  std::vector<std::pair<std::string, std::string>> keys;
  for (const RunStats& r : runs) {
    std::pair<std::string, std::string> k{CanonicalTraceName(r.trace), r.spec.policy};
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(std::move(k));
  }
  std::vector<ReproCell> cells;
  for (const auto& [trace, policy] : keys) {
    ReproCell c;
    c.trace = trace;
    c.policy = policy;
    std::vector<double> u100, u130;
    for (const RunStats& r : runs) {
      if (CanonicalTraceName(r.trace) != trace || r.spec.policy != policy) continue;
      if (auto v = UnallocatedAt(r.curve, 100)) u100.push_back(*v);
      if (auto v = UnallocatedAt(r.curve, 130)) u130.push_back(*v);
    }
    c.ours_100 = Describe(u100);
    c.ours_130 = Describe(u130);
    c.theirs_100 = expected.MeanUnallocated(trace, policy, 100);
    c.theirs_130 = expected.MeanUnallocated(trace, policy, 130);
    c.their_runs = expected.CountRuns(trace, policy);
    cells.push_back(std::move(c));
  }
  return cells;
}

namespace {

std::string Num(std::optional<double> v, bool sign = false) {
  if (!v) return "n/a";
  return sign ? fmt::format("{:+.2f}", *v) : fmt::format("{:.2f}", *v);
}

std::string Ours(const Figure& f) {
  if (f.n == 0) return "n/a";
  return fmt::format("{:.2f} ± {:.2f}", f.mean, f.sd);
}

bool Within(std::optional<double> diff, double tol) { return diff && std::fabs(*diff) <= tol; }

std::string PolicyTable(const std::vector<ReproCell>& cells, double tol) {
  std::vector<std::string> policies;
  for (const ReproCell& c : cells) {
    if (std::find(policies.begin(), policies.end(), c.policy) == policies.end()) {
      policies.push_back(c.policy);
    }
  }
  std::string out = fmt::format(
      "| policy | traces | within {0:.1f} pp at 130% | mean abs diff at 130% | within {0:.1f} pp "
      "at 100% | mean abs diff at 100% |\n|---|---:|---:|---:|---:|---:|\n",
      tol);
  for (const std::string& p : policies) {
    int n = 0, ok130 = 0, ok100 = 0, n130 = 0, n100 = 0;
    double abs130 = 0, abs100 = 0;
    for (const ReproCell& c : cells) {
      if (c.policy != p) continue;
      ++n;
      if (const auto d = c.Diff130()) {
        abs130 += std::fabs(*d);
        ++n130;
        ok130 += Within(d, tol) ? 1 : 0;
      }
      if (const auto d = c.Diff100()) {
        abs100 += std::fabs(*d);
        ++n100;
        ok100 += Within(d, tol) ? 1 : 0;
      }
    }
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", p, n, ok130,
                       n130 ? fmt::format("{:.2f}", abs130 / n130) : "n/a", ok100,
                       n100 ? fmt::format("{:.2f}", abs100 / n100) : "n/a");
  }
  return out;
}

std::string CellTable(const std::vector<ReproCell>& cells, double tol) {
  std::string out =
      "| trace | policy | ours @100 | authors @100 | diff @100 | ours @130 | authors @130 | "
      "diff @130 | |\n|---|---|---:|---:|---:|---:|---:|---:|---|\n";
  for (const ReproCell& c : cells) {
    const auto d130 = c.Diff130();
    const bool flag = !d130 || std::fabs(*d130) > tol;
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.trace, c.policy,
                       Ours(c.ours_100), Num(c.theirs_100), Num(c.Diff100(), true),
                       Ours(c.ours_130), Num(c.theirs_130), Num(d130, true),
                       flag ? fmt::format("**> {:.1f}**", tol) : "");
  }
  return out;
}

// Per trace: does FGD have the lowest unallocated % at 130%, in our runs and in theirs?
std::string WinnerTable(const std::vector<ReproCell>& cells) {
  std::vector<std::string> traces;
  for (const ReproCell& c : cells) {
    if (std::find(traces.begin(), traces.end(), c.trace) == traces.end()) {
      traces.push_back(c.trace);
    }
  }
  std::string out =
      "| trace | best policy @130, ours | best policy @130, authors |\n|---|---|---|\n";
  for (const std::string& t : traces) {
    const ReproCell* ours = nullptr;
    const ReproCell* theirs = nullptr;
    for (const ReproCell& c : cells) {
      if (c.trace != t) continue;
      if (c.ours_130.n > 0 && (!ours || c.ours_130.mean < ours->ours_130.mean)) ours = &c;
      if (c.theirs_130 && (!theirs || *c.theirs_130 < *theirs->theirs_130)) theirs = &c;
    }
    out += fmt::format(
        "| {} | {} | {} |\n", t,
        ours ? fmt::format("{} ({:.2f})", ours->policy, ours->ours_130.mean) : "n/a",
        theirs ? fmt::format("{} ({:.2f})", theirs->policy, *theirs->theirs_130) : "n/a");
  }
  return out;
}

}  // namespace

std::string ReproMarkdown(const ReproSetup& setup, const std::vector<ReproCell>& cells) {
  const double tol = setup.tolerance_pct;
  int ok130 = 0, ok100 = 0;
  const ReproCell* worst = nullptr;  // The largest |diff| at 130%.
  for (const ReproCell& c : cells) {
    ok130 += Within(c.Diff130(), tol) ? 1 : 0;
    ok100 += Within(c.Diff100(), tol) ? 1 : 0;
    if (c.Diff130() && (!worst || std::fabs(*c.Diff130()) > std::fabs(*worst->Diff130()))) {
      worst = &c;
    }
  }
  std::string out = "# FGD reproduction: Tessera beside the authors' simulator\n\n";
  out += fmt::format(
      "Generated by `bench/fgd_repro.sh`, which runs `{}`. Do not edit by hand; rerun the "
      "script instead.\n\n"
      "- Cluster: `{}` ({} nodes, {} GPUs), empty at the start.\n"
      "- Grid: {} cells (trace x policy) x seeds {}: {} runs. Workload tuned to {:g}x the GPU "
      "capacity; pods placed one at a time, nothing departs (docs/sim.md, "
      "shared/reference/fgd-details.md).\n"
      "- Figure: unallocated GPU % = 100 - allocated %, bucketed by arrived GPU demand as the "
      "authors' merge scripts do. Ours: mean ± sample sd over seeds. Authors': mean over seeds "
      "of 100 - the column of `analysis_allo_discrete.csv`.\n"
      "- Time: {:.1f} s for the grid on {} threads, {:.3f} s per run on average.\n\n",
      setup.command, setup.nodes, setup.node_count, setup.gpus, cells.size(), setup.seeds,
      setup.runs, setup.inflate, setup.wall_seconds, setup.jobs, setup.mean_run_seconds);
  out += fmt::format(
      "## Summary\n\n**{} of {} cells within {:.1f} pp of the authors at arrived = 130%**; "
      "{} of {} at arrived = 100%.{}\n\n",
      ok130, cells.size(), tol, ok100, cells.size(),
      worst ? fmt::format(" The largest difference at 130% is {:+.2f} pp ({}, {}).",
                          *worst->Diff130(), worst->trace, worst->policy)
            : "");
  out += PolicyTable(cells, tol);
  out += "\n## Best policy per trace at arrived = 130%\n\n" + WinnerTable(cells);
  out += fmt::format(
      "\n## Unallocated GPU % per trace and policy\n\nCells whose difference at 130% exceeds "
      "{:.1f} pp (or that lack a figure) are marked.\n\n",
      tol);
  out += CellTable(cells, tol);
  return out;
}

}  // namespace tessera::sim
