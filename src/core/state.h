// State is the control plane's memory and the operations the API offers on it. It composes parts
// with one job each and orchestrates them:
//   Tenants          who may call, their quotas and tokens (tenants.h);
//   Admission        what a request becomes, and whether the fleet could ever host it;
//   Usage            what each tenant holds, in the quota's unit;
//   InstanceTable    the working set of instances;
//   PendingQueue     what waits, grouped by shape, in budgeted passes;
//   Preemptor        spot victims, indexed by node, in budgeted searches;
//   AgentSupervisor  what the nodes' agents are told and report;
//   Recovery         what comes back at start-up, reconciled with the fleet and catalog.
// Only the core thread touches it. Every operation that changes something appends the changed
// records to the round's store batch.
// Priorities: reserved over on-demand over spot. Reserved and on-demand work that does not fit
// preempts spot work; nothing being deleted is ever a victim or restarted. Reasons shown to a
// tenant never name another tenant's resources.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "common/clock.h"
#include "core/admission.h"
#include "core/agents.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/labels.h"
#include "core/preemptor.h"
#include "core/queue.h"
#include "core/recovery.h"
#include "core/tenants.h"
#include "core/usage.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace tessera::core {

// A fixed-bucket histogram of scheduling latency, as Prometheus exposes it.
struct LatencyHistogram {
  // Upper bounds of the buckets, in seconds.
  static constexpr std::array<double, 10> kBounds = {0.00001, 0.00005, 0.0001, 0.0005, 0.001,
                                                     0.005,   0.01,    0.05,   0.1,    0.5};
  std::array<int64_t, kBounds.size()> buckets{};  // Cumulative counts, as Prometheus wants.
  int64_t count = 0;
  double sum = 0;
  void Observe(double seconds);
};

// Counters for /metrics, read on the core thread.
struct Counters {
  int64_t scheduling_attempts = 0;
  int64_t preemptions = 0;
  int64_t preemption_searches = 0;
  int64_t evicted = 0;  // Ended instances that left memory after the retention period.
  LatencyHistogram scheduling_latency;
};

struct StateOptions {
  bool sim_agents = false;
  // How long an ended instance stays in memory (listed, and read without the store).
  Duration retention = std::chrono::hours(1);
  Preemptor::Limits preemption;
  // Groups of queued work that may fail to place per queue pass.
  size_t queue_failures_per_pass = 32;
};

// A page of instances, and where the next one starts.
struct InstancePage {
  std::vector<Instance> items;
  std::optional<int64_t> next_after;  // The seq to pass as ListQuery::after_seq; none at the end.
};

struct ListQuery {
  std::optional<InstanceState> state;
  LabelSelector selector;
  int64_t after_seq = 0;
  size_t limit = 100;
};

class State {
 public:
  // `catalog` and `clock` must outlive the state.
  State(const catalog::Catalog* catalog, const Clock* clock, std::unique_ptr<fleet::Fleet> fleet,
        std::unique_ptr<sched::Scheduler> scheduler, StateOptions options);

  // REQUIRES: a fresh State, before any other operation.
  // Rebuilds from stored records, reconciling with today's fleet and catalog (recovery.h): what
  // cannot come back is marked failed, its record written to `batch`. Stored node states are
  // applied after the bookings, so drained nodes keep their work. DataLoss naming the record only
  // when a record is corrupt.
  Result<RecoveryReport> Restore(const std::vector<store::TenantRecord>& tenants,
                                 const std::vector<store::InstanceRecord>& instances,
                                 const std::map<std::string, fleet::NodeState>& node_states,
                                 store::Batch& batch);

  Tenants& tenants() { return tenants_; }
  const Tenants& tenants() const { return tenants_; }
  // Changes a tenant's quota or disabled flag. Disabling ends its pending instances (they leave
  // the queue as terminated, with the reason) and releases their quota; what runs keeps running.
  Result<Tenant> UpdateTenant(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                              std::optional<bool> disabled, store::Batch& batch);

  // REQUIRES: `caller` is a tenant of tenants(), not the admin (who has no quota).
  // Admits the request (400/409 for a shape the fleet can never host), checks the quota, then
  // places the instance, preempting spot work if its priority allows, or queues it behind any
  // identical request already waiting.
  Result<Instance> CreateInstance(const Tenant& caller, const CreateInstanceRequest& req,
                                  store::Batch& batch);
  // NotFound for an unknown id and for another tenant's instance alike. A pending instance
  // carries the reason it waits.
  Result<Instance> GetInstance(const Tenant& caller, std::string_view id) const;
  // The caller's instances (the admin's: all) in creation order, one page.
  InstancePage ListInstances(const Tenant& caller, const ListQuery& query) const;
  // Stops the instance and frees its capacity (through its agent when agents serve the nodes).
  Result<Instance> DeleteInstance(const Tenant& caller, std::string_view id, store::Batch& batch);

  Status SetNodeDrained(const std::string& node, bool drained, store::Batch& batch);

  // Starts a core round: per-round budgets start afresh.
  void BeginRound() { preemptor_.NewRound(); }
  // Ends a core round, after its commands: agents' reports are applied, queued work is placed
  // (one budgeted pass per change in capacity), and ended instances past the retention period
  // leave memory.
  void EndRound(store::Batch& batch);

  // True when queued work should be tried again in a round of its own: capacity freed or the
  // last round's preemption budget ran out with work waiting.
  bool has_deferred_work() const { return queue_.HasUntried(); }

  const fleet::Fleet& fleet() const { return *fleet_; }
  const catalog::Catalog& catalog() const { return *catalog_; }
  const InstanceTable& instances() const { return instances_; }
  const PendingQueue& queue() const { return queue_; }
  const Counters& counters() const { return counters_; }
  // What the tenant's active instances hold or wait for, in milli-GPU.
  int64_t TenantGpuMilli(const TenantId& tenant) const { return usage_.Milli(tenant.str()); }

 private:
  // Tries to place `inst` now, preempting if its priority allows.
  Attempt Place(Instance& inst, store::Batch& batch, bool first_attempt);
  void Evict(Instance& victim, store::Batch& batch);
  void Book(Instance& inst, const fleet::Assignment& a);
  void Unbook(Instance& inst);
  // One budgeted pass over the queue.
  void PlaceQueued(store::Batch& batch);
  // True when a report changed something.
  bool ApplyAgentReports(store::Batch& batch);
  void Save(const Instance& inst, store::Batch& batch);
  void Transition(Instance& inst, InstanceState to, std::string reason);
  // `inst` as the API shows it: a pending one with the reason it waits.
  Instance Shown(const Instance& inst) const;
  // True when `inst` is visible to `caller`.
  static bool Visible(const Tenant& caller, const Instance& inst) {
    return caller.admin || inst.tenant == caller.id;
  }

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  std::unique_ptr<fleet::Fleet> fleet_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  StateOptions options_;

  Tenants tenants_;
  Admission admission_;
  Usage usage_;
  InstanceTable instances_;
  PendingQueue queue_;
  Preemptor preemptor_;
  AgentSupervisor agents_;
  int64_t next_instance_ = 1;
  Counters counters_;
};

}  // namespace tessera::core
