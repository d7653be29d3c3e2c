#include "core/preemptor.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

sched::Request Gpus(int n) {
  sched::Request r;
  r.gpu_count = n;
  r.gpu_milli = 1000;
  r.cpu_milli = 1000;
  r.memory_mib = 1024;
  r.priority = 1;
  return r;
}

class PreemptorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_ = TestFleet(R"({"name": "p", "shapes": [
      {"name": "h", "count": 3, "gpu_model": "H100-80GB", "gpus": 2, "vcpus": 16,
       "memory_gib": 64, "gpu_mode": "exclusive"}]})");
    scheduler_ = sched::Scheduler::Create(fleet_.get(), {"bestfit", 1, {}}).value();
  }

  // A spot instance holding `gpus` GPUs, booked by the scheduler and tracked.
  Instance* Spot(Preemptor& p, int gpus) {
    auto a = scheduler_->Schedule(Gpus(gpus));
    EXPECT_TRUE(a.has_value());
    auto inst = std::make_unique<Instance>();
    inst->seq = static_cast<int64_t>(spot_.size());
    inst->billing = Billing::kSpot;
    inst->shape.gpu_model = "H100-80GB";
    inst->shape.gpus = gpus;
    inst->assignment = a;
    p.Track(inst.get());
    spot_.push_back(std::move(inst));
    return spot_.back().get();
  }

  std::unique_ptr<fleet::Fleet> fleet_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::vector<std::unique_ptr<Instance>> spot_;
};

TEST_F(PreemptorTest, FindsTheFewestVictimsOnOneNodeAndChangesNothing) {
  Preemptor p(&TestCatalog(), fleet_.get(), scheduler_.get(), {});
  Instance* whole = Spot(p, 2);  // Node A: one victim frees both GPUs.
  Spot(p, 1);                    // Node B: two victims needed.
  Spot(p, 1);
  Spot(p, 2);  // Node C.
  ASSERT_EQ(fleet_->used_gpu_milli(), 6000);
  auto plan = p.Find(Gpus(2));
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->victims.size(), 1u);
  EXPECT_TRUE(plan->victims[0] == whole || plan->victims[0] == spot_[3].get());
  EXPECT_EQ(fleet_->used_gpu_milli(), 6000) << "a search puts back what it tried";
  EXPECT_EQ(p.size(), 4u);
  EXPECT_EQ(p.CountFor(Gpus(1)), 4u);
  // Untracked instances (being deleted) are never chosen.
  p.Untrack(whole);
  p.Untrack(spot_[3].get());
  p.Untrack(spot_[3].get());  // Twice does nothing.
  plan = p.Find(Gpus(2));
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->victims.size(), 2u);
  EXPECT_EQ(p.size(), 2u);
}

TEST_F(PreemptorTest, SearchesPerRoundAreBounded) {
  Preemptor p(&TestCatalog(), fleet_.get(), scheduler_.get(), {.searches_per_round = 2});
  Spot(p, 1);
  EXPECT_FALSE(p.Find(Gpus(3))) << "no node has three GPUs";
  EXPECT_EQ(p.searches_total(), 1) << "looking for candidates is a search";
  EXPECT_FALSE(p.budget_spent());
  EXPECT_TRUE(p.Find(Gpus(2)));
  EXPECT_TRUE(p.budget_spent());
  EXPECT_FALSE(p.Find(Gpus(2))) << "the round's searches are spent";
  EXPECT_EQ(p.searches_total(), 2);
  p.NewRound();
  Preemptor empty(&TestCatalog(), fleet_.get(), scheduler_.get(), {});
  EXPECT_FALSE(empty.Find(Gpus(1)));
  EXPECT_EQ(empty.searches_total(), 0) << "without victims there is nothing to search";
  EXPECT_TRUE(p.Find(Gpus(2)));
}

}  // namespace
}  // namespace tessera::core
