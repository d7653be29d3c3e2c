// Secrets and envelope encryption through a real server (docs/secrets.md): a secret reaches its
// workload's environment and no answer, log or database file; a secret in use is not deleted
// unless forced; a wrong keyring stops the start naming the key; a rotation under a create load
// loses nothing and leaves no record on the old key.
#include <fmt/format.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string Sha256Hex(const std::string& s) {
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), d, &n, EVP_sha256(), nullptr);
  std::string out;
  for (unsigned int i = 0; i < n; ++i) out += fmt::format("{:02x}", d[i]);
  return out;
}

// A value no test could meet by chance.
std::string Unique(const std::string& prefix) {
  static int n = 0;
  return fmt::format("{}-{:08x}-{}-{}", prefix, static_cast<unsigned>(getpid()), ++n,
                     std::chrono::steady_clock::now().time_since_epoch().count());
}

// Every byte of a file, "" when it cannot be read (binary-safe, unlike ReadFile's text).
std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class TenantSecretsTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    token_ = NewTenant("acme", 8);
  }

  json Instance(const std::string& command, const json& env) {
    json body = H100(1, "on_demand");
    body["command"] = command;
    body["env"] = env;
    return body;
  }

  // The database's files as bytes, together.
  std::string Database() {
    std::string all;
    for (const char* f : {"tessera.db", "tessera.db-wal"}) all += Bytes(dir_.File("data/") + f);
    return all;
  }

  std::string token_;
};

TEST_F(TenantSecretsTest, ASecretReachesItsWorkloadAndAppearsNowhereElse) {
  const std::string secret = Unique("hf_secret"), literal = Unique("literal");
  auto made = Post("/v1/secrets", token_, {{"name", "hf-token"}, {"value", secret}});
  ASSERT_EQ(made.status, 201) << made.raw;
  EXPECT_EQ(made.body["name"], "hf-token");
  EXPECT_EQ(made.body["version"], 1);
  // The workload prints digests of what it was given, never the values.
  auto inst = Post("/v1/instances", token_,
                   Instance("printf %s \"$HF_TOKEN\" | sha256sum; printf %s \"$MODE\" | sha256sum; "
                            "sleep 60",
                            {{"HF_TOKEN", {{"secret", "hf-token"}}}, {"MODE", literal}}));
  ASSERT_EQ(inst.status, 201) << inst.raw;
  const std::string id = inst.body["id"];
  ASSERT_EQ(AwaitState(token_, id, "running"), "running");
  std::string log;
  ASSERT_TRUE(WaitFor(
      [&] {
        log = Get("/v1/instances/" + id + "/logs", token_).raw;
        return log.find(Sha256Hex(literal)) != std::string::npos;
      },
      10s))
      << log;
  EXPECT_NE(log.find(Sha256Hex(secret)), std::string::npos) << "the secret reached the workload";
  // A group whose template refers to it, and a webhook URL holding a token.
  const std::string hook = "https://hooks.example.com/" + Unique("hook-token");
  json group = {{"name", "g"}, {"size", 1}, {"template", Instance("sleep 60", {})}};
  group["template"]["env"] = {{"HF_TOKEN", {{"secret", "hf-token"}}}, {"MODE", literal}};
  ASSERT_EQ(Post("/v1/groups", token_, group).status, 201);
  ASSERT_EQ(Post("/v1/alert-rules", token_,
                 {{"name", "hot"},
                  {"metric", "DCGM_FI_DEV_GPU_TEMP"},
                  {"op", ">"},
                  {"threshold", 90},
                  {"notify", {{{"webhook", hook}}}}})
                .status,
            201);
  // An error about the env never quotes what was sent.
  const std::string bad = Unique("bad-value") + std::string(40 << 10, 'x');
  auto refused = Post("/v1/instances", token_, Instance("true", {{"X", bad}}));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.raw.find("bad-value"), std::string::npos) << refused.raw.substr(0, 300);
  EXPECT_NE(refused.raw.find("env.X"), std::string::npos) << refused.raw.substr(0, 300);

  // No answer holds the secret; the literal only where its owner reads its own instance.
  std::string answers;
  const std::vector<std::string> tenant_paths = {
      "/v1/instances", "/v1/instances/" + id, "/v1/secrets", "/v1/secrets/hf-token",
      "/v1/groups",    "/v1/whoami",          "/v1/usage"};
  for (const std::string& path : tenant_paths) {
    answers += Get(path, token_).raw;
  }
  for (const char* path : {"/v1/audit?limit=1000", "/v1/instances", "/v1/nodes", "/v1/alert-rules",
                           "/v1/keys", "/metrics"}) {
    answers += Call("GET", path, kAdminToken).raw;
  }
  EXPECT_EQ(answers.find(secret), std::string::npos);
  EXPECT_NE(answers.find(literal), std::string::npos) << "an env literal is its owner's to read";
  // The server's own output (its simulated agents' too) holds neither, and the database files
  // hold neither the secret, nor the literal, nor the webhook URL.
  EXPECT_EQ(server_->output().find(secret), std::string::npos);
  EXPECT_EQ(server_->output().find(literal), std::string::npos);
  const std::string db = Database();
  ASSERT_GT(db.size(), 0u);
  EXPECT_EQ(db.find(secret), std::string::npos) << "the secret is stored sealed";
  EXPECT_EQ(db.find(literal), std::string::npos) << "env literals are stored sealed";
  EXPECT_EQ(db.find(hook.substr(8)), std::string::npos) << "webhook URLs are stored sealed";
  EXPECT_NE(db.find("enc:v1:local-1:"), std::string::npos);

  // Across a restart every value opens again, from the keyring the server made in its data
  // directory.
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  StartServer();
  const json again = Get("/v1/instances/" + id, token_).body;
  EXPECT_EQ(again["env"]["MODE"], literal) << again.dump();
  EXPECT_EQ(again["env"]["HF_TOKEN"], json({{"secret", "hf-token"}}));
  EXPECT_EQ(Get("/v1/alert-rules", token_).raw.find(hook) != std::string::npos, true);
  // Once it ends, its values are dropped from memory and store alike.
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, token_).status, 200);
  ASSERT_EQ(AwaitState(token_, id, "terminated"), "terminated");
  EXPECT_TRUE(Get("/v1/instances/" + id, token_).body["env"]["MODE"].is_null());
}

