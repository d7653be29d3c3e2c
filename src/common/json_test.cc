#include "common/json.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(JsonTest, MalformedTextNamesWhereAndOffset) {
  auto j = ParseJson("{\"a\": 1,, }", "gpus.json");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message().rfind("gpus.json: malformed JSON at byte 9", 0), 0u)
      << j.status().message();
}

TEST(JsonTest, FieldsCollectEveryError) {
  auto j = *ParseJson(R"({"id": 7, "vcpus": -1, "ram": 1.5, "ok": "yes", "colour": "red"})", "x");
  JsonFields f(j, "types.json: entry 'a'");
  EXPECT_EQ(f.String("id"), "");
  EXPECT_EQ(f.Int("vcpus", 1, 1024), 0);
  EXPECT_EQ(f.Int("ram", 0, 10), 0);
  EXPECT_EQ(f.Bool("ok"), false);
  EXPECT_EQ(f.String("missing"), "");
  EXPECT_EQ(f.String("optional", false, "dflt"), "dflt");
  f.RejectUnknown({"id", "vcpus", "ram", "ok"});
  const std::vector<std::string> want = {
      "types.json: entry 'a': field 'id': expected a string, found integer",
      "types.json: entry 'a': field 'vcpus': -1 is out of range [1, 1024]",
      "types.json: entry 'a': field 'ram': expected an integer, found 1.5",
      "types.json: entry 'a': field 'ok': expected true or false, found string",
      "types.json: entry 'a': field 'missing': is required",
      "types.json: entry 'a': field 'colour': is not a known field",
  };
  EXPECT_EQ(f.errors(), want);
  EXPECT_FALSE(f.status().ok());
}

TEST(JsonTest, NonObjectIsAnError) {
  auto j = *ParseJson("[1,2]", "x");
  JsonFields f(j, "x: entry 0");
  EXPECT_EQ(f.errors().front(), "x: entry 0: expected an object, found array");
}

}  // namespace
}  // namespace tessera
