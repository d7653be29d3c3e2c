#include "sched/plugins/adaptive_fgd.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "sched/sched_testing.h"

namespace tessera::sched {
namespace {

TEST(AdaptiveFgdTest, ScoreIsFgdsSigmoidOfTheFragmentationChange) {
  const struct {
    double delta;
    int32_t want;
  } cases[] = {
      {0, 50},      // No change.
      {-1000, 73},  // A drop of one GPU's worth: sigmoid(1).
      {1000, 26},   // A rise: sigmoid(-1).
      {-100, 52},   // sigmoid(0.1).
      {-5000, 99},  // Saturates.
      {5000, 0},
  };
  for (const auto& c : cases) EXPECT_EQ(AdaptiveFgdScore(c.delta), c.want) << c.delta;
}

// Where each request of `requests` went ("node:gpu,gpu" or "-"), on a small mixed fleet.
std::vector<std::string> Placements(const std::vector<Request>& requests, Workload target = {}) {
  auto fleet = testing::MakeFleet(
      {testing::SharedNode("a", "G2", 8, 96), testing::SharedNode("b", "G2", 8, 96),
       testing::SharedNode("c", "T4", 2, 32), testing::SharedNode("d", "V100M32", 4, 64),
       testing::SharedNode("e", "V100M32", 4, 16)});
  auto s = Scheduler::Create(fleet.get(), {.policy = "adaptive-fgd", .seed = 7, .target = target});
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  std::vector<std::string> out;
  for (const Request& r : requests) {
    const std::optional<fleet::Assignment> a = (*s)->Schedule(r);
    if (!a) {
      out.push_back("-");
      continue;
    }
    std::string where = fleet->node(a->node).name + ":";
    for (int i = 0; i < a->gpu_count; ++i) {
      where += std::to_string(a->gpus[static_cast<size_t>(i)].gpu) + ",";
    }
    out.push_back(where);
  }
  return out;
}

std::vector<Request> Mixed(int n, int salt) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    const int k = i * 7 + salt;
    if (k % 5 == 0) {
      out.push_back(testing::Cpu(2000 + 1000 * (k % 3)));
    } else if (k % 4 == 0) {
      out.push_back(testing::Whole(4000, 1 + k % 3));
    } else {
      out.push_back(testing::Share(2000, 100 + 100 * (k % 8), k % 9 == 0 ? testing::Bit("T4") : 0));
    }
  }
  return out;
}

TEST(AdaptiveFgdTest, IsOnlineAPrefixIsPlacedTheSameWhateverFollows) {
  const std::vector<Request> prefix = Mixed(30, 1);
  for (int salt : {2, 3, 4}) {
    std::vector<Request> run = prefix;
    const std::vector<Request> rest = Mixed(25, salt);
    run.insert(run.end(), rest.begin(), rest.end());
    const std::vector<std::string> got = Placements(run);
    const std::vector<std::string> alone = Placements(prefix);
    EXPECT_EQ(std::vector<std::string>(got.begin(), got.begin() + 30), alone) << salt;
  }
}

TEST(AdaptiveFgdTest, IgnoresTheTargetWorkloadItIsGiven) {
  const std::vector<Request> run = Mixed(40, 5);
  const Workload skewed = {{.cpu_milli = 0, .gpu_count = 8, .gpu_milli = 1000, .weight = 0.7},
                           {.cpu_milli = 90000, .gpu_count = 0, .gpu_milli = 0, .weight = 0.3}};
  EXPECT_EQ(Placements(run), Placements(run, skewed));
}

TEST(AdaptiveFgdTest, LearnsToKeepTheSharesItHasSeenPlaceable) {
  // After many 600-milli shares, a 400-milli share should complete a GPU that holds 600 rather
  // than open a fresh one, which would leave 600 free and spoil nothing but waste a whole GPU.
  std::vector<Request> run(12, testing::Share(1000, 600));
  run.push_back(testing::Share(1000, 400));
  const std::vector<std::string> got = Placements(run);
  // The 12 shares of 600 fill 12 GPUs; the 400 goes onto one of them, not a fresh GPU: the node
  // it lands on already held a 600 share on that GPU.
  const std::string last = got.back();
  EXPECT_NE(std::find(got.begin(), got.end() - 1, last), got.end() - 1) << last;
}

}  // namespace
}  // namespace tessera::sched
