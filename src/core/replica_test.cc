// Cores as replicas on one real PostgreSQL database: a follower reads what the leader committed
// and writes nothing; a leader whose lease was taken is fenced and steps down; the Replica loop
// elects one leader and hands over when it stops.
#include "core/replica.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/core.h"
#include "core/core_test_util.h"
#include "store/postgres.h"
#include "testing/postgres.h"
#include "testing/testing.h"

namespace tessera::core {
namespace {

class ReplicaTest : public ::testing::Test {
 protected:
  // A replicated core on `url`: a follower until it leads.
  std::unique_ptr<Core> StartCore(const std::string& url) {
    CoreOptions options;
    options.catalog = &TestCatalog();
    options.empty_fleet = true;
    options.data_dir = dir_.path();
    options.store = url;
    options.replicated = true;
    auto core = Core::Start(options);
    EXPECT_TRUE(core.ok()) << core.status().ToString();
    return core.ok() ? std::move(*core) : nullptr;
  }

  static Result<Tenant> CreateTenant(Core& core, const std::string& name) {
    return core.Run<Tenant>([name](State& s, store::Batch& b) {
      return s.tenants().Create(name, 1000, "hash-" + name, b);
    });
  }

  // Commits one ledger line starting at `start`.
  static Result<bool> AppendLedgerLine(Core& core, int64_t start) {
    return core.Run<bool>([start](State&, store::Batch& batch) -> Result<bool> {
      store::LedgerRecord l;
      l.tenant = "tenant-000001";
      l.start = start;
      batch.ledger.push_back(l);
      return true;
    });
  }

  static size_t Tenants(Core& core) {
    return core
        .Run<size_t>(
            [](State& s, store::Batch&) -> Result<size_t> { return s.tenants().List().size(); })
        .value();
  }

  testing::TempDir dir_;
};

TEST_F(ReplicaTest, AFollowerWritesNothingAndALeaderWhoseLeaseWasTakenIsFenced) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  auto a = StartCore(url);
  auto b = StartCore(url);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->follower());
  auto refused = CreateTenant(*a, "early");
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable) << "a follower does not write";
  EXPECT_EQ(Tenants(*a), 0u) << "and what the command wrote is gone from its memory";

  auto lease_a = store::OpenLeadership(url, "a", "http://a");
  auto lease_b = store::OpenLeadership(url, "b", "http://b");
  ASSERT_TRUE(lease_a.ok() && lease_b.ok());
  const int64_t first = *(*lease_a)->TryAcquire(0.5);
  ASSERT_TRUE(a->Lead(first).ok());
  EXPECT_FALSE(a->follower());
  std::atomic<int> stepped_down = 0;
  a->set_on_step_down([&](const std::string&) { ++stepped_down; });
  ASSERT_TRUE(CreateTenant(*a, "acme").ok());
  ASSERT_TRUE(AppendLedgerLine(*a, 50).ok());
  ASSERT_TRUE(b->Follow().ok());
  EXPECT_EQ(Tenants(*b), 1u) << "a follower catches up from the store";

  // A pauses past its lease and B takes over: A's next write is fenced, and A follows.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  const int64_t second = *(*lease_b)->TryAcquire(5);
  ASSERT_TRUE(b->Lead(second).ok());
  auto late = CreateTenant(*a, "late");
  EXPECT_EQ(late.status().code(), StatusCode::kUnavailable) << late.status().ToString();
  EXPECT_TRUE(a->follower());
  EXPECT_EQ(stepped_down, 1);
  ASSERT_TRUE(CreateTenant(*b, "beta").ok());
  // The new leader appends to the ledger after the lines its predecessor wrote.
  EXPECT_TRUE(AppendLedgerLine(*b, 100).ok());
  EXPECT_EQ(b->Run<int64_t>([&](State&, store::Batch&) -> Result<int64_t> {
               return b->store().LastLedgerSeq();
             }).value(),
            2);
  ASSERT_TRUE(a->Follow().ok());
  EXPECT_EQ(Tenants(*a), 2u) << "acme and beta; 'late' never landed";
}

