// The preemptor: when reserved or on-demand work cannot be placed, it finds spot instances to
// evict for it, on one node: the fewest victims that make the request fit there, then the ones
// that free the least GPU. Victims are kept in an index by node as they come and go (only spot
// instances that hold capacity and are not being deleted), so a search looks only at nodes that
// have victims and could host the request once they leave. A search tries at most
// Limits::max_nodes such nodes and Limits::max_trials victim sets in all, and a round allows at
// most Limits::searches_per_round searches: whatever the requests, preemption costs a round a
// bounded amount of scheduler work (docs/api.md states the budget): a trial is a release of the
// victims, one placement attempt on the node and a re-booking, some microseconds.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "catalog/catalog.h"
#include "core/instance.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"

namespace tessera::core {

class Preemptor {
 public:
  struct Limits {
    size_t max_nodes = 8;           // Candidate nodes tried per search.
    size_t max_trials = 16;         // Victim sets tried per search, over all its nodes.
    size_t searches_per_round = 4;  // Searches per core round.
  };

  struct Plan {
    fleet::NodeIndex node;
    std::vector<Instance*> victims;
  };

  // `catalog`, `fleet` and `scheduler` must outlive this.
  Preemptor(const catalog::Catalog* catalog, const fleet::Fleet* fleet, sched::Scheduler* scheduler,
            Limits limits);

  // `inst` may now be evicted: a spot instance that holds capacity. REQUIRES: inst->assignment,
  // and `inst` stays at its address until Untrack.
  void Track(Instance* inst);
  // `inst` may no longer be evicted (it is being released, deleted or evicted). REQUIRES:
  // inst->assignment still set (untrack before releasing). Untracking twice does nothing.
  void Untrack(const Instance* inst);

  // A plan to fit `req`, or nullopt when none was found within the limits (or the round's
  // searches are spent: then budget_spent() is true). Changes nothing: the caller evicts.
  // `only`: a plan on that node alone (work held to its volumes' node).
  std::optional<Plan> Find(const sched::Request& req,
                           std::optional<fleet::NodeIndex> only = std::nullopt);

  // Starts a round: its searches are counted from zero.
  void NewRound() {
    searches_ = 0;
    extra_ = 0;
  }
  // More searches for this round: a gang's members each need one (Groups::PlaceGang bounds it).
  void AddSearches(size_t n) { extra_ += n; }
  bool budget_spent() const { return searches_ >= limits_.searches_per_round + extra_; }
  // Spot instances on nodes whose GPUs `req` could use: what a pending reason reports.
  size_t CountFor(const sched::Request& req) const;
  size_t size() const { return tracked_; }
  // Searches run since the start (a search with no candidate node is not run).
  int64_t searches_total() const { return searches_total_; }

 private:
  // Nodes worth a search for `req`, best first.
  std::vector<uint32_t> Candidates(const sched::Request& req) const;
  // False when `req` cannot fit on `n` even once `victims` are released, by counting: CPU,
  // memory, and the GPUs (or the share) the victims would leave free. True says only "maybe".
  bool MightFit(const sched::Request& req, const fleet::Node& n,
                const std::vector<Instance*>& victims) const;
  const catalog::GpuModel& catalog_of(const fleet::Node& n) const { return catalog_->gpu(n.model); }
  // Whether `req` fits on `node` once `victims` are released; the fleet is restored after.
  bool FitsWithout(const sched::Request& req, fleet::NodeIndex node,
                   const std::vector<Instance*>& victims);
  int64_t Milli(const Instance* i) const { return i->shape.GpuMilli(*catalog_); }

  const catalog::Catalog* catalog_;
  const fleet::Fleet* fleet_;
  sched::Scheduler* scheduler_;
  Limits limits_;
  std::unordered_map<uint32_t, std::vector<Instance*>> by_node_;
  size_t tracked_ = 0;
  size_t extra_ = 0;
  size_t searches_ = 0;
  int64_t searches_total_ = 0;
};

}  // namespace tessera::core
