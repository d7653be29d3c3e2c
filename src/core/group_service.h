// Groups: instance groups (docs/groups.md). Creating, reading, scaling, patching and deleting them
// (group_service.cc); placing their members as gangs, all or nothing with a topology, with the
// distributed-training environment and its rendezvous; deciding a group's fate when a member
// ends, and restarting it whole (group_gangs.cc); the autoscaler; their records.
// It owns the groups' memory (GroupTable, with its retention) and the autoscaler's. A member is an
// instance like any other: it is made, booked, started and stopped by the instance lifecycle
// (Instances), which groups reach only through Lifecycle. Groups read the fleet, the scheduler,
// the agents and the parts that admit and bill work, and book members and trial placements in the
// scheduler themselves.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "billing/meter.h"
#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/accounts.h"
#include "core/admission.h"
#include "core/agents.h"
#include "core/autoscaler.h"
#include "core/group.h"
#include "core/group_table.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/pending_work.h"
#include "core/preemptor.h"
#include "core/queue.h"
#include "core/secrets.h"
#include "core/service_stats.h"
#include "core/state_options.h"
#include "core/tenants.h"
#include "core/volume_mounts.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"
#include "store/store.h"

namespace tessera::core {

class Groups {
 public:
  // What groups ask of the instance lifecycle (Instances, instance_service.h): members are
  // admitted, made, booked, started and stopped as single instances are, and spot victims go the
  // same way.
  class Lifecycle {
   public:
    virtual ~Lifecycle() = default;
    // The admission gate for `count` instances of `req` owned by `owner`: shape, quotas, the cap
    // on pending work (unless `readmit`) and the budget; `group`'s own members do not count as
    // other holders of a volume that is not shared.
    virtual Result<Admitted> Admit(const Tenant& owner, const CreateInstanceRequest& req, int count,
                                   bool readmit, std::string_view group) = 0;
    // A new pending instance as admitted (a reserved one claims its unit), not yet saved.
    virtual Result<Instance*> Add(const Tenant& owner, const CreateInstanceRequest& req,
                                  Admitted admitted) = 0;
    // `inst`, pending, takes `a` (booked where the scheduler holds it already) and its volumes
    // settle on that node; it stays pending until Start.
    virtual void Book(Instance& inst, const fleet::Assignment& a, store::Batch& batch) = 0;
    // `inst`, booked, is scheduled: its agent hears of it, and its record is saved.
    virtual void Start(Instance& inst, store::Batch& batch) = 0;
    // Stops `inst` as a delete does; `ending` says who ended its run, for its bill.
    virtual void Stop(Instance& inst, const std::string& why, store::Batch& batch,
                      billing::Ending ending) = 0;
    // Spot `victims` make room for `for_whom`: those due notice are given it, the others go now.
    // Answers how many were given notice (for_whom waits for them to stop).
    virtual size_t PreemptFor(const std::vector<Instance*>& victims, Instance& for_whom,
                              store::Batch& batch) = 0;
    // Writes `inst`'s record into `batch`.
    virtual void Save(const Instance& inst, store::Batch& batch) = 0;
  };

  // What groups read and book; every part must outlive this.
  struct Parts {
    const catalog::Catalog* catalog = nullptr;
    const Clock* clock = nullptr;
    fleet::Fleet* fleet = nullptr;
    sched::Scheduler* scheduler = nullptr;
    AgentSupervisor* agents = nullptr;
    InstanceTable* instances = nullptr;
    const Tenants* tenants = nullptr;
    const Admission* admission = nullptr;
    Accounts* accounts = nullptr;
    VolumeMounts* mounts = nullptr;
    Preemptor* preemptor = nullptr;
    const PendingQueue* queue = nullptr;   // Its capacity generation: when a gang is worth a try.
    const PendingWork* pending = nullptr;  // Owners' room under their cap (the autoscaler).
    TenantSecrets* secrets = nullptr;      // Templates' values, sealed under the group's record.
    ServiceStats* service_stats = nullptr;
    Counters* counters = nullptr;
    const StateOptions* options = nullptr;
    Lifecycle* lifecycle = nullptr;
  };

  explicit Groups(const Parts& parts)
      : catalog_(parts.catalog),
        clock_(parts.clock),
        fleet_(parts.fleet),
        scheduler_(parts.scheduler),
        agents_(parts.agents),
        instances_(parts.instances),
        tenants_(parts.tenants),
        admission_(parts.admission),
        accounts_(parts.accounts),
        mounts_(parts.mounts),
        preemptor_(parts.preemptor),
        queue_(parts.queue),
        pending_(parts.pending),
        secrets_(parts.secrets),
        service_stats_(parts.service_stats),
        counters_(parts.counters),
        options_(parts.options),
        lifecycle_(parts.lifecycle),
        autoscaler_(parts.options->autoscale_interval) {}
  Groups(const Groups&) = delete;
  Groups& operator=(const Groups&) = delete;

