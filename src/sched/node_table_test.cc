#include "sched/node_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <vector>

#include "sched/frag.h"
#include "sched/sched_testing.h"

namespace tessera::sched {
namespace {

// The fleet-wide sums the table keeps as nodes change, against a scan of its own summaries.
void ExpectSumsMatchAScan(const NodeTable& t) {
  int64_t cpu = 0, gpu = 0;
  std::array<int64_t, 64> gpus{}, free{};
  for (uint32_t n = 0; n < t.size(); ++n) {
    cpu += std::max<int64_t>(0, t.fit(n).cpu_free);
    gpu += t.fit(n).gpu_free;
    if (t.fit(n).model_bit == 0) continue;
    const auto m = static_cast<size_t>(std::countr_zero(t.fit(n).model_bit));
    gpus[m] += t.gpus(n).count;
    free[m] += t.fit(n).gpu_free;
  }
  EXPECT_EQ(t.total_cpu_free(), cpu);
  EXPECT_EQ(t.total_gpu_free(), gpu);
  for (int m = 0; m < 64; ++m) {
    EXPECT_EQ(t.model_gpus(m), gpus[static_cast<size_t>(m)]) << m;
    EXPECT_EQ(t.model_gpu_free(m), free[static_cast<size_t>(m)]) << m;
  }
}

TEST(NodeTableTest, KeepsFleetWideSumsThroughAllocationsReleasesAndNewNodes) {
  auto fleet = testing::MakeFleet(
      {testing::SharedNode("a", "G2", 8, 96), testing::SharedNode("b", "T4", 2, 32),
       fleet::NodeSpec{.name = "cpu", .cpu_milli = 64000, .memory_mib = 65536}});
  const FragModel model{Workload{}};
  NodeTable t(fleet.get(), &model);
  ExpectSumsMatchAScan(t);
  EXPECT_EQ(t.total_gpu_free(), 10000);
  EXPECT_EQ(t.model_gpus(testing::TheCatalog().FindGpuIndex("T4")->value), 2);

  // A whole GPU and a 300-milli share on the G2 node, and most of the CPU-only node's CPU.
  fleet::Assignment a{
      .node = fleet::NodeIndex(0), .cpu_milli = 12000, .memory_mib = 1024, .gpu_count = 1};
  a.gpus[0] = {.gpu = 0, .milli = 1000};
  fleet::Assignment b{
      .node = fleet::NodeIndex(0), .cpu_milli = 4000, .memory_mib = 1024, .gpu_count = 1};
  b.gpus[0] = {.gpu = 1, .milli = 300};
  fleet::Assignment c{.node = fleet::NodeIndex(2), .cpu_milli = 60000, .memory_mib = 1024};
  for (const fleet::Assignment* x : {&a, &b, &c}) {
    const Status s = fleet->Allocate(*x);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  t.Sync();
  ExpectSumsMatchAScan(t);
  EXPECT_EQ(t.total_gpu_free(), 10000 - 1300);
  EXPECT_EQ(t.total_cpu_free(), 96000 - 16000 + 32000 + 64000 - 60000);

  ASSERT_TRUE(fleet->Release(a).ok());
  ASSERT_TRUE(fleet->Release(b).ok());
  ASSERT_TRUE(fleet->AddNode(testing::SharedNode("c", "T4", 4, 32)).ok());
  t.Sync();
  ExpectSumsMatchAScan(t);
  EXPECT_EQ(t.total_gpu_free(), 14000);
  EXPECT_EQ(t.model_gpus(testing::TheCatalog().FindGpuIndex("T4")->value), 6);
}

fleet::Assignment ShareOn(uint32_t node, int gpu, int milli) {
  fleet::Assignment a{
      .node = fleet::NodeIndex(node), .cpu_milli = 4000, .memory_mib = 1024, .gpu_count = 1};
  a.gpus[0] = {.gpu = gpu, .milli = milli};
  return a;
}

// In-use nodes in the same state are listed once, by their lowest-ranked member, in every list a
// request may read; a node that changes leaves its group, and the next-ranked member leads.
TEST(NodeTableTest, ListsOneLeadPerGroupOfInUseNodesInTheSameState) {
  auto fleet = testing::MakeFleet(
      {testing::SharedNode("a", "G2", 8, 96), testing::SharedNode("b", "G2", 8, 96),
       testing::SharedNode("c", "G2", 8, 96), testing::SharedNode("d", "G2", 8, 96)});
  const FragModel model{Workload{}};
  NodeTable t(fleet.get(), &model);
  t.SetRanks({3, 1, 2, 0});  // d, b, c, a from the lowest rank.
  for (uint32_t n : {0u, 1u, 2u}) ASSERT_TRUE(fleet->Allocate(ShareOn(n, 2, 300)).ok());
  t.Sync();
  const std::vector<uint32_t> b = {1};
  EXPECT_EQ(t.used().size(), 3u);
  EXPECT_EQ(t.used_leads(), b);
  EXPECT_EQ(t.share_leads(1000 / NodeTable::kShareBucketWidth), b);  // Whole GPUs remain.
  EXPECT_EQ(t.whole_leads(7), b);
  EXPECT_EQ(t.group(0), t.group(1));
  EXPECT_EQ(t.group(2), t.group(1));
  EXPECT_NE(t.group(3), t.group(1));  // d is idle.

  // b frees its share: c (rank 2) leads a and c. A tag sets a apart from c.
  ASSERT_TRUE(fleet->Release(ShareOn(1, 2, 300)).ok());
  t.Sync();
  EXPECT_EQ(t.used_leads(), std::vector<uint32_t>{2});
  t.AddTag(0, kShareTag, +1);
  std::vector<uint32_t> leads = t.used_leads();
  std::sort(leads.begin(), leads.end());
  EXPECT_EQ(leads, (std::vector<uint32_t>{0, 2}));
  EXPECT_NE(t.group(0), t.group(2));

  // When a group empties its id goes to the next new group, with a new generation.
  const uint32_t id = t.group(0), generation = t.group_generation(id);
  t.AddTag(0, kShareTag, -1);  // a rejoins c; its tagged group empties.
  EXPECT_EQ(t.group(0), t.group(2));
  ASSERT_TRUE(fleet->Allocate(ShareOn(2, 5, 100)).ok());
  t.Sync();
  EXPECT_EQ(t.group(2), id);
  EXPECT_NE(t.group_generation(id), generation);
  EXPECT_LE(t.group_ids(), t.size() + 1);
}

// Sync skips its scan when the fleet reports no change; a refresh after the scheduler's own
// booking must not hide a change made elsewhere in between.
TEST(NodeTableTest, SeesEveryChangeThoughItSkipsScansWhenNothingChanged) {
  auto fleet = testing::MakeFleet(
      {testing::SharedNode("a", "G2", 8, 96), testing::SharedNode("b", "G2", 8, 96)});
  const FragModel model{Workload{}};
  NodeTable t(fleet.get(), &model);
  EXPECT_FALSE(t.Sync());
  ASSERT_TRUE(fleet->Allocate(ShareOn(0, 0, 500)).ok());  // Outside the scheduler.
  ASSERT_TRUE(fleet->Allocate(ShareOn(1, 0, 200)).ok());  // The scheduler's own booking...
  t.Refresh(1);                                           // ...which it refreshes at once.
  t.Sync();
  EXPECT_EQ(t.fit(0).gpu_free, 7500);
  EXPECT_EQ(t.fit(1).gpu_free, 7800);
  ASSERT_TRUE(fleet->Allocate(ShareOn(1, 1, 200)).ok());  // The only change: no scan needed.
  t.Refresh(1);
  ASSERT_TRUE(fleet->Allocate(ShareOn(0, 1, 100)).ok());
  t.Sync();
  EXPECT_EQ(t.fit(0).gpu_free, 7400);
  EXPECT_EQ(t.fit(1).gpu_free, 7600);
}

}  // namespace
}  // namespace tessera::sched
