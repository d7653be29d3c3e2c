#include "sim/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "common/csv.h"
#include "sim/svg_chart.h"
#include "testing/testing.h"

namespace tessera::sim {
namespace {

// A run whose curve is flat at `unalloc` % unallocated from bucket 0 to `last`.
RunStats FakeRun(std::string policy, uint64_t seed, double unalloc, int last = 130) {
  RunStats r;
  r.trace = "t.csv";
  r.spec.policy = std::move(policy);
  r.spec.seed = seed;
  r.pods = 100;
  r.placed = 90;
  r.failed = 10;
  r.wall_seconds = 0.5;
  r.schedule_seconds = 0.25;
  r.curve.resize(131);
  for (int b = 0; b <= 130; ++b) {
    CurvePoint& p = r.curve[static_cast<size_t>(b)];
    p.arrived_pct = b;
    if (b > last) continue;
    p.has_data = true;
    p.allocated_pct = 100 - unalloc;
    p.unallocated_pct = unalloc;
    p.frag_pct = unalloc / 2;
    p.frag_ratio_pct = 50;
  }
  return r;
}

TEST(DescribeTest, MeanAndSampleStandardDeviation) {
  const Figure f = Describe({2, 4, 4, 4, 5, 5, 7, 9});
  EXPECT_DOUBLE_EQ(f.mean, 5);
  EXPECT_NEAR(f.sd, 2.138089935, 1e-9);  // sqrt(32 / 7)
  EXPECT_EQ(f.n, 8);
  EXPECT_DOUBLE_EQ(Describe({3}).sd, 0);
  EXPECT_EQ(Describe({}).n, 0);
}

TEST(SummarizeTest, GroupsByPolicyInFirstSeenOrder) {
  const auto s = Summarize({FakeRun("fgd", 42, 4), FakeRun("random", 42, 12), FakeRun("fgd", 43, 6),
                            FakeRun("random", 43, 14, 99)});
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].policy, "fgd");
  EXPECT_EQ(s[0].seeds, (std::vector<uint64_t>{42, 43}));
  EXPECT_DOUBLE_EQ(s[0].unallocated_at_100.mean, 5);
  EXPECT_NEAR(s[0].unallocated_at_100.sd, std::sqrt(2.0), 1e-12);
  // The second random run has no data beyond 99: only one value at 100 and 130.
  EXPECT_EQ(s[1].unallocated_at_100.n, 1);
  EXPECT_DOUBLE_EQ(s[1].unallocated_at_130.mean, 12);
  EXPECT_DOUBLE_EQ(s[1].mean_curve[50].unallocated_pct, 13);
  EXPECT_DOUBLE_EQ(s[0].placements_per_second.mean, 400);
}

