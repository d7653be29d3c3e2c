// What workload.cc and workload_status.cc share: a workload's entry in its supervisor, and the
// helpers both use. Internal to src/agent/.
#pragma once

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/container_exec.h"
#include "agent/workload.h"
#include "agent/workload_shim.h"
#include "common/result.h"

namespace tessera::agent {

struct WorkloadSupervisor::Entry {
  std::string dir;      // The workload's cwd and HOME.
  std::string control;  // The supervisor's files: <work_dir>/.control/<id> (or dir/.tessera).
  const std::string& ControlDir() const { return control; }
  std::string File(const char* name) const { return ControlDir() + "/" + name; }
  std::string tenant;
  int64_t uid = -1;       // The uid it runs as; -1: the agent's own.
  std::string container;  // A container workload's container name; "" for a bare process.
  std::vector<std::string> volumes;  // Its volumes' directories on the node.
  bool container_killed = false;
  WorkloadStatus status;
  std::string boot_id;     // The boot the workload started in (from `state`).
  std::string cgroup_dir;  // "" when it has none.
  bool pids_known = false;
  shim::ShimPids pids;
  uint64_t shim_start = 0;
  uint64_t pid_start = 0;
  // The shim is gone but the workload was not: it is being killed, and reported lost after.
  bool killing_orphan = false;
  std::string lost_reason;
  int64_t term_at = INT64_MAX;  // The pending stop, CLOCK_MONOTONIC ms.
  int64_t kill_at = INT64_MAX;
};

namespace workload_internal {

inline constexpr int64_t kMaxGraceMs = int64_t{366} * 24 * 3600 * 1000;  // A year: no overflow.
inline constexpr int64_t kMaxUnixMs = 253'402'300'799'999;  // 9999-12-31T23:59:59.999Z.

// Now, in Unix milliseconds.
int64_t UnixMs();
// Removes a workload's directory. One a workload uid owns is emptied as that uid: its processes
// may still run (another of the tenant's workloads) and swap a directory for a symlink to the
// agent's files while root walks it.
Status RemoveWorkspace(const std::string& dir);
// A container workload's run files: its control dir's `container/`.
ContainerControlFiles ContainerFilesIn(const std::string& control);

}  // namespace workload_internal
}  // namespace tessera::agent
