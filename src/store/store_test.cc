#include "store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "common/ids.h"
#include "store/postgres.h"
#include "testing/postgres.h"
#include "testing/testing.h"

namespace tessera::store {
namespace {

// The stores every test of StoreTest runs against: each opens the same database again on
// Open(), as a restarted server would.
class SqliteBackend {
 public:
  static constexpr bool kPostgres = false;
  void Init() {}
  Result<std::unique_ptr<Store>> Open() { return OpenSqliteStore(dir_.path() + "/data"); }

 private:
  testing::TempDir dir_;
};

class PostgresBackend {
 public:
  static constexpr bool kPostgres = true;
  void Init() {
    std::string error;
    testing::PostgresServer* pg = testing::SharedPostgres(&error);
    ASSERT_NE(pg, nullptr) << error;
    url_ = pg->CreateDatabase();
  }
  Result<std::unique_ptr<Store>> Open() { return OpenPostgresStore(url_); }

 private:
  std::string url_;
};

template <typename Backend>
class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if constexpr (Backend::kPostgres) {
      if (!testing::PostgresBinDir()) {
        GTEST_SKIP() << "PostgreSQL is not installed: scripts/bootstrap.sh installs Debian's "
                        "postgresql package (or set TESSERA_PG_BINDIR)";
      }
    }
    backend_.Init();
  }
  // Opens the store again, as a restarted server would.
  Result<std::unique_ptr<Store>> Open() { return backend_.Open(); }
  Backend backend_;
};

using Backends = ::testing::Types<SqliteBackend, PostgresBackend>;
class BackendNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    return T::kPostgres ? "Postgres" : "Sqlite";
  }
};
TYPED_TEST_SUITE(StoreTest, Backends, BackendNames);

TYPED_TEST(StoreTest, CommitsAreVisibleAfterReopen) {
  {
    auto s = this->Open();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    Batch b;
    b.tenants.push_back({"tenant-000001", "acme", "abcd", R"({"quota":{"gpus":8}})"});
    b.instances.push_back({"inst-000001", "tenant-000001", "pending", "{}", ""});
    b.audit.push_back(
        {0, "2026-11-30T00:00:00Z", "admin", "POST /v1/tenants", "tenant-000001", 201, ""});
    b.settings.emplace_back("admin_token_hash", "ffff");
    ASSERT_TRUE((*s)->Commit(b).ok());
    Batch update;
    update.instances.push_back({"inst-000001", "tenant-000001", "running", R"({"node":"n1"})", ""});
    ASSERT_TRUE((*s)->Commit(update).ok());
  }
  auto s = this->Open();
  ASSERT_TRUE(s.ok());
  auto tenants = (*s)->LoadTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 1u);
  EXPECT_EQ((*tenants)[0].name, "acme");
  auto instances = (*s)->LoadInstances("");
  ASSERT_EQ(instances->size(), 1u);
  EXPECT_EQ((*instances)[0].state, "running");
  EXPECT_EQ((*instances)[0].doc, R"({"node":"n1"})");
  auto audit = (*s)->ListAudit(0, 10);
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].seq, 1);
  EXPECT_EQ((*audit)[0].status, 201);
  EXPECT_EQ(**(*s)->GetSetting("admin_token_hash"), "ffff");
  EXPECT_FALSE((*s)->GetSetting("missing")->has_value());
}

