// Stacks' records alone: the owner index follows every put and erase, the cap on a tenant's
// stacks, the records with groups still to retire, and what a restore reads back (a malformed
// record named). Planning and applying are tested through the API (tests/server_stacks_test.cc).
#include "core/stacks.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace tessera::core {
namespace {

StackRecord Stack(const std::string& tenant, const std::string& name,
                  std::vector<StackObjectRecord> objects) {
  StackRecord r;
  r.tenant = tenant;
  r.name = name;
  r.serial = 1;
  r.objects = std::move(objects);
  return r;
}

StackObjectRecord Object(const std::string& kind, const std::string& name, const std::string& id) {
  StackObjectRecord o;
  o.kind = kind;
  o.name = name;
  o.id = id;
  return o;
}

TEST(StackRecordsTest, TheOwnerIndexFollowsEveryPutAndErase) {
  Stacks stacks;
  store::Batch batch;
  ASSERT_TRUE(stacks
                  .Put(Stack("tenant-000001", "web",
                             {Object("instance", "api", "inst-000001"),
                              Object("group", "workers", "grp-000001")}),
                       batch)
                  .ok());
  const StackRecord* owner = stacks.OwnerOf("tenant-000001", "instance", "inst-000001");
  ASSERT_NE(owner, nullptr);
  EXPECT_EQ(owner->name, "web");
  EXPECT_EQ(stacks.OwnerOf("tenant-000002", "instance", "inst-000001"), nullptr)
      << "another tenant's objects are not its";
  EXPECT_EQ(stacks.OwnerOf("tenant-000001", "group", "inst-000001"), nullptr) << "by kind too";

  // A new apply replaced the instance: the old id is no longer owned.
  ASSERT_TRUE(
      stacks.Put(Stack("tenant-000001", "web", {Object("instance", "api", "inst-000002")}), batch)
          .ok());
  EXPECT_EQ(stacks.OwnerOf("tenant-000001", "instance", "inst-000001"), nullptr);
  EXPECT_EQ(stacks.OwnerOf("tenant-000001", "group", "grp-000001"), nullptr);
  EXPECT_NE(stacks.OwnerOf("tenant-000001", "instance", "inst-000002"), nullptr);
  stacks.Erase("tenant-000001", "web", batch);
  EXPECT_EQ(stacks.OwnerOf("tenant-000001", "instance", "inst-000002"), nullptr);
  EXPECT_EQ(stacks.Find("tenant-000001", "web"), nullptr);
  EXPECT_EQ(batch.deleted_settings.back(), "stack/tenant-000001/web");
}

TEST(StackRecordsTest, ATenantHoldsAtMostItsCapOfStacks) {
  Stacks stacks;
  store::Batch batch;
  for (size_t i = 0; i < kMaxStacksPerTenant; ++i) {
    ASSERT_TRUE(stacks.Put(Stack("tenant-000001", fmt::format("s{}", i), {}), batch).ok());
  }
  EXPECT_EQ(stacks.Put(Stack("tenant-000001", "one-more", {}), batch).code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(stacks.Put(Stack("tenant-000001", "s0", {}), batch).ok()) << "a replacement";
  EXPECT_TRUE(stacks.Put(Stack("tenant-000002", "s0", {}), batch).ok()) << "per tenant";
  EXPECT_EQ(stacks.List("tenant-000001").size(), kMaxStacksPerTenant);
}

TEST(StackRecordsTest, ARestoreReadsBackRecordsWithGroupsToRetireAndNamesAMalformedOne) {
  Stacks first;
  store::Batch batch;
  StackObjectRecord replacement = Object("group", "workers", "grp-000002");
  replacement.retiring = {"grp-000001"};
  ASSERT_TRUE(first.Put(Stack("tenant-000001", "web", {replacement}), batch).ok());
  ASSERT_EQ(first.Retiring().size(), 1u);

  Stacks second;
  ASSERT_TRUE(second.Restore(batch.settings).ok());
  ASSERT_EQ(second.Retiring().size(), 1u);
  EXPECT_EQ(second.Retiring()[0]->objects[0].retiring, std::vector<std::string>{"grp-000001"});
  EXPECT_NE(second.OwnerOf("tenant-000001", "group", "grp-000002"), nullptr);
  StackRecord done = *second.Find("tenant-000001", "web");
  done.objects[0].retiring.clear();
  ASSERT_TRUE(second.Put(done, batch).ok());
  EXPECT_TRUE(second.Retiring().empty());

  Stacks third;
  const Status bad = third.Restore({{"stack/tenant-000001/web", "[1, 2]"}});
  EXPECT_EQ(bad.code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.message().find("stack/tenant-000001/web"), std::string::npos) << bad.message();
}

}  // namespace
}  // namespace tessera::core
