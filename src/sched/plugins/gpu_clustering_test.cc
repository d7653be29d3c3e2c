#include "sched/plugins/gpu_clustering.h"

#include <gtest/gtest.h>

namespace tessera::sched {
namespace {

NodeTags Tags(std::initializer_list<std::pair<int, uint32_t>> counts) {
  NodeTags t;
  for (auto [tag, n] : counts) {
    t.count[static_cast<size_t>(tag)] = n;
    t.kinds += n > 0 ? 1 : 0;
  }
  return t;
}

TEST(GpuClusteringTest, FourTiersThenFullerFirst) {
  const NodeTags none = Tags({}), shares = Tags({{kShareTag, 3}}),
                 mixed = Tags({{kShareTag, 1}, {1, 2}}), whole = Tags({{1, 4}});
  const struct {
    const char* name;
    int tag;
    NodeTags tags;
    int64_t gpu_free;
    int want;
  } cases[] = {
      // f = int(25 * (8000 - free) / 8000).
      {"only its own tag", kShareTag, shares, 6000, 75 + 6},
      {"its tag among others", kShareTag, mixed, 2000, 50 + 18},
      {"no GPU workloads", kShareTag, none, 8000, 25 + 0},
      {"only other tags", kShareTag, whole, 4000, 0 + 12},
      {"k-gpu tag matches", 1, whole, 0, 75 + 25},
      {"2-gpu is another tag than 1-gpu", 2, whole, 4000, 12},
      {"small node: f counts against 8 GPUs", 1, none, 2000, 25 + 18},
      {"CPU-only scores 0", kNoTag, shares, 0, 0},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(GpuClusteringScore(c.tag, c.tags, c.gpu_free), c.want) << c.name;
  }
}

TEST(GpuClusteringTest, TagsOfRequests) {
  EXPECT_EQ(TagOf(0, 0, false), kNoTag);
  EXPECT_EQ(TagOf(1, 470, false), kShareTag);
  EXPECT_EQ(TagOf(1, 1000, false), 1);
  EXPECT_EQ(TagOf(8, 1000, false), 8);
  EXPECT_EQ(TagOf(1, 0, true), kMigTag);
}

}  // namespace
}  // namespace tessera::sched
