// Tenants over time, against the real binary: token rotation with a grace period or at once,
// quota changes, disabling, and the same through the client commands; and TLS end to end.
#include <regex>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using testing::RunTessera;

class TenantLifecycleTest : public ServerTest {
 protected:
  testing::CommandResult Cli(std::vector<std::string> args, const std::string& token) {
    args.insert(args.end(), {"--url", server_->url(), "--token", token});
    return RunTessera(args);
  }
};

TEST_F(TenantLifecycleTest, ARotatedTokenKeepsWorkingForItsGraceOrStopsAtOnce) {
  auto created = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 4}}}});
  ASSERT_EQ(created.status, 201);
  const std::string id = created.body["id"];
  const std::string first = created.body["token"];
  // The tenant rotates its own token; the old one keeps working for the grace period.
  auto rotated = Post("/v1/tenants/" + id + "/tokens", first, {{"grace_seconds", 600}});
  ASSERT_EQ(rotated.status, 201) << rotated.raw;
  const std::string second = rotated.body["token"];
  EXPECT_TRUE(std::regex_match(second, std::regex("tsr_[0-9a-f]{64}")));
  EXPECT_NE(second, first);
  ASSERT_EQ(rotated.body["tokens"].size(), 2u);
  EXPECT_TRUE(rotated.body["tokens"][0].contains("expires_at"));
  EXPECT_FALSE(rotated.body["tokens"][0].contains("hash")) << "hashes stay in the store";
  EXPECT_EQ(Get("/v1/instances", first).status, 200);
  EXPECT_EQ(Get("/v1/instances", second).status, 200);
  // The admin rotates it again and revokes every earlier token at once.
  auto revoked = Post("/v1/tenants/" + id + "/tokens", kAdminToken, {{"revoke_previous", true}});
  ASSERT_EQ(revoked.status, 201) << revoked.raw;
  const std::string third = revoked.body["token"];
  for (const std::string& old : {first, second}) {
    auto r = Get("/v1/instances", old);
    EXPECT_EQ(r.status, 401);
  }
  EXPECT_EQ(Get("/v1/instances", third).status, 200);
  // It survives a restart.
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  StartServer();
  EXPECT_EQ(Get("/v1/instances", third).status, 200);
  EXPECT_EQ(Get("/v1/instances", first).status, 401);
  // Another tenant can neither rotate nor read this one.
  auto other = Post("/v1/tenants", kAdminToken, {{"name", "beta"}, {"quota", {{"gpus", 1}}}});
  const std::string beta = other.body["token"];
  EXPECT_EQ(Post("/v1/tenants/" + id + "/tokens", beta, json::object()).status, 404);
  EXPECT_EQ(Get("/v1/tenants/" + id, beta).status, 404);
  EXPECT_EQ(Get("/v1/tenants/" + id, third).body["name"], "acme");
}

TEST_F(TenantLifecycleTest, RotationsPastTheCapLeaveOnlyTheNewestTokensAcrossARestart) {
  // 2,856 rotations once left 2,857 valid tokens, and each rotation slowed with their count.
  auto created = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 4}}}});
  ASSERT_EQ(created.status, 201);
  const std::string id = created.body["id"];
  std::vector<std::string> tokens = {created.body["token"]};
  constexpr size_t kCap = 8, kRotations = 11;
  for (size_t i = 0; i < kRotations; ++i) {
    auto rotated = Post("/v1/tenants/" + id + "/tokens", tokens.back(), {{"grace_seconds", 600}});
    ASSERT_EQ(rotated.status, 201) << "a rotation always succeeds: " << rotated.raw;
    EXPECT_LE(rotated.body["tokens"].size(), kCap) << rotated.raw;
    tokens.push_back(rotated.body["token"]);
  }
  const auto check = [&](const std::string& when) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const bool live = i + kCap >= tokens.size();  // The newest kCap.
      EXPECT_EQ(Get("/v1/instances", tokens[i]).status, live ? 200 : 401)
          << "token " << i << " " << when;
    }
    EXPECT_EQ(Get("/v1/tenants/" + id, kAdminToken).body["tokens"].size(), kCap) << when;
  };
  check("after the rotations");
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  StartServer();
  check("after a restart");
}

