// SoleTenant: a filter that keeps tenants apart on nodes that cannot isolate them. A node whose
// workloads all run under one identity (its agent cannot switch uids: `isolation: none`) lets
// any workload read, signal or outlive another there, so such a node hosts one tenant at a time:
// it is feasible for a request only while no other source (Request::source, the tenant) holds
// capacity on it. A node not marked shared takes every source, and so does a request from source
// 0 (no tenant: a capacity check, the FGD simulator).
// The fleet's bookings do not say whose they are, so the owner of the scheduler tells the filter
// (Hold and Release, as it books and frees work). What it holds stays held until Release, also
// while a trial releases the capacity in the fleet (the preemptor's), so another tenant's work
// keeps a shared node closed even where evicting it would make room: the filter never makes the
// preemptor evict work merely to empty a shared node.
// Thread-safety: not thread-safe; owned by a Scheduler and called on its owner's thread.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "fleet/fleet.h"
#include "sched/plugin.h"

namespace tessera::sched {

class SoleTenantFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "sole-tenant"; }
  // Keeps the nodes that Admits() `need.source`.
  size_t Filter(const Need& need, const NodeTable& nodes, std::span<const uint32_t> in,
                uint32_t* out) const override;
  // True only while some shared node holds work and the request names its source: the filter
  // may then refuse one node and keep another that the node table deems identical.
  bool NeedsEveryNode(const Need& need) const override;

  // Whether node n hosts one source at a time (true) or any (false, every node's default).
  void SetShared(fleet::NodeIndex n, bool shared);
  bool shared(fleet::NodeIndex n) const;
  // How many nodes are shared: with none, the filter refuses nothing.
  size_t shared_nodes() const { return shared_nodes_; }
  // `source` books one more piece of work on node n (Hold) or frees one (Release). REQUIRES:
  // Release matches an earlier Hold of the same node and source.
  void Hold(fleet::NodeIndex n, uint32_t source);
  void Release(fleet::NodeIndex n, uint32_t source);

  // Whether node n may take work of `source` now: it is not shared, `source` is 0, or no other
  // source holds work there.
  bool Admits(uint32_t n, uint32_t source) const;
  // Shared nodes that another source's work keeps closed to `source` now.
  size_t ClosedTo(uint32_t source) const;

 private:
  struct Node {
    bool shared = false;
    std::vector<std::pair<uint32_t, int>> holders;  // (source, pieces of work), none at 0.
    bool closing() const { return shared && !holders.empty(); }
  };
  Node& At(fleet::NodeIndex n);
  // Moves in_use_ by how `n`'s closing() changed from `was`.
  void Count(const Node& n, bool was);

  std::vector<Node> nodes_;  // By fleet node index; grown on demand.
  size_t in_use_ = 0;        // Shared nodes with holders: only they can be refused.
  size_t shared_nodes_ = 0;
};

}  // namespace tessera::sched
