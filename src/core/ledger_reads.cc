#include "core/ledger_reads.h"

#include <spdlog/spdlog.h>

namespace tessera::core {

Result<std::unique_ptr<LedgerReads>> LedgerReads::Start(store::Store& store, int threads,
                                                        size_t per_tenant) {
  std::vector<std::unique_ptr<store::LedgerReader>> readers;
  for (int i = 0; i < std::max(1, threads); ++i) {
    TESSERA_ASSIGN_OR_RETURN(auto reader, store.OpenLedgerReader());
    readers.push_back(std::move(reader));
  }
  return std::unique_ptr<LedgerReads>(
      new LedgerReads(std::move(readers), std::max<size_t>(1, per_tenant)));
}

LedgerReads::LedgerReads(std::vector<std::unique_ptr<store::LedgerReader>> readers,
                         size_t per_tenant)
    : per_tenant_(per_tenant), readers_(std::move(readers)) {
  for (auto& reader : readers_) {
    threads_.emplace_back([this, r = reader.get()] { Loop(*r); });
  }
}

LedgerReads::~LedgerReads() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

bool LedgerReads::Submit(const std::string& tenant, Job job) {
  {
    std::lock_guard lock(mu_);
    size_t& held = held_[tenant];
    if (stopping_ || held >= per_tenant_) {
      if (held == 0) held_.erase(tenant);
      return false;
    }
    ++held;
    std::deque<Job>& q = queued_[tenant];
    if (q.empty()) turns_.push_back(tenant);
    q.push_back(std::move(job));
  }
  cv_.notify_one();
  return true;
}

void LedgerReads::Loop(store::LedgerReader& reader) {
  while (true) {
    Job job;
    std::string tenant;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !turns_.empty(); });
      if (stopping_) return;
      tenant = std::move(turns_.front());
      turns_.pop_front();
      std::deque<Job>& q = queued_[tenant];
      job = std::move(q.front());
      q.pop_front();
      if (q.empty()) {
        queued_.erase(tenant);
      } else {
        turns_.push_back(tenant);  // Its next job waits for every other tenant's turn.
      }
    }
    try {
      job(reader);
    } catch (const std::exception& e) {
      spdlog::error("a billing read failed: {}", e.what());
    }
    std::lock_guard lock(mu_);
    if (--held_[tenant] == 0) held_.erase(tenant);
  }
}

}  // namespace tessera::core
