// `tessera server --store postgres://...` and `tessera store migrate` through the real binary, on
// a real PostgreSQL (testing/postgres.h; skipped when it is not installed): what a server
// acknowledged survives kill -9 in the database, whatever --data the next server is given; a
// stopped SQLite server's state moves into an empty database with its tenants' tokens, instances,
// budgets and audit log; and every refusal (a non-empty target, a directory without a store, a
// store a server still holds, a bad or unreachable --store) says what it refused, never printing
// a password.
#include <fmt/format.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "server_test_util.h"
#include "testing/postgres.h"

namespace tessera {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// What a user sees of an instance that must not change across a restart or a migration.
struct Seen {
  std::string state, node;
  std::vector<int> gpus;
  bool operator==(const Seen&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Seen& s) {
  os << s.state << " on '" << s.node << "' gpus";
  for (int g : s.gpus) os << " " << g;
  return os;
}

class PostgresServerTest : public ServerTest {
 protected:
  // No server until the test says on which store.
  void SetUp() override { fleet_path_ = dir_.Write("fleet.json", kSmallFleet); }

  // Starts a server with --data dir_/`data` on the test's fleet with simulated agents, plus
  // `extra` (a --store).
  void Launch(const std::string& data, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"--data", dir_.File(data), "--fleet", fleet_path_,
                                     "--sim-agents"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<testing::ServerProcess>();
    ASSERT_TRUE(server_->Start(args, kAdminToken)) << server_->output();
  }

  std::string Create(const std::string& token, const json& body) {
    auto r = Post("/v1/instances", token, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", "");
  }

  // Every instance the tenant sees, by id.
  std::map<std::string, Seen> Instances(const std::string& token) {
    auto r = Get("/v1/instances?limit=100", token);
    EXPECT_EQ(r.status, 200) << r.raw;
    std::map<std::string, Seen> out;
    for (const json& i : r.body["instances"]) {
      Seen s{i.value("state", "?"), i["node"].is_string() ? i["node"].get<std::string>() : "", {}};
      for (const json& g : i["gpus"])
        s.gpus.push_back(g["index"].is_number() ? g["index"].get<int>() : -1);
      out[i["id"]] = s;
    }
    return out;
  }

  // The audit log as (seq, action, actor, target, status) lines.
  std::vector<std::string> Audit() {
    auto r = Get("/v1/audit?limit=1000", kAdminToken);
    EXPECT_EQ(r.status, 200) << r.raw;
    std::vector<std::string> out;
    for (const json& e : r.body["entries"]) {
      out.push_back(fmt::format("{} {} {} {} {}", e["seq"].dump(), e["action"].dump(),
                                e["actor"].dump(), e["target"].dump(), e["status"].dump()));
    }
    return out;
  }

  // A tenant with two H100s and a MIG slice running, one H100 waiting (the node is full) and one
  // deleted instance; returns the tenant's token and id.
  std::pair<std::string, std::string> Populate() {
    auto t = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 8}}}});
    EXPECT_EQ(t.status, 201) << t.raw;
    const std::string token = t.body.value("token", "");
    const std::string a = Create(token, H100(1, "on_demand"));
    const std::string b = Create(token, H100(1, "on_demand"));
    const std::string mig =
        Create(token, {{"billing", "on_demand"}, {"instance_type", "mig.a100-40gb.3g.20gb"}});
    const std::string waiting = Create(token, H100(1, "on_demand"));
    const std::string gone =
        Create(token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
    for (const std::string& id : {a, b, mig, gone}) {
      EXPECT_EQ(AwaitState(token, id, "running"), "running") << id;
    }
    EXPECT_EQ(Call("DELETE", "/v1/instances/" + gone, token).status, 200);
    EXPECT_EQ(AwaitState(token, gone, "terminated"), "terminated");
    EXPECT_EQ(Get("/v1/instances/" + waiting, token).body.value("state", ""), "pending");
    return {token, t.body.value("id", "")};
  }

  // Waits until every instance the tenant has is running, pending or terminated, and returns
  // them.
  std::map<std::string, Seen> Settled(const std::string& token) {
    std::map<std::string, Seen> now;
    WaitFor(
        [&] {
          now = Instances(token);
          for (const auto& [id, s] : now) {
            if (s.state == "scheduled" || s.state == "stopping") return false;
          }
          return true;
        },
        std::chrono::seconds(10));
    return now;
  }
};

