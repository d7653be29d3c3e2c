#include "common/server_list.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ServerListTest, ARedirectIsFollowedOnlyToAListedServer) {
  auto list = ServerList::Parse("http://a:1, http://b:2/,https://c:3", "--server");
  ASSERT_TRUE(list.ok()) << list.status().message();
  EXPECT_EQ(list->urls(), (std::vector<std::string>{"http://a:1", "http://b:2", "https://c:3"}));
  EXPECT_EQ(list->current(), "http://a:1");
  EXPECT_TRUE(list->Follow("https://c:3/v1/instances?limit=2"));
  EXPECT_EQ(list->current(), "https://c:3");
  EXPECT_FALSE(list->Follow("http://evil:1/v1/instances")) << "a token goes to listed servers only";
  EXPECT_FALSE(list->Follow("http://a:10/v1")) << "a port that merely begins with a listed one";
  EXPECT_EQ(list->current(), "https://c:3");
  list->Next();
  EXPECT_EQ(list->current(), "http://a:1") << "round and round";
}

TEST(ServerListTest, AnythingButURLsIsRefusedNamingTheFlag) {
  for (const char* bad : {"", "a:1", "http://", "http://a:1,", "ftp://x", "http://a:1/path"}) {
    auto list = ServerList::Parse(bad, "--server");
    ASSERT_FALSE(list.ok()) << bad;
    EXPECT_NE(list.status().message().find("--server"), std::string::npos);
  }
}

}  // namespace
}  // namespace tessera
