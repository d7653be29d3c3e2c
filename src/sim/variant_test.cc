#include "sim/variant.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

TEST(PolicyVariantTest, ReadsTheWindowFromTheName) {
  auto eight = ParsePolicyVariant("guarded-fgd-batch8");
  ASSERT_TRUE(eight.ok()) << eight.status().ToString();
  EXPECT_EQ(eight->base, "guarded-fgd");
  EXPECT_EQ(eight->window, 8);
  EXPECT_EQ(ParsePolicyVariant("fgd-batch64")->window, 64);
  EXPECT_EQ(ParsePolicyVariant("guarded-fgd-batch")->window, kDefaultBatchWindow);
  auto plain = ParsePolicyVariant("guarded-fgd");
  EXPECT_EQ(plain->base, "guarded-fgd");
  EXPECT_EQ(plain->window, 1);
}

TEST(PolicyVariantTest, ReadsRepackAfterTheWindow) {
  auto repack = ParsePolicyVariant("guarded-fgd-repack");
  EXPECT_EQ(repack->base, "guarded-fgd");
  EXPECT_EQ(repack->window, 1);
  EXPECT_TRUE(repack->repack);
  EXPECT_FALSE(repack->plain());
  auto both = ParsePolicyVariant("guarded-fgd-batch16-repack");
  EXPECT_EQ(both->base, "guarded-fgd");
  EXPECT_EQ(both->window, 16);
  EXPECT_TRUE(both->repack);
  // The other order is not a variant: its base is then no registry policy.
  EXPECT_EQ(ParsePolicyVariant("fgd-repack-batch8")->base, "fgd-repack");
  EXPECT_TRUE(ParsePolicyVariant("fgd")->plain());
}

TEST(PolicyVariantTest, RefusesAWindowThatIsNotAWholeNumberInRangeNamingIt) {
  for (const char* name : {"fgd-batch0", "fgd-batch65", "fgd-batchx", "fgd-batch8x", "fgd-batch-1",
                           "fgd-batch08", "fgd-batch99999999999999999999"}) {
    auto r = ParsePolicyVariant(name);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("policy '") + name + "'"), std::string::npos)
        << r.status().message();
  }
}

Pod Share(int milli) {
  Pod p;
  p.num_gpu = milli > 0 ? 1 : 0;
  p.gpu_milli = milli;
  return p;
}

TEST(OrderWindowTest, DecidesTheLargestDemandFirstAndKeepsArrivalOrderOnTies) {
  std::vector<Pod> pods = {Share(300), Share(1000), Share(0), Share(810), Share(300), Share(150)};
  pods.push_back(Share(1000));
  pods.back().num_gpu = 8;
  std::vector<uint32_t> order = {0, 1, 2, 3, 4, 5, 6};
  OrderWindow(pods, order, 0, 6);  // The last pod is outside the window and stays last.
  EXPECT_EQ(order, (std::vector<uint32_t>{1, 3, 0, 4, 5, 2, 6}));
  OrderWindow(pods, order, 5, 7);
  EXPECT_EQ(order, (std::vector<uint32_t>{1, 3, 0, 4, 5, 6, 2}));
}

}  // namespace
}  // namespace tessera::sim
