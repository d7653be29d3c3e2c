#include "sim/protocol.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace tessera::sim {
namespace {

Pod MakePod(std::string name, int num_gpu, int gpu_milli) {
  Pod p;
  p.name = std::move(name);
  p.cpu_milli = 1000;
  p.memory_mib = 1024;
  p.num_gpu = num_gpu;
  p.gpu_milli = gpu_milli;
  return p;
}

std::vector<Pod> Shares(int n, int milli) {
  std::vector<Pod> pods;
  for (int i = 0; i < n; ++i) pods.push_back(MakePod("pod-" + std::to_string(i), 1, milli));
  return pods;
}

TEST(UniformBelowTest, StaysInRangeAndCoversIt) {
  std::mt19937_64 rng(7);
  std::vector<int> hits(6);
  for (int i = 0; i < 6000; ++i) {
    const uint64_t v = UniformBelow(rng, 6);
    ASSERT_LT(v, 6u);
    ++hits[v];
  }
  for (int h : hits) EXPECT_GT(h, 850);
}

TEST(TuneUpTest, OriginalsComeFirstEachOnceThenCopies) {
  const auto trace = Shares(20, 500);  // 10,000 milli.
  auto order = BuildArrivalOrder(trace, 30'000, 42);
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  ASSERT_GT(order->pods.size(), 20u);
  std::set<uint32_t> first(order->pods.begin(), order->pods.begin() + 20);
  EXPECT_EQ(first.size(), 20u);
  EXPECT_EQ(order->copies, static_cast<int64_t>(order->pods.size()) - 20);
  EXPECT_EQ(order->removed, 0);
}

TEST(TuneUpTest, StopsAtTheFirstDrawThatWouldPassTheTarget) {
  const auto trace = Shares(4, 500);  // 2,000 milli.
  // 10,000 + 500 > 10,250: the draw that would make 10,500 is discarded.
  auto below = BuildArrivalOrder(trace, 10'250, 1);
  ASSERT_TRUE(below.ok());
  EXPECT_EQ(below->demand_milli, 10'000);
  EXPECT_EQ(below->copies, 16);
  // The test is strict: landing exactly on the target is accepted.
  auto exact = BuildArrivalOrder(trace, 10'500, 1);
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->demand_milli, 10'500);
}

TEST(TuneUpTest, MultiGpuCopiesAreTestedWithTheirPerGpuMilli) {
  // One 8-GPU pod: 8,000 + 1,000 <= 10,000 accepts a copy, which adds 8,000.
  const std::vector<Pod> trace = {MakePod("big", 8, 1000)};
  auto order = BuildArrivalOrder(trace, 10'000, 3);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->demand_milli, 16'000);
  EXPECT_EQ(order->pods.size(), 2u);
}

TEST(TuneUpTest, CpuOnlyDrawsAreKeptAndDemandStillReachesTheTarget) {
  auto trace = Shares(5, 1000);
  for (int i = 0; i < 5; ++i) trace.push_back(MakePod("cpu-" + std::to_string(i), 0, 0));
  auto order = BuildArrivalOrder(trace, 20'000, 9);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->demand_milli, 20'000);
  const auto cpu_only = std::count_if(order->pods.begin(), order->pods.end(),
                                      [&](uint32_t i) { return trace[i].num_gpu == 0; });
  EXPECT_GT(cpu_only, 5);  // Copies of CPU-only pods were appended too (about 15 expected).
}

TEST(TuneUpTest, ATraceWithoutGpuPodsCannotBeTunedUp) {
  const std::vector<Pod> trace = {MakePod("cpu", 0, 0)};
  auto order = BuildArrivalOrder(trace, 1000, 1);
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.status().message().find("no pod asks for a GPU"), std::string::npos);
}

TEST(TuneDownTest, RemovesRandomPodsWhileDemandIsAboveTheTarget) {
  const auto trace = Shares(10, 1000);  // 10,000 milli.
  auto order = BuildArrivalOrder(trace, 5'500, 42);
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->demand_milli, 5'000);
  EXPECT_EQ(order->removed, 5);
  EXPECT_EQ(order->copies, 0);
  std::set<uint32_t> kept(order->pods.begin(), order->pods.end());
  EXPECT_EQ(kept.size(), 5u);
}

TEST(OrderTest, DependsOnNamesAndSeedNotOnFileOrder) {
  auto trace = Shares(50, 100);
  auto reversed = trace;
  std::reverse(reversed.begin(), reversed.end());
  auto a = BuildArrivalOrder(trace, 5'000, 42);
  auto b = BuildArrivalOrder(reversed, 5'000, 42);
  auto c = BuildArrivalOrder(trace, 5'000, 43);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  std::vector<std::string> na, nb, nc;
  for (uint32_t i : a->pods) na.push_back(trace[i].name);
  for (uint32_t i : b->pods) nb.push_back(reversed[i].name);
  for (uint32_t i : c->pods) nc.push_back(trace[i].name);
  EXPECT_EQ(na, nb);
  EXPECT_NE(na, nc);
  // Shuffled: not simply name order.
  EXPECT_FALSE(std::is_sorted(na.begin(), na.end()));
}

}  // namespace
}  // namespace tessera::sim
