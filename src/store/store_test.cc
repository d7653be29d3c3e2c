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
    b.instances.push_back({"inst-000001", "tenant-000001", "pending", "{}"});
    b.audit.push_back(
        {0, "2026-11-30T00:00:00Z", "admin", "POST /v1/tenants", "tenant-000001", 201, ""});
    b.settings.emplace_back("admin_token_hash", "ffff");
    ASSERT_TRUE((*s)->Commit(b).ok());
    Batch update;
    update.instances.push_back({"inst-000001", "tenant-000001", "running", R"({"node":"n1"})"});
    ASSERT_TRUE((*s)->Commit(update).ok());
  }
  auto s = OpenSqliteStore(dir.path() + "/data");
  ASSERT_TRUE(s.ok());
  auto tenants = (*s)->LoadTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 1u);
  EXPECT_EQ((*tenants)[0].name, "acme");
  auto instances = (*s)->LoadInstances();
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
  b.instances.push_back({"inst-000009", "tenant-000002", "pending", "{}"});
  b.tenants.push_back({"tenant-000002", "acme", "h2", "{}"});
  Status st = (*s)->Commit(b);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tenant-000002"), std::string::npos) << st.message();
  EXPECT_TRUE((*s)->LoadInstances()->empty());
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
      b.instances.push_back({InstanceId::FromNumber(i).str(), "tenant-000001", "pending", "{}"});
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
  EXPECT_EQ((*s)->LoadInstances()->size(), 50u);
}

TEST(SqliteStoreTest, UnwritableDirectoryIsAClearError) {
  auto s = OpenSqliteStore("/proc/tessera-cannot-create");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/proc/tessera-cannot-create"), std::string::npos);
}

}  // namespace
}  // namespace tessera::store
