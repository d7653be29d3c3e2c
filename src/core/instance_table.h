// The working set of instances: every active instance and those that ended less than a retention
// period ago, by id, in creation order and per tenant. Older ended instances leave memory (the
// store keeps them for billing and audit), so memory and every scan stay bounded by what is live.
// Pages walk the creation order, so a listing is stable while instances come and go.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "core/instance.h"
#include "core/tenants.h"

namespace tessera::core {

// True when `inst` is visible to `caller`: its own tenant's, or the admin's to see.
inline bool Visible(const Tenant& caller, const Instance& inst) {
  return caller.admin || inst.tenant == caller.id;
}

// What a caller is told of an instance it may not see, or that does not exist: the same words.
Status InstanceNotFound(std::string_view id);

class InstanceTable {
 public:
  // Adds `inst`. REQUIRES: its id and seq are new.
  Instance& Add(Instance inst);
  Instance* Find(std::string_view id);
  const Instance* Find(std::string_view id) const;
  // The instance `caller` may see (Visible): NotFound naming the id, for an unknown id and for
  // another tenant's instance alike, so a tenant cannot tell the two apart.
  Result<Instance*> FindFor(const Tenant& caller, std::string_view id);
  Result<const Instance*> FindFor(const Tenant& caller, std::string_view id) const;
  size_t size() const { return by_seq_.size(); }

  // Up to `limit` instances with seq > `after_seq` (of `tenant` unless it is empty) that `keep`
  // accepts, in creation order; `more` tells whether any instance beyond the page was accepted.
  std::vector<const Instance*> Page(const std::string& tenant, int64_t after_seq, size_t limit,
                                    const std::function<bool(const Instance&)>& keep,
                                    bool* more) const;

  // Notes that `inst` has just reached a terminal state, so eviction can find it without a scan.
  void Ended(const Instance& inst) { ended_.insert({inst.updated_at, inst.seq}); }
  // Removes the instances that ended (a terminal state) before `cutoff`; returns how many. Each is
  // first shown to `evict` (when set): false keeps it, until Ended lists it again.
  size_t EvictEndedBefore(Time cutoff, const std::function<bool(const Instance&)>& evict = nullptr);

  // Every instance, in creation order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [seq, inst] : by_seq_) fn(inst);
  }
  template <typename Fn>
  void ForEach(Fn fn) {
    for (auto& [seq, inst] : by_seq_) fn(inst);
  }
  // The instances created after seq `after`, in creation order, while `fn` returns true.
  template <typename Fn>
  void ForEachAfter(int64_t after, Fn fn) {
    for (auto it = by_seq_.upper_bound(after); it != by_seq_.end(); ++it) {
      if (!fn(it->second)) return;
    }
  }

 private:
  std::map<int64_t, Instance> by_seq_;  // Nodes are stable: pointers into it stay valid.
  std::unordered_map<std::string, int64_t> by_id_;
  std::map<std::string, std::set<int64_t>> by_tenant_;
  std::set<std::pair<Time, int64_t>> ended_;  // (updated_at, seq) of terminal instances.
};

}  // namespace tessera::core
