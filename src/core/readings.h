// What the nodes' GPUs read, as their agents reported it (docs/telemetry.md): the series of every
// node an agent serves, each GPU labelled with the instance and tenant that hold it (what /metrics
// shows and the alert rules evaluate), and per-GPU readings for an instance's owner and for the
// operator, lately (from the history) or as last reported. It only reads; the state records
// telemetry as reports arrive.
// Thread-safety: none; the core thread calls it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "core/agents.h"
#include "core/instance_table.h"
#include "core/monitoring.h"
#include "core/tenants.h"
#include "fleet/fleet.h"
#include "telemetry/history.h"
#include "telemetry/series.h"

namespace tessera::core {

class Readings {
 public:
  // The parts must outlive this.
  Readings(const Clock* clock, const fleet::Fleet* fleet, const AgentSupervisor* agents,
           const InstanceTable* instances, const telemetry::History* history)
      : clock_(clock), fleet_(fleet), agents_(agents), instances_(instances), history_(history) {}

  // Appends the series of each registered node an agent serves: its GPUs' last readings, each
  // labelled with its holders (a lost node's series say so).
  void NodeTargets(std::vector<telemetry::Target>& out) const;
  // Instance `id`'s GPUs' readings over the last `window`. NotFound for an unknown id and for
  // another tenant's instance alike.
  Result<InstanceReadings> OfInstance(const Tenant& caller, std::string_view id,
                                      Duration window) const;
  // A node's GPUs' readings over the last `window` by GPU index, each MIG instance's beside its
  // GPU's; `sampled` false for a node no agent reports for. NotFound for a node not in the
  // fleet.
  Result<std::vector<GpuReadings>> OfNode(const std::string& node, Duration window) const;
  // The caller's instances (the admin's: all) that hold GPUs on a node, with their GPUs' latest
  // readings (tessera instances top).
  std::vector<InstanceReadings> Top(const Tenant& caller) const;

 private:
  const Clock* clock_;
  const fleet::Fleet* fleet_;
  const AgentSupervisor* agents_;
  const InstanceTable* instances_;
  const telemetry::History* history_;
};

}  // namespace tessera::core
