#include "core/queue.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

Instance Pending(int64_t seq, int vcpus, Billing billing = Billing::kOnDemand) {
  Instance i;
  i.id = InstanceId::FromNumber(seq);
  i.seq = seq;
  i.billing = billing;
  i.shape.gpu_model = "H100-80GB";
  i.shape.gpus = 1;
  i.shape.vcpus = vcpus;
  return i;
}

// Runs a pass where `fits` says which ids are placed; returns the ids tried, in order.
std::vector<std::string> Pass(PendingQueue& q, size_t budget,
                              const std::function<Attempt(const std::string&)>& answer) {
  std::vector<std::string> tried;
  q.Pass(budget, [&](const std::string& id) {
    tried.push_back(id);
    return answer(id);
  });
  return tried;
}

TEST(PendingQueueTest, GroupsGoByPriorityThenAgeAndAFailureEndsOnlyItsGroup) {
  PendingQueue q;
  q.Push(Pending(1, 4, Billing::kSpot));
  q.Push(Pending(2, 8));
  q.Push(Pending(3, 4, Billing::kSpot));  // Joins 1's group.
  q.Push(Pending(4, 8));                  // Joins 2's group.
  q.Push(Pending(5, 2, Billing::kReserved));
  EXPECT_EQ(q.groups(), 3u);
  const auto tried = Pass(q, 10, [](const std::string& id) {
    return id == "inst-000002" ? Attempt::kNoRoom : Attempt::kPlaced;
  });
  // Reserved first; then on-demand, whose oldest finds no room so 4 is not tried; then spot.
  EXPECT_EQ(tried,
            (std::vector<std::string>{"inst-000005", "inst-000002", "inst-000001", "inst-000003"}));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_FALSE(q.HasUntried()) << "the on-demand group waits for capacity to free";
  EXPECT_TRUE(Pass(q, 10, [](const std::string&) { return Attempt::kPlaced; }).empty());
  q.CapacityFreed();
  EXPECT_TRUE(q.HasUntried());
  EXPECT_EQ(Pass(q, 10, [](const std::string&) { return Attempt::kPlaced; }),
            (std::vector<std::string>{"inst-000002", "inst-000004"}));
  EXPECT_EQ(q.size(), 0u);
}

TEST(PendingQueueTest, APassSpendsAtMostItsBudgetAndTheNextResumesWhereItStopped) {
  PendingQueue q;
  for (int i = 1; i <= 10; ++i) q.Push(Pending(i, i));  // Ten groups.
  const auto no_room = [](const std::string&) { return Attempt::kNoRoom; };
  EXPECT_EQ(Pass(q, 4, no_room).size(), 4u);
  EXPECT_TRUE(q.HasUntried());
  EXPECT_EQ(Pass(q, 4, no_room),
            (std::vector<std::string>{"inst-000005", "inst-000006", "inst-000007", "inst-000008"}));
  EXPECT_EQ(Pass(q, 4, no_room).size(), 2u);
  EXPECT_FALSE(q.HasUntried());
}

TEST(PendingQueueTest, DeferredGroupsStayUntriedAndJoiningAFailedGroupWaits) {
  PendingQueue q;
  q.Push(Pending(1, 1));
  q.Push(Pending(2, 2), /*tried=*/true);  // Just found no room.
  EXPECT_EQ(Pass(q, 10, [](const std::string&) { return Attempt::kDeferred; }),
            std::vector<std::string>{"inst-000001"});
  EXPECT_TRUE(q.HasUntried()) << "deferred, not written off";
  q.Push(Pending(3, 2));  // Identical to 2, which failed: it waits with it.
  EXPECT_TRUE(q.HasGroup(Pending(9, 2)));
  EXPECT_EQ(Pass(q, 10, [](const std::string&) { return Attempt::kPlaced; }),
            std::vector<std::string>{"inst-000001"});
  EXPECT_FALSE(q.HasUntried());
  EXPECT_TRUE(q.Remove(Pending(3, 2)));
  EXPECT_FALSE(q.Remove(Pending(3, 2)));
  EXPECT_EQ(q.size(), 1u);
}

}  // namespace
}  // namespace tessera::core
