#include "sched/plugins/bestfit.h"

#include <gtest/gtest.h>

namespace tessera::sched {
namespace {

TEST(BestFitTest, ScoreFollowsTheFormula) {
  const struct {
    int64_t cpu_free, gpu_free, cpu_req, gpu_req;
    int want;
  } cases[] = {
      // 100 * (1 - [0.5 * 84000/128000 + 0.5 * 7000/8000]) = 100 * (1 - 0.765625) = 23.4375.
      {96000, 8000, 12000, 1000, 23},
      // Leaves half of each: exactly 50.
      {96000, 6000, 32000, 2000, 50},
      // Leaves nothing: 100. Leaves a whole 128-vCPU, 8-GPU node: 0.
      {12000, 500, 12000, 500, 100},
      {140000, 9000, 12000, 1000, 0},
      // A CPU-only request on a node without idle GPU: 100 * (1 - 0.5 * 4000/128000) = 98.4375.
      {8000, 0, 4000, 0, 98},
      // On an exact boundary the float arithmetic lands just below 45, where exact arithmetic
      // gives 45: 100 * (1 - [0.5 * 16000/128000 + 0.5 * 7800/8000]) = 45. Go truncates to 44.
      {17000, 7800, 1000, 0, 44},
      {24000, 7900, 8000, 100, 44},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(BestFitScore(c.cpu_free, c.gpu_free, c.cpu_req, c.gpu_req), c.want)
        << c.cpu_free << " " << c.gpu_free << " " << c.cpu_req << " " << c.gpu_req;
  }
}

TEST(BestFitTest, FastPathAgreesWithFloatArithmeticEverywhere) {
  for (int64_t cpu = 0; cpu <= 128000; cpu += 500) {
    for (int64_t gpu = 0; gpu <= 8000; gpu += 50) {
      const int64_t cpu_req = 4000, gpu_req = 0;
      double s = 0;
      s += (static_cast<double>(cpu) - static_cast<double>(cpu_req)) / 128000.0 * 0.5;
      s += (static_cast<double>(gpu) - static_cast<double>(gpu_req)) / 8000.0 * 0.5;
      const auto want = static_cast<int>(static_cast<int64_t>((1.0 - s) * 100.0));
      ASSERT_EQ(BestFitScore(cpu, gpu, cpu_req, gpu_req), want) << cpu << " " << gpu;
    }
  }
}

}  // namespace
}  // namespace tessera::sched
