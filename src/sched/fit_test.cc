#include "sched/fit.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "sched/sched_testing.h"

namespace tessera::sched {
namespace {

using catalog::SharingMode;
using testing::Bit;
using testing::Cpu;
using testing::Share;
using testing::TheCatalog;
using testing::Whole;

class FitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_ = testing::MakeFleet({
        testing::SharedNode("t4s", "T4", 2, 16, 64),
        fleet::NodeSpec{.name = "v100x",
                        .gpu_model = "V100M16",
                        .gpus = 4,
                        .cpu_milli = 32000,
                        .memory_mib = 128 * 1024,
                        .nvlink_islands = {{0, 1}, {2, 3}}},
        fleet::NodeSpec{.name = "a100m",
                        .gpu_model = "A100-40GB",
                        .gpus = 2,
                        .cpu_milli = 32000,
                        .memory_mib = 256 * 1024,
                        .default_mode = SharingMode::kMig},
        testing::SharedNode("down", "T4", 2, 64, 512),
        fleet::NodeSpec{.name = "cpu", .cpu_milli = 64000, .memory_mib = 512 * 1024},
    });
    ASSERT_TRUE(fleet_->SetNodeState(fleet::NodeIndex(3), fleet::NodeState::kDown).ok());
    // t4s: 600 milli taken on GPU 0. v100x: GPUs 0 and 2 taken, so its free ones straddle islands.
    Book(0, {{.gpu = 0, .milli = 600}});
    Book(1, {{.gpu = 0}, {.gpu = 2}});
    table_ = std::make_unique<NodeTable>(fleet_.get(), &frag_);
  }

