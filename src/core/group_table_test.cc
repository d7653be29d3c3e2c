// The group table alone: ids never reused, a tenant sees only its own groups, which groups wait
// and in what order, the flags a round consumes, and the retention of ended groups.
#include "core/group_table.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

const Time kNoon = Time(std::chrono::seconds(1'796'644'800));  // 2026-12-07T12:00:00Z.

Tenant Named(const std::string& id) {
  Tenant t;
  t.id = *TenantId::Parse(id);
  t.name = id;
  return t;
}

Group& Added(GroupTable& table, const std::string& tenant, Billing billing) {
  Group g;
  table.Number(g);
  g.tenant = *TenantId::Parse(tenant);
  g.spec.member.billing = billing;
  return table.Add(std::move(g));
}

std::vector<std::string> Ids(const std::vector<Group*>& groups) {
  std::vector<std::string> out;
  for (const Group* g : groups) out.push_back(g->id);
  return out;
}

TEST(GroupTableTest, IdsAreNeverReusedAndATenantFindsOnlyItsOwn) {
  GroupTable table;
  Group& first = Added(table, "tenant-000001", Billing::kOnDemand);
  EXPECT_EQ(first.id, "grp-000001");
  EXPECT_EQ(first.seq, 1);
  Group undone;
  table.Number(undone);  // Numbered, then never added (its members were refused).
  EXPECT_EQ(Added(table, "tenant-000002", Billing::kOnDemand).id, "grp-000003");
  EXPECT_EQ(table.next(), 4);
  table.NextAtLeast(10);  // One past a stored group's seq.
  EXPECT_EQ(Added(table, "tenant-000001", Billing::kOnDemand).id, "grp-000010");

  EXPECT_TRUE(table.Of(Named("tenant-000001"), "grp-000001").ok());
  const Status other = table.Of(Named("tenant-000002"), "grp-000001").status();
  EXPECT_EQ(other.code(), StatusCode::kNotFound);
  EXPECT_EQ(other.message(), "group 'grp-000001' not found")
      << "another tenant's group reads as an unknown one";
  EXPECT_EQ(table.Of(Named("tenant-000002"), "grp-999999").status().code(), StatusCode::kNotFound);
  Tenant admin;
  admin.admin = true;
  EXPECT_TRUE(table.Of(admin, "grp-000001").ok());
}

TEST(GroupTableTest, WaitingGroupsComeByPriorityThenAgeAndEndedOnesAreDropped) {
  GroupTable table;
  Group& spot = Added(table, "tenant-000001", Billing::kSpot);
  Group& od = Added(table, "tenant-000001", Billing::kOnDemand);
  Group& reserved = Added(table, "tenant-000001", Billing::kReserved);
  Group& od2 = Added(table, "tenant-000001", Billing::kOnDemand);
  for (const Group* g : {&spot, &od, &reserved, &od2}) table.MarkWaiting(g->id);
  EXPECT_EQ(Ids(table.Waiting(false)), (std::vector<std::string>{reserved.id, od.id, od2.id}));
  EXPECT_EQ(Ids(table.Waiting(true)), std::vector<std::string>{spot.id});
  od.state = GroupState::kDeleted;
  table.DoneWaiting(reserved.id);
  EXPECT_EQ(Ids(table.Waiting(false)), std::vector<std::string>{od2.id});
  od.state = GroupState::kRunning;
  EXPECT_EQ(Ids(table.Waiting(false)), std::vector<std::string>{od2.id})
      << "an ended group left the waiting set for good";

  EXPECT_FALSE(table.TakeRetry());
  table.Retry();
  EXPECT_TRUE(table.TakeRetry());
  EXPECT_FALSE(table.TakeRetry()) << "taken once";
  table.MemberEnded("inst-000001");
  EXPECT_EQ(table.TakeEndedMembers(), std::vector<std::string>{"inst-000001"});
  EXPECT_TRUE(table.TakeEndedMembers().empty());
}

TEST(GroupTableTest, EndedGroupsLeaveAfterTheRetentionAndTheirMembersWithThem) {
  GroupTable table;
  Group& ended = Added(table, "tenant-000001", Billing::kOnDemand);
  ended.state = GroupState::kSucceeded;
  ended.updated_at = kNoon;
  ended.members = {"inst-000001", "inst-000002"};
  Group& running = Added(table, "tenant-000001", Billing::kOnDemand);
  running.updated_at = kNoon - 24h;
  Instance member;
  member.id = *InstanceId::Parse("inst-000002");
  member.group = ended.id;
  EXPECT_TRUE(table.Lists(member));
  member.group.clear();
  EXPECT_FALSE(table.Lists(member)) << "a single instance is no group's";

  std::vector<std::string> evicted;
  auto note = [&](const Group& g) { evicted.push_back(g.id); };
  table.EvictEnded(kNoon, 1h, note);
  EXPECT_TRUE(evicted.empty()) << "ended at the cutoff, not before";
  table.EvictEnded(kNoon + 30s, 1h, note);
  EXPECT_TRUE(evicted.empty()) << "a sweep a minute at most";
  table.EvictEnded(kNoon + 61s, 1h, note);
  EXPECT_EQ(evicted, std::vector<std::string>{"grp-000001"});
  EXPECT_EQ(table.Find("grp-000001"), nullptr);
  EXPECT_NE(table.Find("grp-000002"), nullptr) << "a running group stays, however old";
}

}  // namespace
}  // namespace tessera::core