TYPED_TEST(StoreTest, AFailedBatchAppliesNothing) {
  auto s = this->Open();
  ASSERT_TRUE(s.ok());
  Batch first;
  first.tenants.push_back({"tenant-000001", "acme", "h", "{}"});
  ASSERT_TRUE((*s)->Commit(first).ok());
  // The second tenant reuses the unique name, so the whole batch, instance included, must fail.
  Batch b;
  b.instances.push_back({"inst-000009", "tenant-000002", "pending", "{}", ""});
  b.tenants.push_back({"tenant-000002", "acme", "h2", "{}"});
  Status st = (*s)->Commit(b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tenant-000002"), std::string::npos) << st.message();
  EXPECT_TRUE((*s)->LoadInstances("")->empty());
  EXPECT_EQ((*s)->LoadTenants()->size(), 1u);
}

LedgerRecord Line(const std::string& tenant, int64_t start, int64_t amount) {
  LedgerRecord l;
  l.tenant = tenant;
  l.instance = "inst-000001";
  l.instance_type = "gpu.1xh100";
  l.billing = "on_demand";
  l.start = start;
  l.end = start + 60;
  l.seconds = 60;
  l.rate_micros = 3'600'000;
  l.amount_micros = amount;
  return l;
}

std::vector<LedgerRecord> Scan(Store& s, const std::string& tenant, int64_t from, int64_t to) {
  std::vector<LedgerRecord> out;
  EXPECT_TRUE(
      s.ScanLedger(tenant, from, to, [&](const LedgerRecord& l) { out.push_back(l); }).ok());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return out;
}

TYPED_TEST(StoreTest, LedgerLinesKeepIncreasingSeqsAcrossFailuresAndReopens) {
  {
    auto s = this->Open();
    ASSERT_TRUE(s.ok());
    Batch first;
    first.tenants.push_back({"tenant-000001", "acme", "h", "{}"});
    first.ledger = {Line("tenant-000001", 100, 1), Line("tenant-000002", 50, 2)};
    ASSERT_TRUE((*s)->Commit(first).ok());
    Batch failing;  // The duplicate name fails the whole batch, its lines included.
    failing.tenants.push_back({"tenant-000002", "acme", "h2", "{}"});
    failing.ledger = {Line("tenant-000001", 200, 3)};
    ASSERT_FALSE((*s)->Commit(failing).ok());
    Batch next;
    next.ledger = {Line("tenant-000001", 10, 4)};
    ASSERT_TRUE((*s)->Commit(next).ok());
  }
  auto s = this->Open();
  ASSERT_TRUE(s.ok());
  Batch after;
  after.ledger = {Line("tenant-000001", 300, 5)};
  ASSERT_TRUE((*s)->Commit(after).ok());
  auto mine = Scan(**s, "tenant-000001", 0, 1000);
  ASSERT_EQ(mine.size(), 3u) << "the failed batch's line is not there";
  EXPECT_EQ(mine[0].seq, 1);
  EXPECT_EQ(mine[1].seq, 3);
  EXPECT_EQ(mine[1].amount_micros, 4);
  EXPECT_EQ(mine[2].seq, 4) << "after a reopen, seqs go on from the last";
  EXPECT_EQ(Scan(**s, "tenant-000001", 100, 300).size(), 1u) << "[from, to) by start";
  EXPECT_EQ(Scan(**s, "", 0, 1000).size(), 4u) << "every tenant's";
}

// A reader on another thread sees the ledger up to the seq it is given, while the store commits.
TYPED_TEST(StoreTest, ALedgerReaderOnAnotherThreadSeesLinesUpToItsSeq) {
  auto s = this->Open();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->LastLedgerSeq(), 0);
  Batch first;
  first.ledger = {Line("tenant-000001", 100, 1), Line("tenant-000001", 50, 2)};
  ASSERT_TRUE((*s)->Commit(first).ok());
  const int64_t seen = (*s)->LastLedgerSeq();
  EXPECT_EQ(seen, 2);
  auto reader = (*s)->OpenLedgerReader();
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  std::atomic<bool> stop = false;
  std::thread writer([&] {
    for (int i = 0; i < 200 && !stop; ++i) {
      Batch more;
      more.ledger = {Line("tenant-000001", 200 + i, 1)};
      ASSERT_TRUE((*s)->Commit(more).ok());
    }
  });
  for (int i = 0; i < 20; ++i) {
    int64_t lines = 0, amount = 0;
    ASSERT_TRUE((*reader)
                    ->Scan("tenant-000001", 0, 10'000, seen,
                           [&](const LedgerRecord& l) {
                             ++lines;
                             amount += l.amount_micros;
                           })
                    .ok());
    EXPECT_EQ(lines, 2);
    EXPECT_EQ(amount, 3) << "a scan up to seq 2 sees those two lines, whatever is committed since";
  }
  stop = true;
  writer.join();
  int64_t all = 0;
  ASSERT_TRUE((*reader)
                  ->Scan("", 0, 10'000, (*s)->LastLedgerSeq(), [&](const LedgerRecord&) { ++all; })
                  .ok());
  EXPECT_EQ(all, (*s)->LastLedgerSeq());
}

TEST(SqliteStoreTest, ALedgerKeptByTheEarlierLayoutMovesOverWhole) {
  testing::TempDir dir;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((dir.path() + "/tessera.db").c_str(), &db), SQLITE_OK);
    const char* old = R"sql(
      CREATE TABLE ledger (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, instance TEXT NOT NULL,
        instance_type TEXT NOT NULL, billing TEXT NOT NULL, reservation TEXT NOT NULL,
        start INTEGER NOT NULL, end INTEGER NOT NULL, seconds INTEGER NOT NULL,
        rate_micros INTEGER NOT NULL, amount_micros INTEGER NOT NULL, note TEXT NOT NULL,
        gpu_milli INTEGER NOT NULL, util_pct_seconds INTEGER NOT NULL,
        util_observed_seconds INTEGER NOT NULL);
      CREATE INDEX ledger_by_tenant ON ledger(tenant, start);
      INSERT INTO ledger VALUES (7, 'tenant-000001', 'inst-000003', 'gpu.1xh100', 'spot', '',
        100, 160, 60, 3600000, 60000, 'platform', 1000, 3000, 60);
      INSERT INTO ledger VALUES (9, 'tenant-000001', 'inst-000004', 'gpu.1xh100', 'on_demand', '',
        50, 110, 60, 3600000, 60000, '', 1000, 0, 0);)sql";
    ASSERT_EQ(sqlite3_exec(db, old, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto s = OpenSqliteStore(dir.path());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Batch b;
  b.ledger = {Line("tenant-000001", 70, 5)};
  ASSERT_TRUE((*s)->Commit(b).ok());
  auto lines = Scan(**s, "tenant-000001", 0, 1000);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].seq, 7);
  EXPECT_EQ(lines[0].note, "platform");
  EXPECT_EQ(lines[0].util_pct_seconds, 3000);
  EXPECT_EQ(lines[1].seq, 9);
  EXPECT_EQ(lines[1].start, 50);
  EXPECT_EQ(lines[2].seq, 10) << "new lines follow the moved ones";
}

