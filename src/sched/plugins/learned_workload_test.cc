#include "sched/plugins/learned_workload.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::sched {
namespace {

Need Of(Kind kind, int64_t cpu, int milli, int count, ModelMask mask) {
  Need n;
  n.kind = kind;
  n.cpu = cpu;
  n.milli = milli;
  n.count = count;
  n.mask = mask;
  return n;
}
Need CpuOnly(int64_t cpu) { return Of(Kind::kCpuOnly, cpu, 0, 0, 0); }
Need Share(int64_t cpu, int milli, ModelMask mask = 0) {
  return Of(Kind::kShare, cpu, milli, 1, mask);
}
Need Whole(int64_t cpu, int gpus, ModelMask mask = 0) {
  return Of(Kind::kWhole, cpu, 1000, gpus, mask);
}

// The weight the model gives the class (cpu, milli, count), 0 when it is not in the model.
double WeightOf(const LearnedWorkload& w, int64_t cpu, int milli, int count) {
  for (const WorkloadClass& c : w.workload()) {
    if (c.cpu_milli == cpu && c.gpu_milli == milli && c.gpu_count == count) return c.weight;
  }
  return 0;
}

TEST(LearnedWorkloadTest, HoleWasteIsWhatFillersDrawnFromTheSizesSeenLeaveBehind) {
  // Only 600-milli shares: a hole below 600 stays as it is; 1000 free ends with 400 wasted.
  const std::vector<double> sixes = HoleWaste({{600, 5}});
  EXPECT_DOUBLE_EQ(sixes[0], 0);
  EXPECT_DOUBLE_EQ(sixes[599], 599);
  EXPECT_DOUBLE_EQ(sixes[600], 0);
  EXPECT_DOUBLE_EQ(sixes[750], 150);
  EXPECT_DOUBLE_EQ(sixes[1000], 400);
  // 500s and 250s tile a GPU exactly: no hole of a multiple of 250 wastes anything.
  const std::vector<double> tiles = HoleWaste({{500, 1}, {250, 1}});
  EXPECT_DOUBLE_EQ(tiles[1000], 0);
  EXPECT_DOUBLE_EQ(tiles[750], 0);
  EXPECT_DOUBLE_EQ(tiles[300], 50);
  EXPECT_DOUBLE_EQ(tiles[100], 100);
  // Weights matter: a 700 (leaving 300 a 250 fills to 50) drawn three times as often as a 250
  // (whose leftovers tile on): W(1000) = 3/4 * W(300) + 1/4 * W(750).
  const std::vector<double> mix = HoleWaste({{700, 3}, {250, 1}});
  EXPECT_DOUBLE_EQ(mix[300], 50);
  EXPECT_DOUBLE_EQ(mix[1000], 0.75 * mix[300] + 0.25 * mix[750]);
  // Nothing seen yet: every hole stays.
  EXPECT_DOUBLE_EQ(HoleWaste({})[420], 420);
}

TEST(LearnedWorkloadTest, LearnsTheClassesAndSumsOfWhatItIsShown) {
  LearnedWorkload w;
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(w.Add(i % 4 == 0 ? CpuOnly(2000) : Share(4000, 500), 0), i == 0) << i;
  }
  EXPECT_TRUE(w.Add(Whole(8000, 2), 0));  // The 65th request rebuilds the model.
  // 48 shares, 16 CPU-only and one pair of GPUs: the pair is the 5% left out.
  EXPECT_DOUBLE_EQ(WeightOf(w, 4000, 500, 1), 0.75);
  EXPECT_DOUBLE_EQ(WeightOf(w, 2000, 0, 0), 0.25);
  EXPECT_EQ(WeightOf(w, 8000, 1000, 2), 0);
  const LearnedSums s = w.sums();
  EXPECT_EQ(s.cpu, 16 * 2000 + 48 * 4000 + 8000);
  EXPECT_EQ(s.gpu_milli, 48 * 500 + 2000);
  EXPECT_EQ(s.gpu_request_cpu, 48 * 4000 + 8000);
  // MIG requests are not counted.
  EXPECT_FALSE(w.Add(Of(Kind::kMig, 1000, 0, 1, 0), 0));
  EXPECT_EQ(w.sums().cpu, s.cpu);
}

