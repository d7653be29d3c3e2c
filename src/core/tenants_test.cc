#include "core/tenants.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

class TenantsTest : public ::testing::Test {
 protected:
  FakeClock clock_;
  Tenants tenants_{&clock_};
  store::Batch batch_;

  // The principal a token hash authenticates as, through the published index.
  Result<Principal> Who(const std::string& hash) {
    return Authenticate(*tenants_.index(), hash, clock_.Now());
  }
};

TEST_F(TenantsTest, TheIndexAuthenticatesTenantsAndTheOperator) {
  tenants_.SetAdminTokenHash("admin-hash", batch_);
  auto acme = tenants_.Create("acme", 4000, "acme-hash", batch_);
  ASSERT_TRUE(acme.ok());
  EXPECT_TRUE(Who("admin-hash")->admin);
  EXPECT_EQ(Who("acme-hash")->tenant, acme->id);
  EXPECT_EQ(Who("nope").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(tenants_.Create("acme", 1, "other", batch_).status().code(),
            StatusCode::kAlreadyExists);
  ASSERT_EQ(batch_.tenants.size(), 1u);
  EXPECT_EQ(batch_.tenants[0].token_hash, "acme-hash");
  EXPECT_EQ(batch_.settings[0],
            (std::pair<std::string, std::string>{"admin_token_hash", "admin-hash"}));
}

TEST_F(TenantsTest, ARotatedTokenWorksUntilItsGraceEnds) {
  auto t = tenants_.Create("acme", 1000, "old", batch_);
  auto before = tenants_.index();
  ASSERT_TRUE(tenants_.Rotate(t->id.str(), "new", 1h, batch_).ok());
  EXPECT_NE(tenants_.index(), before) << "every change publishes a new index";
  EXPECT_TRUE(Who("old").ok());
  EXPECT_TRUE(Who("new").ok());
  clock_.Advance(59min);
  EXPECT_TRUE(Who("old").ok());
  clock_.Advance(1min);
  EXPECT_EQ(Who("old").status().message(),
            "this token was replaced and its grace period has ended");
  EXPECT_TRUE(Who("new").ok());
  EXPECT_TRUE(tenants_.Authenticate("new").ok());
  EXPECT_FALSE(tenants_.Authenticate("old").ok()) << "the core's check is the same rule";
  // Revoking at once also cuts short a token still in its grace.
  ASSERT_TRUE(tenants_.Rotate(t->id.str(), "newer", 1h, batch_).ok());
  ASSERT_TRUE(tenants_.Rotate(t->id.str(), "newest", Duration::zero(), batch_).ok());
  EXPECT_FALSE(Who("new").ok());
  EXPECT_FALSE(Who("newer").ok());
  EXPECT_TRUE(Who("newest").ok());
  EXPECT_EQ(tenants_.Find(t->id.str())->tokens.size(), 1u) << "ended tokens are dropped";
  EXPECT_EQ(tenants_.Rotate("tenant-999999", "x", 1h, batch_).status().code(),
            StatusCode::kNotFound);
}

TEST_F(TenantsTest, RotationsPastTheCapRetireTheOldestPredecessorsAtOnce) {
  // 2,856 rotations in their grace once left 2,857 tokens that all worked.
  auto t = tenants_.Create("acme", 1000, "h0", batch_);
  const int rotations = 20;
  for (int i = 1; i <= rotations; ++i) {
    auto r = tenants_.Rotate(t->id.str(), fmt::format("h{}", i), 1h, batch_);
    ASSERT_TRUE(r.ok()) << "a rotation always succeeds";
    EXPECT_LE(r->tokens.size(), kMaxLiveTokens);
  }
  const int oldest_live = rotations - static_cast<int>(kMaxLiveTokens) + 1;  // h13.
  for (int i = 0; i <= rotations; ++i) {
    const std::string hash = fmt::format("h{}", i);
    EXPECT_EQ(Who(hash).ok(), i >= oldest_live) << hash;
  }
  EXPECT_EQ(Who("h0").status().message(), "invalid token") << "retired, not merely expired";
  EXPECT_EQ(tenants_.index()->size(), kMaxLiveTokens) << "retired tokens leave the index";
  EXPECT_EQ(tenants_.Find(t->id.str())->tokens.back().hash, "h20") << "the newest is current";
  // The store holds the same tokens: a restart keeps exactly these.
  Tenants restored(&clock_);
  ASSERT_TRUE(restored.Restore({batch_.tenants.back()}).ok());
  for (int i = 0; i <= rotations; ++i) {
    const std::string hash = fmt::format("h{}", i);
    EXPECT_EQ(Authenticate(*restored.index(), hash, clock_.Now()).ok(), i >= oldest_live) << hash;
  }
  // A record from before the cap, with every predecessor still in its grace, keeps the newest.
  nlohmann::json doc = nlohmann::json::parse(batch_.tenants.back().doc);
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 30; ++i) {
    nlohmann::json k = {{"hash", fmt::format("old{}", i)},
                        {"created_at", FormatRfc3339(clock_.Now())}};
    if (i < 29) k["expires_at"] = FormatRfc3339(clock_.Now() + 1h);
    many.push_back(std::move(k));
  }
  doc["tokens"] = many;
  store::TenantRecord legacy = batch_.tenants.back();
  legacy.doc = doc.dump();
  Tenants upgraded(&clock_);
  ASSERT_TRUE(upgraded.Restore({legacy}).ok());
  EXPECT_EQ(upgraded.index()->size(), kMaxLiveTokens);
  EXPECT_TRUE(Authenticate(*upgraded.index(), "old29", clock_.Now()).ok());
  EXPECT_TRUE(Authenticate(*upgraded.index(), "old22", clock_.Now()).ok());
  EXPECT_FALSE(Authenticate(*upgraded.index(), "old21", clock_.Now()).ok());
}

