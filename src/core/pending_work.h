// PendingWork: how many instances each tenant has waiting to be placed (pending), members of
// waiting groups included, and the cap on that count. Every way work is added (an instance, a
// group's create, a scale-out by its owner or its autoscaler) passes the admission gate, which
// asks Admit here: one tenant cannot fill the queue that every tenant's work waits in. The count
// is kept as instances become pending and stop being so (placed, ended), so a check costs a hash
// lookup whatever the queue holds; recovery rebuilds it as it restores each pending instance.
// Work that comes back on its own (a preempted or displaced instance queued again, a group's
// restart) counts but is never refused: it was admitted once.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "core/tenants.h"

namespace tessera::core {

// The server's cap on a tenant's pending instances, unless its quota says otherwise.
inline constexpr int64_t kDefaultMaxPending = 1000;
// The most an operator may set a tenant's cap to (quota.max_pending).
inline constexpr int64_t kMaxMaxPending = 1'000'000;

class PendingWork {
 public:
  // `default_cap`: the cap of a tenant whose quota sets none.
  explicit PendingWork(int64_t default_cap) : default_cap_(default_cap) {}

  // One more (or one fewer) pending instance of `tenant`. REQUIRES for Remove: one was added.
  void Add(const std::string& tenant) { ++count_[tenant]; }
  void Remove(const std::string& tenant);

  // The tenant's pending instances, members of waiting groups included.
  int64_t Count(const std::string& tenant) const;
  // The tenant's cap: its quota's max_pending, else the server's default.
  int64_t CapOf(const Tenant& t) const { return t.max_pending.value_or(default_cap_); }
  // How many more `t` may add now (0 at or over its cap).
  int64_t Room(const Tenant& t) const;

  // OK when `t` may add `count` pending instances; otherwise ResourceExhausted with the reason
  // too_many_pending (429), naming the cap, the count, what was asked and what to do.
  Status Admit(const Tenant& t, int64_t count) const;

 private:
  int64_t default_cap_;
  std::unordered_map<std::string, int64_t> count_;  // By tenant id; absent: none.
};

}  // namespace tessera::core