TEST_F(PostgresServerTest, WhatTheServerAcknowledgedSurvivesKillNineInTheDatabase) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  Launch("data-a", {"--store", url});
  EXPECT_NE(server_->output().find("(data in " + url + ")"), std::string::npos)
      << server_->output();
  const auto [token, tenant_id] = Populate();
  const std::map<std::string, Seen> before = Settled(token);
  ASSERT_EQ(before.size(), 5u);
  const std::vector<std::string> audit = Audit();
  ASSERT_GE(audit.size(), 7u) << "the tenant, five creates and a delete";
  const json usage = Get("/v1/tenants/" + tenant_id, kAdminToken).body["usage"];
  ASSERT_NEAR(usage["gpus"].get<double>(), 3 + 3.0 / 7, 0.001) << usage;

  EXPECT_EQ(server_->Stop(SIGKILL), 128 + SIGKILL);
  // Another data directory: what comes back can only have come from PostgreSQL.
  Launch("data-b", {"--store", url});
  EXPECT_FALSE(fs::exists(dir_.File("data-a") + "/tessera.db"))
      << "with --store the state is not kept in SQLite";
  EXPECT_FALSE(fs::exists(dir_.File("data-b") + "/tessera.db"));
  const std::map<std::string, Seen> after = Settled(token);
  EXPECT_EQ(after, before);
  EXPECT_EQ(Get("/v1/tenants/" + tenant_id, kAdminToken).body.value("name", ""), "acme");
  EXPECT_EQ(Get("/v1/tenants/" + tenant_id, kAdminToken).body["usage"], usage)
      << "the tenant's instances hold its quota as before";
  const std::vector<std::string> audit_after = Audit();
  ASSERT_GE(audit_after.size(), audit.size());
  EXPECT_EQ(std::vector<std::string>(audit_after.begin(), audit_after.begin() + audit.size()),
            audit);

  // The restarted server keeps serving: a new instance gets an id no earlier one had, and runs.
  auto fresh =
      Post("/v1/instances", token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
  ASSERT_EQ(fresh.status, 201) << fresh.raw;
  const std::string fresh_id = fresh.body.value("id", "");
  EXPECT_EQ(before.count(fresh_id), 0u) << fresh_id << " was handed out before the restart";
  EXPECT_EQ(AwaitState(token, fresh_id, "running"), "running");
  // And that too is in the database: a third server sees it.
  EXPECT_EQ(server_->Stop(SIGKILL), 128 + SIGKILL);
  Launch("data-c", {"--store", url});
  EXPECT_EQ(AwaitState(token, fresh_id, "running"), "running");
  EXPECT_EQ(Instances(token).size(), 6u);
}

TEST_F(PostgresServerTest, MigrateMovesAStoppedSqliteServersStateIntoAnEmptyDatabase) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  const std::string data = dir_.File("data");
  Launch("data");
  const auto [token, tenant_id] = Populate();
  json budget = {{"monthly_usd", "500"}, {"hard_stop", false}};
  ASSERT_EQ(Call("PUT", "/v1/tenants/" + tenant_id + "/budget", kAdminToken, &budget).status, 200);
  const std::map<std::string, Seen> before = Settled(token);
  const std::vector<std::string> audit = Audit();

  // While the SQLite server runs, its store is not copied: the lock holder is named.
  const testing::CommandResult busy =
      testing::RunTessera({"store", "migrate", "--from", data, "--to", url});
  EXPECT_EQ(busy.exit_code, 1) << busy.err;
  EXPECT_NE(busy.err.find(fmt::format("data directory {} is in use by another tessera server "
                                      "(pid {})",
                                      data, server_->pid())),
            std::string::npos)
      << busy.err;

  ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  const testing::CommandResult moved =
      testing::RunTessera({"store", "migrate", "--from", data + "/tessera.db", "--to", url});
  ASSERT_EQ(moved.exit_code, 0) << moved.err << moved.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      moved.out, m,
      std::regex("moved 1 tenants, 5 instances, \\d+ settings, (\\d+) audit entries and \\d+ "
                 "ledger lines from (.*) to (.*)\n")))
      << moved.out;
  EXPECT_EQ(std::stoul(m[1]), audit.size()) << "every audit entry is copied";
  EXPECT_EQ(fs::path(m[2].str()), fs::path(data));
  EXPECT_EQ(m[3], url);
  EXPECT_NE(moved.out.find("is left as it was"), std::string::npos) << moved.out;

  // A server on the database serves what the SQLite one had, to the tenant's old token.
  Launch("data-pg", {"--store", url});
  EXPECT_EQ(Get("/v1/whoami", token).status, 200) << "the tenant's token still works";
  auto tenants = Get("/v1/tenants", kAdminToken);
  ASSERT_EQ(tenants.body["tenants"].size(), 1u) << tenants.raw;
  EXPECT_EQ(tenants.body["tenants"][0]["name"], "acme");
  EXPECT_EQ(Settled(token), before);
  const std::vector<std::string> audit_after = Audit();
  ASSERT_GE(audit_after.size(), audit.size());
  EXPECT_EQ(std::vector<std::string>(audit_after.begin(), audit_after.begin() + audit.size()),
            audit);
  auto budgets = Get("/v1/budgets", kAdminToken);
  ASSERT_EQ(budgets.body["budgets"].size(), 1u) << budgets.raw;
  EXPECT_EQ(budgets.body["budgets"][0]["set_by"], "operator") << budgets.raw;
  auto fresh =
      Post("/v1/instances", token, {{"billing", "spot"}, {"instance_type", "shared.l40s.half"}});
  ASSERT_EQ(fresh.status, 201) << fresh.raw;
  EXPECT_EQ(before.count(fresh.body.value("id", "")), 0u);

  // Migrating again into the database, which now holds that state, copies nothing.
  const testing::CommandResult again =
      testing::RunTessera({"store", "migrate", "--from", data, "--to", url});
  EXPECT_EQ(again.exit_code, 1) << again.err;
  EXPECT_TRUE(std::regex_search(
      again.err, std::regex(std::regex_replace(url, std::regex("[.?+*()]"), "\\$&") +
                            ": the target already holds 1 tenants, 6 instances, \\d+ settings, "
                            "\\d+ audit entries and \\d+ ledger lines; store migrate copies "
                            "only into an empty database")))
      << again.err;
  EXPECT_EQ(Instances(token).size(), 6u);
}

