#include "sched/plugins/dotprod.h"

#include <gtest/gtest.h>

namespace tessera::sched {
namespace {

TEST(DotProductTest, ScoreFollowsTheFormula) {
  const struct {
    int64_t cpu_free, gpu_free, cpu_req, gpu_req;
    int want;
  } cases[] = {
      // dot = 0.75 * 0.09375 + 1 * 0.125 = 0.1953125; 100 * (1 - dot/2) = 90.234375.
      {96000, 8000, 12000, 1000, 90},
      // dot = 0.5 * 0.5 + 0.5 * 0.5 = 0.5: exactly 75.
      {64000, 4000, 64000, 4000, 75},
      // CPU-only: dot = 0.125 * 0.0625; 100 * (1 - 0.00390625) = 99.609375.
      {16000, 8000, 8000, 0, 99},
      // Full node, full request: dot = 2, score 0.
      {128000, 8000, 128000, 8000, 0},
      // Less free CPU scores higher: the rule packs.
      {8000, 0, 8000, 0, 99},
      {128000, 0, 8000, 0, 96},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(DotProductScore(c.cpu_free, c.gpu_free, c.cpu_req, c.gpu_req), c.want)
        << c.cpu_free << " " << c.gpu_free << " " << c.cpu_req << " " << c.gpu_req;
  }
}

TEST(DotProductTest, FastPathAgreesWithFloatArithmeticEverywhere) {
  for (int64_t cpu = 0; cpu <= 128000; cpu += 1000) {
    for (int64_t gpu = 0; gpu <= 8000; gpu += 100) {
      for (int64_t gpu_req : {0, 500, 2000}) {
        const int64_t cpu_req = 16000;
        double dot = 0;
        dot += static_cast<double>(cpu) / 128000 * (static_cast<double>(cpu_req) / 128000);
        dot += static_cast<double>(gpu) / 8000 * (static_cast<double>(gpu_req) / 8000);
        const auto want = static_cast<int>(static_cast<int64_t>(100.0 * (1 - dot / 2)));
        ASSERT_EQ(DotProductScore(cpu, gpu, cpu_req, gpu_req), want) << cpu << " " << gpu;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::sched