TYPED_TEST(StoreTest, CommittedBatchSurvivesKill9) {
  const pid_t pid = fork();
  if (pid == 0) {
    auto s = this->Open();
    if (!s.ok()) _exit(3);
    for (int i = 0; i < 50; ++i) {
      Batch b;
      b.instances.push_back(
          {InstanceId::FromNumber(i).str(), "tenant-000001", "pending", "{}", ""});
      if (!(*s)->Commit(b).ok()) _exit(4);
    }
    kill(getpid(), SIGKILL);  // No destructors, no checkpoint: only what Commit made durable.
    _exit(5);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto s = this->Open();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->LoadInstances("")->size(), 50u);
}

TEST(SqliteStoreTest, OneServerPerDataDirectory) {
  testing::TempDir dir;
  auto first = OpenSqliteStore(dir.path());
  ASSERT_TRUE(first.ok());
  auto second = OpenSqliteStore(dir.path());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("data directory " + dir.path() +
                                           " is in use by another tessera server (pid " +
                                           std::to_string(getpid()) + ")"),
            std::string::npos)
      << second.status().message();
  first->reset();
  EXPECT_TRUE(OpenSqliteStore(dir.path()).ok()) << "the lock goes with the store";
}

TEST(SqliteStoreTest, TheDatabaseAndItsWalAreMadePrivateWhateverTheirMode) {
  testing::TempDir dir;
  const std::string db = dir.path() + "/tessera.db";
  // A server killed with its WAL in place, whose files an older version made 0644.
  const pid_t pid = fork();
  if (pid == 0) {
    auto s = OpenSqliteStore(dir.path());
    if (!s.ok()) _exit(3);
    Batch b;
    b.instances.push_back({InstanceId::FromNumber(1).str(), "tenant-000001", "pending", "{}", ""});
    if (!(*s)->Commit(b).ok()) _exit(4);
    kill(getpid(), SIGKILL);
    _exit(5);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  for (const std::string& file : {db, db + "-wal", db + "-shm"}) {
    ASSERT_EQ(chmod(file.c_str(), 0644), 0) << file;
  }
  auto s = OpenSqliteStore(dir.path());
  ASSERT_TRUE(s.ok()) << s.status().message();
  for (const std::string& file : {db, db + "-wal", db + "-shm"}) {
    struct stat st {};
    ASSERT_EQ(stat(file.c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << file;
  }
}

TYPED_TEST(StoreTest, StartUpLoadsWhatIsActiveOrEndedRecently) {
  auto s = this->Open();
  ASSERT_TRUE(s.ok());
  Batch b;
  b.instances.push_back({"inst-000001", "t", "running", "{}", ""});
  b.instances.push_back({"inst-000002", "t", "terminated", "{}", "2026-01-01T00:00:00Z"});
  b.instances.push_back({"inst-000003", "t", "failed", "{}", "2026-03-01T00:00:00Z"});
  ASSERT_TRUE((*s)->Commit(b).ok());
  auto recent = (*s)->LoadInstances("2026-02-01T00:00:00Z");
  ASSERT_TRUE(recent.ok());
  ASSERT_EQ(recent->size(), 2u);
  EXPECT_EQ((*recent)[0].id, "inst-000001");
  EXPECT_EQ((*recent)[1].id, "inst-000003");
  EXPECT_EQ((*recent)[1].ended_at, "2026-03-01T00:00:00Z");
  auto old = (*s)->GetInstance("inst-000002");
  ASSERT_TRUE(old.ok() && old->has_value());
  EXPECT_EQ((*old)->state, "terminated");
  EXPECT_FALSE((*s)->GetInstance("inst-999999")->has_value());
}

TYPED_TEST(StoreTest, TheAuditLogIsPrunedBeforeATimeAndSettingsListByPrefix) {
  auto s = this->Open();
  ASSERT_TRUE(s.ok());
  Batch b;
  b.audit.push_back({0, "2026-01-01T00:00:00Z", "admin", "POST /v1/tenants", "", 201, ""});
  b.audit.push_back({0, "2026-06-01T00:00:00Z", "admin", "POST /v1/tenants", "", 201, ""});
  b.settings.emplace_back("node_state/n1", "draining");
  b.settings.emplace_back("node_state/n2", "ready");
  b.settings.emplace_back("admin_token_hash", "x");
  ASSERT_TRUE((*s)->Commit(b).ok());
  EXPECT_EQ(*(*s)->PruneAudit("2026-03-01T00:00:00Z"), 1);
  auto left = (*s)->ListAudit(0, 10);
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].at, "2026-06-01T00:00:00Z");
  auto nodes = (*s)->ListSettings("node_state/");
  ASSERT_TRUE(nodes.ok());
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0], (std::pair<std::string, std::string>{"node_state/n1", "draining"}));
}

