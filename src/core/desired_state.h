// What each node's agent is told (docs/agent.md, "Desired state"): the workloads it should run,
// stop or preempt, each with its environment (its secrets' values filled in), image, volumes and
// GPUs; the volumes whose data it should delete; the outstanding GPU mode changes and exec
// sessions; and the lease. Built afresh for each answer from the parts that hold the facts; it
// changes nothing. api/agent_codec.cc writes it in the protocol's form.
// Only the node's own agent, authenticated by its node token, is sent what this builds: the
// values of the secrets its workloads refer to, and their registry passwords.
// Thread-safety: none; the core thread calls it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "core/agents.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/log_tails.h"
#include "core/secrets.h"
#include "core/volumes.h"

namespace tessera::core {

class DesiredStates {
 public:
  // The parts must outlive this.
  DesiredStates(const InstanceTable* instances, const TenantSecrets* secrets,
                const Volumes* volumes, const LogTails* logs)
      : instances_(instances), secrets_(secrets), volumes_(volumes), logs_(logs) {}

  // What the agent of node `name` is told at `now`, under `timing`. `node` null: a node no
  // agent joined, told only its lease and the volumes to delete there.
  DesiredState For(const std::string& name, const AgentNode* node, AgentTiming timing,
                   Time now) const;

  // The environment `inst`'s workload sees before the user's own: its GPUs (CUDA_VISIBLE_DEVICES
  // by UUID, "void" without GPUs; a share's MPS thread and memory limits), who it is, and its
  // group's variables.
  static std::map<std::string, std::string> WorkloadEnv(const Instance& inst);

 private:
  DesiredWorkload Workload(const Instance& inst, Time now) const;

  const InstanceTable* instances_;
  const TenantSecrets* secrets_;
  const Volumes* volumes_;
  const LogTails* logs_;
};

}  // namespace tessera::core
