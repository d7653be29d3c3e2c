// The framework's tests. One suite runs over every registered policy and checks what must hold
// for all of them (capacity never broken, a pod that fits somewhere is placed, seeds reproduce
// runs); a brute-force reference then re-derives every decision of the five deterministic
// policies from their pure score functions, over all nodes, without the scheduler's index and
// caches.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sched/frag.h"
#include "sched/node_table.h"
#include "sched/plugin.h"
#include "sched/plugins/bestfit.h"
#include "sched/plugins/dotprod.h"
#include "sched/plugins/fgd.h"
#include "sched/plugins/gpu_clustering.h"
#include "sched/plugins/gpu_packing.h"
#include "sched/rng.h"
#include "sched/sched_testing.h"

namespace tessera::sched {
namespace {

using catalog::SharingMode;
using testing::Bit;
using testing::Cpu;
using testing::Share;
using testing::SharedNode;
using testing::Whole;

const char* const kModels[] = {"T4", "V100M16", "G2", "P100"};

// Up to `max_nodes` nodes of random shapes, some of them identical, every GPU shared (as in the
// openb fleet) unless `modes` mixes in exclusive GPUs.
std::vector<fleet::NodeSpec> RandomSpecs(Rng& rng, size_t max_nodes, bool modes) {
  std::vector<fleet::NodeSpec> specs;
  const size_t nodes = 1 + rng.Uniform(max_nodes);
  const int gpu_choices[] = {0, 1, 2, 4, 8};
  for (size_t i = 0; i < nodes; ++i) {
    if (i > 0 && rng.Uniform(3) == 0) {  // A twin of an earlier node.
      fleet::NodeSpec twin = specs[rng.Uniform(specs.size())];
      twin.name = "n-" + std::to_string(i);
      specs.push_back(twin);
      continue;
    }
    const int gpus = gpu_choices[rng.Uniform(5)];
    fleet::NodeSpec s = SharedNode("n-" + std::to_string(i), gpus ? kModels[rng.Uniform(4)] : "",
                                   gpus, 8 << rng.Uniform(4), 32 << rng.Uniform(4));
    if (gpus == 0) s.default_mode = SharingMode::kExclusive;
    if (modes && gpus > 0 && rng.Uniform(2) == 0) {
      for (int g = 0; g < gpus; ++g) {
        s.gpu_modes.push_back(rng.Uniform(2) ? SharingMode::kShared : SharingMode::kExclusive);
      }
    }
    specs.push_back(s);
  }
  return specs;
}

Request RandomRequest(Rng& rng) {
  Request r = Cpu(static_cast<int64_t>(rng.Uniform(17)) * 1000,
                  static_cast<int64_t>(rng.Uniform(64)) * 1024);
  const uint64_t kind = rng.Uniform(10);
  if (kind < 2) return r;
  if (kind < 6) {
    r.gpu_count = 1;
    r.gpu_milli = 50 * static_cast<int>(1 + rng.Uniform(19));
  } else {
    r.gpu_milli = 1000;
    r.gpu_count = 1 << rng.Uniform(kind == 9 ? 4 : 1);
  }
  if (rng.Uniform(4) == 0)
    r.allowed_models = Bit(kModels[rng.Uniform(4)]) | Bit(kModels[rng.Uniform(4)]);
  return r;
}

// Feasibility read straight from the fleet, written apart from fit.cc.
bool BruteForceFits(const fleet::Node& n, const Request& r) {
  if (n.state != fleet::NodeState::kReady || n.cpu_milli_free < r.cpu_milli ||
      n.memory_mib_free < r.memory_mib) {
    return false;
  }
  if (r.gpu_count == 0) return true;
  if (r.allowed_models != 0 &&
      (!n.model.valid() || !(r.allowed_models & (ModelMask{1} << n.model.value)))) {
    return false;
  }
  int fit = 0;
  for (const fleet::Gpu& g : n.gpus) {
    if (r.gpu_milli < 1000) {
      fit += g.mode == SharingMode::kShared && g.free_milli >= r.gpu_milli ? 1 : 0;
    } else {
      fit += g.mode != SharingMode::kMig && g.free_milli == 1000 &&
                     (!r.exclusive_mode || g.mode == SharingMode::kExclusive)
                 ? 1
                 : 0;
    }
  }
  return fit >= r.gpu_count;
}

Workload SmallTarget() {
  return {{.cpu_milli = 4000, .weight = 0.2},
          {.cpu_milli = 8000, .gpu_count = 1, .gpu_milli = 500, .weight = 0.3},
          {.cpu_milli = 2000, .gpu_count = 1, .gpu_milli = 250, .weight = 0.2},
          {.cpu_milli = 8000, .gpu_count = 1, .gpu_milli = 1000, .weight = 0.2},
          {.cpu_milli = 16000,
           .gpu_count = 2,
           .gpu_milli = 1000,
           .allowed_models = Bit("G2") | Bit("V100M16"),
           .weight = 0.1}};
}

// What the test books, to check the fleet against.
struct Held {
  std::vector<fleet::Assignment> assignments;

