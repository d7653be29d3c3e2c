// How long the agent's workload supervisor takes to start a bare process (docs/agent-workloads.md):
// from Start() until the workload's process exists under its shim, p50 and p95 over N starts
// (default 50), as the agent's user (isolation none) and, when run as root, as a workload uid of
// the tenant's own (isolation uid: a uid claimed, its leftovers checked, the directory chowned,
// the process dropped to it). Each workload is `sleep 30`; all are stopped after.
// Usage: workload_bench [--starts N].
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/workload.h"
#include "agent/workload_uids.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using tessera::testing::Percentile;

using Clock = std::chrono::steady_clock;

int Run(const char* what, agent::WorkloadSupervisor::Options options, int starts) {
  auto sup = agent::WorkloadSupervisor::Open(options);
  if (!sup.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, sup.status().ToString().c_str());
    return 1;
  }
  std::vector<double> ms;
  for (int i = 0; i < starts; ++i) {
    agent::WorkloadSpec spec;
    spec.id = fmt::format("w-{}", i);
    spec.tenant = fmt::format("tenant-{}", i % 4);
    spec.command = "sleep 30";
    const auto t0 = Clock::now();
    if (Status s = (*sup)->Start(spec); !s.ok()) {
      std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
      return 1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  std::printf("%-34s %d starts, p50 %.1f ms, p95 %.1f ms (%s)\n", what, starts, Percentile(ms, 0.5),
              Percentile(ms, 0.95), (*sup)->isolation().c_str());
  for (const auto& st : (*sup)->Poll()) (void)(*sup)->Stop(st.id, std::chrono::milliseconds(0));
  const auto end = Clock::now() + std::chrono::seconds(10);
  for (bool running = true; running && Clock::now() < end;) {
    running = false;
    for (const auto& st : (*sup)->Poll()) {
      running = running || st.phase == agent::WorkloadPhase::kRunning;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const auto& st : (*sup)->Poll()) (void)(*sup)->Forget(st.id);
  return 0;
}

int Main(int argc, char** argv) {
  int starts = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--starts") == 0) starts = std::max(1, std::atoi(argv[i + 1]));
  }
  testing::TempDir dir;
  agent::WorkloadSupervisor::Options options;
  options.cgroup_root = "none";
  options.work_dir = dir.File("plain");
  if (Run("bare process, agent's user:", options, starts) != 0) return 1;
  if (geteuid() != 0) {
    std::printf("bare process, workload uid:         skipped (needs root)\n");
    return 0;
  }
  auto uids = agent::ParseUidRange(agent::kDefaultWorkloadUids);
  options.work_dir = dir.File("uids");
  options.first_uid = uids->first;
  options.last_uid = uids->last;
  return Run("bare process, workload uid:", options, starts);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
