// Billing reads off the core thread (docs/billing.md): a few threads, each with a ledger reader of
// its own, run the scans of usage, invoices and cost reports. They take the waiting tenants in
// turn, one job each, so one tenant's million-line scans wait behind each other, never in front
// of another tenant's, and the core thread never runs a scan.
// Thread-safety: Submit may be called from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace tessera::core {

class LedgerReads {
 public:
  using Job = std::function<void(store::LedgerReader&)>;

  // Opens a reader of `store` for each of `threads` threads (on the caller's thread, before the
  // store is used elsewhere) and starts them. A tenant may have `per_tenant` jobs queued or
  // running at once.
  static Result<std::unique_ptr<LedgerReads>> Start(store::Store& store, int threads,
                                                    size_t per_tenant);
  ~LedgerReads();  // Lets running jobs finish; queued ones are dropped.

  // Queues `job` for `tenant` ("" counts as one more tenant, the admin's every-tenant reads).
  // False, running nothing, when the tenant already has its share queued or running.
  bool Submit(const std::string& tenant, Job job);

 private:
  LedgerReads(std::vector<std::unique_ptr<store::LedgerReader>> readers, size_t per_tenant);
  void Loop(store::LedgerReader& reader);

  const size_t per_tenant_;
  std::vector<std::unique_ptr<store::LedgerReader>> readers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::deque<Job>> queued_;  // Guarded by mu_.
  std::map<std::string, size_t> held_;             // Queued or running, per tenant. Guarded.
  std::deque<std::string> turns_;                  // Tenants with a queued job, in turn order.
  bool stopping_ = false;                          // Guarded by mu_.
  std::vector<std::thread> threads_;
};

}  // namespace tessera::core
