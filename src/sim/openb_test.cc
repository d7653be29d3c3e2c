// Checks on the public openb traces (skipped when ../shared/datasets is absent): the loaders on
// every variant, the protocol's shape on real data, and one full run against the FGD authors'
// published figure.
#include <gtest/gtest.h>

#include "common/clock.h"
#include "fleet/fleet_file.h"
#include "sim/fgd_expected.h"
#include "sim/protocol.h"
#include "sim/run.h"
#include "sim/trace.h"
#include "testing/testing.h"

namespace tessera::sim {
namespace {

class OpenbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = catalog::Catalog::LoadEmbedded();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    catalog_ = std::move(c).value();
  }
  std::vector<Pod> Load(const std::string& datasets, const std::string& trace) {
    auto pods = LoadOpenbPods(catalog_, datasets + "/openb/openb_pod_list_" + trace + ".csv");
    EXPECT_TRUE(pods.ok()) << pods.status().ToString();
    return pods.ok() ? std::move(pods).value() : std::vector<Pod>{};
  }
  catalog::Catalog catalog_;
};

TEST_F(OpenbTest, EveryVariantLoadsWithTheDocumentedCountsAndDemand) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  struct Case {
    std::string trace;
    size_t pods;
    int64_t demand_milli;
    size_t typical_classes;  // From fgd-details.md §4.
  };
  for (const Case& c : {Case{"default", 8152, 6'086'800, 35}, Case{"gpushare100", 8152, 0, 21},
                        Case{"gpuspec33", 8152, 6'086'800, 127}, Case{"multigpu50", 9061, 0, 43},
                        Case{"cpu250", 9420, 6'086'800, 0}}) {
    const auto pods = Load(datasets, c.trace);
    EXPECT_EQ(pods.size(), c.pods) << c.trace;
    if (c.demand_milli > 0) {
      EXPECT_EQ(TotalDemandMilli(pods), c.demand_milli) << c.trace;
    }
    if (c.typical_classes > 0) {
      EXPECT_EQ(TypicalWorkloadOf(pods).workload.size(), c.typical_classes) << c.trace;
    }
  }
}

TEST_F(OpenbTest, DefaultTunesUpToAbout10800PodsAndMultigpu50TunesDown) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  const double target = 1.3 * 6212 * 1000;
  const auto def = Load(datasets, "default");
  auto up = BuildArrivalOrder(def, target, 42);
  ASSERT_TRUE(up.ok());
  // The authors' log shows 10,866 for seed 42; our draws differ, the expected size does not.
  EXPECT_NEAR(static_cast<double>(up->pods.size()), 10'850, 250);
  EXPECT_LE(static_cast<double>(up->demand_milli), target + 7000);
  EXPECT_GT(static_cast<double>(up->demand_milli), target - 1000);

  const auto multi = Load(datasets, "multigpu50");
  auto down = BuildArrivalOrder(multi, target, 42);
  ASSERT_TRUE(down.ok());
  EXPECT_GT(down->removed, 0);
  EXPECT_EQ(down->copies, 0);
  EXPECT_LE(static_cast<double>(down->demand_milli), target);
  EXPECT_GT(static_cast<double>(down->demand_milli), target - 8000);
}

// One full run: under half a second in a release build, a few seconds under sanitizers.
TEST_F(OpenbTest, DefaultFgdSeed42MatchesTheAuthorsAt130) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  auto fleet = fleet::LoadFleetFile(catalog_, datasets + "/openb/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  ASSERT_EQ(fleet->total_gpus(), 6212);
  const auto pods = Load(datasets, "default");
  const auto typical = TypicalWorkloadOf(pods);
  const Scenario scenario{"default", &*fleet, &pods, &typical.workload};
  auto run = RunOne(scenario, {"fgd", 42, 1.3}, SystemClock::Get());
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_EQ(run->placed + run->failed, run->pods);
  auto expected = FgdExpected::Load(datasets + "/fgd_expected_results/analysis_allo_discrete.csv");
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  const auto theirs = expected->MeanUnallocated("default", "fgd", 130);
  ASSERT_TRUE(theirs.has_value());
  EXPECT_NEAR(*theirs, 4.61, 0.01);
  const auto ours = UnallocatedAt(run->curve, 130);
  ASSERT_TRUE(ours.has_value());
  EXPECT_NEAR(*ours, *theirs, 1.0);
  // Fragmentation on the empty cluster is about 13.9% of capacity (fgd-details.md §1.11).
  EXPECT_NEAR(run->curve[0].frag_pct, 13.9, 0.5);
}

}  // namespace
}  // namespace tessera::sim
