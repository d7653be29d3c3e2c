// The agent's work on devices and what a workload mounts: MIG devices made for the slices it is
// granted, MPS daemons for shares, volumes, exec sessions, and the GPU mode changes the server asks
// for (docs/agent.md). Agent's other methods are in agent.cc.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "agent/agent.h"
#include "agent/container_exec.h"
#include "agent/gpu_devices.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::agent {

using nlohmann::json;

Status Agent::PrepareMig(const std::string& instance, const json& w, WorkloadSpec& spec) {
  if (!w.contains("gpu_load") || !w["gpu_load"].is_array()) return Status::Ok();
  // Real GPUs whose MIG devices the agent may not make: a slice runs only on a device that
  // exists, never with a UUID CUDA would not find.
  const bool existing_only = !mig_ && backend_ == "nvml";
  if (!mig_ && !existing_only) return Status::Ok();
  std::optional<Inventory> now;
  std::map<std::string, std::string> uuids;  // The server's UUID of a slice -> the driver's.
  for (const json& g : w["gpu_load"]) {
    if (!g.is_object() || !g.contains("mig_profile")) continue;
    const int gpu = g.value("index", 0);
    const std::string profile = g.value("mig_profile", "");
    const int start = g.value("mig_start", 0);
    MigDevice m;
    if (existing_only) {
      if (!now) {
        TESSERA_ASSIGN_OR_RETURN(Inventory read, gpus_->ReadInventory());
        now = std::move(read);
      }
      const std::vector<MigDevice>* devices =
          gpu >= 0 && static_cast<size_t>(gpu) < now->gpus.size()
              ? &now->gpus[static_cast<size_t>(gpu)].mig_devices
              : nullptr;
      auto it = devices ? std::find_if(devices->begin(), devices->end(),
                                       [&](const MigDevice& d) {
                                         return d.profile == profile && d.start == start;
                                       })
                        : std::vector<MigDevice>::const_iterator{};
      if (!devices || it == devices->end()) {
        return Status::FailedPrecondition(fmt::format(
            "MIG {}@{} on GPU {}: no such device, and this agent makes none (--manage-mig "
            "false): an operator makes it, or the agent runs with --manage-mig",
            profile, start, gpu));
      }
      m = *it;
    } else {
      TESSERA_ASSIGN_OR_RETURN(m, mig_->Acquire(instance, gpu, profile, start));
    }
    if (g.contains("uuid") && g["uuid"].is_string()) uuids[g["uuid"].get<std::string>()] = m.uuid;
  }
  if (uuids.empty()) return Status::Ok();
  // The workload is given exactly the devices NVML made, by the driver's UUIDs.
  for (auto& [name, value] : spec.env) {
    if (name != "CUDA_VISIBLE_DEVICES" && name != "NVIDIA_VISIBLE_DEVICES") continue;
    std::string out;
    for (size_t at = 0; at <= value.size();) {
      size_t comma = value.find(',', at);
      if (comma == std::string::npos) comma = value.size();
      const std::string item = value.substr(at, comma - at);
      auto it = uuids.find(item);
      out += (out.empty() ? "" : ",") + (it != uuids.end() ? it->second : item);
      at = comma + 1;
    }
    value = out;
  }
  if (options_.refresh_gpu_cdi) options_.gpu_cdi_devices = options_.refresh_gpu_cdi();
  return Status::Ok();
}

MpsDaemons& Agent::MpsOf(int64_t uid) {
  std::unique_ptr<MpsDaemons>& d = mps_[uid];
  if (!d) {
    // Each tenant's daemons have a directory only it (and root) may enter: another tenant's
    // client cannot reach them, so cannot queue behind or in front of its server.
    const std::string dir = fmt::format("{}/uid-{}", options_.mps_root, uid);
    mkdir(options_.mps_root.c_str(), 0755);
    mkdir(dir.c_str(), 0710);
    if (chown(dir.c_str(), 0, static_cast<gid_t>(uid)) != 0 || chmod(dir.c_str(), 0710) != 0) {
      spdlog::warn("MPS: {}: {}", dir, strerror(errno));
    }
    MpsOptions o;
    o.control = options_.mps_control;
    o.root = dir;
    o.stop_at_exit = false;  // Workloads outlive the agent; the next run adopts the daemons.
    d = std::make_unique<MpsDaemons>(o);
  }
  return *d;
}

