#include "sim/repack.h"

#include <gtest/gtest.h>

#include "fleet/fleet_file.h"

namespace tessera::sim {
namespace {

sched::Request Share(int milli) {
  sched::Request r;
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
    auto s = sched::Scheduler::Create(&*fleet_, {"guarded-fgd", 42, {}});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    scheduler_ = std::move(s).value();
    repacker_.emplace(*fleet_, *scheduler_);
  }
  void Book(int gpu, int milli) {
    const sched::Request r = Share(milli);
    fleet::Assignment a{.node = fleet::NodeIndex{0},
                        .cpu_milli = r.cpu_milli,
                        .memory_mib = r.memory_mib,
                        .gpu_count = 1,
                        .gpus = {}};
    a.gpus[0] = {
        .gpu = gpu, .milli = milli, .memory_mib = 0, .mig_profile = nullptr, .mig_start = 0};
    ASSERT_TRUE(scheduler_->Reserve(a).ok());
    repacker_->Placed(r, a);
  }
  int Free(int gpu) const { return fleet_->node(fleet::NodeIndex{0}).gpus[gpu].free_milli; }

  catalog::Catalog catalog_;
  std::optional<fleet::Fleet> fleet_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::optional<Repacker> repacker_;
};

TEST_F(RepackerTest, MovesAShareToFreeAWholeGpu) {
  Book(0, 300);
  Book(1, 600);
  const sched::Request whole = Share(1000);
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
  repacker_->Placed(Share(1000), whole);
  sched::Request two = Share(1000);
  two.gpu_count = 2;
  EXPECT_FALSE(repacker_->MakeRoom(two));
  EXPECT_FALSE(repacker_->MakeRoom(Share(1000)));  // The 300 has nowhere to go.
  EXPECT_EQ(Free(0), 700);
  EXPECT_EQ(Free(1), 0);
}

}  // namespace
}  // namespace tessera::sim
