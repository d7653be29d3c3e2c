// The endpoint table alone: a snapshot made afresh only after a change, an instance served only
// while it runs and gone once it has no endpoints, and groups' services that have not ended.
#include "core/endpoint_table.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

Instance WithPort(const std::string& id, InstanceState state, int host_port) {
  Instance inst;
  inst.id = *InstanceId::Parse(id);
  inst.tenant = *TenantId::Parse("tenant-000001");
  inst.state = state;
  if (host_port > 0) inst.endpoints.push_back({8080, "node-1", host_port});
  return inst;
}

TEST(EndpointTableTest, ASnapshotIsMadeAfreshOnlyAfterAChange) {
  EndpointTable table;
  const std::map<std::string, Group> none;
  const auto empty = table.Snapshot(none);
  EXPECT_TRUE(empty->instances.empty());
  table.Index(WithPort("inst-000001", InstanceState::kPending, 0));
  EXPECT_EQ(table.Snapshot(none), empty) << "no endpoints, nothing changed";

  table.Index(WithPort("inst-000001", InstanceState::kRunning, 31000));
  const auto running = table.Snapshot(none);
  ASSERT_NE(running, empty);
  ASSERT_EQ(running->instances.count("inst-000001"), 1u);
  EXPECT_TRUE(running->instances.at("inst-000001").serving);
  EXPECT_EQ(running->instances.at("inst-000001").endpoints[0].host_port, 31000);
  table.Index(WithPort("inst-000001", InstanceState::kRunning, 31000));
  EXPECT_EQ(table.Snapshot(none), running) << "the same endpoints: the same snapshot";

  table.Index(WithPort("inst-000001", InstanceState::kStopping, 31000));
  const auto stopping = table.Snapshot(none);
  EXPECT_FALSE(stopping->instances.at("inst-000001").serving) << "not sent requests while it stops";
  EXPECT_TRUE(running->instances.at("inst-000001").serving) << "a published snapshot never changes";
  table.Index(WithPort("inst-000001", InstanceState::kTerminated, 0));
  EXPECT_TRUE(table.Snapshot(none)->instances.empty());
}

TEST(EndpointTableTest, AGroupsServiceIsListedUntilItEnds) {
  EndpointTable table;
  std::map<std::string, Group> groups;
  Group g;
  g.id = "grp-000001";
  g.tenant = *TenantId::Parse("tenant-000001");
  g.spec.service = Service{8080, "/healthz"};
  g.members = {"inst-000001"};
  groups[g.id] = g;
  table.Index(WithPort("inst-000001", InstanceState::kRunning, 31000));
  auto snap = table.Snapshot(groups);
  ASSERT_EQ(snap->services.count("grp-000001"), 1u);
  EXPECT_EQ(snap->services.at("grp-000001").members, std::vector<std::string>{"inst-000001"});
  groups[g.id].state = GroupState::kDeleted;
  table.Index(WithPort("inst-000001", InstanceState::kStopping, 31000));
  EXPECT_TRUE(table.Snapshot(groups)->services.empty());
}

}  // namespace
}  // namespace tessera::core
