#include "sched/plugins/sole_tenant.h"

#include <gtest/gtest.h>

#include "sched/fit.h"
#include "sched/sched_testing.h"

namespace tessera::sched {
namespace {

using testing::SharedNode;

TEST(SoleTenantTest, ASharedNodeAdmitsOnlyTheSourceThatHoldsIt) {
  const struct {
    bool shared;
    std::vector<uint32_t> holders;
    uint32_t source;
    bool admits;
  } cases[] = {
      {false, {}, 7, true},  // Not shared: anyone.
      {false, {1, 2}, 7, true},
      {true, {}, 7, true},      // Shared and empty: anyone.
      {true, {7, 7}, 7, true},  // Shared, its own work only.
      {true, {1}, 7, false},    // Shared, another's work.
      {true, {7, 1}, 7, false},
      {true, {1}, 0, true},  // No source: a capacity check, never refused.
  };
  for (const auto& c : cases) {
    SoleTenantFilter f;
    f.SetShared(fleet::NodeIndex(3), c.shared);
    for (uint32_t h : c.holders) f.Hold(fleet::NodeIndex(3), h);
    EXPECT_EQ(f.Admits(3, c.source), c.admits)
        << "shared " << c.shared << ", " << c.holders.size() << " held, source " << c.source;
    EXPECT_TRUE(f.Admits(2, c.source)) << "an unknown node is not shared";
    EXPECT_EQ(f.ClosedTo(c.source), c.admits ? 0u : 1u);
  }
}

TEST(SoleTenantTest, ReleasingTheLastPieceReopensTheNodeAndSharingCanChange) {
  SoleTenantFilter f;
  const fleet::NodeIndex n(0);
  f.Hold(n, 1);
  f.Hold(n, 1);
  EXPECT_TRUE(f.Admits(0, 2)) << "not shared yet";
  Need need;
  need.source = 2;
  EXPECT_FALSE(f.NeedsEveryNode(need));
  f.SetShared(n, true);
  EXPECT_FALSE(f.Admits(0, 2));
  EXPECT_TRUE(f.NeedsEveryNode(need));
  need.source = 0;
  EXPECT_FALSE(f.NeedsEveryNode(need)) << "a request of no source is never refused";
  f.Release(n, 1);
  EXPECT_FALSE(f.Admits(0, 2)) << "one piece of source 1's work is still there";
  f.Release(n, 1);
  EXPECT_TRUE(f.Admits(0, 2));
  need.source = 2;
  EXPECT_FALSE(f.NeedsEveryNode(need));
  f.Hold(n, 2);
  f.SetShared(n, false);
  EXPECT_TRUE(f.Admits(0, 3));
  EXPECT_FALSE(f.NeedsEveryNode(need));
}

// Two nodes in the same state, each held by another source: the node table groups them and a
// decision normally looks at the group's lead only. The filter must still find each source its
// own node, and refuse a third source both.
TEST(SoleTenantTest, SourcesFindTheirOwnNodeAmongIdenticalNodes) {
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 4, 32), SharedNode("b", "T4", 4, 32)});
  auto made = Scheduler::Create(fleet.get(), {"bestfit", 42, {}});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Scheduler& s = **made;
  auto* f = static_cast<SoleTenantFilter*>(s.AddFilter(std::make_unique<SoleTenantFilter>()));
  f->SetShared(fleet::NodeIndex(0), true);
  f->SetShared(fleet::NodeIndex(1), true);
  auto place = [&](uint32_t source) {
    Request r = testing::Whole(1000, 1);
    r.source = source;
    auto a = s.Schedule(r);
    if (a) f->Hold(a->node, source);
    return a;
  };
  auto first = place(1);
  ASSERT_TRUE(first);
  auto second = place(2);
  ASSERT_TRUE(second);
  EXPECT_NE(first->node, second->node) << "a shared node holding source 1's work is closed to 2";
  // The nodes are in the same state now, so the table lists one of them for both: whichever it
  // is, each source, tried from this state, finds its own node.
  for (uint32_t source : {1u, 2u}) {
    auto a = place(source);
    ASSERT_TRUE(a) << "source " << source;
    EXPECT_EQ(a->node, source == 1 ? first->node : second->node);
    ASSERT_TRUE(s.Release(*a).ok());
    f->Release(a->node, source);
  }
  EXPECT_FALSE(place(3)) << "both nodes are held by other sources";
  Request r = testing::Whole(1000, 1);
  r.source = 3;
  EXPECT_FALSE(s.ScheduleOn(r, first->node));
  r.source = 0;
  EXPECT_TRUE(s.ScheduleOn(r, first->node)) << "a request of no source is not refused";
  ASSERT_TRUE(s.Release(*first).ok());
  f->Release(first->node, 1);
  auto third = place(3);
  ASSERT_TRUE(third) << "source 1's node is empty again";
  EXPECT_EQ(third->node, first->node);
}

}  // namespace
}  // namespace tessera::sched