TEST_F(TenantsTest, ARotationChangesOnlyItsTenantsEntriesOfTheIndex) {
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(tenants_.Create(fmt::format("t{}", i), 1, fmt::format("other{}", i), batch_).ok());
  }
  auto t = tenants_.Create("acme", 1000, "old", batch_);
  auto before = tenants_.index();
  ASSERT_TRUE(tenants_.Rotate(t->id.str(), "new", 1h, batch_).ok());
  auto after = tenants_.index();
  int shared = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string hash = fmt::format("other{}", i);
    ASSERT_TRUE(after->Find(hash));
    shared += before->Find(hash) == after->Find(hash);
  }
  EXPECT_GE(shared, 990) << "a rotation copies its own entries' buckets, not the whole index";
  // Ended tokens leave the index at the tenant's next change, not only stop authenticating.
  clock_.Advance(2h);
  ASSERT_TRUE(tenants_.Update(t->id.str(), 2000, std::nullopt, batch_).ok());
  EXPECT_FALSE(tenants_.index()->Find("old"));
  EXPECT_EQ(tenants_.index()->size(), 1001u);
}

TEST_F(TenantsTest, ANodeTokenActsAsItsNodeAndARotationEndsTheOldOneAtOnce) {
  tenants_.SetNodeToken("node-a", "na1");
  EXPECT_EQ(Who("na1")->node, "node-a");
  tenants_.SetNodeToken("node-a", "na2");
  EXPECT_EQ(Who("na1").status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(Who("na2")->node, "node-a");
  EXPECT_EQ(tenants_.Authenticate("na2").status().code(), StatusCode::kPermissionDenied)
      << "a node token is not a tenant's";
  EXPECT_EQ(tenants_.index()->size(), 1u);
  tenants_.SetNodeToken("node-a", "");
  EXPECT_EQ(tenants_.index()->size(), 0u);
}

TEST_F(TenantsTest, ADisabledTenantsTokensAreForbiddenAndItsQuotaChanges) {
  auto t = tenants_.Create("acme", 1000, "h", batch_);
  auto updated = tenants_.Update(t->id.str(), 2500, true, batch_);
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ(updated->quota_gpu_milli, 2500);
  EXPECT_EQ(Who("h").status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Who("h").status().message(), "tenant '" + t->id.str() + "' is disabled");
  ASSERT_TRUE(tenants_.Update(t->id.str(), std::nullopt, false, batch_).ok());
  EXPECT_TRUE(Who("h").ok());
  EXPECT_EQ(tenants_.Find(t->id.str())->quota_gpu_milli, 2500) << "an absent field keeps";
}

TEST_F(TenantsTest, RestoreRebuildsTokensGraceAndFlagsFromTheStore) {
  auto t = tenants_.Create("acme", 1000, "old", batch_);
  ASSERT_TRUE(tenants_.Rotate(t->id.str(), "new", 1h, batch_).ok());
  ASSERT_TRUE(tenants_.Update(t->id.str(), std::nullopt, true, batch_).ok());
  Tenants restored(&clock_);
  ASSERT_TRUE(restored.Restore({batch_.tenants.back()}).ok());
  const Tenant* r = restored.Find(t->id.str());
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->disabled);
  ASSERT_EQ(r->tokens.size(), 2u);
  EXPECT_EQ(r->tokens[0].hash, "old");
  EXPECT_EQ(r->tokens[0].expires_at, clock_.Now() + 1h);
  EXPECT_EQ(Authenticate(*restored.index(), "new", clock_.Now()).status().code(),
            StatusCode::kPermissionDenied);
  // A record written before tokens could rotate has only the column's hash.
  store::TenantRecord legacy{"tenant-000007", "old", "legacy-hash",
                             R"({"id":"tenant-000007","name":"old","quota":{"gpus":1.0},)"
                             R"("quota_gpu_milli":1000,"created_at":"2026-01-01T00:00:00Z"})"};
  Tenants from_legacy(&clock_);
  ASSERT_TRUE(from_legacy.Restore({legacy}).ok());
  EXPECT_TRUE(Authenticate(*from_legacy.index(), "legacy-hash", clock_.Now()).ok());
  auto next = from_legacy.Create("new", 1, "x", batch_);
  EXPECT_EQ(next->id.str(), "tenant-000008") << "ids continue after the stored ones";
}

}  // namespace
}  // namespace tessera::core