  // The fleet holds exactly the sum of the assignments, and nothing is over capacity.
  void ExpectFleetMatches(const fleet::Fleet& f) const {
    std::vector<int64_t> cpu(f.size()), mem(f.size());
    std::vector<std::vector<int>> milli(f.size());
    for (size_t n = 0; n < f.size(); ++n) milli[n].resize(f.nodes()[n].gpus.size());
    for (const fleet::Assignment& a : assignments) {
      cpu[a.node.value] += a.cpu_milli;
      mem[a.node.value] += a.memory_mib;
      for (int i = 0; i < a.gpu_count; ++i) {
        milli[a.node.value][static_cast<size_t>(a.gpus[static_cast<size_t>(i)].gpu)] +=
            a.gpus[static_cast<size_t>(i)].milli;
      }
    }
    for (size_t n = 0; n < f.size(); ++n) {
      const fleet::Node& node = f.nodes()[n];
      ASSERT_EQ(node.cpu_milli_free, node.cpu_milli - cpu[n]) << node.name;
      ASSERT_EQ(node.memory_mib_free, node.memory_mib - mem[n]) << node.name;
      ASSERT_GE(node.cpu_milli_free, 0) << node.name;
      ASSERT_GE(node.memory_mib_free, 0) << node.name;
      for (size_t g = 0; g < node.gpus.size(); ++g) {
        ASSERT_EQ(node.gpus[g].free_milli, 1000 - milli[n][g]) << node.name << " gpu " << g;
        ASSERT_GE(node.gpus[g].free_milli, 0) << node.name << " gpu " << g;
      }
    }
  }
};

double BruteForceFragmentation(const fleet::Fleet& f, const Workload& target) {
  double sum = 0;
  for (const fleet::Node& n : f.nodes()) {
    std::vector<int16_t> free;
    for (const fleet::Gpu& g : n.gpus) free.push_back(static_cast<int16_t>(g.free_milli));
    const ModelMask bit = n.model.valid() ? ModelMask{1} << n.model.value : 0;
    sum += NodeFragmentationMilli(target, bit, n.cpu_milli_free, free);
  }
  return sum;
}

class PolicyTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Scheduler> Make(fleet::Fleet* f, uint64_t seed, Workload target = SmallTarget()) {
    Result<std::unique_ptr<Scheduler>> s = Scheduler::Create(f, {GetParam(), seed, target});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
};

TEST_P(PolicyTest, NeverBreaksCapacityAndPlacesWhatFits) {
  Rng rng(11);
  for (int round = 0; round < 12; ++round) {
    auto fleet = testing::MakeFleet(RandomSpecs(rng, 12, /*modes=*/true));
    auto s = Make(fleet.get(), 100 + static_cast<uint64_t>(round));
    Held held;
    for (int op = 0; op < 300; ++op) {
      if (!held.assignments.empty() && rng.Uniform(4) == 0) {
        const size_t i = rng.Uniform(held.assignments.size());
        ASSERT_TRUE(s->Release(held.assignments[i]).ok());
        held.assignments.erase(held.assignments.begin() + static_cast<ptrdiff_t>(i));
      } else {
        Request r = RandomRequest(rng);
        if (r.gpu_milli == 1000) r.exclusive_mode = rng.Uniform(2) == 0;  // As the server asks.
        std::set<uint32_t> feasible;
        for (uint32_t n = 0; n < fleet->size(); ++n) {
          if (BruteForceFits(fleet->nodes()[n], r)) feasible.insert(n);
        }
        const std::optional<fleet::Assignment> a = s->Schedule(r);
        ASSERT_EQ(a.has_value(), !feasible.empty()) << "round " << round << " op " << op;
        if (a) {
          ASSERT_TRUE(feasible.contains(a->node.value));
          ASSERT_EQ(a->cpu_milli, r.cpu_milli);
          ASSERT_EQ(a->gpu_count, r.gpu_count);
          for (int i = 0; i < a->gpu_count && r.exclusive_mode; ++i) {
            const size_t gpu = static_cast<size_t>(a->gpus[static_cast<size_t>(i)].gpu);
            ASSERT_EQ(fleet->node(a->node).gpus[gpu].mode, SharingMode::kExclusive)
                << "round " << round << " op " << op << ": a shared-mode GPU granted whole";
          }
          held.assignments.push_back(*a);
        }
      }
      held.ExpectFleetMatches(*fleet);
      ASSERT_NEAR(s->FragmentationMilli(), BruteForceFragmentation(*fleet, SmallTarget()), 1e-6);
      ASSERT_TRUE(s->last_error().ok()) << s->last_error().ToString();
    }
  }
}

TEST_P(PolicyTest, TakesTheOnlyFeasibleNode) {
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 8), SharedNode("b", "G2", 8, 96),
                                   SharedNode("c", "T4", 2, 8), SharedNode("d", "T4", 4, 16)});
  auto s = Make(fleet.get(), 42);
  const struct {
    const char* name;
    Request request;
    std::string want;
  } cases[] = {
      {"only one node has the CPU", Cpu(64000), "b"},
      {"only one node has the model", Share(1000, 500, Bit("G2")), "b"},
      {"only one node has four GPUs free", Whole(1000, 4, Bit("T4")), "d"},
  };
  for (const auto& c : cases) {
    const std::optional<fleet::Assignment> a = s->Schedule(c.request);
    ASSERT_TRUE(a.has_value()) << c.name;
    EXPECT_EQ(fleet->node(a->node).name, c.want) << c.name;
  }
  EXPECT_FALSE(s->Schedule(Whole(1000, 8, Bit("T4"))).has_value());
}

