#include "sched/queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::sched {
namespace {

Request WithPriority(int p) { return Request{.cpu_milli = 1000, .priority = p}; }

std::vector<uint64_t> Drain(Queue& q) {
  std::vector<uint64_t> ids;
  while (std::optional<Queue::Entry> e = q.Pop()) ids.push_back(e->id);
  return ids;
}

TEST(QueueTest, HighestPriorityFirstThenFifo) {
  Queue q;
  q.Push(1, WithPriority(0));
  q.Push(2, WithPriority(5));
  q.Push(3, WithPriority(0));
  q.Push(4, WithPriority(5));
  q.Push(5, WithPriority(-1));
  EXPECT_EQ(q.size(), 5u);
  ASSERT_NE(q.Front(), nullptr);
  EXPECT_EQ(q.Front()->id, 2u);
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{2, 4, 1, 3, 5}));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.Front(), nullptr);
  EXPECT_FALSE(q.Pop().has_value());
}

TEST(QueueTest, RemoveTakesOutOneEntry) {
  Queue q;
  q.Push(1, WithPriority(1));
  q.Push(2, WithPriority(1));
  q.Push(3, WithPriority(2));
  EXPECT_TRUE(q.Remove(3));
  EXPECT_FALSE(q.Remove(3));
  EXPECT_TRUE(q.Remove(1));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(Drain(q), (std::vector<uint64_t>{2}));
}

TEST(QueueTest, KeepsTheRequest) {
  Queue q;
  q.Push(7, Request{.cpu_milli = 3000, .gpu_count = 1, .gpu_milli = 250, .priority = 2});
  const std::optional<Queue::Entry> e = q.Pop();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->request.cpu_milli, 3000);
  EXPECT_EQ(e->request.gpu_milli, 250);
}

}  // namespace
}  // namespace tessera::sched
