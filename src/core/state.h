// State is the control plane's memory and the operations the API offers on it. It composes parts
// with one job each and orchestrates them:
//   Tenants          who may call, their quotas and tokens (tenants.h);
//   Admission        what a request becomes, and whether the fleet could ever host it;
//   Instances        the instance lifecycle: admission against quotas, placement, preemption
//                    and notice, transitions, what agents report of workloads; and its memory:
//                    the instances, the queue, the batch window, usage and pending work
//                    (instance_service.h), implementing the other parts' Lifecycles;
//   InstanceViews    what a tenant is shown of its instances: one, a page, a log;
//   AgentSupervisor  which nodes agents serve, their long polls and what they report;
//   AgentHub         nodes joined by agents: created, registered, their reports applied, what
//                    they are told (agent_hub.h), through AgentHub::Lifecycle;
//   NodeGpus         joined nodes' GPU mode changes and MIG devices (node_gpus.h);
//   NodeHealth       silent nodes and their leases, GPUs out of service, nodes removed
//                    (node_health.h), displacing work through NodeHealth::Lifecycle;
//   DesiredStates    what each node's agent is told (desired_state.h);
//   Monitoring       alert rules and alerts, GPU history, faults' interruptions (monitoring.h);
//   Readings         what the nodes' GPUs read: series, and readings by instance and node;
//   Accounts         meters, reservations, budgets and billing reads (accounts.h);
//   LogTails         instances' output as their agents shipped it (log_tails.h);
//   Groups           instance groups: their requests, gangs, restarts and autoscaler, and their
//                    memory (group_service.h), reaching instances through Groups::Lifecycle and
//                    hearing of their members through Instances::Listener, which State passes on;
//   EndpointTable    where running instances' ports are reached, and its snapshots;
//   TenantSecrets    secrets, and the values workloads carry, sealed and resolved (secrets.h);
//   KeyRotation      every value sealed at rest re-sealed under the current key (rotation.h);
//   Volumes          tenants' volumes and where they are (volumes.h);
//   VolumeMounts     which instances mount which volumes, and who may (volume_mounts.h);
//   Recovery         what comes back at start-up, reconciled with the fleet and catalog.
// Only the core thread touches it. Every operation that changes something appends the changed
// records to the round's store batch.
// Priorities: reserved over on-demand over spot. Reserved and on-demand work that does not fit
// preempts spot work; nothing being deleted is ever a victim or restarted. Reasons shown to a
// tenant never name another tenant's resources.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "alerts/evaluator.h"
#include "catalog/catalog.h"
#include "common/clock.h"
#include "core/accounts.h"
#include "core/admission.h"
#include "core/agent_hub.h"
#include "core/agents.h"
#include "core/batch_window.h"
#include "core/desired_state.h"
#include "core/endpoint_table.h"
#include "core/group.h"
#include "core/group_service.h"
#include "core/group_table.h"
#include "core/instance.h"
#include "core/instance_service.h"
#include "core/instance_table.h"
#include "core/instance_views.h"
#include "core/labels.h"
#include "core/log_tails.h"
#include "core/monitoring.h"
#include "core/node_gpus.h"
#include "core/node_health.h"
#include "core/pending_work.h"
#include "core/preemptor.h"
#include "core/queue.h"
#include "core/readings.h"
#include "core/recovery.h"
#include "core/rotation.h"
#include "core/secrets.h"
#include "core/service_stats.h"
#include "core/stacks.h"
#include "core/state_options.h"
#include "core/tenants.h"
#include "core/usage.h"
#include "core/volume_mounts.h"
#include "core/volumes.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"
#include "store/store.h"
#include "telemetry/history.h"
#include "telemetry/series.h"

namespace tessera::sched {
class SoleTenantFilter;  // sched/plugins/sole_tenant.h
}  // namespace tessera::sched

namespace tessera::core {

class State final : private Instances::Listener {
 public:
  // `catalog` and `clock` must outlive the state.
  State(const catalog::Catalog* catalog, const Clock* clock, std::unique_ptr<fleet::Fleet> fleet,
        std::unique_ptr<sched::Scheduler> scheduler, StateOptions options);
  // Its parts hold references to one another (Accounts reads the instances): never copied or
  // moved.
  State(const State&) = delete;
  State& operator=(const State&) = delete;

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

