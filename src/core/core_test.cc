#include "core/core.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

#include "common/log.h"
#include "core/core_test_util.h"
#include "core/invariant.h"
#include "store/memory_store.h"
#include "testing/testing.h"

namespace tessera::core {
namespace {

class CoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.catalog = &TestCatalog();
    options_.data_dir = dir_.File("data");
    options_.clock = &clock_;
    auto core = Core::Start(options_);
    ASSERT_TRUE(core.ok()) << core.status().message();
    core_ = std::move(*core);
  }

  Result<Tenant> CreateTenant(const std::string& name) {
    return core_->Run<Tenant>([name](State& s, store::Batch& b) {
      return s.tenants().Create(name, 1000, "hash-" + name, b);
    });
  }

  testing::TempDir dir_;
  FakeClock clock_;
  CoreOptions options_;
  std::unique_ptr<Core> core_;
};

// A broken invariant (capacity released twice, a search's promise not kept: CheckInvariant in
// placement and preemption) throws, and so does any bug: the round fails, never the server.
TEST_F(CoreTest, ACommandThatThrowsFailsItsRoundAndMemoryComesBackFromTheStore) {
  ASSERT_TRUE(CreateTenant("kept").ok());
  // A command that changes memory and then finds an invariant broken: its change must not
  // survive.
  auto thrown = core_->Run<bool>([](State& s, store::Batch& b) -> Result<bool> {
    (void)s.tenants().Create("half-done", 1000, "hash-half", b);
    CheckInvariant(Status::FailedPrecondition("not held"), "releasing a gang member");
    return true;
  });
  ASSERT_FALSE(thrown.ok());
  EXPECT_EQ(thrown.status().code(), StatusCode::kInternal);
  auto names = core_->Run<std::vector<std::string>>([](State& s, store::Batch&) {
    std::vector<std::string> out;
    for (const Tenant* t : s.tenants().List()) out.push_back(t->name);
    return Result<std::vector<std::string>>(out);
  });
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, std::vector<std::string>{"kept"});
  // The principal index the HTTP threads read agrees: the half-made tenant's token is unknown.
  auto index = core_->principals();
  EXPECT_TRUE(index->count("hash-kept"));
  EXPECT_FALSE(index->count("hash-half"));
  // And the core serves on.
  EXPECT_TRUE(CreateTenant("after").ok());
}

// The core wakes on its own when a batch window closes: a create held there is placed and
// committed though no other command comes.
TEST(CoreBatchWindowTest, AHeldCreateIsPlacedWhenTheWindowClosesWithoutAnotherCommand) {
  testing::TempDir dir;
  FakeClock clock;
  CoreOptions options;
  options.catalog = &TestCatalog();
  options.data_dir = dir.File("data");
  options.clock = &clock;
  options.batch_window = 8;
  options.batch_wait = std::chrono::milliseconds(200);
  auto core = Core::Start(options);
  ASSERT_TRUE(core.ok()) << core.status().message();
  auto tenant = (*core)->Run<Tenant>(
      [](State& s, store::Batch& b) { return s.tenants().Create("acme", 1000, "hash-acme", b); });
  ASSERT_TRUE(tenant.ok());
  CreateInstanceRequest req;
  req.instance_type = "gpu.1xh100";
  auto made = (*core)->Run<Instance>([&](State& s, store::Batch& b) {
    return s.instances().Create(*s.tenants().Find(tenant->id.str()), req, b);
  });
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(made->state, InstanceState::kPending);
  clock.Advance(std::chrono::milliseconds(200));
  // The core runs a round of its own every 50 ms while creates are held; give it ample time.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  core->reset();
  auto store = store::OpenStore(options.data_dir);
  ASSERT_TRUE(store.ok()) << store.status().message();
  auto record = (*store)->GetInstance(made->id.str());
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->state, "scheduled");
}

TEST(CoreBatchWindowTest, ACreateHeldWhenTheCoreStopsIsPlacedAfterARestart) {
  testing::TempDir dir;
  FakeClock clock;  // Never advanced: the window never closes by itself.
  CoreOptions options;
  options.catalog = &TestCatalog();
  options.data_dir = dir.File("data");
  options.clock = &clock;
  options.batch_window = 8;
  std::string id;
  std::string tenant_id;
  {
    auto core = Core::Start(options);
    ASSERT_TRUE(core.ok()) << core.status().message();
    auto tenant = (*core)->Run<Tenant>(
        [](State& s, store::Batch& b) { return s.tenants().Create("acme", 1000, "hash-acme", b); });
    ASSERT_TRUE(tenant.ok());
    tenant_id = tenant->id.str();
    CreateInstanceRequest req;
    req.instance_type = "gpu.1xh100";
    auto made = (*core)->Run<Instance>([&](State& s, store::Batch& b) {
      return s.instances().Create(*s.tenants().Find(tenant_id), req, b);
    });
    ASSERT_TRUE(made.ok()) << made.status().message();
    EXPECT_NE(made->reason.find("in the batch window"), std::string::npos) << made->reason;
    id = made->id.str();
  }
  auto core = Core::Start(options);
  ASSERT_TRUE(core.ok()) << core.status().message();
  auto after = (*core)->Run<Instance>(
      [&](State& s, store::Batch&) { return s.views().Get(*s.tenants().Find(tenant_id), id); });
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ(after->state, InstanceState::kScheduled) << after->reason;
  EXPECT_EQ(after->reason.find("batch window"), std::string::npos) << after->reason;
}