// Secrets and env values on PostgreSQL: with no keyring a value to seal is refused naming the
// flag; with --kek-file the database holds only sealed values, and another server on another
// --data with the same keyring opens them.
TEST_F(PostgresServerTest, SecretsAreSealedInTheDatabaseAndOpenOnAnotherServerWithTheKeyring) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  const std::string db = url.substr(url.rfind('/') + 1);
  Launch("data-a", {"--store", url});
  auto t = Post("/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 8}}}});
  ASSERT_EQ(t.status, 201) << t.raw;
  const std::string token = t.body.value("token", "");
  auto refused = Post("/v1/secrets", token, {{"name", "hf"}, {"value", "v"}});
  EXPECT_EQ(refused.status, 409) << refused.raw;
  EXPECT_NE(refused.raw.find("--kek-file"), std::string::npos) << refused.raw;
  json body = H100(1, "on_demand");
  body["env"] = {{"MODE", "x"}};
  auto env_refused = Post("/v1/instances", token, body);
  EXPECT_EQ(env_refused.status, 409) << env_refused.raw;
  EXPECT_NE(env_refused.raw.find("env.MODE"), std::string::npos) << env_refused.raw;
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->output();

  const std::string keys = testing::WritePrivateFile(
      dir_.File("keys"), "pg-1 UFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFA=\n");
  const std::string secret = fmt::format("hf_{}_{}", getpid(), ::time(nullptr));
  const std::string literal = "literal-" + secret;
  Launch("data-a", {"--store", url, "--kek-file", keys});
  ASSERT_EQ(Post("/v1/secrets", token, {{"name", "hf"}, {"value", secret}}).status, 201);
  body["env"] = {{"MODE", literal}, {"HF_TOKEN", {{"secret", "hf"}}}};
  const std::string id = Create(token, body);
  ASSERT_EQ(AwaitState(token, id, "running"), "running");
  EXPECT_EQ(server_->Stop(SIGKILL), 128 + SIGKILL);

  // Every row of every table, as text: neither value, both sealed under the keyring's key.
  const auto rows = pg.Psql(db,
                            "SELECT x::text FROM tenants x UNION ALL SELECT x::text FROM instances "
                            "x UNION ALL SELECT x::text FROM settings x UNION ALL SELECT x::text "
                            "FROM audit x UNION ALL SELECT x::text FROM ledger x");
  ASSERT_TRUE(rows.has_value());
  EXPECT_NE(rows->find(id), std::string::npos) << "the instance is in the database";
  EXPECT_EQ(rows->find(secret), std::string::npos) << "the secret is stored sealed";
  EXPECT_EQ(rows->find(literal), std::string::npos) << "env literals are stored sealed";
  EXPECT_NE(rows->find("enc:v1:pg-1:"), std::string::npos);

  // Without the keyring the next server does not start, naming the key; with it, on another
  // --data, every value opens.
  testing::ServerProcess keyless;
  EXPECT_FALSE(keyless.Start(
      {"--data", dir_.File("data-b"), "--fleet", fleet_path_, "--store", url, "--sim-agents"},
      kAdminToken));
  EXPECT_NE(keyless.output().find("'pg-1'"), std::string::npos) << keyless.output();
  Launch("data-c", {"--store", url, "--kek-file", keys});
  const json again = Get("/v1/instances/" + id, token).body;
  EXPECT_EQ(again["env"]["MODE"], literal) << again.dump();
  EXPECT_EQ(again["env"]["HF_TOKEN"], json({{"secret", "hf"}}));
  auto listed = Get("/v1/secrets", token);
  EXPECT_NE(listed.raw.find("\"hf\""), std::string::npos) << listed.raw;
  EXPECT_EQ(listed.raw.find(secret), std::string::npos) << listed.raw;
  // The keys' status counts what is sealed under pg-1 and nothing on any other key.
  auto status = Get("/v1/keys", kAdminToken);
  ASSERT_EQ(status.status, 200) << status.raw;
  EXPECT_EQ(status.body["current_key"], "pg-1") << status.raw;
  ASSERT_EQ(status.body["records_by_key"].size(), 1u) << status.raw;
  EXPECT_GE(status.body["records_by_key"].value("pg-1", 0), 2) << "the secret and the env literal";
}

