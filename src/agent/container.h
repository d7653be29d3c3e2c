// A tenant's workload as an OCI container: the one `podman run` command line that runs it in the
// foreground (so the workload shim can supervise it like any process), the files that command
// needs in an agent-owned control directory, and the way to kill the container outright when
// that foreground process is gone.
//
// Why the podman CLI with runc (issue 24): crun refuses this machine kind's hybrid cgroups, runc
// works; one foreground `podman run` fits the shim as it is (fork, execve, SIGTERM to stop, the
// exit code is the instance's), where the REST service would add a root daemon and runc on a
// hand-made bundle would re-implement image unpacking, CDI and user namespaces.
//
// What the command does, and why:
// - `--init` (catatonit) as the container's pid 1 forwards SIGTERM to the command, which as pid 1
//   would ignore it; podman's own --sig-proxy forwards the shim's SIGTERM to the container, and
//   `podman run` exits with the command's exit code (143 after SIGTERM, 137 after SIGKILL);
//   125 means podman itself failed, 126 the command could not run, 127 it was not found.
// - `--log-driver none` keeps the command's output on podman's stdout and stderr, which are the
//   shim's pipes; nothing is stored twice.
// - `--pidfile`: conmon writes the host pid of the container's init there. SIGKILL to it ends the
//   container's pid namespace, so KillContainer works even when `podman run` was SIGKILLed.
// - Environment values go through `--env-file` (0600 in the control directory), never argv,
//   which every local user can read in /proc.
// - `--pull never`: a pull is a separate, visible step (container_image.h).
//
// Thread-safety: the functions are pure or act on their own files; any thread may call them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/result.h"

