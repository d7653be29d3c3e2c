// The node agent's workload supervisor: it runs each instance's command as a real process on the
// GPU server, captures its output into a bounded log, stops it with a grace period, tells it of a
// preemption, and fences it with a lease so that a dead or cut-off agent cannot leave a copy
// running after the server has moved the work elsewhere.
//
// Each workload gets a small supervising process of its own, the shim (workload_shim.h), which
// is re-parented to init and outlives the agent: the agent can crash, be killed with SIGKILL or
// be upgraded, and its workloads keep running, keep their output, still honour the lease, and
// still report their exit code to the next agent, which adopts them when it opens the same work
// directory. The agent and its shims talk only through small files in the workload's directory
// (docs/agent-workloads.md lists them), so nothing is lost when either side restarts.
//
// Thread-safety: one thread (the agent loop) uses a supervisor; no method may run concurrently
// with another on the same object. One supervisor at a time may open a work directory (a lock
// file enforces it, across processes too).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/container.h"
#include "common/result.h"

namespace tessera::agent {
namespace shim {
struct ShimPlan;
}  // namespace shim

struct WorkloadSpec {
  std::string id;  // The instance id, e.g. "inst-000042": the directory name; [a-z0-9-]{1,64}.
  // Whose work it is. With workload uids, each tenant on the node runs under a uid of its own, so
  // one tenant's workloads can neither read nor signal another's; "" counts as one more tenant.
  std::string tenant;
  std::string command;  // Run as /bin/sh -c command.
  // An image present on the node (the agent pulls it first): the workload runs as an OCI
  // container from it through podman and runc (container.h), as its tenant's workload uid, with
  // its directory at /workspace; "" = a bare process. With an image the command may be empty (the
  // image's own entrypoint runs), and without a shell in the image it runs in exec form (split at
  // spaces).
  std::string image;
  bool image_has_shell = true;
  // With an image: CDI device names (e.g. "nvidia.com/gpu=0"), so the container's /dev holds its
  // GPUs' device nodes and no others.
  std::vector<std::string> cdi_devices;
  // Added to the base environment (PATH, HOME, LANG), e.g. CUDA_VISIBLE_DEVICES.
  std::vector<std::pair<std::string, std::string>> env;
  int64_t cpu_milli = 0;   // 0 = no limit.
  int64_t memory_mib = 0;  // 0 = no limit.
  // When set, a free TCP port of the node's rendezvous range is reserved for the workload while it
  // runs and given to it in this variable (rank 0 of a group gets MASTER_PORT).
  std::string reserve_port;
  // With reserve_port: variables of `env` whose "{port}" is that port (an endpoint, "host:{port}").
  std::vector<std::string> port_env;
  // The tenant's volumes it mounts (volumes.h), each given to the workload's uid: in a container
  // mounted at `path`; a bare process finds it at its directory + `path` (a link). Either way
  // TESSERA_VOLUME_<NAME> (upper case, '-' and '.' as '_') says where.
  struct Volume {
    std::string name;
    std::string host_dir;  // Where it is on the node (VolumeHost::Prepare).
    std::string path;      // Absolute.
  };
  std::vector<Volume> volumes;
  // The ports it serves on. Each is mapped to a free port of the node's endpoint range (the
  // host port), given in TESSERA_PORT_<port>: a container on its own network is published there
  // (its workload listens on the port itself); a bare process, or a container on the node's
  // network, listens on the host port.
  std::vector<int> ports;
};

enum class WorkloadPhase { kRunning, kExited };

// What a command run inside a running workload needs (an exec session, exec_session.h): who it
// runs as and where, and the workload's process to take the environment from.
struct ExecTarget {
  std::string container;  // A container workload's container; "" for a bare process.
  std::string podman;     // With a container: the podman that runs it.
  // With a container: podman writes it once the container runs (the workload is "running" from
  // the moment `podman run` starts, before its container exists).
  std::string container_pid_file;
  int64_t uid = -1;  // -1: the agent's own user.
  int64_t nproc_limit = 0;
  std::string dir;         // Its cwd and HOME.
  std::string cgroup_dir;  // "" when it has none.
  int pid = 0;             // The workload's main process.
};

struct WorkloadStatus {
  std::string id;
  WorkloadPhase phase = WorkloadPhase::kRunning;
  // kExited: the exit status, or 128+signal when a signal ended it; -1 when lost (unknown).
  int exit_code = 0;
  // kExited: "exited" (ended on its own), "stopped" or "preempted" (ended after SIGTERM),
  // "killed after grace" (needed SIGKILL), "lease expired" (fenced), "agent restarted" (lost at
  // an agent restart), "shim died" (lost while the agent ran).
  std::string reason;
  bool lost = false;  // The process could not be adopted after an agent restart (or its shim died).
  int64_t started_at_unix_ms = 0;
  bool stopping = false;          // A stop or a preemption was asked.
  int64_t log_dropped_bytes = 0;  // Output lost because the log could not be written (disk full).
  int port = 0;                   // The port reserved for it (WorkloadSpec::reserve_port); 0: none.
  std::vector<std::pair<int, int>> endpoints;  // (port, host port) of WorkloadSpec::ports.
};

class WorkloadSupervisor {
 public:
  struct Options {
    std::string work_dir;  // Created when missing.
    // Where each workload's own directory (its cwd and HOME) is made; "" = work_dir. With
    // workload uids it and every directory above it must be traversable by others.
    std::string workspace_dir;
    int64_t log_limit_bytes = 8 << 20;
    std::chrono::milliseconds lease_kill_grace{2000};
    // "" = detect (a child of our own cgroup v2); "none" = do not try; else a cgroup v2 directory
    // whose children may have the cpu and memory controllers.
    std::string cgroup_root;
    // The ports reserve_port picks from (inclusive): torchrun's default MASTER_PORT and above,
    // below Linux's ephemeral range, so the kernel does not hand them out on its own.
    int first_port = 29500;
    int last_port = 29999;
    // The host ports WorkloadSpec::ports map to (inclusive): Kubernetes' NodePort range.
    int first_endpoint_port = 30000;
    int last_endpoint_port = 32767;
    // Unprivileged uids for workloads (inclusive), one per tenant on the node; 0 and 0 = none:
    // workloads then run as the agent's own user and isolation() is "none". Needs root.
    uint32_t first_uid = 0;
    uint32_t last_uid = 0;
    // With workload uids: RLIMIT_NPROC of each workload, which counts every process of its
    // tenant on the node (a fork bomb stops there); 0 = the agent's own limit.
    int64_t nproc_limit = 4096;
    // Where uids are claimed machine-wide (workload_uids.h), so agents sharing a machine and a
    // range never hand one uid to two tenants.
    std::string uid_claims_dir = "/run/tessera/workload-uids";
    // Start refuses a workload (FailedPrecondition, with isolation_note()) unless isolation() is
    // "uid": for agents inside the server's own process, whose files a workload must not reach.
    bool refuse_unisolated = false;
    // podman, for workloads with an image; "" = this supervisor runs no containers.
    std::string podman = "/usr/bin/podman";
  };

