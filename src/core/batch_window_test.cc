// The batch window on a fake clock, alone: when what it holds is due (full, waited long enough,
// or a clock stepped back), what a deleted create leaves, and that it hands its ids over once.
// The state's own tests (BatchWindowTest in instance_service_test.cc) check the order they are
// placed in.
#include "core/batch_window.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

TEST(BatchWindowAloneTest, IsDueWhenFullOrOnceTheFirstHasWaited) {
  FakeClock clock;
  BatchWindow window(clock, 3, 200ms);
  EXPECT_TRUE(window.enabled());
  EXPECT_EQ(window.DueIn(), Duration::max()) << "nothing held, nothing due";
  window.Hold("inst-000001");
  clock.Advance(50ms);
  window.Hold("inst-000002");
  EXPECT_EQ(window.DueIn(), 150ms) << "counted from the first";
  EXPECT_TRUE(window.TakeDue().empty()) << "not before it is due";
  EXPECT_TRUE(window.Holds("inst-000002"));
  window.Hold("inst-000003");
  EXPECT_EQ(window.DueIn(), Duration::zero()) << "full";
  EXPECT_EQ(window.TakeDue(),
            (std::vector<std::string>{"inst-000001", "inst-000002", "inst-000003"}));
  EXPECT_TRUE(window.empty());
  EXPECT_FALSE(window.Holds("inst-000001"));
  EXPECT_TRUE(window.TakeDue().empty()) << "handed over once";

  window.Hold("inst-000004");
  clock.Advance(199ms);
  EXPECT_EQ(window.DueIn(), 1ms) << "a new window's time starts with its first";
  clock.Advance(1ms);
  EXPECT_EQ(window.TakeDue(), std::vector<std::string>{"inst-000004"});
}

TEST(BatchWindowAloneTest, ADeletedCreateStopsCountingAndABackwardClockClosesTheWindow) {
  FakeClock clock;
  BatchWindow window(clock, 2, 200ms);
  window.Hold("inst-000001");
  window.Forget("inst-000001");
  EXPECT_TRUE(window.empty());
  window.Hold("inst-000002");
  window.Hold("inst-000003");
  window.Forget("inst-000002");
  EXPECT_EQ(window.DueIn(), 200ms) << "one of two: not full";
  clock.Advance(-1s);  // NTP steps the wall clock back.
  EXPECT_EQ(window.DueIn(), Duration::zero()) << "never held shut";
  EXPECT_EQ(window.TakeDue(), std::vector<std::string>{"inst-000003"});
}

TEST(BatchWindowAloneTest, ItsReasonNamesItsSizeAndWaitAndAWindowOfOneIsOff) {
  FakeClock clock;
  EXPECT_EQ(BatchWindow(clock, 8, 200ms).Reason(),
            "in the batch window: placed with up to 7 others within 200 ms");
  EXPECT_FALSE(BatchWindow(clock, 1, 200ms).enabled());
}

}  // namespace
}  // namespace tessera::core
