// The agent supervisor: tells each node's agent what to start and stop, and takes its reports.
// Today the agents are simulated (tessera server --sim-agents): an agent starts a scheduled
// instance and stops a stopping one at once, and its reports arrive within the same core round.
// Without agents nothing runs on the nodes, so deleting an instance ends it at once. Real agents
// (long-polling nodes) will report through the same Report path.
// The supervisor keeps only what was notified, so a round costs what changed, never a scan of
// every instance.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <string>
#include <vector>

#include "core/instance.h"

namespace tessera::core {

// What an agent says happened to an instance.
struct AgentReport {
  std::string instance;
  InstanceState state = InstanceState::kRunning;  // Running, or terminated once stopped.
  std::string reason;
};

class AgentSupervisor {
 public:
  explicit AgentSupervisor(bool simulated) : simulated_(simulated) {}

  // Whether agents serve the nodes: a deleted instance then stops through its agent.
  bool serves_nodes() const { return simulated_; }
  // `inst` was scheduled (start it) or is stopping (stop it): its agent is told.
  void Notify(const Instance& inst);
  // The reports that arrived since the last call, oldest first.
  std::vector<AgentReport> Collect();

 private:
  bool simulated_;
  std::vector<AgentReport> reports_;
};

}  // namespace tessera::core