  // Secrets (secrets.h, docs/secrets.md): a tenant's own; the admin lists every tenant's.
  const TenantSecrets& secrets() const { return secrets_; }
  // Creates (`replace` false) or replaces a secret of the caller's tenant; see TenantSecrets::Put.
  Result<Secret> PutSecret(const Tenant& caller, const std::string& name, std::string value,
                           const std::string& user, bool replace, store::Batch& batch);
  // NotFound for an unknown name and another tenant's alike.
  Result<Secret> GetSecret(const Tenant& caller, std::string_view name) const;
  // Deletes a secret. FailedPrecondition naming the instances and groups that refer to it, unless
  // `force`: then instances that wait or are scheduled fail ("its secret ... was deleted"), and
  // what runs keeps running with the environment it started with.
  Status DeleteSecret(const Tenant& caller, const std::string& name, bool force,
                      store::Batch& batch);
  // The instances (not ended) and groups (not ended) of `tenant` that refer to secret `name`.
  std::vector<std::string> SecretUsers(const std::string& tenant, const std::string& name) const;
  // Key rotation (rotation.h, docs/secrets.md): re-sealing every value at rest, a step a round.
  KeyRotation& rotation() { return rotation_; }
  const KeyRotation& rotation() const { return rotation_; }
  // Rebuilds users from their records and publishes their tokens (Tenants::RestoreUsers).
  Status RestoreUsers(const std::vector<std::pair<std::string, std::string>>& records,
                      store::Batch& batch) {
    return tenants_.RestoreUsers(records, batch);
  }
  // Rebuilds secrets from their records (TenantSecrets::kPrefix).
  Status RestoreSecrets(const std::vector<std::pair<std::string, std::string>>& records) {
    return secrets_.Restore(records);
  }
  // Volumes (state_volumes.cc, docs/volumes.md): a tenant's own; the admin lists every tenant's.
  const Volumes& volumes() const { return volumes_; }
  // A new volume of the caller's tenant, billed from now. InvalidArgument naming 'node' for a node
  // not in the fleet; ResourceExhausted past the tenant's volumes_gib quota.
  Result<Volume> CreateVolume(const Tenant& caller, const Volumes::Request& req,
                              const std::string& user, store::Batch& batch);
  // NotFound for an unknown name and another tenant's alike.
  Result<Volume> GetVolume(const Tenant& caller, std::string_view name) const;
  // Deletes a volume: its bill stops now, and its data goes with its node's agent (the volume is
  // shown `deleting` until the agent says so; one no agent made is gone at once).
  // FailedPrecondition naming the instances while any mounts it (running, waiting or waiting to
  // restart).
  Result<Volume> DeleteVolume(const Tenant& caller, std::string_view name, store::Batch& batch);
  // Which instances mount which volumes (volume_mounts.h).
  const VolumeMounts& mounts() const { return mounts_; }
  // Exec sessions (state_exec.cc, docs/volumes.md): `request`'s command, tty and size go into
  // instance `instance_id` of the caller's tenant, through its node's agent, which hears of it
  // with its desired state and must connect for it by `expires` (AgentSupervisor::QueueExec;
  // agents().CloseExec once it did). NotFound for another tenant's instance; FailedPrecondition
  // for one that does not run, or runs where no agent process does.
  Result<ExecSession> OpenExec(const Tenant& caller, std::string_view instance_id,
                               ExecSession request, Duration connect_within);
  // Rebuilds volumes from their records (Volumes::kPrefix and kNextKey), before the instances.
  Status RestoreVolumes(const std::vector<std::pair<std::string, std::string>>& records);

  // Changes a tenant's quota, its cap on pending work or its disabled flag. Disabling ends its
  // pending instances (they leave the queue as terminated, with the reason) and releases their
  // quota; what runs keeps running.
  Result<Tenant> UpdateTenant(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                              std::optional<bool> disabled, store::Batch& batch,
                              std::optional<int64_t> max_pending = std::nullopt,
                              std::optional<int64_t> volumes_gib = std::nullopt);

  // The instance lifecycle and the instances' memory (instance_service.h, docs/api.md): create,
  // delete and relabel, what waits, and what tenants and users hold.
  Instances& instances() { return instances_; }
  const Instances& instances() const { return instances_; }
  // What a tenant is shown of its instances: one, a page, a log (instance_views.h).
  const InstanceViews& views() const { return views_; }
  // What `req` would be admitted as (its shape and price), without creating anything: the
  // checks Instances::Create makes first (400/409), but not the quota or the pending cap.
  Result<Admitted> PriceRequest(const CreateInstanceRequest& req) { return admission_.Admit(req); }

  // Capacity that goes and comes back: leases, GPU health, draining, and an operator's removal of
  // a node (node_health.h, docs/gpu-health.md).
  NodeHealth& node_health() { return health_; }

