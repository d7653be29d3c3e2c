// What groups' services count: requests, those not served, latency buckets and the served rate.
#include "core/service_stats.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace tessera::core {
namespace {

TEST(ServiceStatsTest, CountsWhatWasServedAndWhatWasNotFromManyThreads) {
  ServiceStats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 250; ++i) stats.Record("grp-1", 0.003, false);
      for (int i = 0; i < 10; ++i) stats.Record("grp-1", 0, true);
    });
  }
  for (auto& t : threads) t.join();
  const auto all = stats.Snapshot();
  ASSERT_EQ(all.count("grp-1"), 1u);
  const ServiceStats::Group& g = all.at("grp-1");
  EXPECT_EQ(g.requests, 1040);
  EXPECT_EQ(g.failed, 40);
  EXPECT_EQ(g.buckets[1], 0) << "none at or under 2.5 ms";
  EXPECT_EQ(g.buckets[2], 1000) << "every served one at or under 5 ms";
  EXPECT_NEAR(g.seconds, 3.0, 1e-9);
  // Served requests over the seconds since the first (1 or 2 here), the refused not counted.
  EXPECT_GE(stats.Rate("grp-1"), 500.0);
  EXPECT_LE(stats.Rate("grp-1"), 1000.0);
  EXPECT_EQ(stats.Rate("grp-2"), 0.0);
  stats.Forget("grp-1");
  EXPECT_TRUE(stats.Snapshot().empty());
  EXPECT_EQ(stats.Rate("grp-1"), 0.0);
}

}  // namespace
}  // namespace tessera::core
