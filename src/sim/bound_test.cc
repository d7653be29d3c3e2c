#include "sim/bound.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <optional>

#include "fleet/fleet_file.h"
#include "sched/scheduler.h"
#include "sim/protocol.h"
#include "sim/run.h"
#include "testing/testing.h"

namespace tessera::sim {
namespace {

const catalog::Catalog& Cat() {
  static const catalog::Catalog c = std::move(catalog::Catalog::LoadEmbedded()).value();
  return c;
}

fleet::Fleet Nodes(const std::string& csv) {
  auto f = fleet::ParseOpenbNodeCsv(Cat(), "sn,cpu_milli,memory_mib,gpu,model\n" + csv, "nodes");
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

sched::ModelMask Bit(const std::string& model) {
  return sched::ModelMask{1} << Cat().FindGpuIndex(model)->value;
}

Pod MakePod(int gpus, int milli, sched::ModelMask mask = 0) {
  static int next = 0;
  return Pod{.name = fmt::format("p{:04d}", next++),
             .cpu_milli = 1000,
             .memory_mib = 1024,
             .num_gpu = gpus,
             .gpu_milli = milli,
             .gpu_spec = "",
             .allowed_models = mask};
}

TEST(OfflineBoundTest, BoundsByDemandModelsAndGpusPerNode) {
  // Two 8-GPU G2 nodes, one 2-GPU T4 node, 18 GPUs in all.
  const fleet::Fleet fleet =
      Nodes("a,96000,393216,8,G2\nb,96000,393216,8,G2\nc,32000,65536,2,T4\n");
  struct Case {
    std::string what;
    std::vector<Pod> pods;
    int64_t bound;
  };
  const std::vector<Case> cases = {
      {"demand below capacity", {MakePod(1, 500), MakePod(2, 1000)}, 2500},
      {"demand above capacity", std::vector<Pod>(20, MakePod(1, 1000)), 18000},
      {"T4 pods only reach the T4 node", std::vector<Pod>(5, MakePod(1, 1000, Bit("T4"))), 2000},
      {"8-GPU pods need 8-GPU nodes", std::vector<Pod>(3, MakePod(8, 1000)), 16000},
      {"3-GPU pods use 6 of 8 GPUs", std::vector<Pod>(6, MakePod(3, 1000)), 12000},
      {"models share the rest",
       {MakePod(2, 1000, Bit("T4")), MakePod(2, 1000, Bit("T4")), MakePod(8, 1000),
        MakePod(8, 1000), MakePod(1, 300)},
       18000},
      {"CPU-only pods add nothing", {MakePod(0, 0), MakePod(0, 0)}, 0},
  };
  for (const Case& c : cases) {
    OfflineBound bound(fleet);
    int64_t last = 0;
    for (const Pod& p : c.pods) {
      const int64_t b = bound.Add(p);
      EXPECT_GE(b, last) << c.what;  // A longer prefix never lowers the bound.
      last = b;
    }
    EXPECT_EQ(bound.bound_milli(), c.bound) << c.what;
  }
}

// Shares that cannot share a GPU: the flow alone sees fluid milli, the packing bound sees GPUs.
TEST(OfflineBoundTest, CountsWhatPackingSharesIntoGpusMustWaste) {
  const fleet::Fleet four = Nodes("a,64000,262144,4,V100M16\n");  // 4 GPUs.
  const fleet::Fleet one = Nodes("a,64000,262144,1,V100M16\n");   // 1 GPU.
  struct Case {
    std::string what;
    const fleet::Fleet* fleet;
    std::vector<Pod> pods;
    int64_t bound;  // The true optimum in every case here.
  };
  const std::vector<Case> cases = {
      {"no two 600s share a GPU", &four, std::vector<Pod>(6, MakePod(1, 600)), 2400},
      {"an 810 leaves 190 only small shares use",
       &four,
       {MakePod(1, 810), MakePod(1, 810), MakePod(1, 810), MakePod(1, 810), MakePod(1, 810),
        MakePod(1, 150)},
       3390},
      {"three 470s: two per GPU", &one, std::vector<Pod>(3, MakePod(1, 470)), 940},
      {"shares that fit exactly lose nothing",
       &one,
       {MakePod(1, 500), MakePod(1, 250), MakePod(1, 250)},
       1000},
      {"whole GPUs and shares",
       &four,
       {MakePod(2, 1000), MakePod(1, 700), MakePod(1, 700), MakePod(1, 700)},
       3400},
  };
  for (const Case& c : cases) {
    OfflineBound bound(*c.fleet);
    int64_t last = 0;
    for (const Pod& p : c.pods) {
      const int64_t b = bound.Add(p);
      EXPECT_GE(b, last) << c.what;
      last = b;
    }
    EXPECT_EQ(bound.bound_milli(), c.bound) << c.what;
  }
}

// The bound is at or above every policy's allocation at every arrived bucket.
void ExpectBoundAboveEveryPolicy(const Scenario& s, const std::vector<uint64_t>& seeds) {
  std::vector<std::string> policies = sched::PolicyNames();
  for (uint64_t seed : seeds) {
    auto bound = RunOne(s, {std::string(kOfflineBoundPolicy), seed, 1.3}, SystemClock::Get());
    ASSERT_TRUE(bound.ok()) << bound.status().ToString();
    for (const std::string& policy : policies) {
      auto run = RunOne(s, {policy, seed, 1.3}, SystemClock::Get());
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      for (int pct = 0; pct <= kMaxArrivedPct; ++pct) {
        const CurvePoint& p = run->curve[static_cast<size_t>(pct)];
        const CurvePoint& b = bound->curve[static_cast<size_t>(pct)];
        if (!p.has_data) continue;
        ASSERT_TRUE(b.has_data) << pct;
        EXPECT_GE(b.allocated_pct, p.allocated_pct) << policy << " seed " << seed << " at " << pct;
      }
    }
  }
}

TEST(OfflineBoundTest, IsAboveEveryPolicyOnASmallMixedFleet) {
  const fleet::Fleet fleet = Nodes(
      "a,96000,393216,8,G2\nb,64000,262144,8,V100M32\nc,32000,131072,4,T4\n"
      "d,16000,65536,2,T4\ne,8000,32768,1,P100\n");
  std::vector<Pod> pods;
  for (int i = 0; i < 90; ++i) {
    const int gpus = i % 7 == 0 ? 0 : (i % 11 == 0 ? 4 : (i % 13 == 0 ? 8 : 1));
    const int milli = gpus == 0 ? 0 : (gpus > 1 || i % 3 == 0 ? 1000 : 100 + 70 * (i % 12));
    pods.push_back(MakePod(gpus, milli, i % 5 == 0 ? Bit("T4") : 0));
  }
  const sched::TypicalWorkload typical = TypicalWorkloadOf(pods);
  const Scenario s{"mixed", &fleet, &pods, &typical.workload};
  ExpectBoundAboveEveryPolicy(s, {1, 2, 3});
}

TEST(OfflineBoundTest, IsAboveEveryPolicyOnTheOpenbDefaultTrace) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  const std::string dir = datasets + "/openb/";
  auto fleet = fleet::LoadFleetFile(Cat(), dir + "openb_node_list_gpu_node.csv");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  auto pods = LoadOpenbPods(Cat(), dir + "openb_pod_list_default.csv");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  const sched::TypicalWorkload typical = TypicalWorkloadOf(*pods);
  const Scenario s{"default", &*fleet, &*pods, &typical.workload};
  ExpectBoundAboveEveryPolicy(s, {42});
}

}  // namespace
}  // namespace tessera::sim
