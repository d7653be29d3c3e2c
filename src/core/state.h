// State is the control plane's memory: tenants, instances, the fleet, the scheduler and the
// pending queue, with the operations the API offers. Only the core thread touches it. Every
// operation that changes something appends the changed records to the round's store batch.
// Priorities: reserved over on-demand over spot. Pending work is FIFO within a priority and is
// retried whenever capacity frees; a request that does not fit never blocks smaller ones behind
// it. When reserved or on-demand work cannot be placed, spot instances are preempted: the victims
// are the fewest that make it fit on one node (then the least GPU freed).
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
#include "core/instance.h"
#include "core/labels.h"
#include "core/tenants.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace tessera::core {

// What POST /v1/instances asks for, already type-checked by the API layer.
struct CreateInstanceRequest {
  Billing billing = Billing::kOnDemand;
  std::string name;
  std::string command;
  bool restart = true;
  std::map<std::string, std::string> labels;       // Validated (ValidateLabels).
  std::map<std::string, std::string> annotations;  // Validated (ValidateAnnotations).
  std::string instance_type;                       // Either this...
  Shape shape;  // ...or this, field by field (instance_type empty).
};

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
  LatencyHistogram scheduling_latency;
};

class State {
 public:
  // `catalog` and `clock` must outlive the state.
  State(const catalog::Catalog* catalog, const Clock* clock, std::unique_ptr<fleet::Fleet> fleet,
        std::unique_ptr<sched::Scheduler> scheduler, bool sim_agents);

  // Rebuilds from stored records: re-books every held assignment exactly and re-queues pending
  // work. DataLoss naming the record when a record is corrupt or would double-book capacity.
  Status Restore(const std::vector<store::TenantRecord>& tenants,
                 const std::vector<store::InstanceRecord>& instances);

  Tenants& tenants() { return tenants_; }
  const Tenants& tenants() const { return tenants_; }

  // Changes a tenant's quota or disabled flag. Disabling ends its pending instances (they leave
  // the queue as terminated, with the reason) and releases their quota; what runs keeps running.
  Result<Tenant> UpdateTenant(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                              std::optional<bool> disabled, store::Batch& batch);

  // Validates the shape against the catalog and the tenant's quota, then places the instance,
  // preempting spot work if its priority allows, or queues it.
  Result<Instance> CreateInstance(const Tenant& caller, const CreateInstanceRequest& req,
                                  store::Batch& batch);
  // NotFound for an unknown id and for another tenant's instance alike.
  Result<Instance> GetInstance(const Tenant& caller, const std::string& id) const;
  std::vector<Instance> ListInstances(const Tenant& caller, std::optional<InstanceState> state,
                                      const LabelSelector& selector = {}) const;
  // Stops the instance and frees its capacity; queued work may then be placed.
  Result<Instance> DeleteInstance(const Tenant& caller, const std::string& id, store::Batch& batch);

  Status SetNodeDrained(const std::string& node, bool drained, store::Batch& batch);

  // Places queued work, in priority then FIFO order, until nothing more fits.
  void DrainPending(store::Batch& batch) { DrainQueue(batch); }

  // Advances simulated agents: scheduled -> running, stopping -> terminated. Returns true when
  // anything changed.
  bool TickAgents(store::Batch& batch);

  const fleet::Fleet& fleet() const { return *fleet_; }
  const catalog::Catalog& catalog() const { return *catalog_; }
  const std::map<std::string, Instance>& instances() const { return instances_; }
  const Counters& counters() const { return counters_; }
  int64_t TenantGpuMilli(const TenantId& tenant) const;

 private:
  Result<Shape> ResolveShape(const CreateInstanceRequest& req) const;
  Result<Money> PriceOf(const Shape& shape, Billing billing) const;
  sched::Request ToRequest(const Instance& inst) const;
  // Tries to place `inst` now, preempting if allowed. True when placed.
  bool Place(Instance& inst, store::Batch& batch);
  bool Preempt(Instance& inst, store::Batch& batch);
  void Book(Instance& inst, const fleet::Assignment& a);
  void Unbook(Instance& inst);
  // Places queued work, in priority then FIFO order, until nothing more fits.
  void DrainQueue(store::Batch& batch);
  void Save(const Instance& inst, store::Batch& batch);
  void Transition(Instance& inst, InstanceState to, std::string reason);

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  std::unique_ptr<fleet::Fleet> fleet_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  bool sim_agents_;

  Tenants tenants_;
  std::map<std::string, Instance> instances_;             // By id.
  std::map<std::pair<int, int64_t>, std::string> queue_;  // (-priority, seq) -> pending id.
  std::map<std::string, int64_t> tenant_gpu_milli_;       // Active GPU milli by tenant id.
  bool requeued_ = false;  // Preemption re-queued work since the queue was last drained.
  int64_t next_instance_ = 1;
  Counters counters_;
};

}  // namespace tessera::core
