// report.html: one self-contained page, so it can be mailed or opened offline. The charts are
// inline SVG from svg_chart.cc; the styles are inline; nothing is fetched.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "sim/report.h"
#include "sim/svg_chart.h"

namespace tessera::sim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string Cell(const Figure& f) {
  if (f.n == 0) return "&ndash;";
  if (f.n == 1) return fmt::format("{:.2f}", f.mean);
  return fmt::format("{:.2f} &plusmn; {:.2f}", f.mean, f.sd);
}

std::string Charts(const std::vector<PolicySummary>& summaries) {
  std::string out;
  ChartSpec full = CurveChart(summaries, CurveMetric::kUnallocated);
  full.id = "unalloc";
  full.title = "Unallocated GPU % (lower is better)";
  full.y_label = "unallocated GPU (% of capacity)";
  full.y_min = 0;
  full.y_max = 100;
  out += LineChartSvg(full);

  ChartSpec zoom = CurveChart(summaries, CurveMetric::kUnallocated);
  zoom.id = "unalloc-zoom";
  zoom.title = "Unallocated GPU %, arrived 75-130% (as FGD's Fig. 9a)";
  zoom.y_label = "unallocated GPU (% of capacity)";
  zoom.x_min = 75;
  out += LineChartSvg(zoom);

  ChartSpec frag = CurveChart(summaries, CurveMetric::kFrag);
  frag.id = "frag";
  frag.title = "Fragmentation (% of cluster GPUs)";
  frag.y_label = "fragmented GPU (% of capacity)";
  frag.y_min = 0;
  out += LineChartSvg(frag);

  ChartSpec ratio = CurveChart(summaries, CurveMetric::kFragRatio);
  ratio.id = "frag-ratio";
  ratio.title = "Fragmentation ratio (% of idle GPU)";
  ratio.y_label = "fragmented / idle GPU (%)";
  ratio.y_min = 0;
  ratio.y_max = 100;
  out += LineChartSvg(ratio);
  return out;
}

std::string Distance(double pp) { return std::isnan(pp) ? "&ndash;" : fmt::format("{:+.2f}", pp); }

std::string Table(const std::vector<PolicySummary>& summaries) {
  std::string out =
      "<table>\n<tr><th>policy</th><th>seeds</th><th>unallocated GPU % at 100% arrived</th>"
      "<th>unallocated GPU % at 130% arrived</th><th>distance to the offline bound at 100%, "
      "pp</th><th>at 130%, pp</th><th>pods</th><th>placed</th><th>failed</th>"
      "<th>placements/s</th><th>wall s</th></tr>\n";
  for (const PolicySummary& s : summaries) {
    std::string seeds;
    for (const uint64_t seed : s.seeds)
      seeds += fmt::format("{}{}", seeds.empty() ? "" : ",", seed);
    const BoundDistance d = DistanceToBound(summaries, s);
    out += fmt::format(
        "<tr><td>{}</td><td title=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{:.0f}</td><td>{:.0f}</td><td>{:.0f}</td><td>{:.0f}</td><td>{:.3f}</td></tr>\n",
        HtmlEscape(s.policy), seeds, s.seeds.size(), Cell(s.unallocated_at_100),
        Cell(s.unallocated_at_130), Distance(d.at_100), Distance(d.at_130), s.pods.mean,
        s.placed.mean, s.failed.mean, s.placements_per_second.mean, s.wall_seconds.mean);
  }
  return out + "</table>\n";
}

}  // namespace

ChartSpec CurveChart(const std::vector<PolicySummary>& summaries, CurveMetric metric) {
  ChartSpec c;
  c.x_label = "arrived GPU demand (% of cluster GPU capacity)";
  c.x_min = 0;
  c.x_max = kMaxArrivedPct;
  for (size_t i = 0; i < summaries.size(); ++i) {
    ChartSeries s;
    s.name = summaries[i].policy;
    s.color = SeriesColor(i);
    for (const CurvePoint& p : summaries[i].mean_curve) {
      double y = kNaN;
      if (p.has_data) {
        y = metric == CurveMetric::kUnallocated ? p.unallocated_pct
            : metric == CurveMetric::kFrag      ? p.frag_pct
                                                : p.frag_ratio_pct;
      }
      s.points.emplace_back(p.arrived_pct, y);
    }
    c.series.push_back(std::move(s));
  }
  return c;
}

std::string ReportHtml(const ReportInfo& info, const std::vector<PolicySummary>& summaries) {
  std::string out = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>tessera sim: {0}</title>\n<style>\n"
      "body {{ font-family: sans-serif; margin: 2em; color: #222; max-width: 1100px; }}\n"
      "table {{ border-collapse: collapse; margin: 1em 0; }}\n"
      "th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: right; }}\n"
      "th:first-child, td:first-child {{ text-align: left; }}\n"
      "svg {{ display: block; margin: 1em 0; }}\n.note {{ color: #555; font-size: 90%; }}\n"
      "</style>\n</head>\n<body>\n<h1>Trace simulation: {0}</h1>\n"
      "<p>Cluster <b>{1}</b>: {2} nodes, {3} GPUs. Trace: {4} pods, {5} typical pod classes. "
      "Workload tuned to {6:g}&times; the cluster's GPU capacity, FGD protocol "
      "(one pod at a time, nothing departs).</p>\n",
      HtmlEscape(info.trace), HtmlEscape(info.nodes), info.node_count, info.gpu_count,
      info.trace_pods, info.typical_classes, info.inflate);
  out += Table(summaries);
  out +=
      "<p class=\"note\">Figures are the mean &plusmn; sample standard deviation over seeds. "
      "Unallocated GPU % = 100 &minus; allocated GPU milli / capacity, bucketed by arrived GPU "
      "demand as the FGD authors do (mean of the per-pod rows in each bucket). The distance to "
      "the offline bound is the policy's unallocated % minus the bound's, when the run included "
      "<code>offline-bound</code>: a proven floor under every policy "
      "(docs/offline-bound.md).</p>\n";
  out += Charts(summaries);
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace tessera::sim