TEST(SqliteStoreTest, UnwritableDirectoryIsAClearError) {
  auto s = OpenSqliteStore("/proc/tessera-cannot-create");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/proc/tessera-cannot-create"), std::string::npos);
}

// What only the PostgreSQL store has: a URL, a server that can go away and come back, replicas
// that start together, and text its columns cannot hold.
TEST(PostgresStoreTest, ErrorsNameTheDatabaseAndNeverItsPassword) {
  auto bad = OpenPostgresStore("postgres://tessera@127.0.0.1:5432/db?no_such_option=1");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("--store"), std::string::npos) << bad.status().message();
  const int closed = testing::FreeTcpPort();
  auto unreachable = OpenPostgresStore(
      "postgres://tessera:s3cret@127.0.0.1:" + std::to_string(closed) + "/tessera");
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(unreachable.status().code(), StatusCode::kUnavailable);
  const std::string message = unreachable.status().message();
  EXPECT_NE(message.find("postgres://tessera@127.0.0.1:" + std::to_string(closed) + "/tessera"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;
  EXPECT_TRUE(IsPostgresUrl("postgresql://h/db"));
  EXPECT_FALSE(IsPostgresUrl("./tessera-data"));
}

// The URL's own options reach libpq: sslmode=require against a server without TLS is refused,
// not quietly downgraded.
TEST(PostgresStoreTest, TheUrlsSslModeIsHonoured) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  auto plain = OpenPostgresStore(url + "?sslmode=disable");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  auto tls = OpenPostgresStore(url + "?sslmode=require");
  ASSERT_FALSE(tls.ok());
  EXPECT_NE(tls.status().message().find("SSL"), std::string::npos) << tls.status().message();
}

