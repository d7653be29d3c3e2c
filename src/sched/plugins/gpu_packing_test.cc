#include "sched/plugins/gpu_packing.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::sched {
namespace {

TEST(GpuPackingTest, SharedGpusThenUsedNodesThenSmallEmptyNodes) {
  const struct {
    const char* name;
    std::vector<int16_t> free;
    int milli, count;
    int want;
  } cases[] = {
      {"empty 8-GPU node", {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, 500, 1, 25},
      {"empty 4-GPU node", {1000, 1000, 1000, 1000}, 1000, 1, 29},
      {"empty 2-GPU node", {1000, 1000}, 1000, 2, 31},
      {"empty 1-GPU node", {1000}, 500, 1, 32},
      // Ascending free milli: 0, 500, 1000, 1000; a whole GPU takes a fully free one.
      {"whole GPU on a used node", {1000, 500, 1000, 0}, 1000, 1, 49},
      {"two whole GPUs on a used node", {1000, 500, 1000, 0}, 1000, 2, 48},
      // The tightest GPU that fits: 500 -> 100 - floor(500 * 100 / 1000) / 10 = 95.
      {"share on a shared GPU", {1000, 500, 1000, 0}, 300, 1, 95},
      {"share on a nearly full GPU", {320, 1000}, 300, 1, 97},
      {"share must take a free GPU", {500, 1000, 1000}, 600, 1, 49},
      {"does not fit", {500, 400}, 600, 1, -1},
      {"CPU-only", {1000, 1000}, 0, 0, 0},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(GpuPackingScore(c.free, c.milli, c.count), c.want) << c.name;
  }
}

}  // namespace
}  // namespace tessera::sched
