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
#include "testing/testing.h"

namespace tessera::store {
namespace {

TEST(SqliteStoreTest, CommitsAreVisibleAfterReopen) {
  testing::TempDir dir;
  {
    auto s = OpenSqliteStore(dir.path() + "/data");
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
  auto s = OpenSqliteStore(dir.path() + "/data");
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

TEST(SqliteStoreTest, AFailedBatchAppliesNothing) {
  testing::TempDir dir;
  auto s = OpenSqliteStore(dir.path());
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

TEST(SqliteStoreTest, LedgerLinesKeepIncreasingSeqsAcrossFailuresAndReopens) {
  testing::TempDir dir;
  {
    auto s = OpenSqliteStore(dir.path());
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
  auto s = OpenSqliteStore(dir.path());
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
TEST(SqliteStoreTest, ALedgerReaderOnAnotherThreadSeesLinesUpToItsSeq) {
  testing::TempDir dir;
  auto s = OpenSqliteStore(dir.path());
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

TEST(SqliteStoreTest, CommittedBatchSurvivesKill9) {
  testing::TempDir dir;
  const pid_t pid = fork();
  if (pid == 0) {
    auto s = OpenSqliteStore(dir.path());
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
  auto s = OpenSqliteStore(dir.path());
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

TEST(SqliteStoreTest, StartUpLoadsWhatIsActiveOrEndedRecently) {
  testing::TempDir dir;
  auto s = OpenSqliteStore(dir.path());
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

TEST(SqliteStoreTest, TheAuditLogIsPrunedBeforeATimeAndSettingsListByPrefix) {
  testing::TempDir dir;
  auto s = OpenSqliteStore(dir.path());
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

}  // namespace
}  // namespace tessera::store
