// Billing reads off the core thread: tenants take turns, one tenant's backlog is bounded, and
// each job gets a reader that scans what the store committed.
#include "core/ledger_reads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <vector>

#include "store/memory_store.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

// A gate the jobs wait at until the test opens it.
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return open_; });
  }
  void Open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

TEST(LedgerReadsTest, TenantsTakeTurnsAndOneTenantsBacklogIsBounded) {
  auto store = store::NewMemoryStore();
  store::Batch b;
  store::LedgerRecord line;
  line.tenant = "tenant-000002";
  line.start = 100;
  line.amount_micros = 7;
  b.ledger.push_back(line);
  ASSERT_TRUE(store->Commit(b).ok());
  auto reads = LedgerReads::Start(*store, /*threads=*/1, /*per_tenant=*/3);
  ASSERT_TRUE(reads.ok()) << reads.status().message();
  Gate gate;
  std::mutex mu;
  std::vector<std::string> order;
  auto job = [&](std::string name, bool wait) {
    return [&, name, wait](store::LedgerReader&) {
      if (wait) gate.Wait();
      std::lock_guard lock(mu);
      order.push_back(name);
    };
  };
  // Tenant A's first job holds the only thread; two more wait, and a fourth is refused.
  std::promise<void> running;
  ASSERT_TRUE((*reads)->Submit("a", [&](store::LedgerReader& r) {
    running.set_value();
    job("a1", true)(r);
  }));
  running.get_future().wait();
  ASSERT_TRUE((*reads)->Submit("a", job("a2", false)));
  ASSERT_TRUE((*reads)->Submit("a", job("a3", false)));
  EXPECT_FALSE((*reads)->Submit("a", job("a4", false))) << "a tenant's backlog is bounded";
  // Tenant B comes later, yet goes before A's third: turns alternate.
  std::promise<int64_t> scanned;
  ASSERT_TRUE((*reads)->Submit("b", [&](store::LedgerReader& reader) {
    int64_t amount = 0;
    EXPECT_TRUE(reader
                    .Scan("tenant-000002", 0, 1000, store->LastLedgerSeq(),
                          [&](const store::LedgerRecord& l) { amount += l.amount_micros; })
                    .ok());
    {
      std::lock_guard lock(mu);
      order.push_back("b1");
    }
    scanned.set_value(amount);
  }));
  gate.Open();
  auto result = scanned.get_future();
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(result.get(), 7) << "the job's reader scans what was committed";
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lock(mu);
      if (order.size() == 4) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(order, (std::vector<std::string>{"a1", "a2", "b1", "a3"}));
  }
  // Once A's jobs ran, A may queue again.
  EXPECT_TRUE((*reads)->Submit("a", job("a5", false)));
  reads->reset();  // Joins the thread while what its jobs touch still exists.
}

}  // namespace
}  // namespace tessera::core
