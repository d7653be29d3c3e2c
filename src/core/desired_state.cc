#include "core/desired_state.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/group.h"
#include "fleet/fleet.h"

namespace tessera::core {

DesiredState DesiredStates::For(const std::string& name, const AgentNode* node, AgentTiming timing,
                                Time now) const {
  DesiredState out;
  out.node = name;
  out.lease = timing.lease();
  out.heartbeat = timing.report_period;
  for (const Volume* v : volumes_->Deleting()) {
    if (v->node == name) out.volumes_to_delete.push_back(v->id);
  }
  if (!node) return out;
  out.faults = node->faults;
  out.generation = node->generation;
  for (const std::string& id : node->assigned) {
    const Instance* inst = instances_->Find(id);
    if (!inst) continue;
    // Rank 0 of a gang reserves the group's port as it starts; the others start once it has.
    const bool runs =
        inst->state != InstanceState::kStopping && inst->state != InstanceState::kPreempting;
    if (runs && AwaitsRendezvous(*inst) && inst->rank != 0) continue;
    out.workloads.push_back(Workload(*inst, now));
  }
  // Outstanding GPU mode changes (docs/agent.md, "Changing a GPU's mode").
  for (const auto& [_, c] : node->mode_changes) {
    if (c.outstanding()) out.mode_requests.push_back(c);
  }
  for (const ExecSession& e : node->exec) {
    if (e.expires > now) out.exec.push_back(e);
  }
  return out;
}

DesiredWorkload DesiredStates::Workload(const Instance& inst, Time now) const {
  DesiredWorkload w;
  w.action = inst.state == InstanceState::kStopping     ? DesiredWorkload::Action::kStop
             : inst.state == InstanceState::kPreempting ? DesiredWorkload::Action::kPreempt
                                                        : DesiredWorkload::Action::kRun;
  if (w.action == DesiredWorkload::Action::kRun && AwaitsRendezvous(inst)) {
    w.reserve_port = "MASTER_PORT";
    // An elastic gang's endpoint names the port too: the agent writes it in.
    if (inst.group_env.count("PET_RDZV_ENDPOINT")) w.port_env = {"PET_RDZV_ENDPOINT"};
  }
  if (w.action == DesiredWorkload::Action::kPreempt) {
    w.deadline = inst.preempt_at.value_or(now);
    w.reason = inst.moving ? "moved to another GPU" : "spot preemption";
  }
  w.id = inst.id.str();
  w.attempt = inst.restarts;
  w.name = inst.name;
  w.tenant = inst.tenant.str();
  w.command = inst.command;
  w.env = WorkloadEnv(inst);
  secrets_->Resolve(inst.tenant.str(), inst.env, w.env);
  w.cpu_milli = inst.shape.vcpus * 1000;
  w.memory_mib = inst.shape.memory_mib;
  w.stop_grace_ms = inst.stop_grace_seconds * 1000;
  w.image = inst.image;
  secrets_->ResolvePassword(inst.tenant.str(), w.image);
  for (const VolumeMount& m : inst.volumes) {
    const Volume* v = volumes_->Find(inst.tenant.str(), m.name);
    if (v) w.volumes.push_back({v->id, v->name, m.path, v->size_gib});
  }
  w.ports = inst.ports;
  for (const GpuRef& g : inst.gpus) {
    DesiredGpu d;
    d.index = g.index;
    d.milli = g.milli_gpu > 0          ? g.milli_gpu
              : !g.mig_profile.empty() ? fleet::kMilliPerGpu / 2
                                       : fleet::kMilliPerGpu;
    if (!g.mig_profile.empty()) {
      d.mig_profile = g.mig_profile;
      d.mig_start = g.mig_start;
      d.uuid = g.uuid;  // The agent puts the UUID its device has in its place.
    }
    if (g.milli_gpu > 0) d.memory_mib = inst.shape.gpu_memory_mib;  // Its MPS limit.
    w.gpus.push_back(std::move(d));
  }
  w.log_offset = logs_->ResumeAt(inst.id.str(), inst.restarts);
  return w;
}

std::map<std::string, std::string> DesiredStates::WorkloadEnv(const Instance& inst) {
  std::vector<std::string> uuids;
  std::vector<std::string> mem_limits;
  int thread_percentage = 0;
  for (const GpuRef& g : inst.gpus) {
    uuids.push_back(g.uuid);
    if (g.milli_gpu > 0) {
      thread_percentage = std::max(thread_percentage, std::max(1, g.milli_gpu / 10));
      // MPS names a device by its ordinal among the visible ones, as CUDA numbers them.
      mem_limits.push_back(fmt::format("{}={}M", uuids.size() - 1, inst.shape.gpu_memory_mib));
    }
  }
  const std::string visible = uuids.empty() ? "void" : fmt::format("{}", fmt::join(uuids, ","));
  std::map<std::string, std::string> env = {{"CUDA_VISIBLE_DEVICES", uuids.empty() ? "" : visible},
                                            {"NVIDIA_VISIBLE_DEVICES", visible},
                                            {"TESSERA_INSTANCE_ID", inst.id.str()},
                                            {"TESSERA_INSTANCE_NAME", inst.name},
                                            {"TESSERA_TENANT", inst.tenant.str()}};
  for (const auto& [name, value] : inst.group_env) env[name] = value;
  if (thread_percentage > 0) {
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(thread_percentage);
    env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = fmt::format("{}", fmt::join(mem_limits, ","));
  }
  return env;
}

}  // namespace tessera::core
