// AgentHub: nodes joined by agents, as an operator and their agents see them (docs/agent.md). An
// operator creates a node (its token registered) or rotates its token; the server serves a fleet
// file's node with a simulated agent; an agent run registers its node's inventory, and the node
// joins the fleet (or, when it joined before, the inventory must match); its reports are checked
// and applied (telemetry, logs, MIG devices, volumes, isolation, GPU mode results, and what each
// workload did); and an agent is told its node's desired state. An operator's change of a GPU's
// mode goes through it to NodeGpus.
// The nodes' memory is AgentSupervisor's (agents.h); what a workload's report does to its instance
// is the instance lifecycle's, and a node's state in the fleet is State's: both are reached through
// Lifecycle, which State implements. A node heard again, and GPU faults its telemetry shows, go to
// NodeHealth.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/accounts.h"
#include "core/admission.h"
#include "core/agents.h"
#include "core/desired_state.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/log_tails.h"
#include "core/mode_change.h"
#include "core/monitoring.h"
#include "core/node_gpus.h"
#include "core/node_health.h"
#include "core/state_options.h"
#include "core/tenants.h"
#include "core/volume_mounts.h"
#include "fleet/fleet.h"
#include "store/store.h"

namespace tessera::core {

class AgentHub {
 public:
  // What agents' nodes and reports ask of the rest of the state (State).
  class Lifecycle {
   public:
    virtual ~Lifecycle() = default;
    // Capacity came back: queued work and waiting gangs are worth another pass.
    virtual void CapacityFreed() = 0;
    // The fleet state `node`'s flags give it (lost, drained, held GPUs), and whether it hosts
    // one tenant at a time.
    virtual void ApplyNodeState(const AgentNode& node) = 0;
    // Applies what an agent reported of `inst`'s workload (REQUIRES: its node's, assigned
    // there), and saves `inst` when that changed it.
    virtual void ApplyWorkloadReport(Instance& inst, const AgentReport& report,
                                     store::Batch& batch) = 0;
  };

  // What it reads and changes; every part must outlive this.
  struct Parts {
    const catalog::Catalog* catalog = nullptr;
    const Clock* clock = nullptr;
    fleet::Fleet* fleet = nullptr;
    AgentSupervisor* agents = nullptr;
    InstanceTable* instances = nullptr;  // Pulls' progress; reports name the instances.
    Tenants* tenants = nullptr;          // Node tokens, and who a token is.
    Admission* admission = nullptr;      // A node joined the fleet.
    NodeGpus* node_gpus = nullptr;       // GPU modes and MIG devices.
    NodeHealth* health = nullptr;        // Nodes heard again, and GPU faults.
    VolumeMounts* mounts = nullptr;      // What agents report of volumes.
    Monitoring* monitoring = nullptr;    // GPU history.
    Accounts* accounts = nullptr;        // Utilization, for the cost report.
    LogTails* logs = nullptr;
    const DesiredStates* desired = nullptr;
    Counters* counters = nullptr;
    Lifecycle* lifecycle = nullptr;
  };

  explicit AgentHub(const Parts& parts)
      : catalog_(parts.catalog),
        clock_(parts.clock),
        fleet_(parts.fleet),
        agents_(parts.agents),
        instances_(parts.instances),
        tenants_(parts.tenants),
        admission_(parts.admission),
        node_gpus_(parts.node_gpus),
        health_(parts.health),
        mounts_(parts.mounts),
        monitoring_(parts.monitoring),
        accounts_(parts.accounts),
        logs_(parts.logs),
        desired_(parts.desired),
        counters_(parts.counters),
        lifecycle_(parts.lifecycle) {}
  AgentHub(const AgentHub&) = delete;
  AgentHub& operator=(const AgentHub&) = delete;

  // An operator's new node: its token (`token_hash`) registered; it joins the fleet when its
  // agent registers the inventory. InvalidArgument naming 'name' or 'sharing'; AlreadyExists
  // for a name in use.
  Result<AgentNode> CreateNode(const std::string& name, std::map<std::string, std::string> labels,
                               catalog::SharingMode sharing, const std::string& token_hash,
                               store::Batch& batch);
  // Serves fleet-file node `node` with one of the server's own simulated agents, which acts
  // with the node token `token_hash` (--sim-agents). NotFound for a node not in the fleet.
  Status AttachSimulated(const std::string& node, const std::string& token_hash);
  // Replaces a joined node's token (the old one stops at once). NotFound for an unknown node.
  Status RotateToken(const std::string& name, const std::string& token_hash, store::Batch& batch);
  // An agent run registers its node's inventory: the node joins the fleet (or, when it joined
  // before, the inventory must match). Errors name the inventory field.
  Status Register(const std::string& node, const AgentRegistration& reg, store::Batch& batch);
  // Applies an agent's report. True when the agent should be answered now; false when the call
  // may wait for news (park it). FailedPrecondition for a replayed report or a superseded agent
  // run; InvalidArgument naming the field for readings of GPUs the node does not have.
  Result<bool> Sync(const std::string& node, const AgentSync& sync, store::Batch& batch);
  // What the node's agent is told: every workload it should run or stop, and the lease.
  core::DesiredState DesiredState(const std::string& node) const;
  // The node an authenticated node token acts for, or PermissionDenied.
  Result<const AgentNode*> Authenticate(std::string_view token_hash) const;
  // Restores joined nodes from their stored records, before instances (they name the nodes).
  Status Restore(const std::vector<std::pair<std::string, std::string>>& records);
  // An operator sets GPU `gpu` of joined node `node` to `mode`: NodeGpus::SetMode, and what it
  // asks of the rest of the state.
  Result<GpuModeChange> SetGpuMode(const std::string& node, int gpu, catalog::SharingMode mode,
                                   bool allow_reset, store::Batch& batch);

 private:
  // What a change to a node's GPUs asks of the rest of the state (NodeGpus::Effects).
  void Follow(const AgentNode& node, const NodeGpus::Effects& effects);

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  fleet::Fleet* fleet_;
  AgentSupervisor* agents_;
  InstanceTable* instances_;
  Tenants* tenants_;
  Admission* admission_;
  NodeGpus* node_gpus_;
  NodeHealth* health_;
  VolumeMounts* mounts_;
  Monitoring* monitoring_;
  Accounts* accounts_;
  LogTails* logs_;
  const DesiredStates* desired_;
  Counters* counters_;
  Lifecycle* lifecycle_;
};

}  // namespace tessera::core
