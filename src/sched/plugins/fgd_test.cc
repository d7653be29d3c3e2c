#include "sched/plugins/fgd.h"

#include <gtest/gtest.h>

#include "sched/sched_testing.h"

namespace tessera::sched {
namespace {

using catalog::SharingMode;

TEST(FgdTest, ScoreIsTruncatedSigmoidOfTheFragmentationDrop) {
  const struct {
    double before, after;
    int want;
  } cases[] = {
      {500, 500, 50},   // No change: exactly 50.
      {1500, 500, 73},  // sigmoid(1) = 0.731.
      {500, 1500, 26},  // sigmoid(-1) = 0.269.
      {100, 0, 52},     // sigmoid(0.1) = 0.525.
      {5000, 0, 99},    // Saturates.
      {0, 5000, 0},
      // A rounding-sized rise (1e-12 milli) already truncates to 49: why F must be computed in
      // the Go code's order, so that "no change" is bitwise no change.
      {1000, 1000 + 1e-12, 49},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(FgdScore(c.before, c.after), c.want) << c.before << " -> " << c.after;
  }
}

NodeGpus Gpus(std::initializer_list<int> free) {
  NodeGpus g;
  for (int f : free) {
    g.free[static_cast<size_t>(g.count)] = static_cast<int16_t>(f);
    g.mode[static_cast<size_t>(g.count++)] = SharingMode::kShared;
  }
  return g;
}

NodeFit Fit(int64_t cpu_free, const NodeGpus& g) {
  NodeFit f;
  f.cpu_free = cpu_free;
  f.model_bit = testing::Bit("G2");
  for (int i = 0; i < g.count; ++i) f.gpu_free += g.free[static_cast<size_t>(i)];
  return f;
}

TEST(FgdTest, ShareGoesWhereItRemovesFragment) {
  // One class: 600 milli on one GPU. GPU 1's 400 free milli are fragment (F = 400).
  const FragModel model({{.cpu_milli = 0, .gpu_count = 1, .gpu_milli = 600, .weight = 1}});
  const NodeGpus g = Gpus({1000, 400, 1000});
  const NodeFit fit = Fit(32000, g);
  const double before = model.NodeFrag(fit.model_bit, fit.cpu_free, {g.free.data(), 3});
  ASSERT_EQ(before, 400);
  // A 400-milli share on GPU 0 or 2 leaves F at 400 (score 50); on GPU 1 it takes the fragment
  // (F = 0, Δ = 400: sigmoid(0.4) = 0.599, score 59).
  const FgdChoice c = FgdNodeScore(Prepare(testing::Share(1000, 400)), model, fit, g, before);
  EXPECT_EQ(c.score, 59);
  EXPECT_EQ(c.gpu, 1);
  // A 100-milli share on GPU 1 shrinks its fragment to 300 (Δ = 100, sigmoid(0.1): 52).
  const FgdChoice d = FgdNodeScore(Prepare(testing::Share(1000, 100)), model, fit, g, before);
  EXPECT_EQ(d.score, 52);
  EXPECT_EQ(d.gpu, 1);
}

TEST(FgdTest, ShareAvoidsMakingFragmentAndTakesTheLowestIndexOnTies) {
  const FragModel model({{.cpu_milli = 0, .gpu_count = 1, .gpu_milli = 600, .weight = 1}});
  const NodeGpus g = Gpus({700, 1000, 700});
  const NodeFit fit = Fit(32000, g);
  ASSERT_EQ(model.NodeFrag(fit.model_bit, fit.cpu_free, {g.free.data(), 3}), 0);
  // 200 milli on a 700 GPU leaves 500, a fragment for the class (score 37); on the free GPU it
  // leaves 800 (score 50). Best fit would pick GPU 0; FGD picks GPU 1.
  const FgdChoice c = FgdNodeScore(Prepare(testing::Share(1000, 200)), model, fit, g, 0);
  EXPECT_EQ(c.score, 50);
  EXPECT_EQ(c.gpu, 1);
  // 50 milli scores 50 on every GPU: the lowest index wins.
  const FgdChoice d = FgdNodeScore(Prepare(testing::Share(1000, 50)), model, fit, g, 0);
  EXPECT_EQ(d.score, 50);
  EXPECT_EQ(d.gpu, 0);
}

TEST(FgdTest, CpuOnlyAndWholeGpuAfterStates) {
  // Classes: 4000 CPU with 1 whole GPU (w 0.5), 0 CPU with 500 milli (w 0.5).
  const FragModel model({{.cpu_milli = 4000, .gpu_count = 1, .gpu_milli = 1000, .weight = 0.5},
                         {.cpu_milli = 0, .gpu_count = 1, .gpu_milli = 500, .weight = 0.5}});
  const NodeGpus g = Gpus({1000, 300});
  const NodeFit fit = Fit(5000, g);
  const double before = model.NodeFrag(fit.model_bit, fit.cpu_free, {g.free.data(), 2});
  ASSERT_EQ(before, 0.5 * 300 + 0.5 * 300);
  // Taking 500 CPU keeps 4500 >= 4000: no class changes, exactly 50.
  EXPECT_EQ(FgdNodeScore(Prepare(testing::Cpu(500)), model, fit, g, before).score, 50);
  // Taking 2000 CPU leaves 3000: the whole-GPU class can no longer run, so all 1300 idle milli
  // count for it: F = 650 + 150 = 800, Δ = -500, sigmoid(-0.5) = 0.378.
  EXPECT_EQ(FgdNodeScore(Prepare(testing::Cpu(2000)), model, fit, g, before).score, 37);
  // Taking the free GPU leaves only the 300-milli GPU: F = 300, Δ = 0.
  EXPECT_EQ(FgdNodeScore(Prepare(testing::Whole(1000, 1)), model, fit, g, before).score, 50);
}

}  // namespace
}  // namespace tessera::sched