TEST_F(CoreTest, ThePrincipalIndexIsPublishedOnlyOnceACommitIsDurable) {
  auto before = core_->principals();
  EXPECT_FALSE(before->count("hash-acme"));
  std::shared_ptr<const PrincipalIndex> seen_inside;
  auto created = core_->Run<Tenant>([&](State& s, store::Batch& b) {
    auto t = s.tenants().Create("acme", 1000, "hash-acme", b);
    seen_inside = core_->principals();  // Before the commit: still the old index.
    return t;
  });
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(seen_inside->count("hash-acme"));
  EXPECT_TRUE(core_->principals()->count("hash-acme"));
}

// A store that fails on demand: its commits, its reads, or both.
class FailingStore final : public store::Store {
 public:
  explicit FailingStore(std::unique_ptr<store::Store> inner) : inner_(std::move(inner)) {}
  bool fail_commits = false;
  bool fail_reads = false;

  Status Commit(const store::Batch& b) override {
    if (fail_commits) return Status::DataLoss("disk full (injected)");
    return inner_->Commit(b);
  }
  Result<std::vector<store::TenantRecord>> LoadTenants() override {
    if (fail_reads) return Status::DataLoss("I/O error (injected)");
    return inner_->LoadTenants();
  }
  Result<std::vector<store::InstanceRecord>> LoadInstances(const std::string& since) override {
    if (fail_reads) return Status::DataLoss("I/O error (injected)");
    return inner_->LoadInstances(since);
  }
  Result<std::optional<store::InstanceRecord>> GetInstance(const std::string& id) override {
    return inner_->GetInstance(id);
  }
  Result<std::vector<store::AuditRecord>> ListAudit(int64_t after, int limit) override {
    return inner_->ListAudit(after, limit);
  }
  Result<int64_t> PruneAudit(const std::string& before) override {
    return inner_->PruneAudit(before);
  }
  Result<std::optional<std::string>> GetSetting(const std::string& key) override {
    return inner_->GetSetting(key);
  }
  Status ScanLedger(const std::string& tenant, int64_t from, int64_t to,
                    const std::function<void(const store::LedgerRecord&)>& fn) override {
    return inner_->ScanLedger(tenant, from, to, fn);
  }
  int64_t LastLedgerSeq() const override { return inner_->LastLedgerSeq(); }
  Result<std::unique_ptr<store::LedgerReader>> OpenLedgerReader() override {
    return inner_->OpenLedgerReader();
  }
  Result<std::vector<std::pair<std::string, std::string>>> ListSettings(
      const std::string& prefix) override {
    if (fail_reads) return Status::DataLoss("I/O error (injected)");
    return inner_->ListSettings(prefix);
  }

 private:
  std::unique_ptr<store::Store> inner_;
};

class FailingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.catalog = &TestCatalog();
    options_.clock = &clock_;
    auto store = std::make_unique<FailingStore>(store::NewMemoryStore());
    store_ = store.get();
    auto core = Core::Start(options_, std::move(store));
    ASSERT_TRUE(core.ok()) << core.status().message();
    core_ = std::move(*core);
  }

  std::vector<std::string> TenantNames() {
    return *core_->Run<std::vector<std::string>>([](State& s, store::Batch&) {
      std::vector<std::string> out;
      for (const Tenant* t : s.tenants().List()) out.push_back(t->name);
      return Result<std::vector<std::string>>(out);
    });
  }

  FakeClock clock_;
  CoreOptions options_;
  FailingStore* store_ = nullptr;
  std::unique_ptr<Core> core_;
};

TEST_F(FailingStoreTest, AFailedCommitAnswersUnavailableAndMemoryMatchesTheStore) {
  ASSERT_TRUE(core_
                  ->Run<Tenant>([](State& s, store::Batch& b) {
                    return s.tenants().Create("kept", 1000, "h1", b);
                  })
                  .ok());
  store_->fail_commits = true;
  auto lost = core_->Run<Tenant>(
      [](State& s, store::Batch& b) { return s.tenants().Create("lost", 1000, "h2", b); });
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(lost.status().message(), "the store failed: disk full (injected)");
  store_->fail_commits = false;
  EXPECT_EQ(TenantNames(), std::vector<std::string>{"kept"})
      << "memory was rebuilt from the store, which never held 'lost'";
  EXPECT_FALSE(core_->principals()->count("h2"));
}

TEST_F(FailingStoreTest, ACommitAndARebuildThatBothFailStopTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  InitLogging();  // The log goes to standard error, where the death test reads it.
  EXPECT_EXIT(
      {
        store_->fail_commits = true;
        store_->fail_reads = true;
        (void)core_->Run<Tenant>(
            [](State& s, store::Batch& b) { return s.tenants().Create("x", 1, "h", b); });
      },
      ::testing::ExitedWithCode(kExitStoreLost), "cannot rebuild state from the store");
}

}  // namespace
}  // namespace tessera::core