TEST(PostgresStoreTest, AStoreReconnectsWhenTheDatabaseComesBack) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  auto s = OpenPostgresStore(pg.CreateDatabase());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Batch first;
  first.instances.push_back({"inst-000001", "tenant-000001", "running", "{}", ""});
  first.ledger = {Line("tenant-000001", 100, 1)};
  ASSERT_TRUE((*s)->Commit(first).ok());
  ASSERT_TRUE(pg.Restart());
  // The first call after the restart may find its session gone: it fails as Unavailable, never
  // as data loss, and a later call reconnects. A read reconnects first here: the commit after it
  // must still find its prepared statements.
  auto read = (*s)->LoadInstances("");
  if (!read.ok()) {
    EXPECT_EQ(read.status().code(), StatusCode::kUnavailable) << read.status().ToString();
    read = (*s)->LoadInstances("");
  }
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  Batch next;
  next.instances.push_back({"inst-000002", "tenant-000001", "pending", "{}", ""});
  next.ledger = {Line("tenant-000001", 200, 2)};
  Status committed = (*s)->Commit(next);
  if (!committed.ok()) {
    EXPECT_EQ(committed.code(), StatusCode::kUnavailable) << committed.ToString();
    committed = (*s)->Commit(next);
  }
  ASSERT_TRUE(committed.ok()) << committed.ToString();
  EXPECT_EQ((*s)->LoadInstances("")->size(), 2u);
  auto lines = Scan(**s, "tenant-000001", 0, 1000);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].seq, 2) << "seqs go on after the reconnect";
}

TEST(PostgresStoreTest, ReplicasOpeningTogetherMigrateOnce) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  std::vector<std::thread> replicas;
  std::atomic<int> opened = 0;
  for (int i = 0; i < 4; ++i) {
    replicas.emplace_back([&] {
      auto s = OpenPostgresStore(url);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) ++opened;
    });
  }
  for (auto& t : replicas) t.join();
  EXPECT_EQ(opened, 4);
  const std::string db = url.substr(url.rfind('/') + 1);
  EXPECT_EQ(pg.Psql(db,
                    "SELECT count(*) = count(DISTINCT version) AND count(*) > 1 FROM "
                    "tessera_schema"),
            std::optional<std::string>("t\n"))
      << "each migration applied once";
  // A database a newer server migrated is refused, not written with the old schema.
  ASSERT_TRUE(pg.Psql(db, "INSERT INTO tessera_schema(version) VALUES(99)"));
  auto older = OpenPostgresStore(url);
  ASSERT_FALSE(older.ok());
  EXPECT_EQ(older.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(older.status().message().find("version 99, newer"), std::string::npos)
      << older.status().message();
}