// A GPU out of service is never granted, by any policy: not whole, not a share.
TEST_P(PolicyTest, NeverPlacesOnAnUnhealthyGpu) {
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 64), SharedNode("b", "T4", 2, 64)});
  auto s = Make(fleet.get(), 42);
  ASSERT_TRUE(fleet->SetGpuHealthy(fleet::NodeIndex(0), 0, false).ok());
  ASSERT_TRUE(fleet->SetGpuHealthy(fleet::NodeIndex(1), 1, false).ok());
  EXPECT_FALSE(s->Schedule(Whole(1000, 2)).has_value()) << "no node has two healthy GPUs";
  int placed = 0;
  for (int i = 0; i < 8; ++i) {
    const std::optional<fleet::Assignment> a =
        s->Schedule(i % 2 ? Whole(1000, 1) : Share(1000, 300));
    if (!a) continue;
    ++placed;
    ASSERT_EQ(a->gpu_count, 1);
    EXPECT_EQ(a->gpus[0].gpu, a->node.value == 0 ? 1 : 0) << "placed on an unhealthy GPU";
  }
  EXPECT_GE(placed, 2);
  EXPECT_TRUE(s->last_error().ok()) << s->last_error().ToString();
}

// A GPU changing its mode (its agent turning MIG on or off) is granted to nobody meanwhile, by
// any policy, as an unhealthy one; released, it is granted again.
TEST_P(PolicyTest, NeverPlacesOnAGpuChangingItsMode) {
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 64)});
  auto s = Make(fleet.get(), 42);
  ASSERT_TRUE(fleet->SetGpuHeld(fleet::NodeIndex(0), 0, true).ok());
  EXPECT_FALSE(s->Schedule(Whole(1000, 2)).has_value()) << "one GPU is held";
  for (int i = 0; i < 4; ++i) {
    const std::optional<fleet::Assignment> a =
        s->Schedule(i % 2 ? Whole(1000, 1) : Share(1000, 300));
    if (a) {
      EXPECT_EQ(a->gpus[0].gpu, 1) << "placed on a held GPU";
    }
  }
  ASSERT_TRUE(fleet->SetGpuHeld(fleet::NodeIndex(0), 0, false).ok());
  const std::optional<fleet::Assignment> a = s->Schedule(Whole(1000, 1));
  ASSERT_TRUE(a.has_value()) << "released, it takes work again";
  EXPECT_EQ(a->gpus[0].gpu, 0);
}

