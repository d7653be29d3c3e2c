#include "sched/frag.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "sched/rng.h"
#include "sched/sched_testing.h"

namespace tessera::sched {
namespace {

using testing::Bit;

std::vector<int16_t> Free(std::initializer_list<int> v) {
  std::vector<int16_t> out;
  for (int x : v) out.push_back(static_cast<int16_t>(x));
  return out;
}

// A CPU-only class, a share class and a two-GPU class, each checked by hand.
Workload ThreeClasses(ModelMask share_models = 0) {
  return {{.cpu_milli = 4000, .gpu_count = 0, .gpu_milli = 0, .weight = 0.2},
          {.cpu_milli = 2000,
           .gpu_count = 1,
           .gpu_milli = 500,
           .allowed_models = share_models,
           .weight = 0.5},
          {.cpu_milli = 8000, .gpu_count = 2, .gpu_milli = 1000, .weight = 0.3}};
}

struct HandCase {
  const char* name;
  ModelMask share_models;
  int64_t cpu_free;
  std::vector<int16_t> free;
  double want;
};

TEST(FragTest, MatchesHandComputedValues) {
  const ModelMask t4 = Bit("T4"), v100 = Bit("V100M16");
  // Idle 2000 milli. CPU-only: all 2000 (x0.2 = 400). Share 500: GPUs 1000 and 700 fit, the
  // 300 and 0 left over are fragment (x0.5 = 150). Two whole GPUs: only one is free, so all 2000
  // (x0.3 = 600).
  const std::vector<HandCase> cases = {
      {"hosted share", 0, 6000, Free({1000, 300, 700, 0}), 400 + 150 + 600},
      {"share excludes the model", v100, 6000, Free({1000, 300, 700, 0}), 400 + 1000 + 600},
      {"share allows the model", t4 | v100, 6000, Free({1000, 300, 700, 0}), 400 + 150 + 600},
      // 1500 CPU: the share class lacks CPU, so all idle milli counts for it too.
      {"share lacks CPU", 0, 1500, Free({1000, 300, 700, 0}), 400 + 1000 + 600},
      // Two free GPUs and 8000 CPU host the two-GPU class; nothing partial is left.
      {"two GPUs hosted", 0, 8000, Free({1000, 1000}), 400 + 0 + 0},
      {"no idle GPU", 0, 8000, Free({0, 0}), 0},
      {"no GPUs", 0, 8000, Free({}), 0},
  };
  for (const HandCase& c : cases) {
    const Workload w = ThreeClasses(c.share_models);
    EXPECT_DOUBLE_EQ(NodeFragmentationMilli(w, t4, c.cpu_free, c.free), c.want) << c.name;
    EXPECT_DOUBLE_EQ(FragModel(w).NodeFrag(t4, c.cpu_free, c.free), c.want) << c.name;
  }
}

TEST(FragTest, CompiledModelIsBitIdenticalToTheReference) {
  Rng rng(7);
  const ModelMask models[] = {0, Bit("T4"), Bit("G2"), Bit("T4") | Bit("V100M32")};
  const int millis[] = {0, 50, 100, 250, 320, 470, 500, 650, 810, 1000};
  for (int round = 0; round < 200; ++round) {
    Workload w;
    const size_t classes = 1 + rng.Uniform(40);
    for (size_t i = 0; i < classes; ++i) {
      const int milli = millis[rng.Uniform(std::size(millis))];
      const int count = milli == 0 ? 0 : (milli < 1000 ? 1 : 1 + static_cast<int>(rng.Uniform(8)));
      w.push_back({.cpu_milli = static_cast<int64_t>(rng.Uniform(33)) * 1000,
                   .gpu_count = count,
                   .gpu_milli = milli,
                   .allowed_models = models[rng.Uniform(std::size(models))],
                   .weight = static_cast<double>(1 + rng.Uniform(1000)) / 997.0});
    }
    const FragModel model(w);
    for (int state = 0; state < 50; ++state) {
      std::vector<int16_t> free(rng.Uniform(9));
      for (int16_t& f : free) f = static_cast<int16_t>(rng.Uniform(1001));
      const int64_t cpu = static_cast<int64_t>(rng.Uniform(40000));
      const ModelMask node = ModelMask{1} << rng.Uniform(20);
      const double want = NodeFragmentationMilli(w, node, cpu, free);
      EXPECT_EQ(model.NodeFrag(node, cpu, free), want);  // Bitwise, not approximately.
      // F depends on the multiset of free milli only.
      std::reverse(free.begin(), free.end());
      EXPECT_EQ(model.NodeFrag(node, cpu, free), want);
    }
  }
}

TEST(FragTest, CpuChangeMattersOnlyAcrossAClassThreshold) {
  const FragModel model(ThreeClasses());  // Class CPU 2000, 4000, 8000.
  EXPECT_FALSE(model.CpuChangeMatters(7000, 5000));
  EXPECT_TRUE(model.CpuChangeMatters(9000, 7000));
  EXPECT_TRUE(model.CpuChangeMatters(8000, 7999));
  EXPECT_FALSE(model.CpuChangeMatters(8001, 8000));
  EXPECT_TRUE(model.CpuChangeMatters(1000, 2000));
  EXPECT_FALSE(FragModel({}).CpuChangeMatters(100000, 0));
}

TEST(FragTest, EmptyWorkloadHasNoFragmentation) {
  EXPECT_EQ(FragModel({}).NodeFrag(Bit("T4"), 1000, Free({1000, 500})), 0.0);
  EXPECT_TRUE(FragModel({}).empty());
}

}  // namespace
}  // namespace tessera::sched
