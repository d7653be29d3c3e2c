// State's exec sessions (docs/volumes.md, "A shell"): which instance a tenant may run a command
// or a shell in, and what its node's agent is told to connect for.
#include <fmt/format.h>

#include "common/auth.h"
#include "common/text.h"
#include "core/state.h"

namespace tessera::core {

Result<ExecSession> State::OpenExec(const Tenant& caller, std::string_view instance_id,
                                    ExecSession request, Duration connect_within) {
  Result<Instance*> found = instances_.table().FindFor(caller, instance_id);
  if (!found.ok()) return found.status();
  const Instance* inst = *found;
  if (inst->state != InstanceState::kRunning && inst->state != InstanceState::kPreempting) {
    return Status::FailedPrecondition(
        fmt::format("instance '{}' is {}: a command runs only in a running instance",
                    Quote(instance_id), StateName(inst->state)));
  }
  AgentNode* node = agents_.Find(inst->node);
  if (!node || node->simulated || !node->registered()) {
    return Status::FailedPrecondition(fmt::format(
        "instance '{}' runs on node '{}', which no agent process serves (a fleet-file node "
        "simulated inside the server): there is no workload to run a command in",
        Quote(instance_id), inst->node));
  }
  TESSERA_ASSIGN_OR_RETURN(std::string random, GenerateToken());
  request.id = "exec-" + random.substr(4, 32);
  request.node = inst->node;
  request.instance = inst->id.str();
  request.attempt = inst->restarts;
  request.tenant = inst->tenant.str();
  const Time now = clock_->Now();
  request.expires = now + connect_within;
  TESSERA_RETURN_IF_ERROR(agents_.QueueExec(*node, request, now));
  return request;
}

}  // namespace tessera::core
