#include "sim/repro.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "testing/testing.h"

namespace tessera::sim {
namespace {

RunStats FlatRun(std::string trace, std::string policy, uint64_t seed, double unalloc) {
  RunStats r;
  r.trace = std::move(trace);
  r.spec.policy = std::move(policy);
  r.spec.seed = seed;
  r.curve.resize(131);
  for (int b = 0; b <= 130; ++b) {
    CurvePoint& p = r.curve[static_cast<size_t>(b)];
    p.arrived_pct = b;
    p.has_data = true;
    p.unallocated_pct = unalloc;
    p.allocated_pct = 100 - unalloc;
  }
  return r;
}

// The authors' file with one row per (workload, policy) at a flat allocation %.
std::string Expected(const std::vector<std::tuple<std::string, std::string, double>>& rows) {
  std::string out = "workload,sc_policy,tune,seed,total_gpus";
  for (int b = 0; b <= 130; ++b) out += fmt::format(",{}", b);
  out += "\n";
  for (const auto& [w, p, alloc] : rows) {
    out += fmt::format("openb_pod_list_{},{},1.3,42,6212", w, p);
    for (int b = 0; b <= 130; ++b) out += fmt::format(",{}", alloc);
    out += "\n";
  }
  return out;
}

TEST(ReproTest, PaperGridHasSeventeenTraces) {
  EXPECT_EQ(PaperTraces().size(), 17u);
  EXPECT_EQ(PaperTraces().front(), "default");
  EXPECT_EQ(PaperTraces().back(), "multigpu50");
}

TEST(ReproTest, ComparesMeansOverSeedsAndFlagsLargeDifferences) {
  testing::TempDir dir;
  auto expected = FgdExpected::Load(
      dir.Write("e.csv", Expected({{"default", "06-FGD", 95.4}, {"default", "01-Random", 87.5}})));
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  const std::vector<RunStats> runs = {
      FlatRun("default", "fgd", 42, 4.0), FlatRun("default", "fgd", 43, 5.0),
      FlatRun("default", "random", 42, 15.0), FlatRun("cpu050", "fgd", 42, 5.0)};
  const auto cells = CompareWithAuthors(runs, *expected);
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_EQ(cells[0].trace, "default");
  EXPECT_EQ(cells[0].policy, "fgd");
  EXPECT_DOUBLE_EQ(cells[0].ours_130.mean, 4.5);
  EXPECT_NEAR(*cells[0].theirs_130, 4.6, 1e-9);
  EXPECT_NEAR(*cells[0].Diff130(), -0.1, 1e-9);
  EXPECT_NEAR(*cells[1].Diff100(), 2.5, 1e-9);
  EXPECT_FALSE(cells[2].theirs_130.has_value());  // The authors have no cpu050 row here.

  ReproSetup setup;
  setup.command = "bench/fgd_repro.sh";
  setup.seeds = "42-43";
  const std::string md = ReproMarkdown(setup, cells);
  EXPECT_NE(md.find("**1 of 3 cells within 1.0 pp of the authors at arrived = 130%**"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("The largest difference at 130% is +2.50 pp (default, random)."),
            std::string::npos)
      << md;
  EXPECT_NE(
      md.find("| default | fgd | 4.50 ± 0.71 | 4.60 | -0.10 | 4.50 ± 0.71 | 4.60 | -0.10 |  |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| default | random | 15.00 ± 0.00 | 12.50 | +2.50 | 15.00 ± 0.00 | 12.50 | "
                    "+2.50 | **> 1.0** |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| cpu050 | fgd | 5.00 ± 0.00 | n/a | n/a |"), std::string::npos) << md;
  EXPECT_NE(md.find("| default | fgd (4.50) | fgd (4.60) |"), std::string::npos) << md;
}

TEST(ReproTest, SetsOurPolicyBesideFgdAndTheBoundWithoutCountingThemAgainstTheAuthors) {
  testing::TempDir dir;
  auto expected = FgdExpected::Load(dir.Write("e.csv", Expected({{"default", "06-FGD", 95.0}})));
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  const std::vector<RunStats> runs = {
      FlatRun("default", "fgd", 42, 5.0),          FlatRun("default", "guarded-fgd", 42, 4.0),
      FlatRun("default", "adaptive-fgd", 42, 4.8), FlatRun("default", "offline-bound", 42, 1.0),
      FlatRun("cpu050", "fgd", 42, 5.0),           FlatRun("cpu050", "guarded-fgd", 42, 5.15),
      FlatRun("cpu050", "offline-bound", 42, 0.0)};
  const std::string md = ReproMarkdown(ReproSetup{}, CompareWithAuthors(runs, *expected));
  // Only the paper's policies are compared with the authors: 1 of 2 fgd cells has their figure;
  // Tessera's two policies and the bound are not cells of that comparison.
  EXPECT_NE(md.find("**1 of 2 cells within 1.0 pp"), std::string::npos) << md;
  // default: 4.0 <= 0.85 x 5.0: met. cpu050: 5.15 is worse than 5.0: not met; the worst change.
  EXPECT_NE(md.find("**Met on 1 of 2 traces; worst change vs FGD +0.15 pp.**"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| default | 1.00 | 5.00 | 4.80 | 4.00 | 4.00 | 3.00 | -1.00 | yes |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| cpu050 | 0.00 | 5.00 | n/a | 5.15 | 5.00 | 5.15 | +0.15 | no |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("](fgd-default-unallocated.svg)"), std::string::npos) << md;
  // Every policy's distance to the bound, in the order the policies first appear.
  EXPECT_NE(md.find("| trace | bound @100 / @130 | fgd | guarded-fgd | adaptive-fgd |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| default | 1.00 / 1.00 | +4.00 / +4.00 | +3.00 / +3.00 | +3.80 / +3.80 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| cpu050 | 0.00 / 0.00 | +5.00 / +5.00 | +5.15 / +5.15 | n/a |"),
            std::string::npos)
      << md;
}

TEST(ReproTest, ChartsEveryPolicyOfTheTraceAndNothingForAnAbsentOne) {
  const std::vector<RunStats> runs = {FlatRun("default", "fgd", 42, 5.0),
                                      FlatRun("default", "offline-bound", 42, 1.0),
                                      FlatRun("cpu050", "bestfit", 42, 7.0)};
  const std::string svg = ReproChartSvg(runs, "default");
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find(">fgd<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">offline-bound<"), std::string::npos) << svg;
  EXPECT_EQ(svg.find(">bestfit<"), std::string::npos) << svg;
  EXPECT_EQ(ReproChartSvg(runs, "gpushare40"), "");
}

}  // namespace
}  // namespace tessera::sim
