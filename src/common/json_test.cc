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

TEST(JsonTest, AKeyGivenTwiceIsAnErrorNamingItsPath) {
  for (const auto& [text, path] : std::vector<std::pair<std::string, std::string>>{
           {R"({"name": "a", "name": "b"})", "name"},
           {R"({"quota": {"gpus": 1, "gpus": 2}})", "quota.gpus"},
           {R"({"items": [{"a": 1}, {"b": 1, "b": 2}]})", "items[1].b"},
       }) {
    auto j = ParseJson(text, "body");
    ASSERT_FALSE(j.ok()) << text;
    EXPECT_EQ(j.status().message(), "body: field '" + path + "': appears more than once");
  }
  // The same key in sibling objects is fine.
  EXPECT_TRUE(ParseJson(R"({"a": {"x": 1}, "b": {"x": 2}})", "body").ok());
}

TEST(JsonTest, DeepNestingAndInvalidUtf8AreRefused) {
  const std::string deep = std::string(65, '[') + std::string(65, ']');
  auto j = ParseJson(deep, "body");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "body: nested deeper than 64 levels");
  EXPECT_TRUE(ParseJson(std::string(64, '[') + std::string(64, ']'), "body").ok());
  auto bad = ParseJson("{\"name\": \"\xff\x1b[2J\"}", "body");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("malformed JSON at byte"), std::string::npos);
  EXPECT_EQ(bad.status().message().find('\x1b'), std::string::npos) << "the token is escaped";
  EXPECT_EQ(bad.status().message().find('\xff'), std::string::npos);
}

TEST(JsonTest, IntegersOutOfRangeAreReportedAsSent) {
  auto j = *ParseJson(
      R"({"a": 18446744073709551615, "b": -9223372036854775808, "c": 1e300, "d": 2.5, "e": 1e3})",
      "x");
  JsonFields f(j, "body");
  f.Int("a", 1, 16);
  f.Int("b", 1, 16);
  f.Int("c", 1, 16);
  f.Int("d", 1, 16);
  EXPECT_EQ(f.Int("e", 1, 10000), 1000) << "an integer written as a float is an integer";
  const std::vector<std::string> want = {
      "body: field 'a': 18446744073709551615 is out of range [1, 16]",
      "body: field 'b': -9223372036854775808 is out of range [1, 16]",
      "body: field 'c': 1e+300 is out of range [1, 16]",
      "body: field 'd': expected an integer, found 2.5",
  };
  EXPECT_EQ(f.errors(), want);
}

TEST(JsonTest, NestedObjectsReportTheirFieldsByPath) {
  auto j = *ParseJson(R"({"quota": {"gpus": "four", "colour": 1}, "limits": 5})", "x");
  JsonFields f(j, "body");
  JsonFields q = f.Object("quota");
  q.RejectUnknown({"gpus"});
  q.Number("gpus", 0, 10);
  JsonFields l = f.Object("limits");
  EXPECT_TRUE(l.absent());
  l.Int("max", 0, 1);  // Reads nothing, adds nothing: the type error is already there.
  JsonFields m = f.Object("missing", false);
  m.Int("max", 0, 1);
  const std::vector<std::string> want = {
      "body: field 'quota.colour': is not a known field",
      "body: field 'quota.gpus': expected a number, found string",
      "body: field 'limits': expected an object, found integer",
  };
  EXPECT_EQ(f.errors(), want);
}

TEST(JsonTest, StringMapsNameTheEntryOfTheWrongType) {
  auto j = *ParseJson(R"({"labels": {"team": "ml", "n": 1}})", "x");
  JsonFields f(j, "body");
  const auto labels = f.StringMap("labels");
  EXPECT_EQ(labels.size(), 1u);
  EXPECT_EQ(f.errors(),
            std::vector<std::string>{"body: field 'labels.n': expected a string, found integer"});
}

TEST(JsonTest, DumpNeverThrowsOnInvalidUtf8) {
  const nlohmann::json j = {{"action", "POST /\xff\xfe"}};
  EXPECT_EQ(DumpJson(j), "{\"action\":\"POST /\xef\xbf\xbd\xef\xbf\xbd\"}");
}

}  // namespace
}  // namespace tessera