TEST_F(TenantLifecycleTest, QuotaChangesAndADisabledTenantStopsQueuing) {
  auto created = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 1}}}});
  const std::string id = created.body["id"];
  const std::string token = created.body["token"];
  ASSERT_EQ(Post("/v1/instances", token, H100(1, "on_demand")).status, 201);
  EXPECT_EQ(Post("/v1/instances", token, H100(1, "on_demand")).status, 403) << "quota 1";
  auto raised = Patch("/v1/tenants/" + id, kAdminToken, {{"quota", {{"gpus", 3}}}});
  ASSERT_EQ(raised.status, 200) << raised.raw;
  EXPECT_EQ(raised.body["quota"]["gpus"], 3.0);
  EXPECT_EQ(raised.body["usage"]["gpus"], 1.0);
  ASSERT_EQ(Post("/v1/instances", token, H100(1, "on_demand")).status, 201);
  auto queued = Post("/v1/instances", token, H100(1, "on_demand"));
  ASSERT_EQ(queued.status, 201);
  EXPECT_EQ(queued.body["state"], "pending") << "the node's two H100s are taken";
  // Disabling refuses every request of the tenant and ends what it had waiting.
  auto disabled = RunTessera(
      {"tenants", "update", id, "--disable", "--url", server_->url(), "--token", kAdminToken});
  ASSERT_EQ(disabled.exit_code, 0) << disabled.err;
  EXPECT_NE(disabled.out.find("true"), std::string::npos) << disabled.out;
  auto refused = Get("/v1/instances", token);
  EXPECT_EQ(refused.status, 403);
  EXPECT_EQ(refused.body["error"]["message"], "tenant '" + id + "' is disabled");
  // The two placed instances run once their agent has started them.
  const auto placed = Get("/v1/instances", kAdminToken).body["instances"];
  for (const auto& i : placed) Settle(kAdminToken, i["id"]);
  auto all = Get("/v1/instances", kAdminToken).body["instances"];
  int running = 0;
  for (const auto& i : all) {
    if (i["id"] == queued.body["id"]) {
      EXPECT_EQ(i["state"], "terminated");
      EXPECT_EQ(i["reason"], "its tenant was disabled while it was pending");
    }
    running += i["state"] == "running" ? 1 : 0;
  }
  EXPECT_EQ(running, 2) << "what runs keeps running";
  ASSERT_EQ(Patch("/v1/tenants/" + id, kAdminToken, {{"disabled", false}}).status, 200);
  EXPECT_EQ(Get("/v1/instances", token).status, 200);
  EXPECT_EQ(Patch("/v1/tenants/tenant-424242", kAdminToken, {{"disabled", true}}).status, 404);
  EXPECT_EQ(Patch("/v1/tenants/" + id, token, {{"disabled", false}}).status, 403)
      << "a tenant cannot change its own quota or flag";
}

TEST_F(TenantLifecycleTest, TheClientCommandsRotateAndShowTokens) {
  auto created = Cli({"tenants", "create", "acme", "--quota-gpus", "2", "-o", "json"}, kAdminToken);
  ASSERT_EQ(created.exit_code, 0) << created.err;
  const json t = json::parse(created.out);
  const std::string id = t["id"];
  auto rotated = Cli({"tenants", "rotate-token", id, "--grace-seconds", "60"}, t["token"]);
  ASSERT_EQ(rotated.exit_code, 0) << rotated.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(rotated.out, m, std::regex("(tsr_[0-9a-f]{64})"))) << rotated.out;
  const std::string fresh = m[1];
  EXPECT_TRUE(std::regex_search(rotated.out, std::regex("\\d{4}-\\d\\d-\\d\\dT")))
      << "the previous token's expiry is shown";
  auto shown = Cli({"tenants", "get", id}, fresh);
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_TRUE(std::regex_search(shown.out, std::regex(id + " +acme +2 +0 +false"))) << shown.out;
  auto both = Cli({"tenants", "update", id, "--disable", "--enable"}, kAdminToken);
  EXPECT_EQ(both.exit_code, 2);
}

TEST(TlsServerTest, TheCliVerifiesTheServersCertificate) {
  testing::TempDir dir;
  std::string cert, key;
  ASSERT_TRUE(testing::MakeSelfSignedCert(dir, cert, key));
  const std::string fleet = dir.Write("fleet.json", kSmallFleet);
  testing::ServerProcess server;
  ASSERT_TRUE(server.Start(
      {"--data", dir.File("data"), "--fleet", fleet, "--tls-cert", cert, "--tls-key", key},
      kAdminToken))
      << server.output();
  ASSERT_EQ(server.url().rfind("https://127.0.0.1:", 0), 0u) << server.url();
  auto ok =
      RunTessera({"tenants", "list", "--url", server.url(), "--token", kAdminToken, "--ca", cert});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  auto unverified = RunTessera({"tenants", "list", "--url", server.url(), "--token", kAdminToken});
  EXPECT_EQ(unverified.exit_code, 1);
  EXPECT_NE(unverified.err.find("give --ca FILE"), std::string::npos) << unverified.err;
  const std::string plain = "http://127.0.0.1:" + std::to_string(server.port());
  auto cleartext = RunTessera({"tenants", "list", "--url", plain, "--token", kAdminToken});
  EXPECT_EQ(cleartext.exit_code, 1) << "no clear-text answer on a TLS port";
}

TEST(TlsServerTest, PlainHttpOffLoopbackStartsWithALoudWarning) {
  testing::TempDir dir;
  const std::string fleet = dir.Write("fleet.json", kSmallFleet);
  testing::ServerProcess server;
  server.SetListenHost("0.0.0.0");
  ASSERT_TRUE(server.Start({"--data", dir.File("data"), "--fleet", fleet}, kAdminToken))
      << server.output();
  EXPECT_NE(server.output().find("WARNING: tessera server listens on 0.0.0.0 without TLS"),
            std::string::npos)
      << server.output();
}

}  // namespace
}  // namespace tessera
