// Fuzzes the loader of the FGD authors' published results (sim::FgdExpected::Parse,
// src/sim/fgd_expected.h). A rejected file gets an error naming it; an accepted one has runs with
// names, a GPU count and finite cells, each run is found again by its own names, the means over
// them are finite, and the table written back as CSV reads back the same.
#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sim/curve.h"
#include "sim/fgd_expected.h"

namespace tessera::fuzz {
namespace {

constexpr const char* kName = "fgd.csv";

std::string WriteRuns(const std::vector<sim::FgdRun>& runs) {
  std::vector<std::string> header = {"workload", "sc_policy", "tune", "seed", "total_gpus"};
  for (int b = 0; b <= sim::kMaxArrivedPct; ++b) header.push_back(std::to_string(b));
  std::string out = CsvLine(header);
  for (const sim::FgdRun& r : runs) {
    std::vector<std::string> row = {r.workload, r.policy, fmt::format("{}", r.tune),
                                    std::to_string(r.seed), std::to_string(r.total_gpus)};
    for (const std::optional<double>& cell : r.allocated_pct) {
      row.push_back(cell ? fmt::format("{}", *cell) : "");
    }
    out += CsvLine(row);
  }
  return out;
}

bool SameRuns(const std::vector<sim::FgdRun>& a, const std::vector<sim::FgdRun>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].workload != b[i].workload || a[i].policy != b[i].policy || a[i].tune != b[i].tune ||
        a[i].seed != b[i].seed || a[i].total_gpus != b[i].total_gpus ||
        a[i].allocated_pct != b[i].allocated_pct) {
      return false;
    }
  }
  return true;
}

void CheckRuns(const sim::FgdExpected& e) {
  Check(!e.runs().empty(), "an accepted file has no runs");
  for (const sim::FgdRun& r : e.runs()) {
    Check(!r.workload.empty() && !r.policy.empty(), "a run has no workload or policy");
    Check(r.total_gpus >= 1 && r.seed >= 0 && std::isfinite(r.tune), "a run's numbers are off");
    Check(e.CountRuns(r.workload, r.policy) >= 1, "a run is not found by its own names");
    for (int pct = 0; pct <= sim::kMaxArrivedPct; ++pct) {
      const std::optional<double>& cell = r.allocated_pct[static_cast<size_t>(pct)];
      if (!cell) continue;
      Check(std::isfinite(*cell), "a cell is not finite");
      const std::optional<double> mean = e.MeanUnallocated(r.workload, r.policy, pct);
      Check(mean.has_value(), "a run's cell is not in the mean over its runs");
      if (!std::isfinite(*mean)) std::fprintf(stderr, "mean at %d: %g\n", pct, *mean);
      Check(std::isfinite(*mean), "a mean over finite cells is not finite");
    }
  }
}

void FuzzOne(std::string text) {
  Result<sim::FgdExpected> e = sim::FgdExpected::Parse(kName, std::move(text));
  if (!e.ok()) {
    CheckError(e.status(), std::string(kName) + ":");
    return;
  }
  CheckRuns(*e);
  Result<sim::FgdExpected> again = sim::FgdExpected::Parse(kName, WriteRuns(e->runs()));
  if (!again.ok()) std::fprintf(stderr, "again: %s\n", again.status().ToString().c_str());
  Check(again.ok() && SameRuns(e->runs(), again->runs()), "runs written back read back different");
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