  // Opens the work dir and adopts what earlier runs started: running ones are watched again,
  // ended ones report their exit, unadoptable ones report lost (kExited, lost, reason "agent
  // restarted"). Errors name the path; FailedPrecondition when another supervisor holds it.
  static Result<std::unique_ptr<WorkloadSupervisor>> Open(Options options);
  // Does NOT stop workloads: they outlive the agent by design.
  ~WorkloadSupervisor();
  WorkloadSupervisor(const WorkloadSupervisor&) = delete;
  WorkloadSupervisor& operator=(const WorkloadSupervisor&) = delete;

  // Starts the workload and returns once its process exists. InvalidArgument names a bad field;
  // AlreadyExists when the id was started before (until Forget), even by an earlier agent.
  Status Start(const WorkloadSpec& spec);
  // SIGTERM to the workload's process group now, SIGKILL after `grace`. OK when it has already
  // exited; NotFound for an unknown id. Poll reports kExited once every process is gone.
  Status Stop(const std::string& id, std::chrono::milliseconds grace);
  // Writes the notice {"deadline": RFC 3339, "reason": ...} to $TESSERA_PREEMPT_NOTICE now, and
  // stops the workload at the deadline (SIGTERM, SIGKILL after `grace`).
  Status Preempt(const std::string& id, int64_t deadline_unix_ms, const std::string& reason,
                 std::chrono::milliseconds grace);
  // Lease deadline = now (monotonic) + valid_for, for every workload. When it passes without a
  // renewal, the shims stop every workload (even if this agent is dead). Before the first call,
  // workloads are not fenced. A failure to write is logged: the old deadline then stands.
  void RenewLease(std::chrono::milliseconds valid_for);
  // Every known workload, by id, refreshed from the shims' files.
  std::vector<WorkloadStatus> Poll();
  // Up to max_bytes of the workload's log starting at byte `offset` of its whole output
  // (counting what rotation dropped); *next = the offset after what was returned. An offset older
  // than what is kept starts at the oldest kept byte; one past the end returns "" at the end.
  Result<std::string> ReadLog(const std::string& id, int64_t offset, size_t max_bytes,
                              int64_t* next);
  // CPU seconds each running workload's processes have used (its session's: a bare workload's,
  // or its container's), those alive and the children they reaped; one walk of /proc. Only what
  // a simulated GPU's load follows (Agent::Apply), so it is not read on real nodes.
  std::map<std::string, double> CpuSeconds();
  // Where and as whom a command runs inside workload `id` (an exec session). NotFound for an
  // unknown id; FailedPrecondition unless it runs.
  Result<ExecTarget> ExecTargetOf(const std::string& id);
  // Removes an exited workload's directory (and cgroup), so its id may be started again.
  // FailedPrecondition while it runs; NotFound for an unknown id.
  Status Forget(const std::string& id);