  void Book(uint32_t node, std::vector<fleet::GpuGrant> grants) {
    fleet::Assignment a{.node = fleet::NodeIndex(node), .cpu_milli = 1000};
    for (const fleet::GpuGrant& g : grants) a.gpus[static_cast<size_t>(a.gpu_count++)] = g;
    const Status s = fleet_->Allocate(a);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::set<std::string> Feasible(const Request& r) const {
    EXPECT_TRUE(ValidateRequest(r).ok()) << ValidateRequest(r).ToString();
    const Need need = Prepare(r);
    std::set<std::string> out;
    for (uint32_t n = 0; n < table_->size(); ++n) {
      if (Fits(need, *table_, n)) out.insert(fleet_->node(fleet::NodeIndex(n)).name);
    }
    return out;
  }

  FragModel frag_{{}};
  std::unique_ptr<fleet::Fleet> fleet_;
  std::unique_ptr<NodeTable> table_;
};

Request Mig(std::string_view profile) {
  return Request{.cpu_milli = 1000, .memory_mib = 1024, .gpu_count = 1, .mig_profile = profile};
}

TEST_F(FitTest, FiltersByResourcesModelAndSharingMode) {
  using Names = std::set<std::string>;
  Request big_memory = Cpu(1000, 100 * 1024);
  Request capped = Share(1000, 300);
  capped.gpu_memory_mib = 20000;  // More than a T4 has.
  Request small_cap = Share(1000, 300);
  small_cap.gpu_memory_mib = 8000;
  Request linked = Whole(1000, 2);
  linked.nvlink = true;
  Request cpu_with_spec = Cpu(8000);
  cpu_with_spec.allowed_models = Bit("T4");
  const struct {
    const char* name;
    Request request;
    Names want;
  } cases[] = {
      {"CPU-only goes anywhere ready", Cpu(8000), Names{"t4s", "v100x", "a100m", "cpu"}},
      {"CPU short", Cpu(20000), Names{"v100x", "a100m", "cpu"}},
      {"CPU-only ignores gpu_spec", cpu_with_spec, Names{"t4s", "v100x", "a100m", "cpu"}},
      {"memory short", big_memory, Names{"v100x", "a100m", "cpu"}},
      {"share only on shared GPUs", Share(1000, 300), Names{"t4s"}},
      {"share needs one GPU with enough", Share(1000, 500), Names{"t4s"}},
      {"share memory cap too big", capped, Names{}},
      {"share memory cap fits", small_cap, Names{"t4s"}},
      {"one whole GPU: fully free, not mig", Whole(1000, 1), Names{"t4s", "v100x"}},
      {"two whole GPUs", Whole(1000, 2), Names{"v100x"}},
      {"two whole GPUs on one island", linked, Names{}},
      {"model constraint", Whole(1000, 1, Bit("V100M16")), Names{"v100x"}},
      {"model constraint, several", Share(1000, 100, Bit("T4") | Bit("G2")), Names{"t4s"}},
      {"MIG slice", Mig("1g.5gb"), Names{"a100m"}},
      {"MIG profile the model lacks", Mig("7g.80gb"), Names{}},
  };
  for (const auto& c : cases) EXPECT_EQ(Feasible(c.request), c.want) << c.name;
}

TEST_F(FitTest, BestShareGpuIsTheTightestThenLowestIndex) {
  const Need need = Prepare(Share(1000, 300));
  EXPECT_EQ(BestShareGpu(need, table_->gpus(0)), 0);  // 400 free beats 1000 free.
  EXPECT_EQ(BestShareGpu(Prepare(Share(1000, 500)), table_->gpus(0)), 1);
  NodeGpus equal;
  equal.count = 3;
  equal.free = {700, 500, 500};
  equal.mode.fill(SharingMode::kShared);
  EXPECT_EQ(BestShareGpu(need, equal), 1);
}

TEST_F(FitTest, GrantsLowestIndexGpusWithinAnIsland) {
  fleet::Assignment a = BaseAssignment(Prepare(Whole(1000, 2)), 1);
  ASSERT_TRUE(GrantNonShare(Prepare(Whole(1000, 2)), *table_, 1, &a));
  ASSERT_EQ(a.gpu_count, 2);
  EXPECT_EQ(a.gpus[0].gpu, 1);
  EXPECT_EQ(a.gpus[1].gpu, 3);

  Request linked = Whole(1000, 2);
  linked.nvlink = true;
  fleet::Assignment b = BaseAssignment(Prepare(linked), 1);
  EXPECT_FALSE(GrantNonShare(Prepare(linked), *table_, 1, &b));

  const Need mig = Prepare(Mig("3g.20gb"));
  fleet::Assignment c = BaseAssignment(mig, 2);
  ASSERT_TRUE(GrantNonShare(mig, *table_, 2, &c));
  ASSERT_EQ(c.gpu_count, 1);
  EXPECT_EQ(c.gpus[0].gpu, 0);
  ASSERT_NE(c.gpus[0].mig_profile, nullptr);
  EXPECT_EQ(c.gpus[0].mig_profile->name, "3g.20gb");
  EXPECT_TRUE(fleet_->Allocate(c).ok());
}

TEST(ValidateRequestTest, NamesTheFieldAtFault) {
  const struct {
    Request request;
    const char* want;
  } cases[] = {
      {Request{.cpu_milli = -1}, "cpu_milli -1 is negative"},
      {Request{.memory_mib = -2}, "memory_mib -2 is negative"},
      {Request{.gpu_count = 17, .gpu_milli = 1000}, "gpu_count 17 is out of range [0, 16]"},
      {Request{.gpu_count = 0, .gpu_milli = 500}, "gpu_milli 500 asked with gpu_count 0"},
      {Request{.gpu_count = 1, .gpu_milli = 1001}, "gpu_milli 1001 is out of range [1, 1000]"},
      {Request{.gpu_count = 2, .gpu_milli = 500},
       "2 GPUs must be whole (gpu_milli 1000), not gpu_milli 500"},
      {Request{.gpu_count = 2, .mig_profile = "1g.5gb"},
       "a MIG request takes gpu_count 1 (one slice), not 2"},
  };
  for (const auto& c : cases) {
    const Status s = ValidateRequest(c.request);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.want;
    EXPECT_EQ(s.message(), c.want);
  }
  EXPECT_TRUE(ValidateRequest(Share(1000, 999)).ok());
  EXPECT_TRUE(ValidateRequest(Whole(1000, 16)).ok());
}

}  // namespace
}  // namespace tessera::sched
