// The scheduler's extension points, in the style of the Kubernetes scheduling framework:
//   FilterPlugin  keeps the nodes that can host a request;
//   Policy        scores the feasible nodes (integer scores, higher is better) and, once the
//                 framework has picked the winner, chooses the GPUs on it (the FGD simulator's
//                 "gpusel"); Reserve then books them through Fleet::Allocate.
// Plugins see the fleet through NodeTable, the scheduler's incrementally maintained mirror. Both
// interfaces work on a batch of nodes, so one decision costs one virtual call per plugin, not one
// per node. The framework, not the plugins, breaks ties: the highest score wins and, among equal
// scores, the node with the lowest rank in the per-run seeded node order.
// Every policy is named in the registry (registry.cc): PolicyNames() and NewPolicy().
// Thread-safety: plugins are owned and called by one Scheduler on one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "common/result.h"
#include "fleet/fleet.h"
#include "sched/fit.h"
#include "sched/node_table.h"
#include "sched/rng.h"

namespace tessera::sched {

class FilterPlugin {
 public:
  virtual ~FilterPlugin() = default;
  virtual std::string_view Name() const = 0;
  // Writes to `out` the nodes of `in` that can host `need`, in order, and returns how many.
  // `out` has room for in.size() entries and may be in.data() itself.
  virtual size_t Filter(const Need& need, const NodeTable& nodes, std::span<const uint32_t> in,
                        uint32_t* out) const = 0;
  // True when, for `need`, this filter may refuse a node yet keep one that NodeTable holds to be
  // in the same state (it reads what the table does not mirror): the framework then filters every
  // candidate node, not only the lead of each group of identical ones.
  virtual bool NeedsEveryNode(const Need& /*need*/) const { return false; }
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view Name() const = 0;
  // Sets scores[i] for nodes[i]; every node passed the filters. Higher is better.
  virtual void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
                     std::span<int32_t> scores) = 0;
  // Appends the GPU grants for `need` on node n (feasible) to `a`. False when it cannot, which
  // the framework reports as an internal error.
  virtual bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                          fleet::Assignment* a) = 0;
  // True for a policy whose choice depends on how many feasible nodes there are (Random): the
  // framework then scores every feasible node, not one per group of identical idle nodes.
  virtual bool NeedsEveryNode() const { return false; }
  // Told of each request Schedule() is about to place, before it is scored, in arrival order and
  // once per request (not on the retries the caller marks Request::observe = false): an online
  // policy learns the workload from it. `source` is Request::source. It never sees a request
  // before its arrival.
  virtual void Observe(const Need& /*need*/, uint32_t /*source*/) {}
};

// What a policy may hold on to; everything outlives the policy.
struct PolicyEnv {
  Rng* rng = nullptr;               // The run's seeded generator (Random's draws).
  const FragModel* frag = nullptr;  // The target workload (FGD).
};

// The filter every policy runs: Fits() from fit.h.
std::unique_ptr<FilterPlugin> NewFitFilter();

// The policy registered under `name`; NotFound listing the known names otherwise.
Result<std::unique_ptr<Policy>> NewPolicy(std::string_view name, const PolicyEnv& env);

}  // namespace tessera::sched
