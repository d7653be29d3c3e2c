// The GPUs of joined nodes as the server manages them (docs/agent.md): an operator's change of a
// GPU's sharing mode, the hold on the GPU while its agent acts, the agent's results, and a
// registration whose inventory shows a GPU in another mode; and the MIG devices agents report,
// booked in the fleet when they are not Tessera's work, whose UUIDs instances take.
// It changes the fleet's GPUs, the nodes' requests, holds, inventories and stored records, and
// instances' GPU UUIDs (saved into the batch). What follows for the rest of the state it reports
// in Effects, which the caller applies: a hold taken or released (the node's state in the fleet),
// and capacity that queued work may now fit.
// Thread-safety: none; the core thread calls it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/admission.h"
#include "core/agents.h"
#include "core/instance_table.h"
#include "core/mode_change.h"
#include "fleet/fleet.h"
#include "store/store.h"

namespace tessera::core {

class NodeGpus {
 public:
  // What the caller must do after a change; each call only sets fields.
  struct Effects {
    bool hold_changed = false;    // A GPU was held or released: the node's state in the fleet.
    bool capacity_freed = false;  // Queued work may fit now.
  };

  // The parts must outlive this. `documents`: instances are stored with their documents
  // (StoredRecord).
  NodeGpus(const catalog::Catalog* catalog, const Clock* clock, fleet::Fleet* fleet,
           AgentSupervisor* agents, InstanceTable* instances, Admission* admission, bool documents)
      : catalog_(catalog),
        clock_(clock),
        fleet_(fleet),
        agents_(agents),
        instances_(instances),
        admission_(admission),
        documents_(documents) {}

  // An operator sets GPU `gpu` of joined node `node` to `mode` (docs/agent.md, "Changing a GPU's
  // mode"). Between exclusive and shared it is applied at once (state applied, id 0), as it is
  // when the GPU is in `mode` already; into or out of MIG, a request for the node's agent (state
  // requested), the GPU held until its result; asking again with `allow_reset` allows a reset on
  // the same request. NotFound for an unknown node; FailedPrecondition for a node without a
  // registered agent, a GPU that holds work (naming the instances) or one changing to another
  // mode; InvalidArgument naming `index` or `mode`.
  Result<GpuModeChange> SetMode(const std::string& node, int gpu, catalog::SharingMode mode,
                                bool allow_reset, store::Batch& batch, Effects& effects);
  // InvalidArgument naming the first result for a GPU the node does not have.
  Status CheckResults(const AgentNode& node, const std::vector<GpuModeResult>& results) const;
  // Moves the node's outstanding mode changes on with its agent's results (audited); an ended one
  // releases its GPU, and an applied one puts the GPU in its new mode at once.
  void ApplyResults(AgentNode& node, const std::vector<GpuModeResult>& results, store::Batch& batch,
                    Effects& effects);
  // A known node registered again: each GPU takes the mode its inventory gives (`spec`), unless
  // something is allocated on it (logged; it keeps its mode). A simulated agent's node is as its
  // fleet file says.
  void FollowInventory(const AgentNode& node, const fleet::NodeSpec& spec, Effects& effects);

  // Takes the MIG devices a node's agent reported (`repartitions` >= 0: its count of layout
  // changes) as the server's view of them: the inventory lists them, the unmanaged ones' slices
  // are booked so nothing is granted over them, and the node's instances get the UUIDs their
  // devices were made with.
  void ApplyMigLayout(AgentNode& node, const std::vector<MigReport>& mig, int64_t repartitions,
                      store::Batch& batch, Effects& effects);
  // Frees the slices of `node`'s unmanaged MIG devices in the fleet.
  void ReleaseMigHolds(AgentNode& node);
  // On a joined node, a MIG slice whose profile and placement match a MIG device the node's
  // agent reported gets that device's UUID (what CUDA knows it by).
  void UseReportedMigUuids(Instance& inst) const;

 private:
  // FailedPrecondition naming the instances on GPU `gpu` of `node`, or saying it is allocated.
  Status CheckGpuFree(const AgentNode& node, int gpu) const;
  void EnterMode(AgentNode& node, const GpuModeChange& change);
  void Audit(const AgentNode& node, const GpuModeChange& change, store::Batch& batch) const;

  const catalog::Catalog* catalog_;
  const Clock* clock_;
  fleet::Fleet* fleet_;
  AgentSupervisor* agents_;
  InstanceTable* instances_;
  Admission* admission_;
  bool documents_;
};

}  // namespace tessera::core
