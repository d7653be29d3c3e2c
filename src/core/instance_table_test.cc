#include "core/instance_table.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

Instance Make(int64_t seq, const std::string& tenant, InstanceState state, Time updated) {
  Instance i;
  i.id = InstanceId::FromNumber(seq);
  i.seq = seq;
  i.tenant = TenantId::Unchecked(tenant);
  i.state = state;
  i.updated_at = updated;
  return i;
}

TEST(InstanceTableTest, PagesPerTenantAndEvictionOfEndedInstances) {
  const Time t0{};
  InstanceTable table;
  table.Add(Make(1, "a", InstanceState::kRunning, t0));
  table.Add(Make(2, "b", InstanceState::kTerminated, t0 + std::chrono::seconds(5)));
  table.Add(Make(3, "a", InstanceState::kPending, t0));
  Instance& four = table.Add(Make(4, "a", InstanceState::kRunning, t0));
  bool more = false;
  const auto all = [](const Instance&) { return true; };
  auto page = table.Page("a", 0, 2, all, &more);
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[1]->seq, 3);
  EXPECT_TRUE(more);
  page = table.Page("a", 3, 2, all, &more);
  ASSERT_EQ(page.size(), 1u);
  EXPECT_FALSE(more);
  // Four ends later; only what ended before the cutoff leaves.
  four.state = InstanceState::kFailed;
  four.updated_at = t0 + std::chrono::seconds(20);
  table.Ended(four);
  EXPECT_EQ(table.EvictEndedBefore(t0 + std::chrono::seconds(10)), 1u);
  EXPECT_EQ(table.Find("inst-000002"), nullptr);
  EXPECT_NE(table.Find("inst-000004"), nullptr);
  EXPECT_EQ(table.Page("b", 0, 10, all, &more).size(), 0u);
  EXPECT_EQ(table.EvictEndedBefore(t0 + std::chrono::seconds(30)), 1u);
  EXPECT_EQ(table.size(), 2u);
}

}  // namespace
}  // namespace tessera::core