TEST_F(TenantSecretsTest, ASecretInUseIsDeletedOnlyWhenForced) {
  ASSERT_EQ(Post("/v1/secrets", token_, {{"name", "db"}, {"value", "pw"}}).status, 201);
  auto missing = Post("/v1/instances", token_, Instance("true", {{"A", {{"secret", "nope"}}}}));
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.raw.find("env.A': secret 'nope' does not exist"), std::string::npos)
      << missing.raw;
  auto running = Post("/v1/instances", token_, Instance("sleep 60", {{"A", {{"secret", "db"}}}}));
  ASSERT_EQ(running.status, 201);
  ASSERT_EQ(AwaitState(token_, running.body["id"], "running"), "running");
  // The small fleet's other H100 is taken; this one waits.
  ASSERT_EQ(Post("/v1/instances", token_, H100(1, "on_demand")).status, 201);
  auto waiting = Post("/v1/instances", token_, Instance("sleep 60", {{"A", {{"secret", "db"}}}}));
  ASSERT_EQ(waiting.status, 201);
  ASSERT_EQ(waiting.body["state"], "pending") << waiting.raw;
  auto refused = Call("DELETE", "/v1/secrets/db", token_);
  EXPECT_EQ(refused.status, 409);
  EXPECT_NE(refused.raw.find(running.body["id"].get<std::string>()), std::string::npos)
      << refused.raw;
  EXPECT_EQ(Get("/v1/secrets/db", token_).body["used_by"].size(), 2u);
  auto forced = Call("DELETE", "/v1/secrets/db?force=true", token_);
  ASSERT_EQ(forced.status, 200) << forced.raw;
  const json w = Get("/v1/instances/" + waiting.body["id"].get<std::string>(), token_).body;
  EXPECT_EQ(w["state"], "terminated") << w.dump();
  EXPECT_NE(w.value("reason", "").find("its secret 'db' was deleted"), std::string::npos);
  EXPECT_EQ(Get("/v1/instances/" + running.body["id"].get<std::string>(), token_).body["state"],
            "running")
      << "what runs keeps its environment";
  EXPECT_EQ(Get("/v1/secrets/db", token_).status, 404);
}

// A keyring without the key the store's values are sealed under stops the start, naming the key;
// so does a key of that id with other bytes. Nothing is served half-decrypted.
TEST_F(TenantSecretsTest, AWrongKeyringStopsTheStartNamingTheKey) {
  ASSERT_EQ(Post("/v1/secrets", token_, {{"name", "db"}, {"value", "pw"}}).status, 201);
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  const std::string other = testing::WritePrivateFile(
      dir_.File("other.keys"), "other-1 QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=\n");
  testing::ServerProcess wrong;
  EXPECT_FALSE(wrong.Start(
      {"--data", dir_.File("data"), "--fleet", fleet_path_, "--kek-file", other}, kAdminToken));
  EXPECT_NE(wrong.output().find("key 'local-1' is not in the keyring"), std::string::npos)
      << wrong.output();
  const std::string impostor = testing::WritePrivateFile(
      dir_.File("impostor.keys"), "local-1 QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=\n");
  testing::ServerProcess forged;
  EXPECT_FALSE(forged.Start(
      {"--data", dir_.File("data"), "--fleet", fleet_path_, "--kek-file", impostor}, kAdminToken));
  EXPECT_NE(forged.output().find("fails authentication with that key"), std::string::npos)
      << forged.output();
  // A keyring file others may read is refused, naming it and its mode.
  chmod(impostor.c_str(), 0644);
  testing::ServerProcess open_file;
  EXPECT_FALSE(open_file.Start(
      {"--data", dir_.File("data"), "--fleet", fleet_path_, "--kek-file", impostor}, kAdminToken));
  EXPECT_NE(open_file.output().find(impostor), std::string::npos) << open_file.output();
}