TEST(PostgresStoreTest, TextItsColumnsCannotHoldIsStoredReplacedNotRefused) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  auto s = OpenPostgresStore(pg.CreateDatabase());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Batch b;
  b.audit.push_back({0, "2026-01-01T00:00:00Z", "tenant-000001", std::string("GET /v1/x\0y", 11),
                     "", 404, "bad \xff byte"});
  ASSERT_TRUE((*s)->Commit(b).ok()) << "a NUL or invalid UTF-8 from a client never fails a round";
  auto audit = (*s)->ListAudit(0, 10);
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].action, "GET /v1/x\xEF\xBF\xBDy");
  EXPECT_EQ((*audit)[0].detail, "bad \xEF\xBF\xBD byte");
}

// `tessera store migrate`'s copy: everything, seqs included, and only into an empty database.
TEST(PostgresStoreTest, ACopyMovesEverythingWithItsSeqsAndOnlyIntoAnEmptyDatabase) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  testing::TempDir dir;
  auto sqlite = OpenSqliteStore(dir.path());
  ASSERT_TRUE(sqlite.ok());
  Batch b;
  b.tenants.push_back({"tenant-000001", "acme", "h1", R"({"quota":{"gpus":8}})"});
  b.tenants.push_back({"tenant-000002", "beta", "h2", "{}"});
  b.instances.push_back({"inst-000001", "tenant-000001", "running", R"({"a":"tab\there"})", ""});
  b.instances.push_back(
      {"inst-000002", "tenant-000002", "terminated", "{}", "2020-01-01T00:00:00Z"});
  b.audit.push_back({0, "2020-01-01T00:00:00Z", "admin", "POST /v1/tenants", "", 201, ""});
  b.audit.push_back({0, "2026-06-01T00:00:00Z", "admin", "POST /v1/tenants", "x", 201,
                     "line\nbreak and back\\slash"});
  b.settings.emplace_back("admin_token_hash", "ffff");
  b.settings.emplace_back("node_state/n1", "draining");
  b.ledger = {Line("tenant-000001", 100, 1), Line("tenant-000002", 50, 2)};
  ASSERT_TRUE((*sqlite)->Commit(b).ok());
  ASSERT_EQ(*(*sqlite)->PruneAudit("2026-01-01T00:00:00Z"), 1) << "the copy keeps seq 2 as 2";
  Batch more;
  more.ledger = {Line("tenant-000001", 300, 3)};
  ASSERT_TRUE((*sqlite)->Commit(more).ok());

  const std::string url = pg.CreateDatabase();
  auto copied = CopyIntoPostgres(**sqlite, url);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(copied->tenants, 2);
  EXPECT_EQ(copied->instances, 2) << "ended long ago or not, every instance moves";
  EXPECT_EQ(copied->settings, 2);
  EXPECT_EQ(copied->audit, 1);
  EXPECT_EQ(copied->ledger, 3);

  auto moved = OpenPostgresStore(url);
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ((*moved)->LoadTenants()->at(0).doc, R"({"quota":{"gpus":8}})");
  auto instances = (*moved)->LoadInstances("");
  ASSERT_EQ(instances->size(), 2u);
  EXPECT_EQ((*instances)[0].doc, R"({"a":"tab\there"})");
  EXPECT_EQ((*instances)[1].ended_at, "2020-01-01T00:00:00Z");
  auto audit = (*moved)->ListAudit(0, 10);
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].seq, 2);
  EXPECT_EQ((*audit)[0].detail, "line\nbreak and back\\slash");
  EXPECT_EQ(**(*moved)->GetSetting("node_state/n1"), "draining");
  EXPECT_EQ((*moved)->LastLedgerSeq(), 3);
  auto lines = Scan(**moved, "", 0, 1000);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2].start, 300);
  // What the moved store appends goes on from the copied seqs.
  Batch after;
  after.audit.push_back({0, "2026-07-01T00:00:00Z", "admin", "DELETE /v1/x", "", 200, ""});
  after.ledger = {Line("tenant-000001", 400, 4)};
  ASSERT_TRUE((*moved)->Commit(after).ok());
  EXPECT_EQ((*moved)->ListAudit(2, 10)->at(0).seq, 3);
  EXPECT_EQ((*moved)->LastLedgerSeq(), 4);

  auto again = CopyIntoPostgres(**sqlite, url);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("already holds 2 tenants"), std::string::npos)
      << again.status().message();
}

