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

TEST(InstanceTableTest, ACallerFindsItsOwnInstancesAndAnotherTenantsReadAsUnknown) {
  InstanceTable table;
  table.Add(Make(1, "tenant-000001", InstanceState::kRunning, Time{}));
  Tenant owner;
  owner.id = TenantId::Unchecked("tenant-000001");
  Tenant other;
  other.id = TenantId::Unchecked("tenant-000002");
  Tenant admin;
  admin.admin = true;

  auto own = table.FindFor(owner, "inst-000001");
  ASSERT_TRUE(own.ok());
  EXPECT_EQ((*own)->seq, 1);
  EXPECT_TRUE(table.FindFor(admin, "inst-000001").ok());
  const Status theirs = table.FindFor(other, "inst-000001").status();
  const Status unknown = table.FindFor(other, "inst-000404").status();
  EXPECT_EQ(theirs.code(), StatusCode::kNotFound);
  EXPECT_EQ(theirs.message(), "instance 'inst-000001' not found")
      << "the same words as for an id that does not exist";
  EXPECT_EQ(unknown.message(), "instance 'inst-000404' not found");
  // The id comes from a URL: the message shows it escaped and cut.
  const std::string hostile = "x\x1b[2J" + std::string(100, 'y');
  const std::string shown = table.FindFor(owner, hostile).status().message();
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_LT(shown.size(), 100u) << shown;
}

}  // namespace
}  // namespace tessera::core
