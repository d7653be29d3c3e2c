// Instances: the instance lifecycle (docs/core.md). Creating an instance against its tenant's and
// its user's quotas, the cap on pending work and the budget; deleting and relabelling it; the
// transitions every instance goes through and what each one bills, counts and frees
// (instance_service.cc). Placing work as it comes, from the queue and from the batch window;
// preempting spot work, with notice where its agent must stop it (instance_placement.cc). What
// agents' reports do to instances: starts, exits, stops and endpoints (instance_reports.cc).
// It owns the instances' memory (InstanceTable, with its retention) and what waits: the queue, the
// batch window, the preemptor's index of spot victims, each tenant's and user's usage and each
// tenant's pending work. Groups, node health and the agents' hub change instances only through
// the Lifecycle interfaces it implements; what groups must hear of their members goes to its
// Listener.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "billing/meter.h"
#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/accounts.h"
#include "core/admission.h"
#include "core/agent_hub.h"
#include "core/agents.h"
#include "core/batch_window.h"
#include "core/endpoint_table.h"
#include "core/group_service.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/instance_views.h"
#include "core/log_tails.h"
#include "core/node_gpus.h"
#include "core/node_health.h"
#include "core/pending_work.h"
#include "core/preemptor.h"
#include "core/queue.h"
#include "core/recovery.h"
#include "core/secrets.h"
#include "core/state_options.h"
#include "core/tenants.h"
#include "core/usage.h"
#include "core/volume_mounts.h"
#include "fleet/fleet.h"
#include "sched/repack.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace tessera::sched {
class SoleTenantFilter;  // sched/plugins/sole_tenant.h
}  // namespace tessera::sched