Status Agent::PrepareMps(const json& w, WorkloadSpec& spec) {
  if (!mps_available_ || !w.contains("gpu_load") || !w["gpu_load"].is_array()) {
    return Status::Ok();
  }
  int64_t uid = workloads_->PlannedUid(w.value("tenant", ""));
  if (uid < 0) uid = geteuid();
  bool first = true;
  for (const json& g : w["gpu_load"]) {
    if (!g.is_object() || g.contains("mig_profile") || g.value("milli", 1000) >= 1000) continue;
    const int gpu = g.value("index", 0);
    if (gpu < 0 || static_cast<size_t>(gpu) >= gpu_uuids_.size()) continue;
    MpsDaemons& daemons = MpsOf(uid);
    TESSERA_RETURN_IF_ERROR(daemons.Ensure(gpu, gpu_uuids_[static_cast<size_t>(gpu)]));
    const auto [pct, mib] = share_limits_[{gpu, uid}];
    TESSERA_RETURN_IF_ERROR(daemons.SetLimits(gpu, uid, pct, mib));
    // A client talks to one daemon: the first shared GPU's.
    if (first) {
      for (auto& [name, value] : daemons.ClientEnv(gpu)) spec.env.emplace_back(name, value);
    }
    first = false;
  }
  return Status::Ok();
}

Status Agent::PrepareVolumes(const json& w, WorkloadSpec& spec) {
  const json volumes = w.value("volumes", json::array());
  if (!volumes.is_array() || volumes.empty()) return Status::Ok();
  if (!options_.volumes) return Status::FailedPrecondition("this node's agent keeps no volumes");
  for (const json& v : volumes) {
    if (!v.is_object()) return Status::InvalidArgument("volumes: an entry is not an object");
    const std::string id = v.value("id", ""), name = v.value("name", "");
    auto dir = options_.volumes->Prepare(id, v.value("size_gib", int64_t{0}));
    if (!dir.ok()) return dir.status().WithPrefix(fmt::format("volume '{}'", Quote(name)));
    spec.volumes.push_back({name, *dir, v.value("path", "")});
  }
  return Status::Ok();
}

void Agent::RemoveVolumes(const json& desired) {
  if (!options_.volumes || !desired.contains("volumes") || !desired["volumes"].is_object()) return;
  for (const json& id : desired["volumes"].value("delete", json::array())) {
    if (!id.is_string()) continue;
    Status s = options_.volumes->Remove(id.get<std::string>());
    if (!s.ok()) spdlog::warn("removing volume {}: {}", Quote(id.get<std::string>()), s.message());
  }
}

void Agent::ApplyExec(const json& desired, const std::map<std::string, WorkloadPhase>& phase) {
  if (!exec_) return;
  std::set<std::string> running, named;
  for (const auto& [key, p] : phase) {
    if (p == WorkloadPhase::kRunning) running.insert(key);
  }
  const json empty = json::array();
  const json& list =
      desired.contains("exec") && desired["exec"].is_array() ? desired["exec"] : empty;
  for (const json& e : list) {
    if (!e.is_object()) continue;
    ExecCommand c;
    c.id = e.value("id", "");
    named.insert(c.id);
    if (c.id.empty() || exec_->Seen(c.id)) continue;
    c.workload = WorkloadKey(e.value("instance", ""), e.value("attempt", 0));
    for (const json& arg : e.value("command", json::array())) {
      if (arg.is_string()) c.command.push_back(arg.get<std::string>());
    }
    c.tty = e.value("tty", false);
    c.cols = std::clamp(e.value("cols", 80), 1, 1000);
    c.rows = std::clamp(e.value("rows", 24), 1, 1000);
    auto k = known_.find(c.workload);
    Result<ExecTarget> target =
        k == known_.end() || k->second.noop || !running.count(c.workload)
            ? Result<ExecTarget>(Status::FailedPrecondition(
                  k != known_.end() && k->second.pull
                      ? "its image is still being pulled"
                      : "nothing of it runs on this node (no command and no image, or it ended)"))
            : workloads_->ExecTargetOf(c.workload);
    if (!target.ok()) {
      exec_->Refuse(c.id, fmt::format("cannot run a command in instance {}: {}",
                                      e.value("instance", ""), target.status().message()));
      continue;
    }
    spdlog::info("exec {} in {}: {}", c.id, c.workload,
                 c.command.empty() ? std::string("(a shell)") : EscapeForTerminal(c.command[0]));
    exec_->Start(c, *target);
  }
  exec_->Keep(running, named);
}

