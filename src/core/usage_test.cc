#include "core/usage.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

Shape Mig(const std::string& profile) {
  Shape s;
  s.gpu_model = "A100-40GB";
  s.mode = catalog::SharingMode::kMig;
  s.mig_profile = profile;
  return s;
}

TEST(UsageTest, MigSlicesAreSummedPerModelAndRoundedOnce) {
  Usage u(&TestCatalog());
  EXPECT_EQ(u.Marginal("t", Mig("1g.5gb")), 142);  // floor(1000 / 7)
  for (int i = 0; i < 6; ++i) u.Add("t", Mig("1g.5gb"));
  EXPECT_EQ(u.Milli("t"), 857);  // floor(6000 / 7)
  EXPECT_EQ(u.Marginal("t", Mig("1g.5gb")), 143) << "the seventh slice completes the GPU";
  u.Add("t", Mig("1g.5gb"));
  EXPECT_EQ(u.Milli("t"), 1000);
  Shape share;
  share.gpu_model = "L40S-48GB";
  share.mode = catalog::SharingMode::kShared;
  share.milli_gpu = 250;
  u.Add("t", share);
  EXPECT_EQ(u.Milli("t"), 1250);
  for (int i = 0; i < 7; ++i) u.Remove("t", Mig("1g.5gb"));
  u.Remove("t", share);
  EXPECT_EQ(u.Milli("t"), 0);
  EXPECT_EQ(u.Milli("nobody"), 0);
  EXPECT_EQ(MigSliceMilli(3, 7), 428);
}

}  // namespace
}  // namespace tessera::core