namespace tessera::core {

class Instances final : private Groups::Lifecycle,
                        private NodeHealth::Lifecycle,
                        private AgentHub::Lifecycle {
 public:
  // What groups must hear of their members, and of capacity (State passes it on to Groups).
  class Listener {
   public:
    virtual ~Listener() = default;
    // Member `inst` left the active states.
    virtual void MemberEnded(const Instance& inst) = 0;
    // `inst`'s agent named the port it reserved for its group's rendezvous, or `inst` (rank 0)
    // succeeded naming none (`port` empty).
    virtual void RendezvousReserved(Instance& inst, std::optional<int> port,
                                    store::Batch& batch) = 0;
    // Capacity came back: waiting gangs are worth another pass.
    virtual void GangsMayFit() = 0;
    // True while `inst`, ended, must stay in memory for its group.
    virtual bool Keeps(const Instance& inst) const = 0;
  };

  // What it reads and changes; every part must outlive this.
  struct Parts {
    const catalog::Catalog* catalog = nullptr;
    const Clock* clock = nullptr;
    fleet::Fleet* fleet = nullptr;
    sched::Scheduler* scheduler = nullptr;
    sched::SoleTenantFilter* sole_tenant = nullptr;  // Whose work is on a node that is shared.
    AgentSupervisor* agents = nullptr;
    const Tenants* tenants = nullptr;  // Users' quotas.
    TenantSecrets* secrets = nullptr;  // Values sealed under each instance's record.
    Admission* admission = nullptr;
    Accounts* accounts = nullptr;  // Meters, reservation units and budgets.
    VolumeMounts* mounts = nullptr;
    EndpointTable* endpoints = nullptr;
    const NodeGpus* node_gpus = nullptr;  // MIG devices agents made.
    const InstanceViews* views = nullptr;
    LogTails* logs = nullptr;  // Erased with their instances.
    Counters* counters = nullptr;
    const StateOptions* options = nullptr;
    Listener* listener = nullptr;
  };

  explicit Instances(const Parts& parts);
  Instances(const Instances&) = delete;
  Instances& operator=(const Instances&) = delete;

  // What a caller may do (docs/api.md). NotFound for an unknown id and another tenant's alike.
  // REQUIRES: `caller` is a tenant of tenants(), not the admin (who has no quota).
  // Admits the request (400/409 for a shape the fleet can never host), checks the quotas and the
  // cap on pending work (ResourceExhausted, reason too_many_pending), then places the instance,
  // preempting spot work if its priority allows, or queues it behind any identical request
  // already waiting (or holds it in the batch window).
  Result<Instance> Create(const Tenant& caller, const CreateInstanceRequest& req,
                          store::Batch& batch);
  // Stops the instance and frees its capacity (through its agent when agents serve the nodes).
  // A group's active member is refused (FailedPrecondition): its group decides.
  Result<Instance> Delete(const Tenant& caller, std::string_view id, store::Batch& batch);
  // Replaces an active instance's labels and annotations (REQUIRES: validated); a group's member
  // and an ended instance are refused (FailedPrecondition).
  Result<Instance> Relabel(const Tenant& caller, std::string_view id,
                           std::map<std::string, std::string> labels,
                           std::map<std::string, std::string> annotations, store::Batch& batch);
  // `tenant`'s pending instances end (`why`), leaving the queue, and release their quota.
  void EndPendingOf(const TenantId& tenant, const std::string& why, store::Batch& batch);
  // The workload of running instance `id` ended on its own, or that of preempting instance `id`
  // stopped at its notice's end (the what-if simulator's jobs, on nodes its simulated agents
  // serve): applied as its agent's exit report within this round.
  void WorkloadExited(const std::string& id, int exit_code);
  // The provider reclaims running spot instance `id` (the what-if simulator's interruptions):
  // preempted as when its node is lost, and re-queued when it restarts; with simulated_notice,
  // after its notice, as a victim of higher-priority work.
  void ReclaimSpot(const std::string& id, store::Batch& batch);
  // Rebuilds instances from their records, after the tenants, reconciling with today's fleet and
  // catalog (recovery.h): what cannot come back fails, its record written to `batch`, and counts
  // into `report`. DataLoss naming the record when one is corrupt.
  Status Restore(const std::vector<store::InstanceRecord>& records, store::Batch& batch,
                 RecoveryReport& report);

  // Stops `inst` as a delete does (a deleted secret's too, and a group's through
  // Groups::Lifecycle): pending work ends at once, running work through its agent.
  void Stop(Instance& inst, const std::string& why, store::Batch& batch,
            billing::Ending ending) override;
  // Writes `inst`'s record into `batch`.
  void Save(const Instance& inst, store::Batch& batch) override;

  // What the other parts may ask of the instance lifecycle, and nothing more: the interfaces it
  // implements for them.
  Groups::Lifecycle& for_groups() { return *this; }
  NodeHealth::Lifecycle& for_node_health() { return *this; }
  AgentHub::Lifecycle& for_agent_hub() { return *this; }

  // A round's steps, in the order State::EndRound takes them.
  // Starts a round: the preemptor's and the repacker's per-round budgets start afresh.
  void NewRound() {
    preemptor_.NewRound();
    repack_searches_ = 0;
  }
  // Places the creates the batch window held once they are due (batch_window.h): priority
  // first, then the largest GPU demand; what does not fit queues as any create that does not.
  void PlaceHeld(store::Batch& batch);
  // Applies what agents reported of their workloads; true when a report changed something.
  bool ApplyAgentReports(store::Batch& batch);
  // One budgeted pass over the queue, when capacity changed since the last (HasUntried).
  void PlaceQueued(store::Batch& batch);
  // Ended instances past `cutoff` leave memory with their log tails, unless the listener keeps
  // them for their group; answers how many left.
  size_t EvictEnded(Time cutoff);

  // What it holds.
  InstanceTable& table() { return table_; }
  const InstanceTable& table() const { return table_; }
  const PendingQueue& queue() const { return queue_; }
  const BatchWindow& window() const { return window_; }
  Preemptor& preemptor() { return preemptor_; }
  const Preemptor& preemptor() const { return preemptor_; }
  // Each tenant's pending instances and its cap on them.
  const PendingWork& pending() const { return pending_; }
  // What the tenant's, or the user's, active instances hold or wait for, in milli-GPU (their
  // quotas' unit).
  int64_t TenantGpuMilli(const TenantId& tenant) const { return usage_.Milli(tenant.str()); }
  int64_t UserGpuMilli(const std::string& user) const { return user_usage_.Milli(user); }

 private:
  // Groups::Lifecycle: what groups ask of the instance lifecycle (instance_service.cc,
  // instance_placement.cc). Admit is also a create's own gate, with `count` 1 and `readmit` false.
  Result<Admitted> Admit(const Tenant& owner, const CreateInstanceRequest& req, int count,
                         bool readmit, std::string_view group) override;
  Result<Instance*> Add(const Tenant& owner, const CreateInstanceRequest& req,
                        Admitted admitted) override;
  void Book(Instance& inst, const fleet::Assignment& a, store::Batch& batch) override;
  void Start(Instance& inst, store::Batch& batch) override;
  size_t PreemptFor(const std::vector<Instance*>& victims, Instance& for_whom,
                    store::Batch& batch) override;
  // NodeHealth::Lifecycle and AgentHub::Lifecycle (instance_service.cc, instance_reports.cc).
  void Displace(Instance& inst, const std::string& why, store::Batch& batch) override;
  void Note(Instance& inst, std::string reason, store::Batch& batch) override;
  void CapacityFreed() override;
  void ApplyNodeState(const AgentNode& node) override;
  void ApplyWorkloadReport(Instance& inst, const AgentReport& report, store::Batch& batch) override;

  // Where `inst`'s ports are reached, from its agent's running report (its own ports only).
  void SetEndpoints(Instance& inst, const AgentReport& report);
  int64_t GpuMilliOf(const Instance& inst) const { return inst.shape.GpuMilli(*catalog_); }
  // What the scheduler is asked for `inst`.
  sched::Request RequestOf(const Instance& inst) const;
  // Tries to place `inst` now, moving migratable shares (StateOptions::repack), or preempting if
  // its priority allows.
  Attempt Place(Instance& inst, store::Batch& batch, bool first_attempt);
  // Room that repacking made for a request: `now` to take at once, or none when it waits for the
  // moved shares to stop after their notice.
  struct Room {
    std::optional<fleet::Assignment> now;
  };
  // Moves migratable shares so that `req` (for `inst`) fits; nullopt when no move helps, or the
  // round's searches are spent.
  std::optional<Room> Repack(Instance& inst, const sched::Request& req, store::Batch& batch);
  // Moving `s` stopped (or, with no notice due, stops now): it restarts where its move booked,
  // or waits in the queue when that is gone. `old_held`: its old capacity is still booked.
  void FinishMove(Instance& s, store::Batch& batch, bool old_held = true);
  // A new instance's first attempt: queued behind identical waiting requests, else placed now,
  // else queued.
  void PlaceOrQueue(Instance& inst, store::Batch& batch);
  void Evict(Instance& victim, store::Batch& batch);
  // A spot instance lost its capacity: preempted, and queued again when it restarts.
  void EndPreempted(Instance& inst, const std::string& why, store::Batch& batch);
  // `inst`, which holds no capacity, waits again as its next attempt (restarts + 1).
  void Requeue(Instance& inst, const std::string& why, store::Batch& batch);
  // Whether preempting `v` gives it notice: on a joined agent's node; on a simulated agent's under
  // simulated_notice once its workload runs (a victim still scheduled has nothing to warn).
  bool NeedsNotice(const Instance& v) const;
  // Gives the victims notice (joined nodes): they stop at preempt_at, then free the capacity.
  void GiveNotice(const std::vector<Instance*>& victims, Instance& for_whom, store::Batch& batch);
  // Spot instance `v` is told it stops at now + spot_notice (`why`): preempting until its agent
  // reports the stop.
  void Warn(Instance& v, const std::string& why, store::Batch& batch);
  // `inst` takes `a`: where it runs, its GPUs, who else may share the node, its meter's count.
  void Assign(Instance& inst, const fleet::Assignment& a);
  // `inst` holds no capacity any more: Forget after its capacity is released in the scheduler.
  void Unbook(Instance& inst);
  void Forget(Instance& inst);
  // Applies one report about `inst`; true when it changed something.
  bool ApplyReport(Instance& inst, const AgentReport& report, store::Batch& batch);
  // Pending `inst` ends: it leaves the queue and the batch window, and waits for no spot victims.
  void StopWaiting(const Instance& inst);
  // Ends an instance whose workload is gone: frees its capacity and tells its agent.
  void Release(Instance& inst);
  // Records `reason` as the instance's latest word and in its history.
  void Record(Instance& inst, std::string reason);
  // Counts `inst` (add) in, or out of, its tenant's and its user's usage.
  void CountUsage(const Instance& inst, bool add);
  // Moves `inst` to `to`; leaving `running` closes its billing interval into `batch`, ended as
  // `ending` says.
  void Transition(Instance& inst, InstanceState to, std::string reason, store::Batch& batch,
                  billing::Ending ending = billing::Ending::kCustomer);

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  fleet::Fleet* fleet_;
  sched::Scheduler* scheduler_;
  sched::SoleTenantFilter* sole_tenant_;
  AgentSupervisor* agents_;
  const Tenants* tenants_;
  TenantSecrets* secrets_;
  Admission* admission_;
  Accounts* accounts_;
  VolumeMounts* mounts_;
  EndpointTable* endpoints_;
  const NodeGpus* node_gpus_;
  const InstanceViews* views_;
  LogTails* logs_;
  Counters* counters_;
  const StateOptions* options_;
  Listener* listener_;

  InstanceTable table_;
  Usage usage_;
  Usage user_usage_;  // By user id: what each user's active instances hold (users' quotas).
  PendingWork pending_;
  PendingQueue queue_;
  // New creates held for a moment and placed together (StateOptions::batch_window; only
  // InstanceViews::Shown says so).
  BatchWindow window_;
  Preemptor preemptor_;
  // The running migratable shares, by GPU, and the searches this round made (StateOptions::
  // repack).
  sched::Repacker repacker_;
  int repack_searches_ = 0;
  // Instances waiting for spot victims to stop after their notice, and until when.
  std::unordered_map<std::string, Time> awaiting_notice_;
  int64_t next_instance_ = 1;
};

}  // namespace tessera::core
