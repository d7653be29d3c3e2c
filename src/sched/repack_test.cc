#include "sched/repack.h"

#include <gtest/gtest.h>

#include "fleet/fleet_file.h"

namespace tessera::sched {
namespace {

Request Share(int milli) {
  Request r;
  r.cpu_milli = 1000;
  r.memory_mib = 1024;
  r.gpu_count = 1;
  r.gpu_milli = milli;
  return r;
}

// One node of two GPUs, with shares booked on chosen GPUs.
class RepackerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = catalog::Catalog::LoadEmbedded();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    catalog_ = std::move(c).value();
    auto f = fleet::ParseOpenbNodeCsv(
        catalog_, "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\n", "nodes");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    fleet_.emplace(std::move(f).value());
    auto s = Scheduler::Create(&*fleet_, {"guarded-fgd", 42, {}});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    scheduler_ = std::move(s).value();
    repacker_.emplace(*fleet_, *scheduler_);
  }
  void Book(int gpu, int milli, const void* owner = nullptr, uint32_t source = 0) {
    Request r = Share(milli);
    r.source = source;
    fleet::Assignment a{.node = fleet::NodeIndex{0},
                        .cpu_milli = r.cpu_milli,
                        .memory_mib = r.memory_mib,
                        .gpu_count = 1,
                        .gpus = {}};
    a.gpus[0] = {
        .gpu = gpu, .milli = milli, .memory_mib = 0, .mig_profile = nullptr, .mig_start = 0};
    ASSERT_TRUE(scheduler_->Reserve(a).ok());
    repacker_->Track(std::to_string(next_id_++), r, a, owner);
  }
  int Free(int gpu) const { return fleet_->node(fleet::NodeIndex{0}).gpus[gpu].free_milli; }

  catalog::Catalog catalog_;
  std::optional<fleet::Fleet> fleet_;
  std::unique_ptr<Scheduler> scheduler_;
  std::optional<Repacker> repacker_;
  int next_id_ = 0;
};

TEST_F(RepackerTest, MovesAShareToFreeAWholeGpu) {
  Book(0, 300);
  Book(1, 600);
  const Request whole = Share(1000);
  ASSERT_FALSE(scheduler_->Schedule(whole));  // No GPU is free as it stands.
  ASSERT_TRUE(repacker_->MakeRoom(whole));
  EXPECT_EQ(repacker_->moves(), 1);
  EXPECT_EQ(repacker_->moved_milli(), 300);
  EXPECT_EQ(Free(0) + Free(1), 100);  // 300 + 600 + 1000 of 2,000.
  EXPECT_TRUE(Free(0) == 0 || Free(1) == 0);
}

TEST_F(RepackerTest, MovesTwoSharesWhenOneIsNotEnough) {
  Book(0, 200);
  Book(0, 250);
  Book(1, 500);
  ASSERT_TRUE(repacker_->MakeRoom(Share(1000)));
  EXPECT_EQ(repacker_->moves(), 2);
  EXPECT_EQ(repacker_->moved_milli(), 450);
  EXPECT_EQ(Free(0) + Free(1), 50);
}

TEST_F(RepackerTest, PutsEverythingBackWhenTheMovedShareFitsNowhere) {
  Book(0, 300);
  Book(1, 800);
  EXPECT_FALSE(repacker_->MakeRoom(Share(1000)));
  EXPECT_EQ(repacker_->moves(), 0);
  EXPECT_EQ(Free(0), 700);
  EXPECT_EQ(Free(1), 200);
  // The scheduler's own view was put back too: the 700 left on GPU 0 takes a 700 share.
  EXPECT_TRUE(scheduler_->Schedule(Share(700)));
  EXPECT_EQ(Free(0), 0);
}

TEST_F(RepackerTest, NeverMovesWholeGpusNorHelpsAPodOfSeveralGpus) {
  Book(0, 300);
  fleet::Assignment whole{.node = fleet::NodeIndex{0},
                          .cpu_milli = 1000,
                          .memory_mib = 1024,
                          .gpu_count = 1,
                          .gpus = {}};
  whole.gpus[0] = {
      .gpu = 1, .milli = 1000, .memory_mib = 0, .mig_profile = nullptr, .mig_start = 0};
  ASSERT_TRUE(scheduler_->Reserve(whole).ok());
  repacker_->Track("whole", Share(1000), whole);
  Request two = Share(1000);
  two.gpu_count = 2;
  EXPECT_FALSE(repacker_->MakeRoom(two));
  EXPECT_FALSE(repacker_->MakeRoom(Share(1000)));  // The 300 has nowhere to go.
  EXPECT_EQ(Free(0), 700);
  EXPECT_EQ(Free(1), 0);
}

TEST_F(RepackerTest, MovesOnlyTheSharesItMayAndSaysWhereEachWent) {
  Book(0, 300);        // "0"
  Book(0, 100, this);  // "1", which may not move.
  Book(1, 600);        // "2"
  // Moving "0" and "1" (400 milli) would be cheapest; "1" may not move (its owner says so), so
  // "2" goes instead.
  auto plan = repacker_->MakeRoom(Share(1000), [](const void* owner) { return owner == nullptr; });
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].id, "2");
  EXPECT_EQ(plan->moves[0].from.gpus[0].gpu, 1);
  EXPECT_EQ(plan->moves[0].to.gpus[0].gpu, 0);
  EXPECT_EQ(plan->placed.gpus[0].gpu, 1);
  EXPECT_EQ(Free(0), 0);
  EXPECT_EQ(Free(1), 0);
  // Its books follow the move: "2" now sits on GPU 0, and an untracked share never moves.
  repacker_->Untrack("2");
  repacker_->Untrack("0");
  EXPECT_FALSE(repacker_->MakeRoom(Share(300)));
}

TEST_F(RepackerTest, TwoSharesMoveTogetherOnlyWhenOneSourceSentThem) {
  Book(0, 200, nullptr, 1);  // "0"
  Book(0, 250, nullptr, 2);  // "1": with "0", the cheapest pair, but another source's.
  Book(1, 500, nullptr, 1);  // "2"
  auto plan = repacker_->MakeRoom(Share(1000));
  ASSERT_TRUE(plan);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].id, "2");
}

}  // namespace
}  // namespace tessera::sched