  // Whether cpu_milli and memory_mib are enforced (through cgroup v2), and why not when not.
  bool limits_enforced() const { return limits_enforced_; }
  const std::string& limits_note() const { return limits_note_; }
  // "uid" when each tenant's workloads run under a uid of their own, with the supervisor's files
  // out of their reach; "none" when they run as the agent's user (one tenant at a time may use
  // the node then). isolation_note() says why, e.g. "the agent is not root".
  const std::string& isolation() const { return isolation_; }
  const std::string& isolation_note() const { return isolation_note_; }
  // The uid a workload of `tenant` started now would run as: the one its running work has, else
  // the lowest one no other work here holds (Start skips it still when another agent on the
  // machine has claimed it, or it keeps processes that SIGKILL does not end). -1 when this
  // supervisor runs no workload uids, or every one is held.
  int64_t PlannedUid(const std::string& tenant) const;

 private:
  struct Entry;
  explicit WorkloadSupervisor(Options options);

  void Adopt(const std::string& id);
  void ReadPids(Entry& e) const;
  void Refresh(Entry& e);
  void Finish(Entry& e, const std::string& exit_text);
  void MarkLost(Entry& e, const char* reason);
  Status RequestStop(Entry& e, int64_t term_at_ms, int64_t kill_at_ms, const char* kind);
  Result<Entry*> Find(const std::string& id);
  Result<int> ReservePort(const std::string& id);
  // A free port of the endpoint range for each of spec.ports: (port, host port).
  Result<std::vector<std::pair<int, int>>> ReserveEndpoints(const WorkloadSpec& spec);
  // The uid for a workload of `tenant`: the one its running work already has, else the lowest one
  // no other tenant's workload (running, or ended but not forgotten) holds, emptied of processes.
  Result<int64_t> AssignUid(const std::string& id, const std::string& tenant);
  // The uid of `tenant`'s running work, else -1 with the uids a new workload of `tenant` may not
  // take (other tenants' work, and ended work not forgotten) added to `held`.
  int64_t RunningUidOf(const std::string& tenant, std::set<int64_t>& held) const;
  // After `e` ended: when no other running workload has its uid, every process left of that uid
  // (one that left the process group, say) is killed.
  void ReleaseUid(const Entry& e);
  // The host-wide name of workload `id`'s container: "tessera-<id>-<this agent>".
  std::string ContainerNameOf(const std::string& id) const;
  // Fills `plan` to run spec's image as a container (`podman run` in the shim's place).
  Status PlanContainer(const WorkloadSpec& spec, int64_t uid, const std::string& dir,
                       const std::string& control,
                       const std::vector<std::pair<int, int>>& endpoints, shim::ShimPlan& plan);
  // Kills and removes a container workload's container, whether or not its podman still runs.
  void KillContainerOf(Entry& e);
  Status SetUpIsolation();

  Options options_;
  std::string boot_id_;
  std::string cgroup_root_;  // Where workload cgroups are made; "" when limits are not enforced.
  bool limits_enforced_ = false;
  std::string limits_note_;
  ContainerHost container_host_;
  std::string isolation_ = "none";
  std::string isolation_note_ = "no workload uids were given";
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  int lock_fd_ = -1;  // flock'ed <work_dir>/agent.lock, held while this object lives.
};

}  // namespace tessera::agent
