// ParseTable: a good table parses; each kind of defect gets an error naming the entry, the profile
// and the field, and every defect in a table is reported at once.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

nlohmann::json GoodTable() {
  return nlohmann::json::parse(R"({
    "model": "H100-80GB", "memory_slices": 8, "compute_slices": 7,
    "profiles": [
      {"name": "1g.10gb", "id": 19, "compute_slices": 1, "memory_slices": 1,
       "media_extensions": false, "starts": [0, 1, 2, 3, 4, 5, 6], "max_count": 7,
       "memory_mib": 9984},
      {"name": "1g.10gb+me", "id": 20, "compute_slices": 1, "memory_slices": 1,
       "media_extensions": true, "starts": [6, 5, 4, 3, 2, 1, 0], "max_count": 1,
       "memory_mib": 9984},
      {"name": "3g.40gb", "id": 9, "compute_slices": 3, "memory_slices": 4,
       "starts": [0, 4], "max_count": 2, "memory_mib": 40448}
    ]})");
}

constexpr const char* kWhere = "mig.json: entry 'H100-80GB'";

TEST(ParseTableTest, GoodTable) {
  Result<Table> t = ParseTable(GoodTable(), kWhere);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->model, "H100-80GB");
  EXPECT_EQ(t->memory_slices, 8);
  EXPECT_EQ(t->compute_slices, 7);
  ASSERT_EQ(t->profiles.size(), 3u);
  const Profile* me = t->Find("1g.10gb+me");
  ASSERT_NE(me, nullptr);
  EXPECT_TRUE(me->media_extensions);
  EXPECT_EQ(me->starts, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));  // Sorted.
  const Profile* g3 = t->Find("3g.40gb");
  ASSERT_NE(g3, nullptr);
  EXPECT_FALSE(g3->media_extensions);  // Optional, false when absent.
  EXPECT_EQ(g3->id, 9);
  EXPECT_EQ(g3->compute_slices, 3);
  EXPECT_EQ(g3->memory_slices, 4);
  EXPECT_EQ(g3->max_count, 2);
  EXPECT_EQ(g3->memory_mib, 40448);
  EXPECT_EQ(t->Find("2g.20gb"), nullptr);
}

struct ErrorCase {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
  std::string error;  // The whole message; lines joined by '\n'.
};

