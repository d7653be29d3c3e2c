#include "agent/gpu_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "catalog/catalog_testing.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;

struct ResolveCase {
  std::string name;    // As nvmlDeviceGetName returns it.
  int64_t memory_mib;  // As nvmlDeviceGetMemoryInfo's total, in MiB, on real boards.
  std::string want;    // Catalog id.
};

void PrintTo(const ResolveCase& c, std::ostream* os) { *os << c.name << " " << c.memory_mib; }

class ResolveRealNamesTest : public ::testing::TestWithParam<ResolveCase> {};

TEST_P(ResolveRealNamesTest, FindsTheCatalogModel) {
  const ResolveCase& c = GetParam();
  Result<std::string> got =
      ResolveCatalogModel(catalog::EmbeddedCatalogForTest(), c.name, c.memory_mib);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, c.want);
}

INSTANTIATE_TEST_SUITE_P(
    NvmlNames, ResolveRealNamesTest,
    ::testing::Values(ResolveCase{"NVIDIA H100 80GB HBM3", 81559, "H100-80GB"},
                      ResolveCase{"NVIDIA H100 NVL", 95830, "H100-NVL-94GB"},
                      ResolveCase{"NVIDIA H200", 143771, "H200-141GB"},
                      ResolveCase{"NVIDIA B200", 183359, "B200-180GB"},
                      ResolveCase{"NVIDIA A100-SXM4-80GB", 81251, "A100-80GB"},
                      ResolveCase{"NVIDIA A100-SXM4-40GB", 40536, "A100-40GB"},
                      ResolveCase{"NVIDIA A100-PCIE-40GB", 40536, "A100-40GB"},
                      ResolveCase{"NVIDIA A100 80GB PCIe", 81251, "A100-80GB"},
                      ResolveCase{"NVIDIA A30", 24576, "A30-24GB"},
                      ResolveCase{"NVIDIA L40S", 46068, "L40S-48GB"},
                      ResolveCase{"NVIDIA L4", 23034, "L4-24GB"},
                      ResolveCase{"NVIDIA A10", 23028, "A10-24GB"},
                      ResolveCase{"NVIDIA A10G", 23028, "A10G-24GB"},
                      ResolveCase{"Tesla T4", 15360, "T4-16GB"},
                      ResolveCase{"Tesla V100-SXM2-16GB", 16160, "V100-16GB"},
                      ResolveCase{"Tesla V100-SXM2-32GB", 32510, "V100-32GB"},
                      ResolveCase{"Tesla P100-PCIE-16GB", 16280, "P100-16GB"},
                      ResolveCase{"NVIDIA RTX A6000", 49140, "RTX-A6000-48GB"},
                      // Memory hidden (a MIG GPU, an unprivileged caller): the name decides.
                      ResolveCase{"NVIDIA H100 80GB HBM3", 0, "H100-80GB"},
                      ResolveCase{"NVIDIA A100-SXM4-40GB", 0, "A100-40GB"},
                      ResolveCase{"NVIDIA A100-SXM4-80GB", 0, "A100-80GB"},
                      // A catalog id or alias spelled as is.
                      ResolveCase{"H100-80GB", 81920, "H100-80GB"},
                      ResolveCase{"A100-40GB-SXM", 40960, "A100-40GB"}));

TEST(ResolveCatalogModelTest, TheMemoryTellsA100VariantsApart) {
  const catalog::Catalog& c = catalog::EmbeddedCatalogForTest();
  // The same (made-up) name with either memory size: the memory decides, not the name order.
  EXPECT_EQ(*ResolveCatalogModel(c, "NVIDIA A100", 40536), "A100-40GB");
  EXPECT_EQ(*ResolveCatalogModel(c, "NVIDIA A100", 81251), "A100-80GB");
}

TEST(ResolveCatalogModelTest, AnUnknownGpuIsNotFoundAndNamed) {
  Result<std::string> got =
      ResolveCatalogModel(catalog::EmbeddedCatalogForTest(), "NVIDIA GH200 480GB", 97871);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("'NVIDIA GH200 480GB' with 97871 MiB"));
  EXPECT_THAT(got.status().message(), HasSubstr("catalog/gpus.json"));
}

TEST(ResolveCatalogModelTest, AKnownFamilyWithMemoryOfNoVariantIsNotFound) {
  // An H100 with 96 GB (a GH200's) is not the catalog's 80 GB H100: its memory would be wrong.
  Result<std::string> got =
      ResolveCatalogModel(catalog::EmbeddedCatalogForTest(), "NVIDIA H100 96GB HBM3", 97871);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("the memory matches none of H100-80GB"));
}

TEST(ResolveCatalogModelTest, AmbiguousWithoutMemoryIsNotFound) {
  Result<std::string> got =
      ResolveCatalogModel(catalog::EmbeddedCatalogForTest(), "NVIDIA A100", 0);
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("A100-40GB"));
  EXPECT_THAT(got.status().message(), HasSubstr("A100-80GB"));
}

GpuInfo Gpu(int index, std::vector<int> peers) {
  GpuInfo g;
  g.index = index;
  g.nvlink_peers = std::move(peers);
  return g;
}

TEST(NvlinkIslandsTest, AllToAllIsOneIsland) {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < 8; ++i) {
    std::vector<int> peers;
    for (int j = 0; j < 8; ++j) {
      if (j != i) peers.push_back(j);
    }
    gpus.push_back(Gpu(i, peers));
  }
  EXPECT_EQ(NvlinkIslands(gpus), (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

TEST(NvlinkIslandsTest, ComponentsSortedSinglesDropped) {
  // 3-2-1-0 in a chain, 5 <-> 7 listed on one side only, 4 and 6 alone, 9 a peer not present.
  std::vector<GpuInfo> gpus = {Gpu(3, {2}), Gpu(2, {1}), Gpu(1, {0}), Gpu(0, {}),
                               Gpu(4, {9}), Gpu(5, {7}), Gpu(6, {}),  Gpu(7, {})};
  EXPECT_EQ(NvlinkIslands(gpus), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {5, 7}}));
}

TEST(NvlinkIslandsTest, NoLinksNoIslands) {
  EXPECT_TRUE(NvlinkIslands({Gpu(0, {}), Gpu(1, {})}).empty());
  EXPECT_TRUE(NvlinkIslands({}).empty());
}

TEST(ReadHostResourcesTest, ReadsThisHost) {
  int64_t cpu_milli = -1, memory_mib = -1;
  ReadHostResources(cpu_milli, memory_mib);
  EXPECT_GE(cpu_milli, 1000);
  EXPECT_EQ(cpu_milli % 1000, 0);
  EXPECT_GT(memory_mib, 64);
}

}  // namespace
}  // namespace tessera::agent