// Whatever arrives, the tables stay at their caps, and what is frequent stays in the model.
TEST(LearnedWorkloadTest, StaysWithinItsCapsWhateverItIsShown) {
  const struct {
    std::string name;
    Need (*make)(int i);
    uint32_t (*source)(int i);
    size_t classes, pinned, sources;  // What must be held after 20,000 requests.
  } cases[] = {
      {"distinct cpu sizes", [](int i) { return CpuOnly(1000 + i); }, [](int) { return 0u; },
       LearnedWorkload::kMaxClasses, 0, 1},
      {"distinct shares pinned to distinct model sets",
       [](int i) { return Share(2000 + i, 1 + i % 999, static_cast<ModelMask>(i) + 1); },
       [](int) { return 0u; }, LearnedWorkload::kMaxClasses, LearnedWorkload::kMaxPinned, 1},
      {"a new source each request", [](int) { return Whole(4000, 1); },
       [](int i) { return static_cast<uint32_t>(i); }, LearnedWorkload::kMaxClasses, 0,
       LearnedWorkload::kMaxSources},
      {"few classes, another source", [](int i) { return Share(1000, 100 * (1 + i % 3)); },
       [](int) { return 1u; }, 2, 0, 2},
  };
  for (const auto& c : cases) {
    LearnedWorkload w;
    for (int i = 0; i < 20000; ++i) {
      // Every third request is the same whole GPU: it must stay the model's heaviest class.
      w.Add(i % 3 == 0 ? Whole(16000, 1) : c.make(i), i % 3 == 0 ? 0 : c.source(i));
    }
    EXPECT_EQ(w.classes(), std::min(c.classes + 1, LearnedWorkload::kMaxClasses)) << c.name;
    EXPECT_EQ(w.pinned(), c.pinned) << c.name;
    EXPECT_EQ(w.sources(), c.sources) << c.name;
    ASSERT_FALSE(w.workload().empty()) << c.name;
    EXPECT_EQ(w.workload()[0].cpu_milli, 16000) << c.name;
  }
}

// The heaviest source counts at most as much as all the others together.
TEST(LearnedWorkloadTest, NoSourceOutweighsAllTheOthersTogether) {
  const struct {
    std::string name;
    int first_only;              // Requests from source 1 alone, first.
    std::vector<int> per_round;  // Then, per round, requests from source i + 1 (its own class).
    int rounds;
    double share_of_1;  // Source 1's share of the model's weight.
  } cases[] = {
      {"one source", 0, {10}, 100, 1.0},
      {"two even sources", 0, {5, 5}, 100, 0.5},
      {"one source sending 100x the other", 0, {100, 1}, 100, 0.5},
      {"one source sending 100x two others", 0, {100, 1, 1}, 100, 0.5},
      {"a second source after 2,000 requests", 2000, {1, 1}, 2000, 0.5},
      {"the heaviest under half", 0, {4, 3, 3}, 100, 0.4},
  };
  for (const auto& c : cases) {
    LearnedWorkload w;
    for (int i = 0; i < c.first_only; ++i) w.Add(CpuOnly(1000), 1);
    for (int round = 0; round < c.rounds; ++round) {
      for (size_t s = 0; s < c.per_round.size(); ++s) {
        for (int i = 0; i < c.per_round[s]; ++i) {
          w.Add(CpuOnly(1000 * static_cast<int64_t>(s + 1)), static_cast<uint32_t>(s + 1));
        }
      }
    }
    EXPECT_NEAR(w.Share(1), c.share_of_1, 0.001) << c.name;
    // The model, as of its last rebuild (late in the rounds), weighs classes alike: source 1
    // sends only the 1000-milli class.
    EXPECT_NEAR(WeightOf(w, 1000, 0, 0), c.share_of_1, 0.02) << c.name;
  }
}

TEST(LearnedWorkloadTest, WeighsTheHeaviestSourcesSumsAndPinnedDemandAlike) {
  LearnedWorkload w;
  const ModelMask t4 = 1;
  for (int i = 0; i < 100; ++i) w.Add(Whole(1000, 1, t4), 7);  // Source 7: 100 pinned GPUs.
  w.Add(Whole(3000, 1), 9);                                    // Source 9: one unpinned GPU.
  // Source 7 weighs 1/100 a request: it counts as one request, as much as source 9.
  const LearnedSums s = w.sums();
  EXPECT_DOUBLE_EQ(s.cpu, 100 * 1000 * 0.01 + 3000);
  EXPECT_DOUBLE_EQ(s.gpu_milli, 100 * 1000 * 0.01 + 1000);
  EXPECT_DOUBLE_EQ(s.gpu_request_cpu, s.cpu);
  double pinned = 0;
  w.ForEachPinned([&](ModelMask mask, double milli) {
    EXPECT_EQ(mask, t4);
    pinned += milli;
  });
  EXPECT_DOUBLE_EQ(pinned, 1000);
  EXPECT_DOUBLE_EQ(w.Share(7), 0.5);
  EXPECT_DOUBLE_EQ(w.Share(9), 0.5);
  EXPECT_EQ(w.Share(8), 0);  // Never seen.
}

TEST(LearnedWorkloadTest, OneSourceIsNeverWeighedDown) {
  // The simulator sends everything as source 0: what it learns must not depend on sources.
  LearnedWorkload zero, seven;
  double cpu = 0;
  for (int i = 0; i < 5000; ++i) {
    const Need n = i % 5 == 0 ? CpuOnly(1000 + i % 7) : Share(2000, 100 + i % 9 * 100, i % 11);
    zero.Add(n, 0);
    seven.Add(n, 7);
    cpu += static_cast<double>(n.cpu);
  }
  EXPECT_EQ(zero.sums().cpu, cpu);
  EXPECT_EQ(seven.sums().cpu, cpu);
  ASSERT_EQ(zero.workload().size(), seven.workload().size());
  for (size_t i = 0; i < zero.workload().size(); ++i) {
    EXPECT_EQ(zero.workload()[i].weight, seven.workload()[i].weight) << i;
  }
}

}  // namespace
}  // namespace tessera::sched
