#include "sim/run.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fleet/fleet_file.h"
#include "sim/progress.h"

namespace tessera::sim {
namespace {

TEST(ParseSeedsTest, AcceptsRangesListsAndMixes) {
  EXPECT_EQ(*ParseSeeds("42"), (std::vector<uint64_t>{42}));
  EXPECT_EQ(ParseSeeds("42-51")->size(), 10u);
  EXPECT_EQ(*ParseSeeds("1,5,9"), (std::vector<uint64_t>{1, 5, 9}));
  EXPECT_EQ(*ParseSeeds("1-3,7"), (std::vector<uint64_t>{1, 2, 3, 7}));
}

TEST(ParseSeedsTest, RejectsWhatIsNotASeedNamingThePiece) {
  struct Case {
    std::string text, mention;
  };
  for (const Case& c : {Case{"9-1", "'9-1' is not a seed range"}, Case{"x", "'x' is not a seed"},
                        Case{"", "empty"}, Case{"1,,2", "'' is not a seed"},
                        Case{"-4", "'-4' is not a seed"}, Case{"0-200000", "at most 100000"}}) {
    auto r = ParseSeeds(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.mention), std::string::npos) << r.status().message();
  }
}

// A range ending at the largest seed used to loop forever: `s <= hi` never fails when hi is
// 2^64-1, so ++s wrapped to 0 and the list grew until memory ran out.
TEST(ParseSeedsTest, ARangeEndingAtTheLargestSeedEnds) {
  EXPECT_EQ(*ParseSeeds("18446744073709551614-18446744073709551615"),
            (std::vector<uint64_t>{UINT64_MAX - 1, UINT64_MAX}));
  EXPECT_EQ(*ParseSeeds("18446744073709551615-18446744073709551615"),
            (std::vector<uint64_t>{UINT64_MAX}));
}

// Four 8-GPU nodes and 120 pods of mixed shapes (about 84 GPUs of demand).
class RunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = catalog::Catalog::LoadEmbedded();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    catalog_ = std::move(c).value();
    auto f = fleet::ParseOpenbNodeCsv(catalog_,
                                      "sn,cpu_milli,memory_mib,gpu,model\n"
                                      "n0,96000,393216,8,G2\nn1,96000,393216,8,G2\n"
                                      "n2,64000,262144,8,V100M32\nn3,64000,262144,8,T4\n",
                                      "nodes");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fleet_.emplace(std::move(f).value());
    for (int i = 0; i < 120; ++i) {
      Pod p;
      p.name = fmt::format("p{:03d}", i);
      p.cpu_milli = 4000;
      p.memory_mib = 8192;
      p.num_gpu = i % 10 == 0 ? 0 : (i % 17 == 0 ? 4 : 1);
      p.gpu_milli = p.num_gpu == 0 ? 0 : (i % 3 == 0 || p.num_gpu > 1 ? 1000 : 150 + 40 * (i % 9));
      pods_.push_back(p);
    }
    typical_ = TypicalWorkloadOf(pods_);
    scenario_ = {"mixed", &*fleet_, &pods_, &typical_.workload};
  }
  catalog::Catalog catalog_;
  std::optional<fleet::Fleet> fleet_;
  std::vector<Pod> pods_;
  sched::TypicalWorkload typical_;
  Scenario scenario_;
};

TEST_F(RunTest, EveryPodIsAttemptedAndTheFleetTemplateStaysEmpty) {
  auto r = RunOne(scenario_, {"fgd", 42, 1.3}, SystemClock::Get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->total_gpus, 32);
  EXPECT_GT(r->removed, 0);  // About 84 GPUs of demand for a 41.6-GPU target.
  EXPECT_EQ(r->placed + r->failed, r->pods);
  EXPECT_EQ(r->pods, 120 - r->removed);
  EXPECT_LE(r->demand_milli, 41'600);
  EXPECT_TRUE(r->curve[0].has_data);
  EXPECT_EQ(fleet_->used_gpu_milli(), 0);  // Each run works on its own copy.
}

TEST_F(RunTest, AnUnknownPolicyIsNotFoundListingTheKnownOnes) {
  auto r = RunOne(scenario_, {"nope", 42, 1.3}, SystemClock::Get());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("fgd"), std::string::npos) << r.status().message();
}

