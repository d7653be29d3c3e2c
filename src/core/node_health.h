// NodeHealth: capacity that goes away, and comes back (docs/agent.md, docs/gpu-health.md). Joined
// nodes that stop reporting are not_ready, their running work billed to their last report, and
// that work moves once their lease has surely run out; a node that reports again is ready, and
// billing resumes. GPUs whose telemetry shows a fault, or that an operator takes out, leave
// service with the work on them; an operator puts them back. An operator removes a node: drained,
// its work moved, and gone from the fleet once its agent has heard.
// It owns the lease clock (when leases were last checked, and since when the server has been up)
// and the nodes being removed. The work it displaces is the instance lifecycle's, reached through
// Lifecycle, which Instances implements, as is a node's state in the fleet.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <set>
#include <string>

#include "common/clock.h"
#include "common/result.h"
#include "core/accounts.h"
#include "core/admission.h"
#include "core/agents.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/monitoring.h"
#include "core/node_gpus.h"
#include "core/state_options.h"
#include "core/tenants.h"
#include "core/volumes.h"
#include "fleet/fleet.h"
#include "store/store.h"

namespace tessera::core {

class NodeHealth {
 public:
  // What losing capacity asks of the instance lifecycle and the fleet's view of nodes
  // (Instances, instance_service.h).
  class Lifecycle {
   public:
    virtual ~Lifecycle() = default;
    // `inst` lost its capacity (`why`), which is free from now: on-demand and reserved work waits
    // again, spot work is preempted, and what was stopping has ended. Its record is saved.
    virtual void Displace(Instance& inst, const std::string& why, store::Batch& batch) = 0;
    // Records `reason` as `inst`'s latest word and in its history, its state unchanged, and
    // saves it.
    virtual void Note(Instance& inst, std::string reason, store::Batch& batch) = 0;
    // Capacity came back: queued work and waiting gangs are worth another pass.
    virtual void CapacityFreed() = 0;
    // The fleet state `node`'s flags give it (lost, drained, held GPUs), and whether it hosts
    // one tenant at a time.
    virtual void ApplyNodeState(const AgentNode& node) = 0;
  };

  // What it reads and changes; every part must outlive this.
  struct Parts {
    const Clock* clock = nullptr;
    fleet::Fleet* fleet = nullptr;
    AgentSupervisor* agents = nullptr;
    InstanceTable* instances = nullptr;
    Tenants* tenants = nullptr;        // Removed nodes' tokens.
    Admission* admission = nullptr;    // The fleet changed.
    Accounts* accounts = nullptr;      // Silent nodes' billing, and the fleet changed.
    Volumes* volumes = nullptr;        // Removed nodes' volumes.
    NodeGpus* node_gpus = nullptr;     // Removed nodes' MIG holds.
    Monitoring* monitoring = nullptr;  // Interruptions shown to the owners of moved work.
    Counters* counters = nullptr;
    const StateOptions* options = nullptr;
    Lifecycle* lifecycle = nullptr;
  };

  explicit NodeHealth(const Parts& parts)
      : clock_(parts.clock),
        fleet_(parts.fleet),
        agents_(parts.agents),
        instances_(parts.instances),
        tenants_(parts.tenants),
        admission_(parts.admission),
        accounts_(parts.accounts),
        volumes_(parts.volumes),
        node_gpus_(parts.node_gpus),
        monitoring_(parts.monitoring),
        counters_(parts.counters),
        options_(parts.options),
        lifecycle_(parts.lifecycle),
        last_lease_check_(parts.clock->Now()),
        up_since_(parts.clock->Now()) {}
  NodeHealth(const NodeHealth&) = delete;
  NodeHealth& operator=(const NodeHealth&) = delete;

  // How agents report, and when a silent node's work may move (AgentTiming::fence).
  AgentTiming timing() const {
    return {options_->report_period, options_->node_timeout, options_->outage_bound};
  }

  // DELETE /v1/nodes/{id}: takes a joined node out of the fleet, its token revoked, its record
  // deleted and its name free. Refused (FailedPrecondition, naming them) while it runs instances,
  // unless `force`, which moves them as a GPU fault does (a lost node's, at its fence time, as
  // any lost node's), and while it holds volumes, which cannot move; refused for a fleet file's
  // node. With work to stop it is drained and `removing` until its agent has been told to stop it
  // (`removed` false, with the reason it waits); otherwise removed at once.
  struct Removal {
    bool removed = false;
    std::string waiting_for;  // While it is removing.
  };
  Result<Removal> RemoveNode(const std::string& name, bool force, store::Batch& batch);
  // Drains a node (nothing new is placed there; what runs stays) or puts it back in service; its
  // flag is stored. NotFound for a node not in the fleet.
  Status SetNodeDrained(const std::string& node, bool drained, store::Batch& batch);
  // An operator's word on GPU `gpu` of a joined node (docs/gpu-health.md): healthy puts it back
  // in service (and accepts its double-bit ECC count so far); unhealthy takes it out with
  // `reason`, moving its work as a fault would. NotFound for an unknown node or GPU.
  Status SetGpuHealth(const std::string& node, int gpu, bool healthy, const std::string& reason,
                      store::Batch& batch);

  // A round's steps (State::EndRound). Joined nodes that stopped reporting are not_ready, and
  // their work moves once their lease has surely run out (checked every 200 ms at most).
  void ExpireLeases(store::Batch& batch);
  // Removing nodes whose work is stopped or moved leave the fleet.
  void FinishRemovals(store::Batch& batch);
  // From an agent's report (AgentHub::Sync): a silent node reported again, ready, and billing
  // resumes for what still runs there.
  void NodeHeardAgain(AgentNode& node, store::Batch& batch);
  // Takes out of service the GPUs whose faults the node's last telemetry shows; a fault that
  // needs the node restarted drains it.
  void CheckGpuHealth(AgentNode& node, store::Batch& batch);

 private:
  // A removing node whose work is stopped or moved leaves: true when it did (`node` is gone).
  bool FinishRemoval(AgentNode& node, store::Batch& batch);
  // `node` went silent (last heard at `heard`): not_ready, and billing for its running work
  // stops at its last report.
  void NodeSilent(AgentNode& node, Time heard, store::Batch& batch);
  // GPU `gpu` of `node` is out of service from now: nothing more is placed on it, and the work
  // on it moves as on a node loss (billed to now), its reason naming the fault.
  void TakeGpuOutOfService(AgentNode& node, int gpu, const std::string& reason,
                           store::Batch& batch);
  // After `node.unhealthy` changed: its series, the fleet, its agent and the store follow.
  void GpuHealthChanged(AgentNode& node, store::Batch& batch);
  // Shows `inst`'s owner that a fault (`cause`: gpu_unhealthy, node_lost) moved it, on `gpu`
  // (-1: the node) for `fault` (the XID's name, or ""), before it moves.
  void NoteInterruption(const Instance& inst, std::string cause, int gpu, std::string fault);

  const Clock* clock_;
  fleet::Fleet* fleet_;
  AgentSupervisor* agents_;
  InstanceTable* instances_;
  Tenants* tenants_;
  Admission* admission_;
  Accounts* accounts_;
  Volumes* volumes_;
  NodeGpus* node_gpus_;
  Monitoring* monitoring_;
  Counters* counters_;
  const StateOptions* options_;
  Lifecycle* lifecycle_;
  Time last_lease_check_;
  // When the server started, or last came back from a stall (ExpireLeases): no node counts as
  // silent for time before it.
  Time up_since_;
  std::set<std::string> removing_;  // Joined nodes being removed (RemoveNode).
};

}  // namespace tessera::core
