// The shim: the small process that supervises one workload, in the manner of containerd's shim
// but forked from the agent rather than a binary of its own. LaunchShim double-forks (the middle
// process calls setsid and exits), so the shim is re-parented to init and outlives the agent.
// The shim then forks the workload (/bin/sh -c, a session and process group of its own, output
// into a pipe), copies the pipe into the bounded log, reaps, reads its control files (the stop
// request and the work dir's lease) and signals the process group, and when the main process has
// been reaped and its group is empty writes the `exit` file and exits.
//
// The shim is a child of a possibly multithreaded process that never execs: after fork it may
// only use async-signal-safe calls (open, read, write, rename, poll, waitpid, kill, ...), never
// malloc, iostreams or spdlog. So everything it needs, strings and argv/envp included, is
// prepared in a ShimPlan before the fork, and the helpers marked "async-signal-safe" below use
// only system calls and fixed buffers.
// Thread-safety: LaunchShim forks from the calling thread; the helpers are pure or reentrant.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"

namespace tessera::agent::shim {

// The supervisor's files are in <work_dir>/<id>/.tessera, out of the way of what the workload
// writes to its cwd, <work_dir>/<id>; their names (docs/agent-workloads.md):
inline constexpr char kControlDir[] = ".tessera";
inline constexpr char kStateFile[] = "state";          // The agent: the spec, before fork.
inline constexpr char kPidsFile[] = "pids";            // The shim: its pid and the workload's.
inline constexpr char kStopFile[] = "stop";            // The agent: when to TERM and KILL.
inline constexpr char kExitFile[] = "exit";            // The shim: the exit code and reason.
inline constexpr char kDroppedFile[] = "log.dropped";  // The shim: output bytes it could not keep.
// The agent: the preemption notice, in the workload's cwd (not .tessera).
inline constexpr char kNoticeFile[] = "preempt-notice.json";
inline constexpr char kLogLink[] = "log";         // The shim: a hard link to the newest segment.
inline constexpr char kSegmentPrefix[] = "log.";  // + 20 digits: the segment's first offset.
inline constexpr size_t kSegmentDigits = 20;
// In the work dir itself, named with a '.' so no workload id can take them: the lease, "<boot id>
// <deadline, CLOCK_MONOTONIC ms>", written by RenewLease; and the lock one supervisor holds.
inline constexpr char kLeaseFile[] = "agent.lease";
inline constexpr char kLockFile[] = "agent.lock";

// Everything the shim and the workload need, prepared before the fork.
struct ShimPlan {
  std::string dir;                      // The workload's directory, absolute: its cwd and HOME.
  std::string control_dir;              // dir/.tessera: the shim's cwd.
  std::string lease_path;               // <work_dir>/lease, absolute.
  std::string boot_id;                  // The lease's boot id must match ("" = do not check).
  std::string cgroup_dir;               // The workload's cgroup ("" = none); the workload joins it.
  int64_t log_segment_bytes = 4 << 20;  // Half the log limit: two segments are kept.
  int64_t lease_kill_grace_ms = 2000;
  int max_fd = 1024;  // For closing inherited descriptors where close_range is missing.
  // The workload runs as this uid and gid (no supplementary groups, no new privileges); -1 = as
  // the shim's own user.
  int64_t uid = -1;
  // RLIMIT_NPROC for the workload (soft = hard, set before it drops to `uid`, which cannot raise
  // it); 0 = inherited. It counts every process of the uid, that is of the tenant on this node.
  int64_t nproc_limit = 0;
  std::string exec_path = "/bin/sh";  // What the workload execs, with `args` as its argv.
  // A container's workload is `podman run`, whose container outlives a SIGKILL to it: podman's
  // conmon writes the host pid of the container's init here, and where the shim would kill the
  // group it also kills that pid (ending the container's pid namespace). "" = not a container.
  std::string container_pid_file;
  std::vector<std::string> args;  // /bin/sh's argv.
  std::vector<std::string> env;   // NAME=value.

  // Fills the pointer arrays from args and env; call after the last change to them.
  void Seal();
  std::vector<char*> argv;   // nullptr-terminated, into args.
  std::vector<char*> envp;   // nullptr-terminated, into env.
  std::string cgroup_procs;  // cgroup_dir + "/cgroup.procs" (Seal).
  std::string cgroup_kill;   // cgroup_dir + "/cgroup.kill" (Seal).
};

struct ShimPids {
  pid_t shim_pid = 0;
  pid_t pid = 0;  // The workload's main process, also its process group and session id.
};

// In a child forked with its standard descriptors set: every other descriptor closed, signals
// back to their defaults, then `plan`'s directory entered, its cgroup joined, its nproc limit
// set and its uid taken (no groups, no new privileges), and its program executed. Exits 126
// (saying why on stderr) when it cannot become the workload, 127 when the program cannot run.
// Async-signal-safe.
[[noreturn]] void BecomeWorkload(const ShimPlan& plan);

// Forks the shim and waits (up to 10 s) until it has started the workload and written the pids
// file. An error means nothing runs, except Unavailable, which means the shim's fate is unknown.
Result<ShimPids> LaunchShim(const ShimPlan& plan);

// What /proc/<pid>/stat says of a process. Async-signal-safe.
struct ProcStat {
  char state = 0;     // R, S, D, Z (zombie), X (dead), ...
  pid_t session = 0;  // Field 6.
  // Fields 14-17, in clock ticks: its own CPU time and that of the children it has reaped.
  uint64_t cpu_ticks = 0;
  uint64_t start_time = 0;  // Field 22: clock ticks after boot; guards against pid reuse.
};
bool ReadProcStat(pid_t pid, ProcStat* out);

// Calls visit(pid) for each process /proc lists, until it returns false. Not async-signal-safe.
void ForEachProcess(const std::function<bool(pid_t)>& visit);

// True when `pid` is a live (not zombie) process that started at `start_time`.
bool ProcAlive(pid_t pid, uint64_t start_time);

// CLOCK_MONOTONIC in milliseconds: system-wide, so the agent and the shims agree on it.
int64_t MonotonicMs();

// "log." followed by `base` in 20 digits, NUL-terminated, into out[32]. Async-signal-safe.
void SegmentName(int64_t base, char* out);

}  // namespace tessera::agent::shim