TEST_F(ReplicaTest, OneOfTwoReplicasLeadsAndAStoppedLeaderHandsOverAtOnce) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  auto a = StartCore(url);
  auto b = StartCore(url);
  ASSERT_TRUE(a && b);
  ReplicaOptions options{.lease_s = 30, .renew_s = 0.2, .poll_s = 0.05};
  auto lease_a = store::OpenLeadership(url, "a", "http://a");
  auto lease_b = store::OpenLeadership(url, "b", "http://b");
  ASSERT_TRUE(lease_a.ok() && lease_b.ok());
  auto ra = std::make_unique<Replica>(a.get(), std::move(*lease_a), options);
  ra->Start();
  ASSERT_TRUE(ra->AwaitSettled(10));
  ASSERT_TRUE(ra->view().leader);
  Replica rb(b.get(), std::move(*lease_b), options);
  rb.Start();
  ASSERT_TRUE(rb.AwaitSettled(10));
  EXPECT_FALSE(rb.view().leader);
  EXPECT_EQ(rb.view().leader_url, "http://a");
  ASSERT_TRUE(CreateTenant(*a, "acme").ok());
  // The follower catches up within a few polls.
  for (int i = 0; i < 100 && Tenants(*b) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(Tenants(*b), 1u);

  // A stops cleanly: B leads long before A's 30 s lease would have run out.
  const auto stopped = std::chrono::steady_clock::now();
  ra.reset();
  while (!rb.view().leader &&
         std::chrono::steady_clock::now() - stopped < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(rb.view().leader);
  EXPECT_EQ(rb.view().takeovers, 1);
  EXPECT_TRUE(a->follower());
  EXPECT_TRUE(CreateTenant(*b, "beta").ok());
}

// Taking the lease with no commit since the state was built skips a second read of the store;
// with a commit since, the state is read again, so nothing another leader wrote is missed.
TEST_F(ReplicaTest, ANewLeaderReadsTheStoreAgainOnlyWhenSomethingWasCommittedSinceItsState) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  const std::string url = pg.CreateDatabase();
  auto first = StartCore(url);
  ASSERT_TRUE(first);
  auto lease_first = store::OpenLeadership(url, "first", "http://first");
  ASSERT_TRUE(lease_first.ok());
  const int64_t e1 = *(*lease_first)->TryAcquire(30);
  ASSERT_TRUE(first->Lead(e1).ok());
  ASSERT_TRUE(CreateTenant(*first, "acme").ok());

  // A replica reads the lease, builds its state, and only then does the leader commit again.
  auto lease_late = store::OpenLeadership(url, "late", "http://late");
  ASSERT_TRUE(lease_late.ok());
  auto seen = (*lease_late)->Read();
  ASSERT_TRUE(seen.ok());
  auto late = StartCore(url);
  ASSERT_TRUE(late);
  EXPECT_EQ(Tenants(*late), 1u);
  ASSERT_TRUE(CreateTenant(*first, "beta").ok());
  ASSERT_TRUE((*lease_first)->Release(e1).ok());
  first->StopLeading();

  ReplicaOptions options{.lease_s = 30, .renew_s = 0.2, .poll_s = 0.05};
  {
    Replica replica(late.get(), std::move(*lease_late), options, *seen);
    replica.Start();
    ASSERT_TRUE(replica.AwaitLeader(10));
    EXPECT_EQ(Tenants(*late), 2u) << "beta, committed after the state was built, is there";
    ASSERT_TRUE(CreateTenant(*late, "gamma").ok());
  }  // Stops, and hands the lease over.

  // A replica whose state is current leads on it, and writes after what it read.
  auto lease_third = store::OpenLeadership(url, "third", "http://third");
  ASSERT_TRUE(lease_third.ok());
  auto current = (*lease_third)->Read();
  ASSERT_TRUE(current.ok());
  auto third = StartCore(url);
  ASSERT_TRUE(third);
  Replica replica(third.get(), std::move(*lease_third), options, *current);
  replica.Start();
  ASSERT_TRUE(replica.AwaitLeader(10));
  EXPECT_EQ(Tenants(*third), 3u);
  ASSERT_TRUE(CreateTenant(*third, "delta").ok());
  ASSERT_TRUE(late->Follow().ok());
  EXPECT_EQ(Tenants(*late), 4u);
}

}  // namespace
}  // namespace tessera::core
