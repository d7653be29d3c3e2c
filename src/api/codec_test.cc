#include "api/codec.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/json.h"
#include "core/group.h"

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
  EXPECT_EQ(ParseCreateTenant({{"name", "acme"}, {"quota", {{"gpus", 0.001}}}})->quota_gpu_milli,
            1);
  auto fine = ParseCreateTenant({{"name", "acme"}, {"quota", {{"gpus", 0.0001}}}});
  EXPECT_EQ(fine.status().message(),
            "field 'quota.gpus': 0.0001 is finer than the unit, a thousandth of a GPU")
      << "not stored as 0 without a word";
  EXPECT_FALSE(ParseUpdateTenant({{"quota", {{"gpus", 2.5005}}}}).ok());
  auto huge = ParseCreateInstance(*ParseJson(
      R"({"billing":"spot","gpu_model":"H100-80GB","gpus":18446744073709551615,"vcpus":1,)"
      R"("memory_mib":1})",
      "body"));
  EXPECT_EQ(huge.status().message(), "field 'gpus': 18446744073709551615 is out of range [1, 16]");
}

// The cap on pending work (quota.max_pending) alone leaves the GPUs as they are, or with them;
// its refusal is a 429 of its own, not the quota's 403.
TEST(CodecTest, ACapOnPendingWorkIsPartOfTheQuotaAndItsRefusalA429) {
  auto alone = ParseUpdateTenant({{"quota", {{"max_pending", 50}}}});
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  EXPECT_EQ(alone->max_pending, 50);
  EXPECT_FALSE(alone->quota_gpu_milli);
  auto both = ParseCreateTenant({{"name", "acme"}, {"quota", {{"gpus", 2}, {"max_pending", 0}}}});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->quota_gpu_milli, 2000);
  EXPECT_EQ(both->max_pending, 0);
  EXPECT_FALSE(ParseCreateTenant({{"name", "acme"}, {"quota", {{"gpus", 2}}}})->max_pending);
  EXPECT_EQ(ParseUpdateTenant({{"quota", {{"max_pending", 1'000'001}}}}).status().message(),
            "field 'quota.max_pending': 1000001 is out of range [0, 1000000]");
  const HttpError e =
      ToHttpError(Status::ResourceExhausted("too many").WithReason("too_many_pending"));
  EXPECT_EQ(e.status, 429);
  EXPECT_EQ(e.code, "too_many_pending");
  EXPECT_EQ(ToHttpError(Status::ResourceExhausted("quota")).status, 403);
}

TEST(CodecTest, TenantUpdatesAndTokenRotations) {
  EXPECT_EQ(ParseUpdateTenant(json::object()).status().message(),
            "field 'quota': give quota, disabled or both");
  auto u = ParseUpdateTenant({{"disabled", true}});
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->disabled, true);
  EXPECT_FALSE(u->quota_gpu_milli);
  EXPECT_EQ(ParseUpdateTenant({{"quota", {{"gpus", 3}}}})->quota_gpu_milli, 3000);
  EXPECT_EQ(ParseUpdateTenant({{"quota", json::object()}}).status().message(),
            "field 'quota.gpus': is required");
  EXPECT_EQ(ParseRotateToken(json::object())->grace, std::chrono::hours(1));
  EXPECT_EQ(ParseRotateToken({{"grace_seconds", 60}})->grace, std::chrono::seconds(60));
  EXPECT_EQ(ParseRotateToken({{"revoke_previous", true}})->grace, Duration::zero());
  EXPECT_FALSE(ParseRotateToken({{"revoke_previous", true}, {"grace_seconds", 5}}).ok());
  EXPECT_FALSE(ParseRotateToken({{"grace_seconds", -1}}).ok());
}

// An agent's report with `key` set to `value` beside the fields every report has.
Result<core::AgentSync> SyncWith(const std::string& key, json value) {
  json body = {{"protocol", 1}, {"agent_id", "a1"}, {"seq", 1}, {"generation", 0}};
  body[key] = std::move(value);
  return ParseSync(body);
}

