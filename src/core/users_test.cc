// Users inside tenants and what their tokens act as, through Tenants' published index.
#include "core/users.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "core/tenants.h"
#include "store/memory_store.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

class UsersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = tenants_.Create("acme", 8000, "tenant-hash", batch_);
    ASSERT_TRUE(t.ok());
    acme_ = t->id;
  }

  Result<Principal> Who(const std::string& hash) {
    return Authenticate(*tenants_.index(), hash, clock_.Now());
  }

  // Makes user `name` with `role` and a token whose hash is `name`-hash.
  User Make(const std::string& name, Role role, bool read_only = false,
            std::optional<Time> expires = std::nullopt) {
    auto u = tenants_.CreateUser(acme_, name, role, std::nullopt, batch_);
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    EXPECT_TRUE(tenants_.AddUserToken(u->id, name + "-hash", "t", expires, read_only, batch_).ok());
    return *tenants_.users().Find(u->id);
  }

  FakeClock clock_;
  Tenants tenants_{&clock_};
  store::Batch batch_;
  TenantId acme_;
};

TEST_F(UsersTest, EachTokenActsAsItsUserWithItsRole) {
  const User owner = *tenants_.users().FirstOwner(acme_);
  EXPECT_EQ(owner.name, "owner");
  auto tenant = Who("tenant-hash");
  ASSERT_TRUE(tenant.ok());
  EXPECT_EQ(tenant->user, owner.id) << "the tenant's token acts as its first owner";
  EXPECT_EQ(tenant->role, Role::kOwner);
  const User vera = Make("vera", Role::kViewer);
  auto v = Who("vera-hash");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->tenant, acme_);
  EXPECT_EQ(v->user, vera.id);
  EXPECT_EQ(v->user_name, "vera");
  EXPECT_EQ(v->role, Role::kViewer);
  EXPECT_TRUE(Authorize(*v, Role::kViewer, false).ok());
  const Status refused = Authorize(*v, Role::kMember, true);
  EXPECT_EQ(refused.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.message(), "this needs role member; user 'vera' has role viewer");
  // A change of role reaches the token at once.
  ASSERT_TRUE(tenants_.UpdateUser(vera.id, {.role = Role::kMember}, batch_).ok());
  EXPECT_TRUE(Authorize(*Who("vera-hash"), Role::kMember, true).ok());
  // The core's own check finds the tenant behind a user's token too.
  EXPECT_EQ((*tenants_.Authenticate("vera-hash"))->id, acme_);
}

