#include "sim/fgd_expected.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "testing/testing.h"

namespace tessera::sim {
namespace {

std::string Header() {
  std::string h = "workload,sc_policy,tune,seed,total_gpus";
  for (int b = 0; b <= 130; ++b) h += fmt::format(",{}", b);
  return h + "\n";
}

// A row whose cell b is `base + b / 10`.
std::string Row(const std::string& workload, const std::string& policy, int seed, double base) {
  std::string r = fmt::format("{},{},1.3,{},6212", workload, policy, seed);
  for (int b = 0; b <= 130; ++b) r += fmt::format(",{:.6f}", base + b / 10.0);
  return r + "\n";
}

TEST(FgdExpectedTest, MeansUnallocatedOverSeedsMatchingEitherNamingScheme) {
  testing::TempDir dir;
  const std::string path =
      dir.Write("a.csv", Header() + Row("openb_pod_list_default", "06-FGD", 42, 80) +
                             Row("openb_pod_list_default", "06-FGD", 43, 82) +
                             Row("openb_pod_list_default", "04-GpuPacking", 42, 70) +
                             Row("openb_pod_list_cpu050", "06-FGD", 42, 10));
  auto e = FgdExpected::Load(path);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->runs().size(), 4u);
  // Cell 100: (90 + 92) / 2 = 91 allocated.
  EXPECT_NEAR(*e->MeanUnallocated("default", "fgd", 100), 9.0, 1e-9);
  EXPECT_NEAR(*e->MeanUnallocated("openb_pod_list_default", "06-FGD", 130), 100 - 94.0, 1e-9);
  EXPECT_NEAR(*e->MeanUnallocated("/d/openb_pod_list_default.csv", "gpu-packing", 0), 30.0, 1e-9);
  EXPECT_EQ(e->CountRuns("default", "fgd"), 2);
  EXPECT_FALSE(e->MeanUnallocated("gpushare100", "fgd", 100).has_value());
  EXPECT_FALSE(e->MeanUnallocated("default", "fgd", 131).has_value());
}

TEST(FgdExpectedTest, ABadCellNamesFileLineAndColumn) {
  testing::TempDir dir;
  std::string bad = Row("openb_pod_list_default", "06-FGD", 42, 80);
  bad.replace(bad.find(",80."), 4, ",x8.");
  const std::string path = dir.Write("a.csv", Header() + Row("w", "01-Random", 1, 1) + bad);
  auto e = FgdExpected::Load(path);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().message(), path + ":3: column '0': 'x8.000000' is not a number");
}

TEST(FgdExpectedTest, AWrongHeaderOrMissingFileIsAnError) {
  testing::TempDir dir;
  const std::string path = dir.Write("a.csv", "workload,sc_policy\nx,y\n");
  auto e = FgdExpected::Load(path);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("header lacks column 'tune'"), std::string::npos)
      << e.status().message();
  auto missing = FgdExpected::Load(dir.File("nope.csv"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.csv"), std::string::npos);
}

TEST(FgdExpectedTest, ParseReadsTextAndNamesItInErrors) {
  auto e =
      FgdExpected::Parse("mem.csv", Header() + Row("openb_pod_list_default", "06-FGD", 42, 80));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  ASSERT_EQ(e->runs().size(), 1u);
  EXPECT_EQ(e->runs()[0].total_gpus, 6212);
  EXPECT_NEAR(*e->MeanUnallocated("default", "fgd", 10), 19.0, 1e-9);
  auto empty = FgdExpected::Parse("mem.csv", Header());
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(), "mem.csv: no rows");
}

// Caught by the fgd_expected fuzz target's invariant: two runs with 1e308 in one cell made the mean
// over seeds -inf. A cell is an allocation percentage, so anything outside [0, 100] is an error.
TEST(FgdExpectedTest, ACellOutsideZeroToHundredIsAnError) {
  for (const char* cell : {"1e308", "100.5", "-0.1"}) {
    std::string bad = Row("w", "06-FGD", 1, 80);
    bad.replace(bad.find(",80."), 10, std::string(",") + cell);
    auto e = FgdExpected::Parse("mem.csv", Header() + bad);
    ASSERT_FALSE(e.ok()) << cell;
    EXPECT_EQ(e.status().message(),
              fmt::format("mem.csv:2: column '0': '{}' is not a percentage in [0, 100]", cell));
  }
  auto edges = FgdExpected::Parse("mem.csv",
                                  Header() + Row("w", "06-FGD", 1, 0) + Row("w", "06-FGD", 2, 87));
  ASSERT_TRUE(edges.ok()) << edges.status().ToString();
  EXPECT_NEAR(*edges->MeanUnallocated("w", "fgd", 0), 100 - 43.5, 1e-9);
}

TEST(CanonicalNameTest, ReducesBothNamingSchemes) {
  EXPECT_EQ(CanonicalPolicyName("03-GpuClustering"), "gpuclustering");
  EXPECT_EQ(CanonicalPolicyName("gpu-clustering"), "gpuclustering");
  EXPECT_EQ(CanonicalPolicyName("BestFit"), "bestfit");
  EXPECT_EQ(CanonicalTraceName("/x/openb_pod_list_gpuspec33.csv"), "gpuspec33");
  EXPECT_EQ(CanonicalTraceName("openb_pod_list_default"), "default");
  EXPECT_EQ(CanonicalTraceName("cpu050"), "cpu050");
}

}  // namespace
}  // namespace tessera::sim
