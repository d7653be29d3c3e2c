#include "sim/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <system_error>

#include "common/csv.h"
#include "sim/bound.h"

namespace tessera::sim {

Figure Describe(const std::vector<double>& values) {
  Figure f;
  f.n = static_cast<int>(values.size());
  if (values.empty()) return f;
  double sum = 0;
  for (const double v : values) sum += v;
  f.mean = sum / f.n;
  if (f.n > 1) {
    double sq = 0;
    for (const double v : values) sq += (v - f.mean) * (v - f.mean);
    f.sd = std::sqrt(sq / (f.n - 1));
  }
  return f;
}

namespace {

PolicySummary SummarizeOne(const std::string& policy, const std::vector<const RunStats*>& runs) {
  PolicySummary s;
  s.policy = policy;
  std::vector<double> u100, u130, pods, placed, failed, wall, pps;
  std::vector<Curve> curves;
  for (const RunStats* r : runs) {
    s.seeds.push_back(r->spec.seed);
    if (auto v = UnallocatedAt(r->curve, 100)) u100.push_back(*v);
    if (auto v = UnallocatedAt(r->curve, 130)) u130.push_back(*v);
    pods.push_back(static_cast<double>(r->pods));
    placed.push_back(static_cast<double>(r->placed));
    failed.push_back(static_cast<double>(r->failed));
    wall.push_back(r->wall_seconds);
    pps.push_back(r->placements_per_second());
    curves.push_back(r->curve);
  }
  s.unallocated_at_100 = Describe(u100);
  s.unallocated_at_130 = Describe(u130);
  s.pods = Describe(pods);
  s.placed = Describe(placed);
  s.failed = Describe(failed);
  s.wall_seconds = Describe(wall);
  s.placements_per_second = Describe(pps);
  s.mean_curve = MeanCurve(curves);
  return s;
}

// "12.34 ± 0.56", "12.34" for one value, "-" for none.
std::string MeanSd(const Figure& f, int decimals = 2) {
  if (f.n == 0) return "-";
  if (f.n == 1) return fmt::format("{:.{}f}", f.mean, decimals);
  return fmt::format("{:.{}f} ± {:.{}f}", f.mean, decimals, f.sd, decimals);
}

nlohmann::json FigureJson(const Figure& f) {
  if (f.n == 0) return nullptr;
  return {{"mean", f.mean}, {"sd", f.sd}, {"n", f.n}};
}

nlohmann::json OptionalJson(std::optional<double> v) {
  if (!v) return nullptr;
  return *v;
}

nlohmann::json RunJson(const RunStats& r) {
  return {{"trace", r.trace},
          {"policy", r.spec.policy},
          {"seed", r.spec.seed},
          {"inflate", r.spec.inflate},
          {"pods", r.pods},
          {"placed", r.placed},
          {"failed", r.failed},
          {"tuned_copies", r.copies},
          {"tuned_removed", r.removed},
          {"gpu_demand_milli", r.demand_milli},
          {"unallocated_pct_at_100", OptionalJson(UnallocatedAt(r.curve, 100))},
          {"unallocated_pct_at_130", OptionalJson(UnallocatedAt(r.curve, 130))},
          {"wall_seconds", r.wall_seconds},
          {"schedule_seconds", r.schedule_seconds},
          {"placements_per_second", r.placements_per_second()},
          {"moves", r.moves},
          {"moved_milli", r.moved_milli}};
}

// A CSV field, quoted when it holds a comma or a quote.
std::string CsvField(std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (const char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string FileSafe(std::string_view name) {
  std::string out;
  for (const char c : name) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out;
}

}  // namespace

std::vector<PolicySummary> Summarize(const std::vector<RunStats>& runs) {
  std::vector<std::string> order;
  for (const RunStats& r : runs) {
    if (std::find(order.begin(), order.end(), r.spec.policy) == order.end()) {
      order.push_back(r.spec.policy);
    }
  }
  std::vector<PolicySummary> out;
  for (const std::string& p : order) {
    std::vector<const RunStats*> mine;
    for (const RunStats& r : runs) {
      if (r.spec.policy == p) mine.push_back(&r);
    }
    out.push_back(SummarizeOne(p, mine));
  }
  return out;
}

BoundDistance DistanceToBound(const std::vector<PolicySummary>& summaries, const PolicySummary& s) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  const auto bound = std::find_if(summaries.begin(), summaries.end(), [](const PolicySummary& b) {
    return b.policy == kOfflineBoundPolicy;
  });
  auto diff = [](const Figure& a, const Figure& b) {
    return a.n > 0 && b.n > 0 ? a.mean - b.mean : kNaN;
  };
  if (bound == summaries.end()) return {kNaN, kNaN};
  return {diff(s.unallocated_at_100, bound->unallocated_at_100),
          diff(s.unallocated_at_130, bound->unallocated_at_130)};
}

std::string SummaryText(const ReportInfo& info, const std::vector<PolicySummary>& summaries) {
  std::string out = fmt::format(
      "trace {} ({} pods, {} typical classes)\ncluster {} ({} nodes, {} GPUs), inflate {:g}\n\n",
      info.trace, info.trace_pods, info.typical_classes, info.nodes, info.node_count,
      info.gpu_count, info.inflate);
  out += fmt::format("{:<16} {:>5} {:>18} {:>18} {:>10} {:>8} {:>8} {:>8} {:>10} {:>8}\n", "policy",
                     "seeds", "unalloc% @100", "unalloc% @130", "bound+ @100", "pods", "placed",
                     "failed", "placed/s", "wall s");
  for (const PolicySummary& s : summaries) {
    const BoundDistance d = DistanceToBound(summaries, s);
    out += fmt::format(
        "{:<16} {:>5} {:>18} {:>18} {:>10} {:>8.0f} {:>8.0f} {:>8.0f} {:>10.0f} {:>8.3f}\n",
        s.policy, s.seeds.size(), MeanSd(s.unallocated_at_100), MeanSd(s.unallocated_at_130),
        std::isnan(d.at_100) ? "-" : fmt::format("{:+.2f}", d.at_100), s.pods.mean, s.placed.mean,
        s.failed.mean, s.placements_per_second.mean, s.wall_seconds.mean);
  }
  if (std::any_of(summaries.begin(), summaries.end(),
                  [](const PolicySummary& s) { return s.policy == kOfflineBoundPolicy; })) {
    out +=
        "\nbound+ @100: the policy's unallocated % minus the offline bound's (a floor under "
        "every policy; docs/offline-bound.md)\n";
  }
  return out;
}

nlohmann::json SummaryJson(const ReportInfo& info, const std::vector<RunStats>& runs,
                           const std::vector<PolicySummary>& summaries) {
  nlohmann::json j = {{"trace", info.trace},
                      {"nodes_file", info.nodes},
                      {"nodes", info.node_count},
                      {"gpus", info.gpu_count},
                      {"inflate", info.inflate},
                      {"trace_pods", info.trace_pods},
                      {"typical_classes", info.typical_classes}};
  if (runs.size() == 1) j.update(RunJson(runs[0]));
  nlohmann::json all = nlohmann::json::array();
  for (const RunStats& r : runs) all.push_back(RunJson(r));
  j["runs"] = std::move(all);
  nlohmann::json policies = nlohmann::json::array();
  for (const PolicySummary& s : summaries) {
    policies.push_back({{"policy", s.policy},
                        {"seeds", s.seeds},
                        {"unallocated_pct_at_100", FigureJson(s.unallocated_at_100)},
                        {"unallocated_pct_at_130", FigureJson(s.unallocated_at_130)},
                        {"pods", FigureJson(s.pods)},
                        {"placed", FigureJson(s.placed)},
                        {"failed", FigureJson(s.failed)},
                        {"wall_seconds", FigureJson(s.wall_seconds)},
                        {"placements_per_second", FigureJson(s.placements_per_second)}});
    const BoundDistance d = DistanceToBound(summaries, s);
    if (!std::isnan(d.at_100)) policies.back()["distance_to_bound_pp_at_100"] = d.at_100;
    if (!std::isnan(d.at_130)) policies.back()["distance_to_bound_pp_at_130"] = d.at_130;
  }
  j["policies"] = std::move(policies);
  return j;
}

std::string RunsCsv(const std::vector<RunStats>& runs) {
  std::string out =
      "trace,policy,seed,pods,placed,failed,unallocated_pct_at_100,unallocated_pct_at_130,"
      "wall_seconds,placements_per_second,moves\n";
  auto cell = [](std::optional<double> v) { return v ? fmt::format("{:.2f}", *v) : ""; };
  for (const RunStats& r : runs) {
    out += fmt::format("{},{},{},{},{},{},{},{},{:.4f},{:.0f},{}\n", CsvField(r.trace),
                       r.spec.policy, r.spec.seed, r.pods, r.placed, r.failed,
                       cell(UnallocatedAt(r.curve, 100)), cell(UnallocatedAt(r.curve, 130)),
                       r.wall_seconds, r.placements_per_second(), r.moves);
  }
  return out;
}

Status WriteReports(const std::string& dir, const ReportInfo& info,
                    const std::vector<RunStats>& runs) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("{}: cannot create the output directory: {}", dir, ec.message()));
  }
  const std::vector<PolicySummary> summaries = Summarize(runs);
  if (summaries.size() == 1) {
    TESSERA_RETURN_IF_ERROR(WriteCurveCsv(summaries[0].mean_curve, dir + "/curve.csv"));
  } else {
    for (const PolicySummary& s : summaries) {
      TESSERA_RETURN_IF_ERROR(
          WriteCurveCsv(s.mean_curve, fmt::format("{}/curve-{}.csv", dir, FileSafe(s.policy))));
    }
  }
  TESSERA_RETURN_IF_ERROR(WriteFile(dir + "/runs.csv", RunsCsv(runs)));
  const std::string json = SummaryJson(info, runs, summaries)
                               .dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  TESSERA_RETURN_IF_ERROR(WriteFile(dir + "/summary.json", json + "\n"));
  return WriteFile(dir + "/report.html", ReportHtml(info, summaries));
}

}  // namespace tessera::sim