TEST(CodecTest, AnAgentsIsolationIsUidOrNoneAndErrorsNameTheField) {
  auto sync = [](json isolation) { return SyncWith("isolation", std::move(isolation)); };
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

TEST(CodecTest, ImageFieldsOfAnInstanceAndATemplateAreCheckedNamingTheField) {
  const std::string secret = "pa55-never-echoed";
  auto ok = ParseCreateInstance(
      Share({{"image", "registry.example.com:5000/team/train:1.4"},
             {"pull_policy", "if_not_present"},
             {"registry_auth", {{"username", "robot"}, {"password", secret}}}}));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->image.ref, "registry.example.com:5000/team/train:1.4");
  EXPECT_EQ(ok->image.auth->password, secret);
  EXPECT_TRUE(ok->command.empty()) << "an image without a command runs its own entrypoint";
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"image", "Upper/case"}},
       "field 'image': path component 'Upper' may hold only lowercase letters, digits, '.', '_' "
       "and '-'"},
      {{{"image", "train:1.4 "}}, "field 'image': holds whitespace or a control character"},
      {{{"image", std::string(256, 'a')}}, "field 'image': is 256 bytes; at most 255"},
      {{{"image", "train@sha256:00"}},
       "field 'image': digest must be '@sha256:' and 64 lowercase hex digits"},
      {{{"image", true}}, "field 'image': expected a string, found boolean"},
      {{{"pull_policy", "always"}}, "field 'pull_policy': applies only with an image"},
      {{{"image", "train"}, {"pull_policy", "Always"}},
       "field 'pull_policy': 'Always' is not if_not_present, always or never"},
      {{{"registry_auth", {{"username", "robot"}, {"password", secret}}}},
       "field 'registry_auth': applies only with an image"},
      {{{"image", "train"}, {"registry_auth", {{"username", "robot"}}}},
       "field 'registry_auth.password': is required"},
      {{{"image", "train"},
        {"registry_auth", {{"username", "robot"}, {"password", std::string(1025, 'x')}}}},
       "field 'registry_auth.password': is 1025 bytes; at most 1024"},
      {{{"image", "train"}, {"registry_auth", {{"username", 7}, {"password", secret}}}},
       "field 'registry_auth.username': expected a string, found integer"},
      {{{"image", "train"},
        {"registry_auth", {{"username", "robot"}, {"password", json::array({secret})}}}},
       "field 'registry_auth.password': expected a string, found array"},
  };
  for (const auto& [extra, message] : refused) {
    auto r = ParseCreateInstance(Share(extra));
    ASSERT_FALSE(r.ok()) << extra.dump();
    EXPECT_EQ(r.status().message(), message) << extra.dump();
    EXPECT_EQ(r.status().message().find(secret), std::string::npos);
    // The same fields in a group's template are named under it.
    json group = {{"size", 2}, {"template", Share(extra)}};
    JsonFields f(group, "body");
    auto g = core::ReadGroupRequest(f, group);
    const Status s = !f.ok() ? BodyStatus(f) : g.status();
    EXPECT_EQ(s.message(), "field 'template." + message.substr(7)) << extra.dump();
  }
}

