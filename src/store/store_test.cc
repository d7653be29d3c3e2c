#include "store/store.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

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