std::vector<fleet::Assignment> RunStream(const std::string& policy, uint64_t seed,
                                         uint64_t stream) {
  Rng specs_rng(5);
  auto fleet = testing::MakeFleet(RandomSpecs(specs_rng, 16, false));
  auto s = Scheduler::Create(fleet.get(), {policy, seed, SmallTarget()}).value();
  Rng rng(stream);
  std::vector<fleet::Assignment> out;
  for (int i = 0; i < 200; ++i) {
    if (std::optional<fleet::Assignment> a = s->Schedule(RandomRequest(rng))) out.push_back(*a);
  }
  return out;
}

bool Same(const fleet::Assignment& a, const fleet::Assignment& b) {
  if (a.node != b.node || a.gpu_count != b.gpu_count) return false;
  for (int i = 0; i < a.gpu_count; ++i) {
    const auto k = static_cast<size_t>(i);
    if (a.gpus[k].gpu != b.gpus[k].gpu || a.gpus[k].milli != b.gpus[k].milli) return false;
  }
  return true;
}

TEST_P(PolicyTest, SameSeedSameAssignments) {
  const std::vector<fleet::Assignment> a = RunStream(GetParam(), 7, 1);
  const std::vector<fleet::Assignment> b = RunStream(GetParam(), 7, 1);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(Same(a[i], b[i])) << "placement " << i;
}

TEST_P(PolicyTest, DifferentSeedsCanDiffer) {
  // Identical empty nodes tie under every policy, so the seeded node order (or Random's draw)
  // decides where the first pod goes.
  std::vector<fleet::NodeSpec> specs;
  for (int i = 0; i < 16; ++i) specs.push_back(SharedNode("n-" + std::to_string(i), "G2", 8, 96));
  std::set<std::string> first;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    auto fleet = testing::MakeFleet(specs);
    auto s = Make(fleet.get(), seed);
    const std::optional<fleet::Assignment> a = s->Schedule(Share(4000, 500));
    ASSERT_TRUE(a.has_value());
    first.insert(fleet->node(a->node).name);
  }
  EXPECT_GT(first.size(), 1u);
}

// The policy's choice among all feasible nodes, from its pure score functions.
struct Expected {
  uint32_t node = 0;
  int gpu = -1;  // For a share.
};

Expected Reference(const std::string& policy, const Request& r, const fleet::Fleet& f,
                   const Scheduler& s, const std::vector<NodeTags>& tags) {
  const FragModel model(SmallTarget());
  const NodeTable fresh(&f, &model);  // Read from scratch: no history, no caches.
  const Need need = Prepare(r);
  std::vector<uint32_t> feasible;
  for (uint32_t n = 0; n < f.size(); ++n) {
    if (BruteForceFits(f.nodes()[n], r)) feasible.push_back(n);
  }
  int64_t best_key = INT64_MIN;
  Expected e;
  for (uint32_t n : feasible) {
    const NodeFit& fit = fresh.fit(n);
    const NodeGpus& g = fresh.gpus(n);
    const int64_t gpu_req = int64_t{r.gpu_milli} * r.gpu_count;
    int score = 0;
    if (policy == "bestfit") score = BestFitScore(fit.cpu_free, fit.gpu_free, r.cpu_milli, gpu_req);
    if (policy == "dotprod")
      score = DotProductScore(fit.cpu_free, fit.gpu_free, r.cpu_milli, gpu_req);
    if (policy == "gpu-clustering") {
      score = GpuClusteringScore(TagOf(r.gpu_count, r.gpu_milli, false), tags[n], fit.gpu_free);
    }
    if (policy == "gpu-packing" && r.gpu_count > 0) {
      score =
          GpuPackingScore({g.free.data(), static_cast<size_t>(g.count)}, r.gpu_milli, r.gpu_count);
    }
    if (policy == "fgd") score = FgdNodeScore(need, model, fit, g, fresh.frag(n)).score;
    const int64_t key = (int64_t{feasible.size() == 1 ? 0 : score} << 32) +
                        (UINT32_MAX - s.NodeRank(fleet::NodeIndex(n)));
    if (key > best_key) {
      best_key = key;
      e.node = n;
    }
  }
  if (need.kind == Kind::kShare) {
    e.gpu = policy == "fgd" ? FgdNodeScore(need, model, fresh.fit(e.node), fresh.gpus(e.node),
                                           fresh.frag(e.node))
                                  .gpu
                            : BestShareGpu(need, fresh.gpus(e.node));
  }
  return e;
}