// An instance's env: literals and references to secrets; every error names the variable and
// none quotes a value (it may be a secret sent by mistake).
TEST(CodecTest, EnvIsReadNamingTheVariableAndNeverQuotingAValue) {
  auto ok = ParseCreateInstance(
      Share({{"env", {{"HF_HOME", "/data"}, {"TOKEN", {{"secret", "hf-token"}}}}}}));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->env.at("HF_HOME").value, "/data");
  EXPECT_EQ(ok->env.at("TOKEN").secret, "hf-token");
  const std::string hidden = "hunter2-do-not-show";
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"1BAD", hidden}}, "field 'env.1BAD': is not a variable name"},
      {{{"CUDA_VISIBLE_DEVICES", hidden}}, "field 'env.CUDA_VISIBLE_DEVICES': cannot be set"},
      {{{"TESSERA_X", hidden}}, "field 'env.TESSERA_X': cannot be set"},
      {{{"MASTER_PORT", hidden}}, "field 'env.MASTER_PORT': cannot be set"},
      {{{"A", std::string(32 << 10, 'x').insert(0, hidden)}}, "field 'env.A': is 32787 bytes"},
      {{{"A", std::string("hunter2-do-not-show\0", 20)}}, "field 'env.A': holds a NUL byte"},
      {{{"A", 7}}, "field 'env.A': expected a string or {\"secret\": \"NAME\"}, found integer"},
      {{{"A", {{"secret", "a/x"}}}}, "field 'env.A.secret':"},
      {{{"A", {{"secret", "ok"}, {"extra", hidden}}}}, "field 'env.A': expected a string or"},
  };
  for (const auto& [env, want] : cases) {
    auto r = ParseCreateInstance(Share({{"env", env}}));
    ASSERT_FALSE(r.ok()) << env.dump().substr(0, 80);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
    if (!env.begin().value().is_object()) {
      EXPECT_EQ(r.status().message().find(hidden), std::string::npos) << r.status().message();
    }
  }
  json many = json::object();
  for (int i = 0; i < 129; ++i) many[fmt::format("V{}", i)] = "x";
  EXPECT_NE(ParseCreateInstance(Share({{"env", many}})).status().message().find("129 variables"),
            std::string::npos);
  json big = json::object();
  for (int i = 0; i < 9; ++i) big[fmt::format("V{}", i)] = std::string(30 << 10, 'x');
  EXPECT_NE(ParseCreateInstance(Share({{"env", big}})).status().message().find("the most is"),
            std::string::npos);
}

TEST(CodecTest, AnAgentsGpuModeResultsAreCheckedNamingTheField) {
  auto sync = [](json results) { return SyncWith("gpu_mode_results", std::move(results)); };
  auto ok = sync({{{"id", 3}, {"gpu", 1}, {"state", "pending_reset"}, {"reason", "a reset"}},
                  {{"id", 4}, {"gpu", 0}, {"state", "applied"}}});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  ASSERT_EQ(ok->gpu_mode_results.size(), 2u);
  EXPECT_EQ(ok->gpu_mode_results[0].id, 3);
  EXPECT_EQ(ok->gpu_mode_results[0].gpu, 1);
  EXPECT_EQ(ok->gpu_mode_results[0].state, core::ModeChangeState::kPendingReset);
  EXPECT_EQ(ok->gpu_mode_results[0].reason, "a reset");
  EXPECT_EQ(ok->gpu_mode_results[1].state, core::ModeChangeState::kApplied);
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"id", 1}, {"gpu", 0}, {"state", "requested"}},
       "gpu_mode_results[0]: field 'state': 'requested' is not applied, pending_reset, refused or "
       "failed"},
      {{{"id", 0}, {"gpu", 0}, {"state", "applied"}}, "gpu_mode_results[0]: field 'id'"},
      {{{"id", 1}, {"gpu", 16}, {"state", "applied"}}, "gpu_mode_results[0]: field 'gpu'"},
      {{{"id", 1}, {"gpu", 0}}, "gpu_mode_results[0]: field 'state': is required"},
      {{{"id", 1}, {"gpu", 0}, {"state", "failed"}, {"reason", std::string(513, 'r')}},
       "gpu_mode_results[0]: field 'reason': is longer than 512 bytes"},
      {{{"id", 1}, {"gpu", 0}, {"state", "failed"}, {"mode", "mig"}},
       "gpu_mode_results[0]: field 'mode': is not a known field"},
  };
  for (const auto& [entry, message] : refused) {
    auto r = sync(json::array({entry}));
    ASSERT_FALSE(r.ok()) << entry.dump();
    EXPECT_EQ(r.status().message().substr(0, message.size()), message) << r.status().message();
  }
  EXPECT_EQ(sync({{"id", 1}}).status().message(), "field 'gpu_mode_results': expected a list");
}

// A log's offset leaves room for a report's bytes: its end can never overflow.
TEST(CodecTest, ALogOffsetNearTheEndOfInt64IsRefused) {
  auto sync = [](int64_t offset) {
    return SyncWith("logs", json::array({{{"id", "inst-000001"},
                                          {"attempt", 0},
                                          {"offset", offset},
                                          {"data_base64", "aGk="}}}));
  };
  EXPECT_TRUE(sync(1'000'000).ok());
  auto huge = sync(INT64_MAX - 3);  // Seen in a trial: 2^63 - 3.
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("field 'offset'"), std::string::npos)
      << huge.status().message();
}