  // Nodes joined by agents: created, registered, their reports and what they are told
  // (agent_hub.h, docs/agent.md).
  AgentHub& agent_hub() { return hub_; }
  const AgentHub& agent_hub() const { return hub_; }
  // Which nodes agents serve, their long polls and what they report (agents.h).
  AgentSupervisor& agents() { return agents_; }
  const AgentSupervisor& agents() const { return agents_; }
  // After a round commits: long-polling agents whose node changed, or whose wait ended, get
  // their answer.
  void AfterCommit() { agents_.AnswerWaiters(clock_->Now()); }
  // True when the core should run rounds on its own (leases to watch, agents waiting).
  bool needs_ticks() const { return agents_.needs_ticks(); }

  // Telemetry (state_monitoring.cc).
  // Every series of the nodes agents serve (telemetry/series.h): /metrics and the alert rules.
  std::vector<telemetry::Target> Targets() const;
  // What the nodes' GPUs read, for instances' owners and the operator (readings.h).
  const Readings& readings() const { return readings_; }
  // Alert rules and alerts, their evaluations' outbox, history and interruptions (monitoring.h).
  Monitoring& monitoring() { return monitoring_; }
  const Monitoring& monitoring() const { return monitoring_; }
  // What the tenants' declarative stacks own (stacks.h; planned and applied by api/stacks.cc).
  Stacks& stacks() { return stacks_; }
  const Stacks& stacks() const { return stacks_; }

  // Billing (accounts.h, docs/billing.md): meters, reservations, budgets and billing reads.
  // Running instances are metered into the store's ledger in the batch that changes their state.
  Accounts& accounts() { return accounts_; }
  const Accounts& accounts() const { return accounts_; }
  // Whether the fleet could place `units` instances of type `t` now, without preempting: a dry
  // run of the scheduler, undone; beyond kDryRunUnits, a count of free capacity node by node.
  bool PlaceableNow(const catalog::InstanceType& t, int units);
  // Whether the fleet has GPUs of type `t`'s model at all (the recommender ranks those first).
  bool OfferedHere(const catalog::InstanceType& t) const;
  static constexpr int kDryRunUnits = 16;
  // Restores the fleet's first start (Accounts::RestoreFleetSince); a store without its record
  // is dated by its earliest tenant or joined node, else now.
  Status RestoreFleetSince(const std::optional<std::string>& record, store::Batch& batch);
  // Whether `units` free units of the caller's active reservations cover `shape` now: what a
  // create with `billing: reserved` would claim (the what-if simulator asks before it bills so).
  bool HasFreeReservation(const Tenant& caller, const Shape& shape, int units = 1) const {
    return accounts_.ClaimReservation(caller, shape, units).ok();
  }

  // Groups (group_service.h, docs/groups.md): what callers ask of groups, and their memory.
  Groups& groups() { return groups_; }
  const Groups& groups() const { return groups_; }
  size_t log_tails() const { return logs_.size(); }  // Instances whose output is in memory.

  // Starts a core round: per-round budgets start afresh.
  void BeginRound() { instances_.NewRound(); }
  // Ends a core round, after its commands: agents' reports are applied, queued work is placed
  // (one budgeted pass per change in capacity), and ended instances past the retention period
  // leave memory.
  void EndRound(store::Batch& batch);

  // True when queued work should be tried again in a round of its own: capacity freed, the last
  // round's preemption budget ran out with work waiting, or creates wait in the batch window.
  bool has_deferred_work() const {
    return instances_.queue().HasUntried() || !instances_.window().empty();
  }
  // How soon the creates held in the batch window are due (zero when they are); Duration::max()
  // when none is held.
  Duration batch_due_in() const { return instances_.window().DueIn(); }

  const fleet::Fleet& fleet() const { return *fleet_; }
  const catalog::Catalog& catalog() const { return *catalog_; }
  const Clock& clock() const { return *clock_; }
  const StateOptions& options() const { return options_; }
  AgentTiming timing() const { return health_.timing(); }
  // Where running instances' ports are reached (instance.h), as of now: a snapshot made afresh
  // when something changed since the last one (once a round at most, as the core publishes it).
  std::shared_ptr<const EndpointIndex> EndpointSnapshot();
  // What groups' services served (any thread).
  ServiceStats& service_stats() { return service_stats_; }
  const ServiceStats& service_stats() const { return service_stats_; }
  const Counters& counters() const { return counters_; }

