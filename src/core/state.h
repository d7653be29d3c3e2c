// State is the control plane's memory and the operations the API offers on it. It composes parts
// with one job each and orchestrates them:
//   Tenants          who may call, their quotas and tokens (tenants.h);
//   Admission        what a request becomes, and whether the fleet could ever host it;
//   Usage            what each tenant holds, in the quota's unit;
//   PendingWork      how many instances each tenant has waiting, and its cap on them;
//   InstanceTable    the working set of instances;
//   InstanceViews    what a tenant is shown of its instances: one, a page, a log;
//   PendingQueue     what waits, grouped by shape, in budgeted passes;
//   Preemptor        spot victims, indexed by node, in budgeted searches;
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
//   BatchWindow      new creates held for a moment, then placed together (batch_window.h);
//   LogTails         instances' output as their agents shipped it (log_tails.h);
//   Groups           instance groups: their requests, gangs, restarts and autoscaler, and their
//                    memory (group_service.h), reaching instances through Groups::Lifecycle;
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

class State final : private Groups::Lifecycle,
                    private NodeHealth::Lifecycle,
                    private AgentHub::Lifecycle {
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
  // What a user's active instances hold, in milli-GPU (its quota's unit).
  int64_t UserGpuMilli(const std::string& user) const { return user_usage_.Milli(user); }
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

  // REQUIRES: `caller` is a tenant of tenants(), not the admin (who has no quota).
  // Admits the request (400/409 for a shape the fleet can never host), checks the quota and the
  // cap on pending work (ResourceExhausted, reason too_many_pending), then places the instance,
  // preempting spot work if its priority allows, or queues it behind any identical request
  // already waiting.
  Result<Instance> CreateInstance(const Tenant& caller, const CreateInstanceRequest& req,
                                  store::Batch& batch);
  // What a tenant is shown of its instances: one, a page, a log (instance_views.h).
  const InstanceViews& views() const { return views_; }
  // Stops the instance and frees its capacity (through its agent when agents serve the nodes).
  Result<Instance> DeleteInstance(const Tenant& caller, std::string_view id, store::Batch& batch);
  // Replaces an active instance's labels and annotations (REQUIRES: validated); a group's member
  // and an ended instance are refused (FailedPrecondition).
  Result<Instance> Relabel(const Tenant& caller, std::string_view id,
                           std::map<std::string, std::string> labels,
                           std::map<std::string, std::string> annotations, store::Batch& batch);
  // What `req` would be admitted as (its shape and price), without creating anything: the
  // checks CreateInstance makes first (400/409), but not the quota or the pending cap.
  Result<Admitted> PriceRequest(const CreateInstanceRequest& req) { return admission_.Admit(req); }

  // Drains a node (nothing new is placed there; what runs stays) or puts it back in service.
  Status SetNodeDrained(const std::string& node, bool drained, store::Batch& batch) override;
  // Capacity that goes and comes back: leases, GPU health, and an operator's removal of a node
  // (node_health.h, docs/gpu-health.md).
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
  void BeginRound() { preemptor_.NewRound(); }
  // The workload of running instance `id` ended on its own, or that of preempting instance `id`
  // stopped at its notice's end (the what-if simulator's jobs, on nodes its simulated agents
  // serve): applied as its agent's exit report within this round.
  void WorkloadExited(const std::string& id, int exit_code);
  // The provider reclaims running spot instance `id` (the what-if simulator's interruptions):
  // preempted as when its node is lost, and re-queued when it restarts; with simulated_notice,
  // after its notice, as a victim of higher-priority work.
  void ReclaimSpot(const std::string& id, store::Batch& batch);
  // Ends a core round, after its commands: agents' reports are applied, queued work is placed
  // (one budgeted pass per change in capacity), and ended instances past the retention period
  // leave memory.
  void EndRound(store::Batch& batch);

  // True when queued work should be tried again in a round of its own: capacity freed, the last
  // round's preemption budget ran out with work waiting, or creates wait in the batch window.
  bool has_deferred_work() const { return queue_.HasUntried() || !window_.empty(); }
  // How soon the creates held in the batch window are due (zero when they are); Duration::max()
  // when none is held.
  Duration batch_due_in() const { return window_.DueIn(); }

  const fleet::Fleet& fleet() const { return *fleet_; }
  const catalog::Catalog& catalog() const { return *catalog_; }
  const Clock& clock() const { return *clock_; }
  const StateOptions& options() const { return options_; }
  AgentTiming timing() const { return health_.timing(); }
  const InstanceTable& instances() const { return instances_; }
  const PendingQueue& queue() const { return queue_; }
  // Where running instances' ports are reached (instance.h), as of now: a snapshot made afresh
  // when something changed since the last one (once a round at most, as the core publishes it).
  std::shared_ptr<const EndpointIndex> EndpointSnapshot();
  // What groups' services served (any thread).
  ServiceStats& service_stats() { return service_stats_; }
  const ServiceStats& service_stats() const { return service_stats_; }
  const Counters& counters() const { return counters_; }
  // What the tenant's active instances hold or wait for, in milli-GPU.
  int64_t TenantGpuMilli(const TenantId& tenant) const { return usage_.Milli(tenant.str()); }
  // Each tenant's pending instances and its cap on them.
  const PendingWork& pending_work() const { return pending_; }

 private:
  // CreateInstance's parts: admission with the quota for `count` such instances, the cap on
  // pending work (unless `readmit`: a group's restart, which makes again what was admitted) and
  // the budget; then the instance itself, pending (with its reservation unit for `reserved`).
  // `group`: the group whose members these are ("" for a single instance); its own members do
  // not count as other holders of a volume that is not shared.
  Result<Admitted> AdmitFor(const Tenant& caller, const CreateInstanceRequest& req, int count,
                            bool readmit = false, std::string_view group = "");
  // Where `inst`'s ports are reached, from its agent's running report (its own ports only).
  void SetEndpoints(Instance& inst, const AgentReport& report);
  Result<Instance*> AddInstance(const Tenant& caller, const CreateInstanceRequest& req,
                                Admitted admitted);
  // Stops `inst` (DeleteInstance's path, and a group's): pending work ends at once, running
  // work through its agent. `ending` says who ended its run, for its bill.
  void Stop(Instance& inst, const std::string& why, store::Batch& batch,
            billing::Ending ending = billing::Ending::kCustomer);
  void CapacityFreed() override {
    queue_.CapacityFreed();
    groups_.Retry();
  }
  // Deletes the groups a stack replaced once each replacement's members all run (stacks.h).
  void RetireReplacedGroups(store::Batch& batch);
  // Groups::Lifecycle: what groups ask of the instance lifecycle (state_groups.cc).
  Result<Admitted> AdmitMember(const Tenant& owner, const CreateInstanceRequest& req, int count,
                               bool readmit, std::string_view group) override;
  Result<Instance*> AddMember(const Tenant& owner, const CreateInstanceRequest& req,
                              Admitted admitted) override;
  void BookMember(Instance& inst, const fleet::Assignment& a, store::Batch& batch) override;
  void StartMember(Instance& inst, store::Batch& batch) override;
  void StopMember(Instance& inst, const std::string& why, store::Batch& batch,
                  billing::Ending ending) override;
  size_t PreemptFor(const std::vector<Instance*>& victims, Instance& for_whom,
                    store::Batch& batch) override;
  void SaveMember(const Instance& inst, store::Batch& batch) override;
  int64_t GpuMilliOf(const Instance& inst) const { return inst.shape.GpuMilli(*catalog_); }

  // Tries to place `inst` now, preempting if its priority allows.
  Attempt Place(Instance& inst, store::Batch& batch, bool first_attempt);
  // A new instance's first attempt: queued behind identical waiting requests, else placed now,
  // else queued.
  void PlaceOrQueue(Instance& inst, store::Batch& batch);
  // Places the creates the batch window held once they are due (batch_window.h): priority
  // first, then the largest GPU demand; what does not fit queues as any create that does not.
  void PlaceHeld(store::Batch& batch);
  void Evict(Instance& victim, store::Batch& batch);
  // A spot instance lost its capacity: preempted, and queued again when it restarts.
  void EndPreempted(Instance& inst, const std::string& why, store::Batch& batch);
  // `inst`, which holds no capacity, waits again as its next attempt (restarts + 1).
  void Requeue(Instance& inst, const std::string& why, store::Batch& batch);
  // Whether preempting `v` gives it notice: on a joined agent's node; on a simulated agent's under
  // simulated_notice once its workload runs (a victim still scheduled has nothing to warn).
  bool NeedsNotice(const Instance& v);
  // Gives the victims notice (joined nodes): they stop at preempt_at, then free the capacity.
  void GiveNotice(const std::vector<Instance*>& victims, Instance& for_whom, store::Batch& batch);
  // Spot instance `v` is told it stops at now + spot_notice (`why`): preempting until its agent
  // reports the stop.
  void Warn(Instance& v, const std::string& why, store::Batch& batch);
  void Book(Instance& inst, const fleet::Assignment& a);
  void Unbook(Instance& inst);
  // One budgeted pass over the queue.
  void PlaceQueued(store::Batch& batch);
  // True when a report changed something.
  bool ApplyAgentReports(store::Batch& batch);
  // Applies one report about `inst`; true when it changed something.
  bool ApplyReport(Instance& inst, const AgentReport& report, store::Batch& batch);
  // AgentHub::Lifecycle: ApplyReport, and `inst` saved when it changed.
  void ApplyWorkloadReport(Instance& inst, const AgentReport& report, store::Batch& batch) override;
  // Ends an instance whose workload is gone: frees its capacity and tells its agent.
  void Release(Instance& inst);
  // Records `reason` as the instance's latest word and in its history (Record), and with its state
  // unchanged stores it (Note).
  void Record(Instance& inst, std::string reason);
  void Note(Instance& inst, std::string reason, store::Batch& batch) override;
  // `inst` lost its node: on-demand and reserved work queues again, spot work is preempted.
  void Displace(Instance& inst, const std::string& why, store::Batch& batch) override;
  // Evaluates the alert rules over Targets() when an evaluation is due.
  void EvaluateAlerts(store::Batch& batch);
  // The fleet state a joined node's flags give, and whether it hosts one tenant at a time.
  void ApplyNodeState(const AgentNode& node) override;
  void Save(const Instance& inst, store::Batch& batch);
  // Counts `inst` (add) in, or out of, its tenant's and its user's usage.
  void CountUsage(const Instance& inst, bool add);
  // Moves `inst` to `to`; leaving `running` closes its billing interval into `batch`, ended as
  // `ending` says.
  void Transition(Instance& inst, InstanceState to, std::string reason, store::Batch& batch,
                  billing::Ending ending = billing::Ending::kCustomer);

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  std::unique_ptr<fleet::Fleet> fleet_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  // The scheduler's filter that gives a node that cannot isolate tenants to one tenant at a time
  // (ApplyNodeState says which nodes, Book and Unbook whose work is where); the scheduler owns it.
  sched::SoleTenantFilter* sole_tenant_ = nullptr;
  StateOptions options_;

  Tenants tenants_;
  TenantSecrets secrets_;
  Volumes volumes_;
  EndpointTable endpoints_;  // Where running instances' ports are reached.
  ServiceStats service_stats_;
  Admission admission_;
  Usage usage_;
  Usage user_usage_;  // By user id: what each user's active instances hold (users' quotas).
  PendingWork pending_;
  InstanceTable instances_;
  VolumeMounts mounts_{&volumes_, &instances_};
  PendingQueue queue_;
  // New creates held for a moment and placed together (StateOptions::batch_window; only
  // InstanceViews::Shown says so).
  BatchWindow window_;
  Preemptor preemptor_;
  AgentSupervisor agents_;
  LogTails logs_;  // Instances' logs as their agents shipped them.
  DesiredStates desired_{&instances_, &secrets_, &volumes_, &logs_};  // What agents are told.
  NodeGpus node_gpus_{catalog_,
                      clock_,
                      fleet_.get(),
                      &agents_,
                      &instances_,
                      &admission_,
                      options_.instance_documents};
  InstanceViews views_{&instances_, &window_, &admission_, &preemptor_, sole_tenant_, &logs_};
  // Instances waiting for spot victims to stop after their notice, and until when.
  std::unordered_map<std::string, Time> awaiting_notice_;
  int64_t next_instance_ = 1;
  Counters counters_;
  Monitoring monitoring_;
  Readings readings_{clock_, fleet_.get(), &agents_, &instances_, &monitoring_.history()};
  Accounts accounts_;  // After the fleet, admission, tenants, instances and volumes it reads.
  Stacks stacks_;
  NodeHealth health_{NodeHealth::Parts{.clock = clock_,
                                       .fleet = fleet_.get(),
                                       .agents = &agents_,
                                       .instances = &instances_,
                                       .tenants = &tenants_,
                                       .admission = &admission_,
                                       .accounts = &accounts_,
                                       .volumes = &volumes_,
                                       .node_gpus = &node_gpus_,
                                       .monitoring = &monitoring_,
                                       .counters = &counters_,
                                       .options = &options_,
                                       .lifecycle = this}};
  AgentHub hub_{AgentHub::Parts{.catalog = catalog_,
                                .clock = clock_,
                                .fleet = fleet_.get(),
                                .agents = &agents_,
                                .instances = &instances_,
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
                                .lifecycle = this}};
  Groups groups_{Groups::Parts{.catalog = catalog_,
                               .clock = clock_,
                               .fleet = fleet_.get(),
                               .scheduler = scheduler_.get(),
                               .agents = &agents_,
                               .instances = &instances_,
                               .tenants = &tenants_,
                               .admission = &admission_,
                               .accounts = &accounts_,
                               .mounts = &mounts_,
                               .preemptor = &preemptor_,
                               .queue = &queue_,
                               .pending = &pending_,
                               .secrets = &secrets_,
                               .service_stats = &service_stats_,
                               .counters = &counters_,
                               .options = &options_,
                               .lifecycle = this}};
  KeyRotation rotation_{&secrets_,    &instances_,  &groups_.table(),
                        &monitoring_, fleet_.get(), options_.instance_documents};
};

}  // namespace tessera::core
