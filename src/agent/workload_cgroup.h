// CPU and memory limits for workloads through cgroup v2: choosing the cgroup under which each
// workload gets a child (a configured one, or one made beside the agent in its own cgroup), and
// making that child with cpu.max and memory.max. Where limits cannot be enforced (no cgroup2, no
// permission, the controllers not delegated) the choice says why, in words for limits_note().
// Thread-safety: ChooseCgroupRoot may move the calling process (see below); call it from one
// thread at start-up. MakeWorkloadCgroup is safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace tessera::agent {

struct CgroupChoice {
  std::string root;  // Where workload cgroups are made; "" when limits cannot be enforced.
  std::string note;  // Where limits are enforced, or why they are not.
};

// `option` is Options::cgroup_root: "none" (do not try), a cgroup v2 directory, or "" (detect:
// the agent's own cgroup v2 directory D gets D/tessera-workloads). cgroup v2 lets a cgroup that
// holds processes delegate no controllers, so when D holds the agent (and is not the root),
// detection first moves this process into D/tessera-agent, as a systemd unit with Delegate=yes
// is expected to do.
CgroupChoice ChooseCgroupRoot(const std::string& option);

// Creates `dir` (or reuses it) and writes cpu.max ("<quota> 100000", quota = cpu_milli * 100 us,
// at least 1000) and memory.max (bytes); 0 means "max". Errors name the file.
Status MakeWorkloadCgroup(const std::string& dir, int64_t cpu_milli, int64_t memory_mib);

}  // namespace tessera::agent
