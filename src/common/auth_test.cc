#include "common/auth.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera {
namespace {

TEST(AuthTest, TokensAre256BitRandomHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto t = GenerateToken();
    ASSERT_TRUE(t.ok());
    ASSERT_EQ(t->size(), 4u + 64u);
    EXPECT_EQ(t->substr(0, 4), "tsr_");
    EXPECT_EQ(t->find_first_not_of("0123456789abcdef", 4), std::string::npos);
    EXPECT_TRUE(seen.insert(*t).second) << "duplicate token";
  }
}

TEST(AuthTest, HashIsSha256) {
  // Known answer: SHA-256("abc").
  EXPECT_EQ(HashToken("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(AuthTest, ConstantTimeEquals) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(AuthTest, BearerHeader) {
  EXPECT_EQ(BearerToken("Bearer tsr_abc"), "tsr_abc");
  EXPECT_EQ(BearerToken("Bearer   tsr_abc  "), "tsr_abc");
  EXPECT_EQ(BearerToken("Basic dXNlcg=="), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_EQ(BearerToken(""), "");
}

}  // namespace
}  // namespace tessera