void Agent::ApplyModeRequests(const json& desired) {
  std::set<int64_t> asked;
  const json empty = json::array();
  const json& list =
      desired.contains("gpu_mode_requests") && desired["gpu_mode_requests"].is_array()
          ? desired["gpu_mode_requests"]
          : empty;
  for (const json& r : list) {
    if (!r.is_object()) continue;
    const int64_t id = r.value("id", int64_t{0});
    const int gpu = r.value("gpu", -1);
    const std::string mode = r.value("mode", "");
    const bool allow_reset = r.value("allow_reset", false);
    asked.insert(id);
    auto done = mode_results_.find(id);
    if (done != mode_results_.end() && !(done->second.state == "pending_reset" && allow_reset)) {
      continue;
    }
    ModeResult result{gpu, "applied", ""};
    auto fail = [&result](const char* state, std::string why) {
      result.state = state;
      result.reason = std::move(why);
    };
    if (gpu < 0 || gpu >= gpu_count_) {
      fail("failed", fmt::format("this node has no GPU {}", gpu));
    } else {
      // The server asks only for changes into or out of MIG mode: the driver's to make.
      Result<int> procs = gpus_->CountProcesses(gpu);
      if (!procs.ok()) {
        fail("failed", procs.status().message());
      } else if (*procs > 0) {
        fail("refused", fmt::format("{} process(es) use GPU {}: its mode changes only while it "
                                    "is idle",
                                    *procs, gpu));
      } else if (done == mode_results_.end()) {
        Result<std::string> set = gpus_->SetMigMode(gpu, mode == "mig");
        if (!set.ok()) {
          fail(set.status().code() == StatusCode::kFailedPrecondition ? "refused" : "failed",
               set.status().message());
        } else if (*set == "pending_reset") {
          fail("pending_reset",
               fmt::format("the driver applies MIG mode {} on GPU {} at its next reset; the "
                           "agent resets it only when allowed (set-gpu-mode --allow-reset)",
                           mode == "mig" ? "on" : "off", gpu));
        }
      } else {
        result = done->second;  // Pending a reset, which is now allowed.
      }
      if (result.state == "pending_reset" && allow_reset) {
        ExecOptions opts;
        opts.deadline = std::chrono::seconds(120);
        auto reset =
            RunCommand({options_.nvidia_smi, "--gpu-reset", "-i", std::to_string(gpu)}, opts);
        if (!reset.ok() || reset->exit_code != 0) {
          fail("failed", fmt::format("{} --gpu-reset -i {}: {}", options_.nvidia_smi, gpu,
                                     reset.ok() ? CutUtf8(reset->err + reset->out, 240)
                                                : reset.status().message()));
        } else {
          result = ModeResult{gpu, "applied", ""};
        }
      }
    }
    if (result.state == "applied") register_again_ = true;
    spdlog::info("GPU {} mode {}: {}{}{}", gpu, mode, result.state,
                 result.reason.empty() ? "" : ": ", result.reason);
    mode_results_[id] = std::move(result);
  }
  std::erase_if(mode_results_, [&asked](const auto& e) { return !asked.contains(e.first); });
}

}  // namespace tessera::agent