TEST_F(RunTest, GridResultsComeInTaskOrderAndDoNotDependOnThreads) {
  std::vector<GridTask> tasks;
  for (const char* p : {"fgd", "bestfit", "random"}) {
    for (uint64_t s = 1; s <= 3; ++s) tasks.push_back({&scenario_, {p, s, 1.3}});
  }
  GridProgress progress;
  auto one = RunGrid(tasks, 1, SystemClock::Get());
  auto three = RunGrid(tasks, 3, SystemClock::Get(), &progress);
  ASSERT_TRUE(one.ok() && three.ok());
  ASSERT_EQ(three->size(), tasks.size());
  int64_t pods = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    EXPECT_EQ((*three)[i].spec.policy, tasks[i].spec.policy);
    EXPECT_EQ((*three)[i].spec.seed, tasks[i].spec.seed);
    EXPECT_EQ((*three)[i].placed, (*one)[i].placed);
    EXPECT_EQ(UnallocatedAt((*three)[i].curve, 100), UnallocatedAt((*one)[i].curve, 100));
    pods += (*three)[i].pods;
  }
  EXPECT_EQ(progress.runs_done.load(), 9);
  EXPECT_EQ(progress.pods_done.load(), pods);
}

TEST_F(RunTest, AFailingRunFailsTheGridNamingIt) {
  std::vector<GridTask> tasks = {{&scenario_, {"fgd", 1, 1.3}}, {&scenario_, {"bad", 7, 1.3}}};
  auto r = RunGrid(tasks, 2, SystemClock::Get());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind("mixed policy bad seed 7: ", 0), 0u) << r.status().message();
}

TEST_F(RunTest, AWindowOfOneIsThePlainPolicyAndAWiderOneDecidesEveryPodOnce) {
  auto plain = RunOne(scenario_, {"guarded-fgd", 42, 1.3}, SystemClock::Get());
  auto one = RunOne(scenario_, {"guarded-fgd-batch1", 42, 1.3}, SystemClock::Get());
  auto eight = RunOne(scenario_, {"guarded-fgd-batch8", 42, 1.3}, SystemClock::Get());
  ASSERT_TRUE(plain.ok() && one.ok() && eight.ok());
  EXPECT_EQ(one->placed, plain->placed);
  for (int pct = 0; pct <= kMaxArrivedPct; ++pct) {
    EXPECT_EQ(UnallocatedAt(one->curve, pct), UnallocatedAt(plain->curve, pct)) << pct;
  }
  EXPECT_EQ(eight->spec.policy, "guarded-fgd-batch8");
  EXPECT_EQ(eight->pods, plain->pods);  // The same tuned arrivals, decided in another order.
  EXPECT_EQ(eight->placed + eight->failed, eight->pods);
}

// One GPU, a 300-milli share and a whole GPU: whichever arrives first, a window of two places the
// whole GPU and refuses the share, where the plain policy places the share when it comes first.
TEST_F(RunTest, AWindowPlacesTheLargerPodFirstWhicheverArrivedFirst) {
  auto f = fleet::ParseOpenbNodeCsv(
      catalog_, "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,65536,1,T4\n", "nodes");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<Pod> pods(2);
  for (Pod& p : pods) {
    p.cpu_milli = 1000;
    p.memory_mib = 1024;
    p.num_gpu = 1;
  }
  pods[0].name = "a-share";
  pods[0].gpu_milli = 300;
  pods[1].name = "b-whole";
  pods[1].gpu_milli = 1000;
  const sched::TypicalWorkload typical = TypicalWorkloadOf(pods);
  const Scenario one_gpu{"one-gpu", &*f, &pods, &typical.workload};
  int plain_share_first = 0;
  for (uint64_t seed = 1; seed <= 16; ++seed) {
    auto plain = RunOne(one_gpu, {"guarded-fgd", seed, 1.3}, SystemClock::Get());
    auto batched = RunOne(one_gpu, {"guarded-fgd-batch2", seed, 1.3}, SystemClock::Get());
    ASSERT_TRUE(plain.ok() && batched.ok()) << plain.status().ToString();
    ASSERT_EQ(batched->pods, 2);
    EXPECT_EQ(batched->curve[130].allocated_pct, 100) << seed;
    if (plain->curve[130].allocated_pct == 30) ++plain_share_first;
  }
  EXPECT_GT(plain_share_first, 0);  // Some seeds shuffle the share first.
}

TEST_F(RunTest, TheBoundHasNoWindowAndABadWindowIsRefusedNamingThePolicy) {
  auto bound = RunOne(scenario_, {"offline-bound-batch4", 42, 1.3}, SystemClock::Get());
  ASSERT_FALSE(bound.ok());
  EXPECT_NE(bound.status().message().find("places nothing to batch"), std::string::npos);
  auto zero = RunOne(scenario_, {"fgd-batch0", 42, 1.3}, SystemClock::Get());
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("'fgd-batch0'"), std::string::npos);
}

TEST(ProgressTest, LineShowsRunsPodsAndRate) {
  EXPECT_EQ(ProgressText(3, 60, 1'234'567, 2.0),
            "tessera sim: runs 3/60, 1.23M pods, 617.3k pods/s, 2 s");
  EXPECT_EQ(ProgressText(0, 1, 0, 0), "tessera sim: runs 0/1, 0 pods, 0 pods/s, 0 s");
}

}  // namespace
}  // namespace tessera::sim