TEST_F(PostgresServerTest, MigrateNamesWhatItCannotReadOrWriteAndExitsWithAUsageError) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  const std::string empty = dir_.File("nothing-here");
  fs::create_directories(empty);
  const testing::CommandResult no_store =
      testing::RunTessera({"store", "migrate", "--from", empty, "--to", url});
  EXPECT_EQ(no_store.exit_code, 2) << no_store.err;
  EXPECT_NE(no_store.err.find("--from " + empty + ": no SQLite store there"), std::string::npos)
      << no_store.err;
  const testing::CommandResult not_pg =
      testing::RunTessera({"store", "migrate", "--from", empty, "--to", dir_.File("elsewhere")});
  EXPECT_EQ(not_pg.exit_code, 2) << not_pg.err;
  EXPECT_NE(not_pg.err.find("--to " + dir_.File("elsewhere") + ": not a postgres:// URL"),
            std::string::npos)
      << not_pg.err;
}

TEST_F(PostgresServerTest, ABadOrUnreachableStoreStopsTheServerAndNeverPrintsThePassword) {
  const testing::CommandResult mysql = testing::RunTessera(
      {"server", "--store", "mysql://x", "--data", dir_.File("data"), "--fleet", fleet_path_});
  EXPECT_EQ(mysql.exit_code, 2) << mysql.err;
  EXPECT_NE(mysql.err.find("--store"), std::string::npos) << mysql.err;
  EXPECT_NE(mysql.err.find("postgres://"), std::string::npos) << mysql.err;

  // Nothing listens on port 1: the server gives up and says on what, without the password.
  testing::ServerProcess unreachable;
  EXPECT_FALSE(unreachable.Start({"--data", dir_.File("data"), "--fleet", fleet_path_, "--store",
                                  "postgres://tessera:hunter2secret@127.0.0.1:1/x"},
                                 kAdminToken));
  EXPECT_NE(unreachable.output().find("postgres://tessera@127.0.0.1:1/x"), std::string::npos)
      << unreachable.output();
  EXPECT_EQ(unreachable.output().find("hunter2secret"), std::string::npos) << unreachable.output();
  const int status = unreachable.Stop(SIGKILL);
  EXPECT_NE(status, 0);
  EXPECT_NE(status, 128 + SIGKILL) << "it exited on its own";

  // A server that reaches its database names it without the password too (the test server
  // trusts loopback, so the password is never checked).
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  const std::string with_password =
      std::regex_replace(url, std::regex("^postgres://tessera@"), "postgres://tessera:pw0rdXYZ@");
  ASSERT_NE(with_password, url);
  Launch("data", {"--store", with_password});
  EXPECT_NE(server_->output().find("(data in " + url + ")"), std::string::npos)
      << server_->output();
  EXPECT_EQ(server_->output().find("pw0rdXYZ"), std::string::npos) << server_->output();
}

}  // namespace
}  // namespace tessera
