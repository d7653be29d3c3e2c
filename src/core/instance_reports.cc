// What agents report of instances' workloads (docs/agent.md): starts, exits, stops after notice,
// and the endpoints where a running instance's ports are reached.
#include <fmt/format.h>

#include <algorithm>

#include "core/instance_service.h"

namespace tessera::core {

bool Instances::ApplyAgentReports(store::Batch& batch) {
  bool changed = false;
  for (const AgentReport& report : agents_->Collect()) {
    Instance* inst = table_.Find(report.instance);
    if (inst && ApplyReport(*inst, report, batch)) {
      Save(*inst, batch);
      changed = true;
    }
  }
  return changed;
}

bool Instances::ApplyReport(Instance& inst, const AgentReport& report, store::Batch& batch) {
  if (report.attempt != inst.restarts) return false;  // An earlier attempt's copy.
  const Time now = clock_->Now();
  // Rank 0's agent names the port it reserved as it reports rank 0 running, or with its exit when
  // rank 0 ended before any report saw it run. One that succeeded naming none (an agent that
  // reports no port on exit) releases the members it held back at the group's own port, so they
  // do not wait for it forever; a failure restarts the group anyway.
  const bool succeeded = report.state != InstanceState::kRunning && report.exit_code == 0 &&
                         !report.lost && report.reason != "lease expired";
  if (report.port || (succeeded && inst.rank == 0))
    listener_->RendezvousReserved(inst, report.port, batch);
  if (report.state == InstanceState::kRunning) {
    if (inst.state != InstanceState::kScheduled) return false;
    // A start before the instance was scheduled or after now is the agent's clock, or a lie:
    // clamped to the time it can have been, and counted.
    Time started = report.started_at.value_or(now);
    if (started < inst.updated_at || started > now) {
      started = std::clamp(started, inst.updated_at, now);
      ++counters_->agent_times_clamped;
    }
    inst.started_at = started;
    SetEndpoints(inst, report);
    Transition(inst, InstanceState::kRunning, "", batch);
    counters_->start_latency.Observe(Seconds(*inst.started_at - inst.enqueued_at));
    return true;
  }
  switch (inst.state) {
    case InstanceState::kScheduled:
    case InstanceState::kRunning:
      if (report.reason == "lease expired") {
        // Its agent fenced it: the node lost touch with the server. It runs again elsewhere.
        Displace(inst, "node lost: its agent's lease expired", batch);
        return false;  // Displace saved it.
      }
      inst.exit_code = report.exit_code;
      Release(inst);
      if (report.lost) {
        Transition(
            inst, InstanceState::kFailed,
            "agent restarted: " + (report.reason.empty() ? "its process was lost" : report.reason),
            batch, billing::Ending::kPlatform);
      } else if (report.exit_code == 0) {
        Transition(inst, InstanceState::kSucceeded, "exited with code 0", batch);
      } else {
        Transition(inst, InstanceState::kFailed,
                   report.exit_code ? fmt::format("exited with code {}", *report.exit_code)
                                    : "its workload ended: " + report.reason,
                   batch);
      }
      return true;
    case InstanceState::kStopping:
      inst.exit_code = report.exit_code;
      Release(inst);
      // Ended as asked: the reason stays the stop's ("deleted by its owner", a group's scale-in).
      Transition(inst, InstanceState::kTerminated, inst.reason.empty() ? "stopped" : inst.reason,
                 batch);
      return true;
    case InstanceState::kPreempting:
      inst.exit_code = report.exit_code;
      if (report.reason == "exited" && report.exit_code == 0 && !report.lost) {
        // It finished on its own before its agent had to stop it: its work is done.
        Release(inst);
        Transition(inst, InstanceState::kSucceeded, "exited with code 0 during its notice", batch);
        return true;
      }
      if (inst.moving) {
        FinishMove(inst, batch);  // Stopped to move: it restarts where its move booked.
        return true;
      }
      Release(inst);
      // Warn's reason says why: "preempted by higher-priority work; stops at ...".
      EndPreempted(
          inst, inst.reason.substr(0, inst.reason.find("; stops at")) + " after its notice", batch);
      return true;
    default:
      return false;
  }
}

void Instances::ApplyWorkloadReport(Instance& inst, const AgentReport& report,
                                    store::Batch& batch) {
  if (ApplyReport(inst, report, batch)) Save(inst, batch);
}

void Instances::SetEndpoints(Instance& inst, const AgentReport& report) {
  inst.endpoints.clear();
  const AgentNode* node = agents_->Find(inst.node);
  for (const auto& [port, host_port] : report.endpoints) {
    // Only the ports it asked for: an agent names no others.
    if (std::find(inst.ports.begin(), inst.ports.end(), port) == inst.ports.end()) continue;
    inst.endpoints.push_back(
        {port, node && !node->address.empty() ? node->address : inst.node, host_port});
  }
  endpoints_->Index(inst);
}

}  // namespace tessera::core
