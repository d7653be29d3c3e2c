#include "core/agents.h"

namespace tessera::core {

void AgentSupervisor::Notify(const Instance& inst) {
  if (!simulated_) return;
  // A simulated agent does at once what it is told.
  if (inst.state == InstanceState::kScheduled) {
    reports_.push_back({inst.id.str(), InstanceState::kRunning, ""});
  } else if (inst.state == InstanceState::kStopping) {
    reports_.push_back({inst.id.str(), InstanceState::kTerminated, "stopped by its agent"});
  }
}

std::vector<AgentReport> AgentSupervisor::Collect() {
  std::vector<AgentReport> out;
  out.swap(reports_);
  return out;
}

}  // namespace tessera::core