// Leadership: one holder at a time, and a replaced holder's store can no longer commit.
TEST(LeadershipTest, ATakeoverRaisesTheEpochAndFencesTheFormerHoldersCommits) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  auto a_store = OpenPostgresStore(url);
  auto b_store = OpenPostgresStore(url);
  ASSERT_TRUE(a_store.ok() && b_store.ok());
  auto a = OpenLeadership(url, "replica-a", "http://a");
  auto b = OpenLeadership(url, "replica-b", "http://b");
  ASSERT_TRUE(a.ok() && b.ok());

  const int64_t first = *(*a)->TryAcquire(0.5);
  ASSERT_GT(first, 0);
  EXPECT_EQ(*(*b)->TryAcquire(0.5), 0) << "a live lease is not taken";
  (*a_store)->SetFence(first);
  Batch ok;
  ok.instances.push_back({"inst-000001", "tenant-000001", "pending", "{}", ""});
  ASSERT_TRUE((*a_store)->Commit(ok).ok());
  EXPECT_TRUE(*(*a)->Renew(first, 0.5));
  auto lease = (*b)->Read();
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->holder, "replica-a");
  EXPECT_EQ(lease->url, "http://a");
  EXPECT_TRUE(lease->live);
  EXPECT_EQ(lease->commits, 1);

  // A pauses past its lease; B takes over.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const int64_t second = *(*b)->TryAcquire(5);
  EXPECT_EQ(second, first + 1);
  EXPECT_FALSE(*(*a)->Renew(first, 0.5)) << "an expired lease is not renewed";
  Batch late;
  late.instances.push_back({"inst-000002", "tenant-000001", "pending", "{}", ""});
  late.ledger = {Line("tenant-000001", 100, 1)};
  const Status refused = (*a_store)->Commit(late);
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("fenced"), std::string::npos) << refused.message();
  EXPECT_TRUE((*a_store)->Fenced());
  EXPECT_FALSE((*b_store)->GetInstance("inst-000002")->has_value()) << "nothing of it landed";
  EXPECT_EQ((*b_store)->LastLedgerSeq(), 0);
  (*b_store)->SetFence(second);
  ASSERT_TRUE((*b_store)->Commit(late).ok());

  // A clean stop hands over at once.
  ASSERT_TRUE((*b)->Release(second).ok());
  EXPECT_EQ(*(*a)->TryAcquire(5), second + 1);

  ASSERT_TRUE((*a)->Announce("leader", 3, 0).ok());
  ASSERT_TRUE((*b)->Announce("follower", 2, 40).ok());
  auto replicas = (*a)->Replicas(10);
  ASSERT_TRUE(replicas.ok());
  ASSERT_EQ(replicas->size(), 2u);
  EXPECT_EQ((*replicas)[1].id, "replica-b");
  EXPECT_EQ((*replicas)[1].role, "follower");
  EXPECT_EQ((*replicas)[1].lag_ms, 40);
}

}  // namespace
}  // namespace tessera::store