TEST(SummaryJsonTest, OneRunAlsoHasItsFieldsAtTheTop) {
  ReportInfo info;
  info.trace = "t.csv";
  info.gpu_count = 16;
  const std::vector<RunStats> runs = {FakeRun("fgd", 42, 4.5)};
  const auto j = SummaryJson(info, runs, Summarize(runs));
  for (const char* key : {"policy", "seed", "pods", "placed", "failed", "unallocated_pct_at_100",
                          "unallocated_pct_at_130", "wall_seconds", "placements_per_second",
                          "nodes", "gpus", "trace", "inflate", "runs", "policies"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["policy"], "fgd");
  EXPECT_EQ(j["seed"], 42);
  EXPECT_DOUBLE_EQ(j["unallocated_pct_at_130"].get<double>(), 4.5);
  EXPECT_DOUBLE_EQ(j["placements_per_second"].get<double>(), 400);
  EXPECT_EQ(j["gpus"], 16);

  const std::vector<RunStats> two = {FakeRun("fgd", 42, 4), FakeRun("fgd", 43, 6)};
  const auto k = SummaryJson(info, two, Summarize(two));
  EXPECT_FALSE(k.contains("seed"));
  EXPECT_EQ(k["runs"].size(), 2u);
  EXPECT_DOUBLE_EQ(k["policies"][0]["unallocated_pct_at_100"]["mean"].get<double>(), 5);
}

TEST(RunsCsvTest, OneRowPerRunAndEmptyCellsForEmptyBuckets) {
  const std::string csv = RunsCsv({FakeRun("fgd", 42, 4.5), FakeRun("bestfit", 7, 6, 99)});
  EXPECT_EQ(csv,
            "trace,policy,seed,pods,placed,failed,unallocated_pct_at_100,unallocated_pct_at_130,"
            "wall_seconds,placements_per_second,moves\n"
            "t.csv,fgd,42,100,90,10,4.50,4.50,0.5000,400,0\n"
            "t.csv,bestfit,7,100,90,10,,,0.5000,400,0\n");
}

TEST(ReportHtmlTest, IsSelfContainedWithChartsAxesAndLegend) {
  ReportInfo info;
  info.trace = "<trace>.csv";
  const auto html = ReportHtml(info, Summarize({FakeRun("fgd", 42, 4), FakeRun("random", 42, 12)}));
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("&lt;trace&gt;.csv"), std::string::npos);  // Escaped.
  EXPECT_NE(html.find("Unallocated GPU %"), std::string::npos);
  EXPECT_NE(html.find("arrived GPU demand (% of cluster GPU capacity)"), std::string::npos);
  EXPECT_NE(html.find(">random</text>"), std::string::npos);  // Legend entry.
  EXPECT_NE(html.find(">130</text>"), std::string::npos);     // An x tick.
  // Nothing is fetched: no scripts, stylesheets or URLs other than the SVG namespace.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  std::string rest = html;
  for (size_t p; (p = rest.find("http://www.w3.org/2000/svg")) != std::string::npos;) {
    rest.erase(p, 26);
  }
  EXPECT_EQ(rest.find("http"), std::string::npos);
}

TEST(WriteReportsTest, WritesEveryFileForOnePolicyAndPerPolicyCurvesForSeveral) {
  testing::TempDir dir;
  ReportInfo info;
  ASSERT_TRUE(WriteReports(dir.File("one"), info, {FakeRun("fgd", 42, 4)}).ok());
  for (const char* f : {"curve.csv", "runs.csv", "summary.json", "report.html"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.File(std::string("one/") + f))) << f;
  }
  ASSERT_TRUE(
      WriteReports(dir.File("two"), info, {FakeRun("fgd", 42, 4), FakeRun("gpu-packing", 42, 8)})
          .ok());
  EXPECT_TRUE(std::filesystem::exists(dir.File("two/curve-fgd.csv")));
  EXPECT_TRUE(std::filesystem::exists(dir.File("two/curve-gpu-packing.csv")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("two/curve.csv")));
  auto csv = ReadFile(dir.File("two/curve-gpu-packing.csv"));
  ASSERT_TRUE(csv.ok());
  EXPECT_NE(csv->find("\n100,92.0000,8.0000,4.0000,50.0000\n"), std::string::npos);

  dir.Write("file", "x");
  const Status s = WriteReports(dir.File("file/sub"), info, {FakeRun("fgd", 42, 4)});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("file/sub"), std::string::npos) << s.message();
}

TEST(SvgChartTest, NiceTicksAreRoundAndCoverTheRange) {
  EXPECT_EQ(NiceTicks(0, 130, 13),
            (std::vector<double>{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130}));
  EXPECT_EQ(NiceTicks(0, 100, 6), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(NiceTicks(3.2, 4.9, 6), (std::vector<double>{3.5, 4.0, 4.5}));
  const auto fine = NiceTicks(0, 1, 10);
  ASSERT_EQ(fine.size(), 11u);
  EXPECT_EQ(fine[3], 0.3);  // k * step, not a running sum.
  EXPECT_EQ(HtmlEscape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
}

TEST(SvgChartTest, GapsInDataBreakTheLine) {
  ChartSpec c;
  c.x_max = 3;
  c.series.push_back({"s", "#000", {{0, 1}, {1, 2}, {2, std::nan("")}, {3, 1}}});
  const std::string svg = LineChartSvg(c);
  // Two segments: one "M" to start, one "M" after the gap.
  const size_t path = svg.find("<path d=\"");
  ASSERT_NE(path, std::string::npos);
  const std::string d = svg.substr(path, svg.find('"', path + 9) - path);
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 2) << d;
  EXPECT_EQ(std::count(d.begin(), d.end(), 'L'), 1) << d;
}

}  // namespace
}  // namespace tessera::sim
