// NVIDIA MPS for shares of a GPU: one MPS control daemon per shared GPU, started with that GPU
// alone visible (CUDA_VISIBLE_DEVICES = its UUID) and with pipe and log directories of its own
// (ROOT/gpu-N/pipe, ROOT/gpu-N/log), so its clients are exactly the workloads given that pipe
// directory (ClientEnv). MPS runs one server per user id, and the agent runs each tenant under a
// uid of its own, so the limits set on a server (the share of the GPU's threads a client may use,
// and the device memory it may pin) hold per tenant on that GPU. docs/agent.md ("Shares on a GPU:
// MPS") says what this enforces and when it does not.
//
// Everything goes through `nvidia-cuda-mps-control`: with -d it starts a daemon; without, it sends
// the commands read from its stdin to the daemon of $CUDA_MPS_PIPE_DIRECTORY and prints the
// answers. Each command is one run of it, with a deadline, so a wedged daemon cannot hang the
// agent. src/testing/fake_mps_control.cc is a fake of it for the tests.
//
// Daemons outlive the agent's process unless the object is destroyed with stop_at_exit; a new
// MpsDaemons over the same root adopts the daemons and servers an earlier one left.
// Thread-safety: one thread (the agent loop) uses an MpsDaemons; no method may run concurrently
// with another on the same object.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace tessera::agent {

struct MpsOptions {
  std::string control = "nvidia-cuda-mps-control";  // A path, or a name looked up in $PATH.
  // Directory for each GPU's pipe and log directories: ROOT/gpu-N/pipe, ROOT/gpu-N/log. Created
  // when missing; it and everything above it must let the workload uids through (o+x).
  std::string root;
  // The destructor sends `quit` to the daemons this object started. False leaves them running,
  // for workloads that outlive the agent; the next agent adopts them.
  bool stop_at_exit = true;
  // Each run of the control program is killed (its process group) when this passes.
  std::chrono::milliseconds command_deadline{std::chrono::seconds(10)};
};

class MpsDaemons {
 public:
  explicit MpsDaemons(MpsOptions options);
  // Stops (quit) the daemons this object started, when options.stop_at_exit.
  ~MpsDaemons();
  MpsDaemons(const MpsDaemons&) = delete;
  MpsDaemons& operator=(const MpsDaemons&) = delete;

  // Whether the control program exists and is executable (looked up once, at construction).
  bool available() const { return available_; }
  // Why not, e.g. "nvidia-cuda-mps-control not found in PATH: shares are time-sliced without
  // memory limits"; "" when available.
  const std::string& note() const { return note_; }

  // Starts GPU `gpu`'s daemon with only `gpu_uuid` visible, unless one answers in its pipe
  // directory: a daemon an earlier agent left is adopted (with the servers it recorded), one
  // started for another UUID is stopped and replaced. Costs one control command when it runs.
  // FailedPrecondition when !available() or ROOT/gpu-N is unsafe (a symlink, not ours, writable
  // by others); errors name the GPU, the command and the daemon's answer.
  Status Ensure(int gpu, const std::string& gpu_uuid);

  // Sets the limits of `uid`'s MPS server on `gpu` (after Ensure): with no server for `uid` yet,
  // sets the daemon's defaults and starts one (start_server -uid), remembering its PID; with one,
  // sets them on it, where they bind the clients that connect from then on. thread_percentage in
  // 1..100; pinned_mem_mib > 0, the device memory each client may pin. InvalidArgument for those;
  // FailedPrecondition when the GPU has no daemon.
  Status SetLimits(int gpu, int64_t uid, int thread_percentage, int64_t pinned_mem_mib);

  // The environment a client workload on `gpu` needs: CUDA_MPS_PIPE_DIRECTORY and
  // CUDA_MPS_LOG_DIRECTORY of that GPU's daemon. Empty when this object runs no daemon for it.
  std::vector<std::pair<std::string, std::string>> ClientEnv(int gpu) const;

  // Stops (quit) the daemons of GPUs not in `uids_by_gpu`, and shuts down the servers of uids no
  // longer holding a share: `uids_by_gpu` maps each GPU with shares to the uids holding them.
  // Once, it also stops daemons that an earlier agent left under ROOT for GPUs not in the map.
  // Failures are logged; the next call tries again.
  void Reconcile(const std::map<int, std::set<int64_t>>& uids_by_gpu);

 private:
  struct Daemon {
    std::string uuid;
    std::string pipe_dir;
    std::string log_dir;
    bool started_here = false;
    std::map<int64_t, int64_t> server_by_uid;  // The uid's MPS server's PID.
  };

  // Runs the control program with one command (no -d) against `d`'s pipe directory.
  Result<std::string> Command(int gpu, const Daemon& d, const std::string& command) const;
  Result<std::set<int64_t>> ServerPids(int gpu, const Daemon& d) const;
  Status StartDaemon(int gpu, Daemon& d);
  Status Quit(int gpu, const Daemon& d) const;
  // ROOT/gpu-N/servers: "UID PID" lines, so a later agent knows whose servers it adopts.
  void SaveServers(int gpu, const Daemon& d) const;
  void LoadServers(int gpu, Daemon& d, const std::set<int64_t>& running) const;
  std::string GpuDir(int gpu) const;
  void SweepLeftovers(const std::map<int, std::set<int64_t>>& uids_by_gpu);

  MpsOptions options_;
  std::string control_path_;  // Resolved; "" when not available.
  bool available_ = false;
  std::string note_;
  bool swept_ = false;
  std::map<int, Daemon> daemons_;
};

}  // namespace tessera::agent
