#include "api/target.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

TEST(TargetTest, DecodesThePathAndTheQuery) {
  auto t = ParseTarget("/v1/instances/caf%C3%A9?state=running&label_selector=team%3Dml+x&flag");
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(t->path, "/v1/instances/caf\xc3\xa9");
  ASSERT_EQ(t->query.size(), 3u);
  EXPECT_EQ(*t->Param("state"), "running");
  EXPECT_EQ(*t->Param("label_selector"), "team=ml x");
  EXPECT_EQ(*t->Param("flag"), "");
  EXPECT_EQ(t->Param("nope"), nullptr);
  EXPECT_EQ(ParseTarget("/a+b")->path, "/a+b") << "'+' is a space in the query only";
}

TEST(TargetTest, RefusesWhatCannotBeShownOrStoredSafely) {
  struct Case {
    std::string target, error;
  };
  const std::vector<Case> cases = {
      {"", "the request target must be a path starting with '/'"},
      {"http://host/x", "the request target must be a path starting with '/'"},
      {"/x#frag", "the request target must not carry a fragment ('#')"},
      {"/%FF", "the path is not valid UTF-8 (byte 1 of the decoded text)"},
      {"/%ff%fe", "the path is not valid UTF-8 (byte 1 of the decoded text)"},
      {"/a%00b", "the path holds a control character (byte 2 of the decoded text)"},
      {"/a%1B[2J", "the path holds a control character (byte 2 of the decoded text)"},
      {"/a%2", "the path: '%' at byte 2 is not followed by two hex digits"},
      {"/a%g0", "the path: '%' at byte 2 is not followed by two hex digits"},
      {"/x?state=%C0%80",
       "query parameter 'state' is not valid UTF-8 (byte 0 of the decoded text)"},
      {"/x?%FF=1", "a query parameter's name is not valid UTF-8 (byte 0 of the decoded text)"},
      {"/x?a=1&a=2", "query parameter 'a' is given twice"},
  };
  for (const Case& c : cases) {
    auto t = ParseTarget(c.target);
    ASSERT_FALSE(t.ok()) << c.target;
    EXPECT_EQ(t.status().message(), c.error) << c.target;
  }
}

TEST(TargetTest, SplitsSegmentsKeepingEmptyOnes) {
  EXPECT_EQ(PathSegments("/v1/instances"), (std::vector<std::string_view>{"v1", "instances"}));
  EXPECT_EQ(PathSegments("/v1/instances/"), (std::vector<std::string_view>{"v1", "instances", ""}));
  EXPECT_EQ(PathSegments("/"), (std::vector<std::string_view>{""}));
}

}  // namespace
}  // namespace tessera::api
