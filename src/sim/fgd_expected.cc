#include "sim/fgd_expected.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include "common/csv.h"

namespace tessera::sim {

std::string CanonicalPolicyName(std::string_view name) {
  if (name.size() > 3 && std::isdigit(static_cast<unsigned char>(name[0])) &&
      std::isdigit(static_cast<unsigned char>(name[1])) && name[2] == '-') {
    name.remove_prefix(3);
  }
  std::string out;
  for (const char c : name) {
    if (c == '-' || c == '_') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::string CanonicalTraceName(std::string_view name) {
  if (const size_t slash = name.rfind('/'); slash != std::string_view::npos) {
    name.remove_prefix(slash + 1);
  }
  if (name.size() > 4 && name.substr(name.size() - 4) == ".csv") name.remove_suffix(4);
  constexpr std::string_view kPrefix = "openb_pod_list_";
  if (name.substr(0, kPrefix.size()) == kPrefix) name.remove_prefix(kPrefix.size());
  return std::string(name);
}

namespace {

Result<double> ParseNumber(const CsvReader& csv, std::string_view column) {
  const std::string_view f = csv.Field(column);
  double v = 0;
  const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (f.empty() || ec != std::errc() || ptr != f.data() + f.size() || !std::isfinite(v)) {
    return csv.Error(fmt::format("column '{}': '{}' is not a number", column, f));
  }
  return v;
}

Result<FgdRun> ReadRun(const CsvReader& csv) {
  FgdRun run;
  run.workload = std::string(csv.Field("workload"));
  run.policy = std::string(csv.Field("sc_policy"));
  if (run.workload.empty()) return csv.Error("column 'workload' is empty");
  if (run.policy.empty()) return csv.Error("column 'sc_policy' is empty");
  TESSERA_ASSIGN_OR_RETURN(run.tune, ParseNumber(csv, "tune"));
  TESSERA_ASSIGN_OR_RETURN(const int64_t seed, csv.Int("seed", 0, INT32_MAX));
  TESSERA_ASSIGN_OR_RETURN(const int64_t gpus, csv.Int("total_gpus", 1, INT32_MAX));
  run.seed = static_cast<int>(seed);
  run.total_gpus = static_cast<int>(gpus);
  for (int b = 0; b <= kMaxArrivedPct; ++b) {
    const std::string column = std::to_string(b);
    if (csv.Field(column).empty()) continue;
    TESSERA_ASSIGN_OR_RETURN(const double v, ParseNumber(csv, column));
    // A share of the GPUs; beyond [0, 100] the file is broken, and summing such cells over seeds
    // could overflow the mean to infinity.
    if (v < 0 || v > 100) {
      return csv.Error(fmt::format("column '{}': '{}' is not a percentage in [0, 100]", column,
                                   csv.Field(column)));
    }
    run.allocated_pct[static_cast<size_t>(b)] = v;
  }
  return run;
}

}  // namespace

Result<FgdExpected> FgdExpected::Load(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return Parse(path, std::move(text));
}

Result<FgdExpected> FgdExpected::Parse(std::string name, std::string text) {
  CsvReader csv(std::move(name), std::move(text));
  std::vector<std::string> required = {"workload", "sc_policy", "tune", "seed", "total_gpus"};
  for (int b = 0; b <= kMaxArrivedPct; ++b) required.push_back(std::to_string(b));
  TESSERA_RETURN_IF_ERROR(csv.ReadHeader(required));
  FgdExpected out;
  while (csv.Next()) {
    TESSERA_ASSIGN_OR_RETURN(FgdRun run, ReadRun(csv));
    out.runs_.push_back(std::move(run));
  }
  TESSERA_RETURN_IF_ERROR(csv.status());
  if (out.runs_.empty()) return Status::InvalidArgument(fmt::format("{}: no rows", csv.name()));
  return out;
}

std::optional<double> FgdExpected::MeanUnallocated(std::string_view workload,
                                                   std::string_view policy, int pct) const {
  if (pct < 0 || pct > kMaxArrivedPct) return std::nullopt;
  const std::string w = CanonicalTraceName(workload);
  const std::string p = CanonicalPolicyName(policy);
  double sum = 0;
  int n = 0;
  for (const FgdRun& r : runs_) {
    if (CanonicalTraceName(r.workload) != w || CanonicalPolicyName(r.policy) != p) continue;
    const auto& cell = r.allocated_pct[static_cast<size_t>(pct)];
    if (!cell) continue;
    sum += *cell;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return 100.0 - sum / n;
}

int FgdExpected::CountRuns(std::string_view workload, std::string_view policy) const {
  const std::string w = CanonicalTraceName(workload);
  const std::string p = CanonicalPolicyName(policy);
  int n = 0;
  for (const FgdRun& r : runs_) {
    if (CanonicalTraceName(r.workload) == w && CanonicalPolicyName(r.policy) == p) ++n;
  }
  return n;
}

}  // namespace tessera::sim
