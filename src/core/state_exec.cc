// State's exec sessions (docs/volumes.md, "A shell"): which instance a tenant may run a command
// or a shell in, and what its node's agent is told to connect for.
#include <fmt/format.h>

#include <algorithm>

#include "common/auth.h"
#include "common/text.h"
#include "core/state.h"

namespace tessera::core {

namespace {
// Sessions a node's agent has not connected for yet: a flood of requests waits here, not in
// threads on the node.
constexpr size_t kMaxWaitingExec = 32;
}  // namespace

Result<ExecSession> State::OpenExec(const Tenant& caller, std::string_view instance_id,
                                    ExecSession request, Duration connect_within) {
  const Instance* inst = instances_.Find(instance_id);
  if (!inst || !Visible(caller, *inst)) {
    return Status::NotFound(fmt::format("instance '{}' not found", Quote(instance_id)));
  }
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
  const Time now = clock_->Now();
  std::erase_if(node->exec, [now](const ExecSession& e) { return e.expires <= now; });
  if (node->exec.size() >= kMaxWaitingExec) {
    return Status::Unavailable(fmt::format(
        "node '{}' has {} exec sessions waiting for its agent already; try again in a few seconds",
        inst->node, node->exec.size()));
  }
  request.id = "exec-" + random.substr(4, 32);
  request.node = inst->node;
  request.instance = inst->id.str();
  request.attempt = inst->restarts;
  request.tenant = inst->tenant.str();
  request.expires = now + connect_within;
  node->exec.push_back(request);
  agents_.Changed(*node);
  return request;
}

void State::CloseExec(const std::string& node, std::string_view id) {
  AgentNode* n = agents_.Find(node);
  if (!n) return;
  // Its agent is not woken for this: it ignores a session it took already.
  std::erase_if(n->exec, [id](const ExecSession& e) { return e.id == id; });
}

}  // namespace tessera::core