// A rotation re-seals every record while creates go on: every create acknowledged is there with
// its values, and afterwards no record is on the old key, so a server whose keyring holds only
// the new key starts and opens them all.
TEST_F(TenantSecretsTest, ARotationUnderACreateLoadLosesNothingAndLeavesNoRecordOnTheOldKey) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  const std::string keys = dir_.File("keys");
  testing::WritePrivateFile(keys, "old-1 T09PT09PT09PT09PT09PT09PT09PT09PT09PT09PT08=\n");
  StartServer({"--sim-agents", "--kek-file", keys});
  token_ = NewTenant("beta", 1000);
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(Post("/v1/secrets", token_,
                   {{"name", fmt::format("s{}", i)}, {"value", fmt::format("v{}", i)}})
                  .status,
              201);
  }
  // Pending work with env (a shape the fleet holds one of at a time: the rest wait).
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(Post("/v1/instances", token_,
                   Instance("sleep 600", {{"N", std::to_string(i)}, {"S", {{"secret", "s1"}}}}))
                  .status,
              201);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> acked{0};
  std::vector<std::string> made;
  std::thread load([&] {
    while (!stop) {
      auto r = Post("/v1/instances", token_, Instance("sleep 600", {{"LOAD", "during"}}));
      if (r.status == 201) {
        made.push_back(r.body["id"]);
        ++acked;
      }
    }
  });
  auto rotated = testing::RunTessera({"keys", "rotate", "--kek-file", keys, "--id", "new-1",
                                      "--wait", "--url", server_->url(), "--token", kAdminToken});
  stop = true;
  load.join();
  ASSERT_EQ(rotated.exit_code, 0) << rotated.out << rotated.err;
  EXPECT_GT(acked.load(), 0);
  const json status = Get("/v1/keys", kAdminToken).body;
  EXPECT_EQ(status["current_key"], "new-1") << status.dump();
  EXPECT_EQ(status["rotation"]["state"], "done") << status.dump();
  EXPECT_FALSE(status["records_by_key"].contains("old-1")) << status.dump();
  EXPECT_GE(status["records_by_key"].value("new-1", 0), 150) << status.dump();
  // The old key leaves the keyring: the server starts, and every value opens.
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  std::string text = ReadFile(keys);
  text = text.substr(0, text.find("old-1"));
  testing::WritePrivateFile(keys, text);
  StartServer({"--sim-agents", "--kek-file", keys});
  for (const std::string& id : made) {
    const json i = Get("/v1/instances/" + id, token_).body;
    ASSERT_EQ(i["env"]["LOAD"], "during") << i.dump();
  }
  EXPECT_EQ(Get("/v1/secrets", token_).body["secrets"].size(), 50u);
  EXPECT_EQ(Bytes(dir_.File("data/tessera.db")).find("enc:v1:old-1:"), std::string::npos);
}

// With a KMS plugin the plugin decides the current key: once it moves, `tessera keys rotate`
// (without --kek-file) moves every record to it.
TEST_F(TenantSecretsTest, ARotationWithAKmsPluginMovesEveryRecordToThePluginsNewKey) {
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  const std::string current = dir_.Write("kms-current", "kms-1");
  const std::string plugin = dir_.Write("kms", testing::FakeKmsScript(current));
  ASSERT_EQ(chmod(plugin.c_str(), 0700), 0);
  StartServer({"--sim-agents", "--kms-command", plugin});
  token_ = NewTenant("beta", 8);
  ASSERT_EQ(Post("/v1/secrets", token_, {{"name", "db"}, {"value", "pw"}}).status, 201);
  ASSERT_EQ(Post("/v1/instances", token_, Instance("sleep 600", {{"MODE", "fast"}})).status, 201);
  EXPECT_EQ(Get("/v1/keys", kAdminToken).body["records_by_key"], json({{"kms-1", 2}}));

  dir_.Write("kms-current", "kms-2");
  auto rotated = testing::RunTessera(
      {"keys", "rotate", "--wait", "--url", server_->url(), "--token", kAdminToken});
  ASSERT_EQ(rotated.exit_code, 0) << rotated.out << rotated.err;
  const json status = Get("/v1/keys", kAdminToken).body;
  EXPECT_EQ(status["current_key"], "kms-2") << status.dump();
  EXPECT_EQ(status["records_by_key"], json({{"kms-2", 2}})) << status.dump();
}

}  // namespace
}  // namespace tessera