TEST_P(PolicyTest, EveryDecisionMatchesTheBruteForceReference) {
  if (GetParam() == "random") GTEST_SKIP() << "Random's choice is a draw, not a score.";
  if (GetParam() == "adaptive-fgd" || GetParam() == "guarded-fgd") {
    GTEST_SKIP() << GetParam()
                 << " scores against what it has seen; adaptive_fgd_test.cc covers it.";
  }
  Rng rng(23);
  for (int round = 0; round < 8; ++round) {
    auto fleet = testing::MakeFleet(RandomSpecs(rng, 14, /*modes=*/false));
    auto s = Make(fleet.get(), 1000 + static_cast<uint64_t>(round));
    std::vector<NodeTags> tags(fleet->size());
    std::vector<fleet::Assignment> held;
    for (int op = 0; op < 250; ++op) {
      if (!held.empty() && rng.Uniform(5) == 0) {
        const size_t i = rng.Uniform(held.size());
        const fleet::Assignment& a = held[i];
        const int tag = TagOf(a.gpu_count, a.gpus[0].milli, false);
        if (tag != kNoTag && --tags[a.node.value].count[static_cast<size_t>(tag)] == 0) {
          --tags[a.node.value].kinds;
        }
        ASSERT_TRUE(s->Release(a).ok());
        held.erase(held.begin() + static_cast<ptrdiff_t>(i));
        continue;
      }
      const Request r = RandomRequest(rng);
      bool any = false;
      for (const fleet::Node& n : fleet->nodes()) any = any || BruteForceFits(n, r);
      const Expected want = any ? Reference(GetParam(), r, *fleet, *s, tags) : Expected{};
      const std::optional<fleet::Assignment> a = s->Schedule(r);
      ASSERT_EQ(a.has_value(), any);
      if (!a) continue;
      ASSERT_EQ(a->node.value, want.node) << "round " << round << " op " << op;
      if (want.gpu >= 0) {
        ASSERT_EQ(a->gpus[0].gpu, want.gpu) << "round " << round << " op " << op;
      }
      const int tag = TagOf(a->gpu_count, a->gpus[0].milli, false);
      if (tag != kNoTag && tags[a->node.value].count[static_cast<size_t>(tag)]++ == 0) {
        ++tags[a->node.value].kinds;
      }
      held.push_back(*a);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyTest, ::testing::ValuesIn(PolicyNames()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST(SchedulerTest, RegistryNamesThePaperPoliciesThenOurs) {
  EXPECT_EQ(PolicyNames(),
            (std::vector<std::string>{"random", "dotprod", "gpu-clustering", "gpu-packing",
                                      "bestfit", "fgd", "adaptive-fgd", "guarded-fgd"}));
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 8)});
  const Result<std::unique_ptr<Scheduler>> s = Scheduler::Create(fleet.get(), {.policy = "tetris"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.status().message(),
            "unknown scheduling policy 'tetris' (known: random, dotprod, gpu-clustering, "
            "gpu-packing, bestfit, fgd, adaptive-fgd, guarded-fgd)");
}

TEST(SchedulerTest, RejectsABadTargetWorkload) {
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 8)});
  const Result<std::unique_ptr<Scheduler>> s =
      Scheduler::Create(fleet.get(), {.policy = "fgd", .target = {{.weight = -1}}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "target workload class 0: weight -1 must be finite and >= 0");
}

