#include "core/recovery.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

TEST(RecoveryTest, SaysWhyAStoredInstanceCannotComeBack) {
  StoredInstance s;
  s.instance.shape.gpu_model = "H100-80GB";
  s.instance.shape.gpus = 1;
  EXPECT_EQ(WhyNotRestorable(s, TestCatalog()), "");
  s.instance.shape.gpu_model = "Z100";
  EXPECT_EQ(WhyNotRestorable(s, TestCatalog()),
            "its GPU model 'Z100' is not in the catalog any more");
  s.instance.shape.gpu_model = "A100-40GB";
  s.instance.shape.mode = catalog::SharingMode::kMig;
  s.instance.shape.mig_profile = "3g.99gb";
  EXPECT_EQ(WhyNotRestorable(s, TestCatalog()),
            "MIG profile '3g.99gb' is not in the A100-40GB table any more");
  s.instance.shape.mig_profile = "3g.20gb";
  s.binding = Status::FailedPrecondition("node 'n1' left the fleet");
  EXPECT_EQ(WhyNotRestorable(s, TestCatalog()), "node 'n1' left the fleet");
  // A CPU-only instance names no model.
  StoredInstance cpu;
  cpu.instance.shape.vcpus = 4;
  EXPECT_EQ(WhyNotRestorable(cpu, TestCatalog()), "");
}

TEST(RecoveryTest, TheSummaryCountsEverything) {
  RecoveryReport r{2, 10, 6, 3, {"inst-000001: node 'n1' left the fleet"}};
  EXPECT_EQ(r.Summary(),
            "restored 2 tenant(s) and 10 instance(s): 6 holding capacity, 3 queued, 1 failed");
}

}  // namespace
}  // namespace tessera::core