// A report of a workload whose image is still being pulled: {"state": "pulling", "pull": {...}}.
TEST(CodecTest, APullingReportCarriesItsProgressAndErrorsNameTheField) {
  auto sync = [](json report) { return SyncWith("workloads", json::array({std::move(report)})); };
  auto pulling = [](json pull) {
    return json{{"id", "inst-000001"}, {"attempt", 2}, {"state", "pulling"}, {"pull", pull}};
  };
  auto ok = sync(pulling({{"bytes", 44040192}, {"total_bytes", 104857600}, {"percent", 42.9}}));
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_TRUE(ok->reports.empty()) << "a pull is no report of a start or an end";
  ASSERT_EQ(ok->pulls.size(), 1u);
  EXPECT_EQ(ok->pulls[0].instance, "inst-000001");
  EXPECT_EQ(ok->pulls[0].attempt, 2);
  EXPECT_EQ(ok->pulls[0].progress.bytes, 44040192);
  EXPECT_EQ(ok->pulls[0].progress.total_bytes, 104857600);
  EXPECT_EQ(ok->pulls[0].progress.percent, 42) << "rounded down";
  EXPECT_TRUE(sync(pulling({{"bytes", 0}, {"total_bytes", 0}, {"percent", 0}})).ok())
      << "a size not known yet is 0";
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"id", "inst-000001"}, {"attempt", 0}, {"state", "pulling"}}, "field 'pull': is required"},
      {pulling({{"bytes", -1}, {"total_bytes", 0}, {"percent", 0}}),
       "field 'pull.bytes': -1 is out of range [0, 9223372036854775807]"},
      {pulling({{"bytes", 1}, {"total_bytes", "10"}, {"percent", 0}}),
       "field 'pull.total_bytes': expected an integer, found string"},
      {pulling({{"bytes", 1}, {"total_bytes", 10}, {"percent", 101}}),
       "field 'pull.percent': 101 is out of range [0, 100]"},
      {pulling({{"bytes", 1}, {"total_bytes", 10}}), "field 'pull.percent': is required"},
      {pulling({{"bytes", 1}, {"total_bytes", 10}, {"percent", 5}, {"layers", 3}}),
       "field 'pull.layers': is not a known field"},
      {pulling(7), "field 'pull': expected an object, found integer"},
      {{{"id", "inst-000001"},
        {"attempt", 0},
        {"state", "running"},
        {"pull", {{"bytes", 1}, {"total_bytes", 1}, {"percent", 100}}}},
       "field 'pull': applies only to state pulling"},
      {{{"id", "inst-000001"}, {"attempt", 0}, {"state", "downloading"}},
       "field 'state': 'downloading' is not running, pulling or exited"},
  };
  for (const auto& [report, message] : refused) {
    auto r = sync(report);
    ASSERT_FALSE(r.ok()) << report.dump();
    EXPECT_EQ(r.status().message(), "workloads[0]: " + message) << report.dump();
  }
}

// An entry's error names the entry, and a start time that does not parse is quoted, not echoed:
// the fuzzer found control characters and any length of text coming back in the 400.
TEST(CodecTest, AReportsErrorsNameTheEntryAndQuoteWhatWasSent) {
  const json running = {{"id", "inst-000001"}, {"attempt", 0}, {"state", "running"}};
  json bad = running;
  bad["started_at"] = "2026-1EE\x1b[31m" + std::string(5000, 'x');
  auto r = SyncWith("workloads", json::array({running, bad}));
  ASSERT_FALSE(r.ok());
  const std::string& m = r.status().message();
  EXPECT_EQ(m.rfind("workloads[1]: field 'started_at': '2026-1EE\\e[31mxxx", 0), 0u) << m;
  EXPECT_LT(m.size(), 200u);
  EXPECT_EQ(m.find('\x1b'), std::string::npos);
  auto log = SyncWith("logs", json::array({{{"id", "inst-000001"},
                                            {"attempt", 0},
                                            {"offset", 0},
                                            {"data_base64", "not base64!"}}}));
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().message(), "logs[0]: field 'data_base64': is not padded standard base64");
}

}  // namespace
}  // namespace tessera::api
