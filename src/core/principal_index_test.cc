#include "core/principal_index.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace tessera::core {
namespace {

Principal Of(const std::string& tenant) {
  Principal p;
  p.tenant = TenantId::Unchecked(tenant);
  return p;
}

std::shared_ptr<const PrincipalIndex> Build(int n) {
  std::vector<PrincipalIndex::Change> changes;
  for (int i = 0; i < n; ++i) changes.push_back({fmt::format("{:064x}", i), Of("t")});
  return PrincipalIndex().With(changes);
}

TEST(PrincipalIndexTest, ChangesSetReplaceAndRemoveInOrder) {
  struct Case {
    std::vector<PrincipalIndex::Change> changes;
    std::string hash;
    std::optional<std::string> want;  // The tenant it finds, or nothing.
    size_t size;
  };
  const std::vector<Case> cases = {
      {{{"a", Of("t1")}}, "a", "t1", 1},
      {{{"a", Of("t1")}, {"a", Of("t2")}}, "a", "t2", 1},
      {{{"a", Of("t1")}, {"a", std::nullopt}}, "a", std::nullopt, 0},
      {{{"a", std::nullopt}, {"a", Of("t1")}}, "a", "t1", 1},
      {{{"a", Of("t1")}, {"b", Of("t2")}}, "b", "t2", 2},
      {{{"b", std::nullopt}}, "b", std::nullopt, 0},
      {{}, "", std::nullopt, 0},
  };
  for (const Case& c : cases) {
    auto index = PrincipalIndex().With(c.changes);
    const Principal* p = index->Find(c.hash);
    ASSERT_EQ(p != nullptr, c.want.has_value()) << c.hash;
    if (p) {
      EXPECT_EQ(p->tenant.str(), *c.want);
    }
    EXPECT_EQ(index->size(), c.size);
    EXPECT_EQ(index->count(c.hash), c.want ? 1u : 0u);
  }
}

TEST(PrincipalIndexTest, ANewIndexLeavesTheOldOneAsItWas) {
  auto before = Build(10'000);
  ASSERT_EQ(before->size(), 10'000u);
  const std::string first = fmt::format("{:064x}", 0), last = fmt::format("{:064x}", 9'999);
  const std::vector<PrincipalIndex::Change> changes = {
      {first, std::nullopt}, {last, Of("other")}, {"new", Of("t")}};
  auto after = before->With(changes);
  EXPECT_EQ(after->size(), 10'000u);
  EXPECT_FALSE(after->Find(first));
  EXPECT_EQ(after->Find(last)->tenant.str(), "other");
  EXPECT_TRUE(after->Find("new"));
  // The old one is a snapshot: a reader holding it sees none of that.
  EXPECT_EQ(before->size(), 10'000u);
  EXPECT_TRUE(before->Find(first));
  EXPECT_EQ(before->Find(last)->tenant.str(), "t");
  EXPECT_FALSE(before->Find("new"));
  for (int i = 1; i < 9'999; ++i) {
    ASSERT_TRUE(after->Find(fmt::format("{:064x}", i))) << i;
  }
}

TEST(PrincipalIndexTest, AChangeSharesWhatItDidNotTouch) {
  // Copying the whole index on every change made a token rotation cost O(every token).
  auto before = Build(10'000);
  const std::vector<PrincipalIndex::Change> one = {{"rotated", Of("t")}};
  auto after = before->With(one);
  int shared = 0;
  for (int i = 0; i < 10'000; ++i) {
    const std::string hash = fmt::format("{:064x}", i);
    shared += before->Find(hash) == after->Find(hash);  // The same entry, not a copy.
  }
  EXPECT_GE(shared, 9'900) << "one change copies one bucket (about 1/4096 of the index)";
}

TEST(PrincipalIndexTest, AuthenticateRefusesUnknownExpiredAndDisabled) {
  const Time now = FakeClock().Now();
  Principal expired = Of("tenant-000001");
  expired.expires_at = now;
  Principal disabled = Of("tenant-000002");
  disabled.disabled = true;
  const std::vector<PrincipalIndex::Change> changes = {
      {"ok", Of("tenant-000003")}, {"expired", expired}, {"disabled", disabled}};
  auto index = PrincipalIndex().With(changes);
  EXPECT_EQ(Authenticate(*index, "ok", now)->tenant.str(), "tenant-000003");
  EXPECT_EQ(Authenticate(*index, "nope", now).status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(Authenticate(*index, "expired", now).status().message(),
            "this token was replaced and its grace period has ended");
  EXPECT_EQ(Authenticate(*index, "disabled", now).status().message(),
            "tenant 'tenant-000002' is disabled");
}

}  // namespace
}  // namespace tessera::core