TEST_F(UsersTest, AReadOnlyTokenNeverWritesAndAnExpiredOneStops) {
  Make("rob", Role::kOwner, /*read_only=*/true);
  Make("brief", Role::kMember, false, clock_.Now() + 10min);
  EXPECT_TRUE(Authorize(*Who("rob-hash"), Role::kOwner, false).ok());
  EXPECT_NE(Authorize(*Who("rob-hash"), Role::kViewer, true).message().find("read-only"),
            std::string::npos);
  EXPECT_TRUE(Who("brief-hash").ok());
  clock_.Advance(10min);
  const auto gone = Who("brief-hash");
  EXPECT_EQ(gone.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(gone.status().message().find("this token expired at"), std::string::npos);
}

TEST_F(UsersTest, DisablingAUserOrItsTenantStopsItsTokensAtOnce) {
  const User mia = Make("mia", Role::kMember);
  ASSERT_TRUE(tenants_.UpdateUser(mia.id, {.disabled = true}, batch_).ok());
  EXPECT_EQ(Who("mia-hash").status().message(),
            "user 'mia' of tenant '" + acme_.str() + "' is disabled");
  ASSERT_TRUE(tenants_.UpdateUser(mia.id, {.disabled = false}, batch_).ok());
  EXPECT_TRUE(Who("mia-hash").ok());
  ASSERT_TRUE(tenants_.Update(acme_.str(), std::nullopt, true, batch_).ok());
  EXPECT_EQ(Who("mia-hash").status().code(), StatusCode::kPermissionDenied)
      << "a disabled tenant's users stop with it";
  ASSERT_TRUE(tenants_.Update(acme_.str(), std::nullopt, false, batch_).ok());
  EXPECT_TRUE(Who("mia-hash").ok());
  // Revoked and deleted: gone from the index.
  const std::string token = tenants_.users().Find(mia.id)->tokens[0].id;
  ASSERT_TRUE(tenants_.RevokeUserToken(mia.id, token, batch_).ok());
  EXPECT_EQ(Who("mia-hash").status().code(), StatusCode::kUnauthenticated);
  Make("max", Role::kMember);
  ASSERT_TRUE(tenants_.DeleteUser(tenants_.users().Lookup(acme_, "max")->id, batch_).ok());
  EXPECT_EQ(Who("max-hash").status().code(), StatusCode::kUnauthenticated);
}

TEST_F(UsersTest, ATenantKeepsAnEnabledOwnerAndNamesAreChecked) {
  const User owner = *tenants_.users().FirstOwner(acme_);
  EXPECT_EQ(tenants_.UpdateUser(owner.id, {.role = Role::kMember}, batch_).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(tenants_.UpdateUser(owner.id, {.disabled = true}, batch_).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(tenants_.DeleteUser(owner.id, batch_).code(), StatusCode::kFailedPrecondition);
  const User otto = Make("otto", Role::kOwner);
  EXPECT_TRUE(tenants_.UpdateUser(owner.id, {.role = Role::kMember}, batch_).ok());
  EXPECT_EQ(tenants_.DeleteUser(otto.id, batch_).code(), StatusCode::kFailedPrecondition)
      << "otto is now the last enabled owner";
  for (const std::string& bad :
       std::vector<std::string>{"", "Bob", "user-7", "a b", std::string(64, 'a'), "-x"}) {
    EXPECT_EQ(tenants_.CreateUser(acme_, bad, Role::kMember, std::nullopt, batch_).status().code(),
              StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(tenants_.CreateUser(acme_, "otto", Role::kMember, std::nullopt, batch_).status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(tenants_.users().Lookup(acme_, otto.id), tenants_.users().Lookup(acme_, "otto"));
  EXPECT_EQ(tenants_.users().Lookup(TenantId::FromNumber(99), "otto"), nullptr);
}

TEST_F(UsersTest, AUserHoldsAtMostSixteenLiveTokens) {
  const User mia = Make("mia", Role::kMember, false, clock_.Now() + 1min);
  for (size_t i = 1; i < Users::kMaxTokensPerUser; ++i) {
    ASSERT_TRUE(
        tenants_.AddUserToken(mia.id, fmt::format("h{}", i), "", std::nullopt, false, batch_).ok());
  }
  EXPECT_EQ(
      tenants_.AddUserToken(mia.id, "one-more", "", std::nullopt, false, batch_).status().code(),
      StatusCode::kResourceExhausted);
  clock_.Advance(1min);  // The first one expires, and its place is free.
  EXPECT_TRUE(tenants_.AddUserToken(mia.id, "one-more", "", std::nullopt, false, batch_).ok());
}

// The records come back as they were; a tenant from a store without users gets its first owner,
// recorded, and its token acts as it.
TEST_F(UsersTest, RestoreBringsUsersBackAndGivesOlderTenantsTheirFirstOwner) {
  Make("mia", Role::kMember, true, clock_.Now() + 1h);
  auto store = store::NewMemoryStore();
  ASSERT_TRUE(store->Commit(batch_).ok());
  // An older tenant: its record only, no user.
  store::Batch legacy;
  ASSERT_TRUE(tenants_.Create("beta", 1000, "beta-hash", legacy).ok());
  legacy.settings.clear();
  ASSERT_TRUE(store->Commit(legacy).ok());

  Tenants again(&clock_);
  auto tenants = store->LoadTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_TRUE(again.Restore(*tenants).ok());
  auto records = store->ListSettings("user");
  ASSERT_TRUE(records.ok());
  store::Batch fixed;
  ASSERT_TRUE(again.RestoreUsers(*records, fixed).ok());
  auto mia = Authenticate(*again.index(), "mia-hash", clock_.Now());
  ASSERT_TRUE(mia.ok()) << mia.status().ToString();
  EXPECT_EQ(mia->user_name, "mia");
  EXPECT_TRUE(mia->read_only);
  EXPECT_EQ(mia->expires_at, clock_.Now() + 1h);
  auto beta = Authenticate(*again.index(), "beta-hash", clock_.Now());
  ASSERT_TRUE(beta.ok());
  EXPECT_EQ(beta->role, Role::kOwner);
  EXPECT_FALSE(beta->user.empty()) << "the older tenant got its first owner";
  EXPECT_FALSE(fixed.settings.empty()) << "and it is recorded";
  // A new user never takes an id a restored one holds.
  auto next = again.CreateUser(mia->tenant, "max", Role::kMember, std::nullopt, fixed);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(again.users().Find(next->id)->name, "max");
  EXPECT_NE(next->id, mia->user);
}

}  // namespace
}  // namespace tessera::core