 private:
  // Instances::Listener: what groups hear of their members, passed on to Groups.
  void MemberEnded(const Instance& inst) override { groups_.MemberEnded(inst); }
  void RendezvousReserved(Instance& inst, std::optional<int> port, store::Batch& batch) override {
    groups_.RendezvousReserved(inst, port, batch);
  }
  void GangsMayFit() override { groups_.Retry(); }
  bool Keeps(const Instance& inst) const override { return groups_.Lists(inst); }
  // Deletes the groups a stack replaced once each replacement's members all run (stacks.h).
  void RetireReplacedGroups(store::Batch& batch);
  // Evaluates the alert rules over Targets() when an evaluation is due.
  void EvaluateAlerts(store::Batch& batch);

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  std::unique_ptr<fleet::Fleet> fleet_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  // The scheduler's filter that gives a node that cannot isolate tenants to one tenant at a time
  // (Instances says which nodes, and whose work is where); the scheduler owns it.
  sched::SoleTenantFilter* sole_tenant_ = nullptr;
  StateOptions options_;

  Tenants tenants_;
  TenantSecrets secrets_;
  Volumes volumes_;
  EndpointTable endpoints_;  // Where running instances' ports are reached.
  ServiceStats service_stats_;
  Admission admission_;
  AgentSupervisor agents_;
  LogTails logs_;  // Instances' logs as their agents shipped them.
  Counters counters_;
  Instances instances_{Instances::Parts{.catalog = catalog_,
                                        .clock = clock_,
                                        .fleet = fleet_.get(),
                                        .scheduler = scheduler_.get(),
                                        .sole_tenant = sole_tenant_,
                                        .agents = &agents_,
                                        .tenants = &tenants_,
                                        .secrets = &secrets_,
                                        .admission = &admission_,
                                        .accounts = &accounts_,
                                        .mounts = &mounts_,
                                        .endpoints = &endpoints_,
                                        .node_gpus = &node_gpus_,
                                        .views = &views_,
                                        .logs = &logs_,
                                        .counters = &counters_,
                                        .options = &options_,
                                        .listener = this}};
  VolumeMounts mounts_{&volumes_, &instances_.table()};
  // What agents are told.
  DesiredStates desired_{&instances_.table(), &secrets_, &volumes_, &logs_};
  NodeGpus node_gpus_{catalog_,
                      clock_,
                      fleet_.get(),
                      &agents_,
                      &instances_.table(),
                      &admission_,
                      options_.instance_documents};
  InstanceViews views_{&instances_.table(),     &instances_.window(), &admission_,
                       &instances_.preemptor(), sole_tenant_,         &logs_};
  Monitoring monitoring_;
  Readings readings_{clock_, fleet_.get(), &agents_, &instances_.table(), &monitoring_.history()};
  Accounts accounts_;  // After the fleet, admission, tenants, instances and volumes it reads.
  Stacks stacks_;
  NodeHealth health_{NodeHealth::Parts{.clock = clock_,
                                       .fleet = fleet_.get(),
                                       .agents = &agents_,
                                       .instances = &instances_.table(),
                                       .tenants = &tenants_,
                                       .admission = &admission_,
                                       .accounts = &accounts_,
                                       .volumes = &volumes_,
                                       .node_gpus = &node_gpus_,
                                       .monitoring = &monitoring_,
                                       .counters = &counters_,
                                       .options = &options_,
                                       .lifecycle = &instances_.for_node_health()}};
  AgentHub hub_{AgentHub::Parts{.catalog = catalog_,
                                .clock = clock_,
                                .fleet = fleet_.get(),
                                .agents = &agents_,
                                .instances = &instances_.table(),
                                .tenants = &tenants_,
                                .admission = &admission_,
                                .node_gpus = &node_gpus_,
                                .health = &health_,
                                .mounts = &mounts_,
                                .monitoring = &monitoring_,
                                .accounts = &accounts_,
                                .logs = &logs_,
                                .desired = &desired_,
                                .counters = &counters_,
                                .lifecycle = &instances_.for_agent_hub()}};
  Groups groups_{Groups::Parts{.catalog = catalog_,
                               .clock = clock_,
                               .fleet = fleet_.get(),
                               .scheduler = scheduler_.get(),
                               .agents = &agents_,
                               .instances = &instances_.table(),
                               .tenants = &tenants_,
                               .admission = &admission_,
                               .accounts = &accounts_,
                               .mounts = &mounts_,
                               .preemptor = &instances_.preemptor(),
                               .queue = &instances_.queue(),
                               .pending = &instances_.pending(),
                               .secrets = &secrets_,
                               .service_stats = &service_stats_,
                               .counters = &counters_,
                               .options = &options_,
                               .lifecycle = &instances_.for_groups()}};
  KeyRotation rotation_{&secrets_,    &instances_.table(), &groups_.table(),
                        &monitoring_, fleet_.get(),        options_.instance_documents};
};

}  // namespace tessera::core