namespace tessera::agent {

enum class ContainerUserMode {
  // `--userns=auto`: the container gets a range of host uids of its own from /etc/subuid's
  // "containers" entry; root inside is an unprivileged uid outside, and no two running
  // containers share a range.
  kUserNamespace,
  // `--user UID:GID`: the command runs as this distinct unprivileged host uid, without a user
  // namespace (for nodes without subuid ranges).
  kHostUid,
};

enum class ContainerNetwork {
  kNone,     // Loopback only; the fastest start (no network set-up).
  kPrivate,  // Podman's default bridge: a network namespace with NAT to the outside.
  kHost,     // The node's own network stack (multi-node rendezvous); it reaches the node's ports.
};

struct ContainerSpec {
  // The container's name on the host, [a-z0-9][a-z0-9_.-]{0,127}: the agent names it
  // "tessera-<instance>-<agent>" (WorkloadSupervisor::ContainerNameOf).
  std::string name;
  std::string image;  // A reference already present on the node: the run never pulls.
  // With a shell, `command` runs as `sh -c command`; without, `args` is the exec-form argv.
  // Either empty: the image's own entrypoint and command.
  bool image_has_shell = true;
  std::string command;
  std::vector<std::string> args;
  // Names [A-Za-z_][A-Za-z0-9_]*; values without newlines (the env file is one line each).
  std::vector<std::pair<std::string, std::string>> env;
  ContainerUserMode user_mode = ContainerUserMode::kUserNamespace;
  uint32_t uid = 0;  // kHostUid: the workload's own uid and gid; never 0.
  uint32_t gid = 0;
  int64_t cpu_milli = 0;   // 0 = no limit.
  int64_t memory_mib = 0;  // 0 = no limit; swap is not allowed beyond it.
  int64_t pids_limit = 4096;
  // Rlimits must not exceed the agent's own (it lacks CAP_SYS_RESOURCE), so they are set.
  int64_t nofile_limit = 1024;
  int64_t nproc_limit = 4096;
  // A host directory mounted read-write at /workspace (also the working directory), chowned to
  // the container's user by podman (`U`); "" = none.
  std::string work_dir;
  // Host directories mounted read-write at container paths (the tenant's volumes): (host, path).
  std::vector<std::pair<std::string, std::string>> binds;
  // Ports published on the node's interfaces: (host port, container port). Only with the
  // private network.
  std::vector<std::pair<int, int>> publish;
  std::vector<std::string> cdi_devices;   // Fully qualified, e.g. "nvidia.com/gpu=0".
  std::vector<std::string> device_nodes;  // Host device nodes given as they are, e.g. "/dev/fuse".
  ContainerNetwork network = ContainerNetwork::kPrivate;
};

// What the node's podman can do; DetectContainerHost fills it.
struct ContainerHost {
  // A full path: the shim execve's the argv without a PATH search.
  std::string podman = "/usr/bin/podman";
  std::string runtime = "runc";
  bool cpu_limits = false;     // A cgroup cpu controller: --cpus is enforced.
  bool memory_limits = false;  // A cgroup memory controller: --memory is enforced.
  bool pids_limits = false;    // A cgroup pids controller: --pids-limit is enforced.
  bool userns_auto = false;    // /etc/subuid and /etc/subgid have a "containers" range.
  bool init = false;           // catatonit is installed for --init.
};

// The files of one container's run, in an agent-owned 0700 directory out of the tenant's reach.
struct ContainerControlFiles {
  std::string dir;
  std::string pid_file;  // The host pid of the container's init (written by conmon).
  std::string cid_file;  // The container id (written by podman).
  std::string env_file;  // The environment (written 0600 by PrepareContainerRun).
};

// The control files' paths in `dir`.
ContainerControlFiles ControlFilesIn(const std::string& dir);
// The host pid of a container's init, as its pid file says once the container runs; nullopt
// before (no file, or nothing in it yet) or for anything but a pid above 1. A pid file outlives
// its process: who acts on the pid checks it is still the container's (KillContainer does).
std::optional<pid_t> ReadContainerPid(const std::string& pid_file);

struct ContainerRun {
  std::vector<std::string> argv;  // One foreground `podman run ...`.
  std::string container_name;     // The spec's name.
  std::string env_file_content;   // What PrepareContainerRun writes to the env file.
  // What the node cannot enforce, in words, e.g. "memory limit not enforced: no memory cgroup
  // controller" (the caller reports these; nothing is claimed that is not enforced).
  std::vector<std::string> notes;
};

// Builds the run from the spec, the node's abilities and the control files. Pure. InvalidArgument
// names the bad field; FailedPrecondition when kUserNamespace is asked of a node without ranges.
Result<ContainerRun> BuildPodmanRun(const ContainerSpec& spec, const ContainerHost& host,
                                    const ContainerControlFiles& files);

// Before each execution of run.argv: makes the control directory (0700) when missing, removes a
// previous run's pid and cid files (podman refuses to overwrite a cid file) and writes the env
// file 0600. Errors name the path. A container of the same name left by an earlier run must be
// gone first (KillContainer), or podman refuses the name (exit 125).
Status PrepareContainerRun(const ContainerRun& run, const ContainerControlFiles& files);

// Kills the container now and removes it, whether or not its `podman run` still lives: SIGKILL
// to the init pid from the pid file (only when /proc says that pid is still in the container's
// cgroup, so a reused pid is never hit), then `podman rm -f` by name, within `deadline`. Removes
// the pid, cid and env files. OK when no such container exists (any more).
Status KillContainer(const ContainerHost& host, const std::string& container_name,
                     const ContainerControlFiles& files,
                     std::chrono::milliseconds deadline = std::chrono::seconds(30));

// Whether `subid_text` (the contents of /etc/subuid or /etc/subgid) gives "containers" a range.
bool HasContainersRange(const std::string& subid_text);

// Reads what the node can do: the cgroup controllers under `cgroup_root` (v1 or v2), the subid
// files, catatonit. Paths are parameters so tests can point them at a made-up tree.
ContainerHost DetectContainerHost(const std::string& cgroup_root = "/sys/fs/cgroup",
                                  const std::string& subuid = "/etc/subuid",
                                  const std::string& subgid = "/etc/subgid");

// kUserNamespace when the host has ranges for it, else kHostUid.
ContainerUserMode DefaultUserMode(const ContainerHost& host);

}  // namespace tessera::agent