  // What a caller may do (docs/groups.md). Each call answers the group as it is then: its record
  // with each member's instance, rank, state and node. NotFound for an unknown id and another
  // tenant's alike.
  // A new group of the caller's: every member passes the admission gate (shape errors name the
  // template) and is placed as a gang, or waits.
  Result<GroupStatus> Create(const Tenant& caller, const GroupRequest& req, store::Batch& batch);
  Result<GroupStatus> Get(const Tenant& caller, std::string_view id) const;
  std::vector<GroupStatus> List(const Tenant& caller) const;
  // Stops every member; the group stays listed as deleted until its members have ended.
  Result<GroupStatus> Delete(const Tenant& caller, std::string_view id, store::Batch& batch);
  // Grows the group with new ranks (placed as a gang) or shrinks it, stopping the highest ranks
  // (the newest members) first.
  Result<GroupStatus> Scale(const Tenant& caller, std::string_view id, int size,
                            store::Batch& batch);
  // PATCH /v1/groups/{id}: a new size (as Scale), and sets, changes or removes its autoscale,
  // whose first evaluation then decides the size; all of it or none. An elastic group's range
  // must hold a new autoscale's [min, max] (its members' rendezvous was made for that range).
  Result<GroupStatus> Patch(const Tenant& caller, std::string_view id, const GroupPatch& patch,
                            store::Batch& batch);
  // The owner's backlog for a group autoscaled on `pending` (PUT /v1/groups/{id}/backlog).
  Result<GroupStatus> SetBacklog(const Tenant& caller, std::string_view id, int64_t pending);
  // Rebuilds groups from their records (GroupTable::kPrefix and kNextKey), after the instances.
  // Values sealed at rest are opened (a key the keyring lacks fails it, naming the key); a
  // registry password stored in the clear before envelope encryption is sealed into `batch`.
  Status Restore(const std::vector<std::pair<std::string, std::string>>& records,
                 store::Batch& batch);

  // Every group in memory, and their table (ids, waiting groups, retention).
  const std::map<std::string, Group>& all() const { return table_.all(); }
  GroupTable& table() { return table_; }
  const GroupTable& table() const { return table_; }

  // A round's steps, in the order State::EndRound takes them.
  // Every autoscale_interval: each autoscaled group's metric, floor and decision (audited).
  void RunAutoscaler(store::Batch& batch);
  // Members that ended decide their group's fate: all succeeded, it succeeded; one failed, was
  // preempted or lost, the attempt ends and the group restarts whole or fails. True when any
  // member had ended.
  bool Settle(store::Batch& batch);
  // Whether gangs are worth another pass (GroupTable::TakeRetry), and the pass itself: waiting
  // groups of spot work (`spot`) or of higher priority, each placed as a gang or left waiting
  // with its reason. On-demand gangs go before the queue's single instances, spot gangs after.
  bool TakeRetry() { return table_.TakeRetry(); }
  void Place(store::Batch& batch, bool spot);
  // Capacity freed: waiting gangs are worth another pass.
  void Retry() { table_.Retry(); }
  // Member `inst` left the active states: its group settles in the next round.
  void MemberEnded(const Instance& inst) { table_.MemberEnded(inst.id.str()); }
  // True while `inst`'s group may still need its outcome (it stays in memory until then).
  bool Lists(const Instance& inst) const { return table_.Lists(inst); }
  // Ended groups that ended before `cutoff` leave memory (the store keeps them), and their
  // members may leave after them.
  void EvictEnded(Time cutoff);
  // Rank 0's agent reserved its group's MASTER_PORT: every member placed in this attempt gets it,
  // and those held back start. Without `port` (rank 0 ended naming none), the group's own port.
  void RendezvousReserved(Instance& rank0, std::optional<int> port, store::Batch& batch);

 private:
  // Places `g`'s pending members as a gang: true when placed (or nothing waits), false with its
  // reason when it waits.
  bool PlaceGang(Group& g, store::Batch& batch);
  // The group's next attempt: all its members, pending (or the group fails, saying why).
  void StartAttempt(Group& g, store::Batch& batch);
  // Pending members for ranks [from, to) of `g`, as one more attempt's (`readmit`: a restart's)
  // or a scale-out's.
  Status AddMembers(Group& g, int from, int to, store::Batch& batch, bool readmit = false);
  // The admission gate for `count` more of g's members, as its owner; shape errors name the
  // template. Every way a group grows passes it: create, scale, autoscale, restart (`readmit`:
  // not refused for the pending cap).
  Result<Admitted> AdmitMembers(const Group& g, int count, bool readmit = false);
  GroupStatus StatusOf(const Group& g) const;
  // Sets a group's size: new ranks wait to be placed, the highest ranks stop (`why`).
  Status Resize(Group& g, int size, const std::string& why, store::Batch& batch);
  std::optional<double> Metric(const Group& g) const;
  // Lists ended instances a group stops listing (a restart, a scale-in, its own eviction) for
  // eviction again: the sweep skipped them while the group listed them.
  void ReleaseMembers(const std::vector<std::string>& ids);
  // Where other nodes reach `node`: its agent's address, else its name.
  std::string NodeAddress(const std::string& node) const;
  // Stops the group's current attempt (saying `why` to each member) and makes a fresh one at
  // spec.size once they all stopped; `reason` is the group's meanwhile.
  void RestartWhole(Group& g, const std::string& why, std::string reason, store::Batch& batch);

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  fleet::Fleet* fleet_;
  sched::Scheduler* scheduler_;
  AgentSupervisor* agents_;
  InstanceTable* instances_;
  const Tenants* tenants_;
  const Admission* admission_;
  Accounts* accounts_;
  VolumeMounts* mounts_;
  Preemptor* preemptor_;
  const PendingQueue* queue_;
  const PendingWork* pending_;
  TenantSecrets* secrets_;
  ServiceStats* service_stats_;
  Counters* counters_;
  const StateOptions* options_;
  Lifecycle* lifecycle_;
  GroupTable table_;
  Autoscaler autoscaler_;
};

}  // namespace tessera::core
