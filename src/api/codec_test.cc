#include "api/codec.h"

#include <gtest/gtest.h>

#include "common/json.h"

namespace tessera::api {
namespace {

using nlohmann::json;

json Share(json extra = json::object()) {
  json j = {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}};
  j.update(extra);
  return j;
}

TEST(CodecTest, NamesFollowTheDocumentedSet) {
  for (const std::string& name :
       {std::string("train-01"), std::string("a"), std::string(63, 'n'), std::string("v1.2_x")}) {
    EXPECT_TRUE(ParseCreateInstance(Share({{"name", name}})).ok()) << name;
  }
  for (const std::string& name :
       {std::string(64, 'n'), std::string(1 << 20, 'n'), std::string("a\nb"),
        std::string("a\0b", 3), std::string("\x1b[2Jx"), std::string("-x"), std::string("Upper"),
        std::string("sp ace")}) {
    auto r = ParseCreateInstance(Share({{"name", name}}));
    ASSERT_FALSE(r.ok()) << name.substr(0, 10);
    EXPECT_EQ(r.status().message(),
              "field 'name': must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or "
              "digit");
  }
  EXPECT_FALSE(ParseCreateTenant({{"name", "a\x1b"}}).ok());
}

TEST(CodecTest, CommandsLabelsAndAnnotationsAreBounded) {
  EXPECT_TRUE(ParseCreateInstance(Share({{"command", std::string(64 << 10, 'c')}})).ok());
  auto big = ParseCreateInstance(Share({{"command", std::string((64 << 10) + 1, 'c')}}));
  EXPECT_EQ(big.status().message(), "field 'command': is 65537 bytes; at most 65536");
  auto labels = ParseCreateInstance(Share(
      {{"labels", {{"team", "ml"}, {"tier", "gold"}}}, {"annotations", {{"note", "long\ntext"}}}}));
  ASSERT_TRUE(labels.ok()) << labels.status().message();
  EXPECT_EQ(labels->labels.at("team"), "ml");
  EXPECT_EQ(labels->annotations.at("note"), "long\ntext");
  EXPECT_FALSE(ParseCreateInstance(Share({{"labels", {{"team", 7}}}})).ok());
  EXPECT_FALSE(ParseCreateInstance(Share({{"labels", "team=ml"}})).ok());
  EXPECT_FALSE(ParseCreateInstance(Share({{"labels", {{"bad key", "x"}}}})).ok());
}

TEST(CodecTest, ObjectsWhereObjectsBelongAndIntegersAsSent) {
  auto quota = ParseCreateTenant({{"name", "acme"}, {"quota", 5}});
  EXPECT_EQ(quota.status().message(), "field 'quota': expected an object, found integer");
  auto gpus = ParseCreateTenant({{"name", "acme"}, {"quota", {{"gpus", "4"}}}});
  EXPECT_EQ(gpus.status().message(), "field 'quota.gpus': expected a number, found string");
  auto ok = ParseCreateTenant({{"name", "acme"}, {"quota", {{"gpus", 2.5}}}});
  EXPECT_EQ(ok->quota_gpu_milli, 2500);
  auto huge = ParseCreateInstance(*ParseJson(
      R"({"billing":"spot","gpu_model":"H100-80GB","gpus":18446744073709551615,"vcpus":1,)"
      R"("memory_mib":1})",
      "body"));
  EXPECT_EQ(huge.status().message(), "field 'gpus': 18446744073709551615 is out of range [1, 16]");
}

TEST(CodecTest, TenantUpdatesAndTokenRotations) {
  EXPECT_EQ(ParseUpdateTenant(json::object()).status().message(),
            "field 'quota': give quota, disabled or both");
  auto u = ParseUpdateTenant({{"disabled", true}});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->disabled, true);
  EXPECT_FALSE(u->quota_gpu_milli);
  EXPECT_EQ(ParseUpdateTenant({{"quota", {{"gpus", 3}}}})->quota_gpu_milli, 3000);
  EXPECT_EQ(ParseRotateToken(json::object())->grace, std::chrono::hours(1));
  EXPECT_EQ(ParseRotateToken({{"grace_seconds", 60}})->grace, std::chrono::seconds(60));
  EXPECT_EQ(ParseRotateToken({{"revoke_previous", true}})->grace, Duration::zero());
  EXPECT_FALSE(ParseRotateToken({{"revoke_previous", true}, {"grace_seconds", 5}}).ok());
  EXPECT_FALSE(ParseRotateToken({{"grace_seconds", -1}}).ok());
}

TEST(CodecTest, AnAgentsIsolationIsUidOrNoneAndErrorsNameTheField) {
  auto sync = [](json isolation) {
    json body = {{"protocol", 1},
                 {"agent_id", "a1"},
                 {"seq", 1},
                 {"generation", 0},
                 {"isolation", std::move(isolation)}};
    return ParseSync(body);
  };
  auto uid = sync({{"mode", "uid"}, {"note", "one uid per tenant"}});
  ASSERT_TRUE(uid.ok()) << uid.status().message();
  EXPECT_EQ(uid->isolation, core::Isolation::kUid);
  EXPECT_EQ(uid->isolation_note, "one uid per tenant");
  EXPECT_EQ(sync({{"mode", "none"}})->isolation, core::Isolation::kNone);
  EXPECT_EQ(sync({{"mode", "root"}}).status().message(),
            "field 'isolation.mode': 'root' is not uid or none");
  EXPECT_EQ(sync({{"note", "x"}}).status().message(), "field 'isolation.mode': is required");
  EXPECT_EQ(sync({{"mode", "uid"}, {"uids", 5}}).status().message(),
            "field 'isolation.uids': is not a known field");
  EXPECT_EQ(sync("uid").status().message(), "field 'isolation': expected an object, found string");
  EXPECT_EQ(sync({{"mode", "none"}, {"note", std::string(513, 'n')}}).status().message(),
            "field 'isolation.note': is longer than 512 bytes");
  json older = {{"protocol", 1}, {"agent_id", "a1"}, {"seq", 1}, {"generation", 0}};
  auto quiet = ParseSync(older);
  ASSERT_TRUE(quiet.ok());
  EXPECT_FALSE(quiet->isolation) << "an older agent says nothing: the server counts it as none";
}

}  // namespace
}  // namespace tessera::api
