// The autoscaler alone, at given instants: when an evaluation is due, HPA's rule (the tolerance,
// ceil, min and max), the scale-down window, the schedule's floor, and the owner's cap on pending
// work. The state's own tests (group_autoscale_test.cc) measure real members' readings.
#include "core/autoscaler.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

// 2026-12-07T10:00:00Z, a Monday.
const Time kMonday10 = Time(std::chrono::seconds(1'796'637'600));

// A group of `size` autoscaled on GPU utilization towards 50%, within [1, 10], with a 300 s
// scale-down window.
Group Autoscaled(int size) {
  Group g;
  g.id = "grp-000001";
  g.spec.size = size;
  Autoscale a;
  a.min = 1;
  a.max = 10;
  a.target = 50;
  g.spec.autoscale = a;
  return g;
}

TEST(AutoscalerTest, IsDueOnceAnInterval) {
  Autoscaler autoscaler(15s);
  EXPECT_TRUE(autoscaler.Due(kMonday10)) << "the first evaluation at once";
  EXPECT_FALSE(autoscaler.Due(kMonday10 + 14s));
  EXPECT_TRUE(autoscaler.Due(kMonday10 + 15s));
  EXPECT_FALSE(autoscaler.Due(kMonday10 + 16s)) << "counted from the last evaluation";
}

TEST(AutoscalerTest, FollowsHpasRuleWithinItsBounds) {
  const Autoscaler autoscaler(15s);
  Group g = Autoscaled(4);
  Autoscaler::Decision d = autoscaler.Decide(g, 54.0, std::nullopt, kMonday10);
  EXPECT_FALSE(d.resize) << "within 10% of the target";
  EXPECT_FALSE(d.audit);
  d = autoscaler.Decide(g, 80.0, std::nullopt, kMonday10 + 15s);
  EXPECT_TRUE(d.resize);
  EXPECT_EQ(d.to, 7) << "ceil(4 x 80 / 50)";
  EXPECT_EQ(g.decision, "4 -> 7: gpu_util 80.0 against a target of 50 over 4 member(s)");
  EXPECT_EQ(g.scale_ups, 1);
  d = autoscaler.Decide(g, 1e12, std::nullopt, kMonday10 + 30s);
  EXPECT_EQ(d.to, 10) << "never above max, even for a reading no int holds";
  d = autoscaler.Decide(g, std::nullopt, std::nullopt, kMonday10 + 45s);
  EXPECT_FALSE(d.resize) << "no readings: the size stays";
}

TEST(AutoscalerTest, ScalesDownOnlyToTheHighestRecommendationOfItsWindow) {
  const Autoscaler autoscaler(15s);
  Group g = Autoscaled(8);
  EXPECT_FALSE(autoscaler.Decide(g, 50.0, std::nullopt, kMonday10).resize) << "recommends 8";
  Autoscaler::Decision d = autoscaler.Decide(g, 10.0, std::nullopt, kMonday10 + 60s);
  EXPECT_FALSE(d.resize) << "8 was recommended within the last 300 s";
  EXPECT_EQ(g.desired, 8);
  d = autoscaler.Decide(g, 10.0, std::nullopt, kMonday10 + 301s);
  EXPECT_TRUE(d.resize);
  EXPECT_EQ(d.to, 2) << "ceil(8 x 10 / 50), the window's highest once 8 left it";
  EXPECT_EQ(g.scale_downs, 1);
  // After a restart (no window remembered), no scale-down until a window has passed.
  Group restarted = Autoscaled(8);
  restarted.scale_down_after = kMonday10 + 300s;
  EXPECT_FALSE(autoscaler.Decide(restarted, 10.0, std::nullopt, kMonday10).resize);
}

TEST(AutoscalerTest, TheLatestScheduleEntrySetsTheFloor) {
  const Autoscaler autoscaler(15s);
  Group g = Autoscaled(6);
  g.spec.autoscale->schedule = {{*Cron::Parse("0 9 * * 1-5"), 5}, {*Cron::Parse("0 18 * * *"), 1}};
  g.spec.autoscale->scale_down_stabilization_seconds = 0;
  Autoscaler::Decision d = autoscaler.Decide(g, 5.0, std::nullopt, kMonday10);
  EXPECT_EQ(d.to, 5) << "idle, but 09:00's entry holds 5";
  EXPECT_EQ(g.floor, 5);
  EXPECT_NE(g.decision.find("schedule '0 9 * * 1-5' sets the floor to 5"), std::string::npos)
      << g.decision;
  g.spec.size = 5;
  d = autoscaler.Decide(g, 5.0, std::nullopt, kMonday10 + 9h);  // 19:00: 18:00's entry.
  EXPECT_EQ(d.to, 1);
}

TEST(AutoscalerTest, AtItsOwnersPendingCapItGrowsOnlyIntoTheRoomLeftAndSaysSoOnce) {
  const Autoscaler autoscaler(15s);
  Group g = Autoscaled(2);
  const Autoscaler::Room room{1, 9, 10};
  Autoscaler::Decision d = autoscaler.Decide(g, 100.0, room, kMonday10);
  EXPECT_TRUE(d.resize);
  EXPECT_EQ(d.to, 3) << "wants 4, room for 1";
  EXPECT_NE(g.decision.find("held at 3 by its owner's cap on pending instances (9 pending, cap "
                            "10)"),
            std::string::npos)
      << g.decision;
  g.spec.size = 3;
  const Autoscaler::Room full{0, 10, 10};
  d = autoscaler.Decide(g, 100.0, full, kMonday10 + 15s);
  EXPECT_FALSE(d.resize);
  EXPECT_TRUE(d.audit) << "a new hold is said";
  EXPECT_EQ(g.desired, 6);
  d = autoscaler.Decide(g, 100.0, full, kMonday10 + 30s);
  EXPECT_FALSE(d.audit) << "and not again while it stays held";
}

}  // namespace
}  // namespace tessera::core