TEST(SchedulerTest, TiesGoToTheLowestRankedNode) {
  std::vector<fleet::NodeSpec> specs;
  for (int i = 0; i < 10; ++i) specs.push_back(SharedNode("n-" + std::to_string(i), "T4", 2, 32));
  auto fleet = testing::MakeFleet(specs);
  auto s = Scheduler::Create(fleet.get(), {.policy = "gpu-packing", .seed = 3}).value();
  std::vector<uint32_t> ranks;
  for (uint32_t n = 0; n < fleet->size(); ++n) ranks.push_back(s->NodeRank(fleet::NodeIndex(n)));
  std::vector<uint32_t> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i);  // A permutation.
  // CPU-only pods score 0 everywhere under GpuPacking: first fit in rank order.
  const auto rank0 =
      static_cast<uint32_t>(std::find(ranks.begin(), ranks.end(), 0u) - ranks.begin());
  const auto rank1 =
      static_cast<uint32_t>(std::find(ranks.begin(), ranks.end(), 1u) - ranks.begin());
  EXPECT_EQ(s->Schedule(Cpu(20000))->node.value, rank0);
  EXPECT_EQ(s->Schedule(Cpu(20000))->node.value, rank1);  // Rank 0 has 12000 left.
  EXPECT_EQ(s->Schedule(Cpu(12000))->node.value, rank0);
}

TEST(SchedulerTest, ScheduleOnPlacesOnTheGivenNodeOnly) {
  auto fleet = testing::MakeFleet({SharedNode("a", "G2", 8, 96), SharedNode("b", "T4", 2, 16)});
  auto s = Scheduler::Create(fleet.get(), {.policy = "fgd", .target = SmallTarget()}).value();
  const std::optional<fleet::Assignment> a = s->ScheduleOn(Share(8000, 300), fleet::NodeIndex(1));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->node.value, 1u);
  EXPECT_EQ(a->gpus[0].milli, 300);
  EXPECT_FALSE(s->ScheduleOn(Cpu(16000), fleet::NodeIndex(1)).has_value());  // 8000 CPU left.
  EXPECT_FALSE(s->ScheduleOn(Whole(1000, 1, Bit("G2")), fleet::NodeIndex(1)).has_value());
  EXPECT_FALSE(s->ScheduleOn(Cpu(1000), fleet::NodeIndex(7)).has_value());
  EXPECT_TRUE(s->ScheduleOn(Whole(1000, 1, Bit("G2")), fleet::NodeIndex(0)).has_value());
  EXPECT_NEAR(s->FragmentationMilli(), BruteForceFragmentation(*fleet, SmallTarget()), 1e-9);
}

TEST(SchedulerTest, MalformedRequestsAreNotPlaced) {
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 8)});
  auto s = Scheduler::Create(fleet.get(), {.policy = "bestfit"}).value();
  EXPECT_FALSE(s->Schedule(Request{.gpu_count = 2, .gpu_milli = 500}).has_value());
  EXPECT_EQ(fleet->used_gpu_milli(), 0);
  EXPECT_TRUE(s->last_error().ok());
}

TEST(SchedulerTest, FollowsChangesMadeOutsideIt) {
  auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 8), SharedNode("b", "T4", 2, 8)});
  Options options{.policy = "bestfit", .target = SmallTarget()};
  auto s = Scheduler::Create(fleet.get(), options).value();
  const double empty = s->FragmentationMilli();
  // A node going down is avoided; a booking made straight on the fleet is seen.
  ASSERT_TRUE(fleet->SetNodeState(fleet::NodeIndex(0), fleet::NodeState::kDown).ok());
  fleet::Assignment outside{.node = fleet::NodeIndex(1), .cpu_milli = 1000, .gpu_count = 1};
  outside.gpus[0] = {.gpu = 0, .milli = 300};
  ASSERT_TRUE(fleet->Allocate(outside).ok());
  EXPECT_NE(s->FragmentationMilli(), empty);
  EXPECT_NEAR(s->FragmentationMilli(), BruteForceFragmentation(*fleet, SmallTarget()), 1e-9);
  const std::optional<fleet::Assignment> a = s->Schedule(Share(1000, 800));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->node.value, 1u);
  EXPECT_EQ(a->gpus[0].gpu, 1);  // GPU 0 has only 700 left.
  // A node that joins later is used.
  ASSERT_TRUE(fleet->AddNode(SharedNode("c", "G2", 8, 96)).ok());
  const std::optional<fleet::Assignment> b = s->Schedule(Whole(32000, 4));
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(fleet->node(b->node).name, "c");
  EXPECT_EQ(s->NodeRank(b->node), 2u);
}

