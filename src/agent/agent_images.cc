// The agent's workload starts: at once for a command, or after its image is pulled, on a thread
// of its own that the agent loop checks each round (docs/images.md). Agent's other methods are in
// agent.cc.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <mutex>
#include <thread>

#include "agent/agent.h"
#include "agent/container_exec.h"
#include "agent/gpu_devices.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::agent {

using nlohmann::json;

void Agent::StartNow(Known& k, const WorkloadSpec& spec) {
  k.noop = false;
  if (Status s = workloads_->Start(spec); !s.ok()) {
    // Started by an earlier run whose record is gone: never run twice. Refused: the server hears
    // why, as the instance's end, rather than waiting for it for ever.
    spdlog::error("starting {}: {}", spec.id, s.message());
    if (s.code() != StatusCode::kAlreadyExists) {
      k.noop = true;
      k.start_error = s.message();
    }
    return;
  }
  if (!spec.image.empty() && options_.images) (void)options_.images->MarkUsed(spec.image);
}

bool Agent::ImageHasShell(const std::string& image) {
  if (auto it = image_shell_.find(image); it != image_shell_.end()) return it->second;
  // The image's files, mounted read-only by podman for a look (it is the agent's, as root).
  bool shell = true;
  ExecOptions opts;
  opts.deadline = std::chrono::seconds(30);
  auto mounted = RunCommand({"podman", "image", "mount", image}, opts);
  if (mounted.ok() && mounted->exit_code == 0) {
    std::string root = mounted->out.substr(0, mounted->out.find('\n'));
    struct stat st {};
    shell = lstat((root + "/bin/sh").c_str(), &st) == 0;
    (void)RunCommand({"podman", "image", "unmount", image}, opts);
  }
  image_shell_[image] = shell;
  return shell;
}

void Agent::StartWithImage(Known& k, WorkloadSpec spec, const json& w) {
  spec.image = w.value("image", "");
  if (!options_.images) {
    k.noop = true;
    k.start_error = fmt::format("image {}: this node runs no containers", Quote(spec.image));
    return;
  }
  auto devices = CdiDevicesForLoad(w.value("gpu_load", json::array()), options_.gpu_cdi_devices,
                                   options_.gpu_cdi_required);
  if (!devices.ok()) {
    k.noop = true;
    k.start_error = fmt::format("image {}: {}", Quote(spec.image), devices.status().message());
    return;
  }
  spec.cdi_devices = std::move(*devices);
  auto policy = ParsePullPolicy(w.value("pull_policy", "if_not_present"));
  if (!policy.ok()) {
    k.noop = true;
    k.start_error = policy.status().message();
    return;
  }
  if (*policy != PullPolicy::kAlways) {
    auto present = options_.images->Present(spec.image);
    if (present.ok() && *present) {
      spec.image_has_shell = ImageHasShell(spec.image);
      StartNow(k, spec);
      return;
    }
    if (*policy == PullPolicy::kNever) {
      k.noop = true;
      k.start_error = fmt::format("image {}: not on this node, and its pull_policy is never",
                                  Quote(spec.image));
      return;
    }
  }
  std::optional<RegistryCredentials> auth;
  if (w.contains("registry_auth") && w["registry_auth"].is_object()) {
    auth = RegistryCredentials{w["registry_auth"].value("username", ""),
                               w["registry_auth"].value("password", "")};
  }
  // The pull runs on a thread of its own: the agent keeps reporting (the workload's progress
  // included) and serving its other workloads meanwhile.
  k.noop = true;
  k.pull = std::make_shared<PullJob>();
  k.pending = spec;
  std::thread([images = options_.images, job = k.pull, image = spec.image, policy = *policy,
               auth = std::move(auth)] {
    Status s = images->Pull(image, policy, auth, [&job](const PullProgress& p) {
      std::lock_guard lock(job->mu);
      job->progress = p;
    });
    std::lock_guard lock(job->mu);
    job->status = s;
    job->done = true;
  }).detach();
}

void Agent::FinishPulls() {
  for (auto& [key, k] : known_) {
    if (!k.pull) continue;
    Status s;
    {
      std::lock_guard lock(k.pull->mu);
      if (!k.pull->done) continue;
      s = k.pull->status;
    }
    k.pull.reset();
    if (k.stop_sent) continue;  // Stopped while it pulled: nothing starts.
    if (!s.ok()) {
      spdlog::warn("{}: {}", key, s.message());
      k.start_error = s.message();
      continue;
    }
    k.pending->image_has_shell = ImageHasShell(k.pending->image);
    StartNow(k, *k.pending);
    k.pending.reset();
  }
}

}  // namespace tessera::agent