TEST(ParseTableTest, Errors) {
  const std::string w = kWhere;
  const std::string g3 = w + ": profile '3g.40gb'";
  const std::vector<ErrorCase> cases = {
      {"not an object", [](nlohmann::json& j) { j = nlohmann::json::array(); },
       w + ": expected an object, found array"},
      {"unknown table field", [](nlohmann::json& j) { j["colour"] = "green"; },
       w + ": field 'colour': is not a known field"},
      {"missing model", [](nlohmann::json& j) { j.erase("model"); },
       w + ": field 'model': is required"},
      {"empty model", [](nlohmann::json& j) { j["model"] = ""; },
       w + ": field 'model': must not be empty"},
      {"memory slices as text", [](nlohmann::json& j) { j["memory_slices"] = "8"; },
       w + ": field 'memory_slices': expected an integer, found string"},
      {"compute slices zero", [](nlohmann::json& j) { j["compute_slices"] = 0; },
       w + ": field 'compute_slices': 0 is out of range [1, 64]"},
      {"profiles not an array", [](nlohmann::json& j) { j["profiles"] = 3; },
       w + ": field 'profiles': expected an array of objects, found integer"},
      {"no profiles", [](nlohmann::json& j) { j["profiles"] = nlohmann::json::array(); },
       w + ": field 'profiles': must list at least one profile"},
      {"profile not an object", [](nlohmann::json& j) { j["profiles"][1] = "1g"; },
       w + ": profiles[1]: expected an object, found string"},
      {"unknown profile field", [](nlohmann::json& j) { j["profiles"][2]["size"] = 4; },
       g3 + ": field 'size': is not a known field"},
      {"missing name", [](nlohmann::json& j) { j["profiles"][2].erase("name"); },
       w + ": profiles[2]: field 'name': is required"},
      {"name with @", [](nlohmann::json& j) { j["profiles"][2]["name"] = "3g@40gb"; },
       w + ": profile '3g@40gb': field 'name': '3g@40gb' must not contain '@' or spaces"},
      {"duplicate name", [](nlohmann::json& j) { j["profiles"][2]["name"] = "1g.10gb"; },
       w + ": profile '1g.10gb': field 'name': is listed twice"},
      {"duplicate id", [](nlohmann::json& j) { j["profiles"][2]["id"] = 19; },
       g3 + ": field 'id': 19 is also the id of '1g.10gb'"},
      {"id as float", [](nlohmann::json& j) { j["profiles"][2]["id"] = 9.5; },
       g3 + ": field 'id': expected an integer, found 9.5"},
      {"compute above the table's",
       [](nlohmann::json& j) { j["profiles"][2]["compute_slices"] = 8; },
       g3 + ": field 'compute_slices': 8 is out of range [1, 7]"},
      {"memory above the table's", [](nlohmann::json& j) { j["profiles"][2]["memory_slices"] = 9; },
       g3 + ": field 'memory_slices': 9 is out of range [1, 8]"},
      {"start past the end",
       [](nlohmann::json& j) {
         j["profiles"][2]["starts"] = {0, 5};
       },
       g3 + ": field 'starts': item 1: 5 is out of range [0, 4] (the profile takes 4 of "
            "the GPU's 8 memory slices)"},
      {"negative start", [](nlohmann::json& j) { j["profiles"][2]["starts"] = {-1}; },
       g3 + ": field 'starts': item 0: -1 is out of range [0, 4] (the profile takes 4 of "
            "the GPU's 8 memory slices)"},
      {"start twice",
       [](nlohmann::json& j) {
         j["profiles"][2]["starts"] = {0, 4, 0};
       },
       g3 + ": field 'starts': item 2: start 0 is listed twice"},
      {"start as text", [](nlohmann::json& j) { j["profiles"][2]["starts"] = {"0"}; },
       g3 + ": field 'starts': item 0: expected an integer, found string"},
      {"no starts", [](nlohmann::json& j) { j["profiles"][2]["starts"] = nlohmann::json::array(); },
       g3 + ": field 'starts': must list at least one start"},
      {"starts not an array", [](nlohmann::json& j) { j["profiles"][2]["starts"] = 0; },
       g3 + ": field 'starts': expected an array of integers, found integer"},
      {"max count zero", [](nlohmann::json& j) { j["profiles"][2]["max_count"] = 0; },
       g3 + ": field 'max_count': 0 is out of range [1, 8]"},
      {"memory missing", [](nlohmann::json& j) { j["profiles"][2].erase("memory_mib"); },
       g3 + ": field 'memory_mib': is required"},
      {"+me flag without suffix",
       [](nlohmann::json& j) { j["profiles"][2]["media_extensions"] = true; },
       g3 + ": field 'media_extensions': is true but the name does not end in '+me'"},
      {"+me suffix without flag",
       [](nlohmann::json& j) { j["profiles"][1]["media_extensions"] = false; },
       w + ": profile '1g.10gb+me': field 'media_extensions': is false but the name ends in "
           "'+me'"},
      {"media extensions as text",
       [](nlohmann::json& j) { j["profiles"][2]["media_extensions"] = "no"; },
       g3 + ": field 'media_extensions': expected true or false, found string"},
      {"every error at once",
       [](nlohmann::json& j) {
         j["compute_slices"] = "7";
         j["profiles"][0]["max_count"] = -1;
         j["profiles"][2]["starts"] = {0, 7};
       },
       w + ": field 'compute_slices': expected an integer, found string\n" + w +
           ": profile '1g.10gb': field 'max_count': -1 is out of range [1, 8]\n" + g3 +
           ": field 'starts': item 1: 7 is out of range [0, 4] (the profile takes 4 of "
           "the GPU's 8 memory slices)"},
  };
  for (const ErrorCase& c : cases) {
    nlohmann::json j = GoodTable();
    c.edit(j);
    Result<Table> t = ParseTable(j, kWhere);
    EXPECT_EQ(t.status().ToString(), Status::InvalidArgument(c.error).ToString()) << c.name;
  }
}

}  // namespace
}  // namespace tessera::mig