TEST(SchedulerTest, ReserveAndReleaseKeepTheCachesInStep) {
  auto fleet = testing::MakeFleet({SharedNode("a", "G2", 8, 96), SharedNode("b", "G2", 8, 96)});
  auto s =
      Scheduler::Create(fleet.get(), {.policy = "gpu-clustering", .target = SmallTarget()}).value();
  // A share booked from outside tags node b "share-gpu": the next share joins it.
  fleet::Assignment restored{.node = fleet::NodeIndex(1), .cpu_milli = 1000, .gpu_count = 1};
  restored.gpus[0] = {.gpu = 3, .milli = 250};
  ASSERT_TRUE(s->Reserve(restored).ok());
  const std::optional<fleet::Assignment> a = s->Schedule(Share(1000, 500));
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->node.value, 1u);
  ASSERT_TRUE(s->Release(*a).ok());
  ASSERT_TRUE(s->Release(restored).ok());
  EXPECT_EQ(fleet->used_gpu_milli(), 0);
  EXPECT_NEAR(s->FragmentationMilli(), BruteForceFragmentation(*fleet, SmallTarget()), 1e-9);
  // Releasing twice is refused by the fleet, and nothing changes.
  EXPECT_FALSE(s->Release(restored).ok());
  // A booking the fleet refuses is reported, not applied.
  fleet::Assignment too_big{.node = fleet::NodeIndex(0), .cpu_milli = 200000};
  EXPECT_EQ(s->Reserve(too_big).code(), StatusCode::kResourceExhausted);
}

// A policy that records what it is shown (a fake: it scores every node alike and takes the
// best-fit GPUs).
class WatchingPolicy final : public Policy {
 public:
  explicit WatchingPolicy(std::vector<std::pair<int64_t, uint32_t>>* seen) : seen_(seen) {}
  std::string_view Name() const override { return "watching"; }
  void Score(const Need&, const NodeTable&, std::span<const uint32_t>,
             std::span<int32_t> scores) override {
    std::fill(scores.begin(), scores.end(), 0);
  }
  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    return GrantBest(need, nodes, n, a);
  }
  void Observe(const Need& need, uint32_t source) override {
    seen_->emplace_back(need.cpu, source);
  }

 private:
  std::vector<std::pair<int64_t, uint32_t>>* seen_;  // (cpu, source) of each request observed.
};

// The server retries a queued request by scheduling it again, marked observe = false: the policy
// learns from each request once, with its source, however often it is retried.
TEST(SchedulerTest, ThePolicyObservesEachRequestOnceWithItsSource) {
  auto with = [](int64_t cpu, uint32_t source, bool observe) {
    Request r = Cpu(cpu);
    r.source = source;
    r.observe = observe;
    return r;
  };
  const struct {
    std::string name;
    std::vector<Request> requests;
    std::vector<std::pair<int64_t, uint32_t>> want;  // (cpu, source) observed, in order.
  } cases[] = {
      {"each request once", {with(1000, 0, true), with(2000, 0, true)}, {{1000, 0}, {2000, 0}}},
      {"a request that waits, retried three times",
       {with(90000, 3, true), with(90000, 3, false), with(90000, 3, false), with(90000, 3, false)},
       {{90000, 3}}},
      {"retries between other arrivals",
       {with(90000, 1, true), with(1000, 2, true), with(90000, 1, false), with(3000, 2, true)},
       {{90000, 1}, {1000, 2}, {3000, 2}}},
      {"the same request sent twice is two requests",
       {with(1000, 5, true), with(1000, 5, true)},
       {{1000, 5}, {1000, 5}}},
  };
  for (const auto& c : cases) {
    auto fleet = testing::MakeFleet({SharedNode("a", "T4", 2, 64)});  // 90000 CPU never fits.
    std::vector<std::pair<int64_t, uint32_t>> seen;
    auto s = Scheduler::Create(fleet.get(), {}, std::make_unique<WatchingPolicy>(&seen));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    for (const Request& r : c.requests) (*s)->Schedule(r);
    EXPECT_EQ(seen, c.want) << c.name;
    // The preemption path places on a chosen node and observes nothing.
    const size_t before = seen.size();
    EXPECT_TRUE((*s)->ScheduleOn(with(1000, 9, true), fleet::NodeIndex(0)).has_value()) << c.name;
    EXPECT_EQ(seen.size(), before) << c.name;
  }
  EXPECT_EQ(Scheduler::Create(testing::MakeFleet({}).get(), {}, nullptr).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::sched
