// Create to running through the whole stack (issue 24): a real `tessera server` on loopback and
// one real `tessera agent` process (sim GPUs, root, workload uids), instances created one at a
// time and each awaited until running, then deleted. Two kinds: a bare process (`sleep`), and a
// container of a cached image (a busybox-static image imported into podman's store,
// `pull_policy: never`). Each start is measured twice: the server's `start_latency_seconds`
// (enqueued to the agent's report that it runs) and as a client sees it (POST to the first GET
// that says running, polled every 2 ms); and when the command itself ran (it prints /proc/uptime,
// to 10 ms, compared with the boot-time clock at the POST). Prints p50, p95 and max of each.
// A third kind is a MIG slice on a second node whose agent runs `--backend nvml --manage-mig` on
// the fake NVML library (an A100 80GB in MIG mode): each start needs a new MIG device, made at
// the start slice the server granted, and each delete destroys it. Every instance is placed at
// its create on an idle node, so the server's figure is grant to running. The fake makes a
// device at once; the driver's own creation time is not in it (unknown until measured on
// hardware).
// Usage: start_bench [--starts N] [--only bare|container|mig]. Needs root; the container kind
// also podman, runc and busybox-static (scripts/bootstrap.sh), and is skipped without them.
#include <fmt/format.h>
#include <httplib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/container_test_support.h"
#include "bench_stack.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using tessera::testing::BootSeconds;
using tessera::testing::Percentile;

using Clock = std::chrono::steady_clock;
using nlohmann::json;
namespace support = agent::testing_support;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b7";

using bench::Call;

struct Samples {
  std::vector<double> server_ms;
  std::vector<double> client_ms;
  std::vector<double> command_ms;
};

// Creates `starts` instances one at a time from `body`, each awaited until running and then
// deleted and awaited until it ended.
Samples Run(httplib::Client& api, const std::string& tenant, const json& body, int starts) {
  Samples s;
  for (int i = 0; i < starts; ++i) {
    const auto t0 = Clock::now();
    const double boot0 = BootSeconds();
    const json made = Call(api, "POST", "/v1/instances", tenant, body);
    const std::string id = made.value("id", "");
    if (id.empty()) {
      std::fprintf(stderr, "create failed: %s\n", made.dump().c_str());
      break;
    }
    json now;
    for (;;) {
      now = Call(api, "GET", "/v1/instances/" + id, tenant);
      const std::string state = now.value("state", "");
      if (state == "running") break;
      if (state == "failed" || state == "terminated" || state == "succeeded" ||
          Clock::now() - t0 > std::chrono::seconds(60)) {
        std::fprintf(stderr, "instance %s: %s\n", id.c_str(), now.dump().c_str());
        return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    s.client_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    s.server_ms.push_back(now.value("start_latency_seconds", 0.0) * 1000);
    // The command's first line is the uptime at which it ran (to 10 ms).
    for (int tries = 0; tries < 2000; ++tries) {
      httplib::Headers h = {{"Authorization", "Bearer " + tenant}};
      auto log = api.Get("/v1/instances/" + id + "/logs", h);
      if (log && log->status == 200 && !log->body.empty()) {
        s.command_ms.push_back((std::stod(log->body) - boot0) * 1000);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    Call(api, "DELETE", "/v1/instances/" + id, tenant);
    while (Call(api, "GET", "/v1/instances/" + id, tenant).value("state", "") != "terminated") {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return s;
}

void Print(const char* what, const Samples& s) {
  std::printf("%-34s %3zu starts  server p50 %7.1f ms  p95 %7.1f ms  max %7.1f ms\n", what,
              s.server_ms.size(), Percentile(s.server_ms, 0.5), Percentile(s.server_ms, 0.95),
              Percentile(s.server_ms, 1.0));
  std::printf("%-34s %3s          client p50 %7.1f ms  p95 %7.1f ms  max %7.1f ms\n", "", "",
              Percentile(s.client_ms, 0.5), Percentile(s.client_ms, 0.95),
              Percentile(s.client_ms, 1.0));
  std::printf("%-34s %3zu          command p50 %6.1f ms  p95 %7.1f ms  max %7.1f ms\n", "",
              s.command_ms.size(), Percentile(s.command_ms, 0.5), Percentile(s.command_ms, 0.95),
              Percentile(s.command_ms, 1.0));
}

int Main(int argc, char** argv) {
  int starts = 50;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--starts") starts = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--only") only = argv[i + 1];
  }
  auto stack = bench::Stack::Start("start_bench", kAdmin, 8);
  if (!stack) return geteuid() == 0 ? 1 : 0;
  testing::TempDir& dir = stack->dir;
  testing::ServerProcess& server = stack->server;
  httplib::Client& api = *stack->api;
  const std::string& tenant = stack->tenant;
  const json shape = {{"billing", "on_demand"},
                      {"gpu_model", "H100-80GB"},
                      {"gpus", 1},
                      {"vcpus", 2},
                      {"memory_mib", 4096},
                      {"command", "cat /proc/uptime; exec sleep 600"}};
  std::printf("create to running, one at a time, on one node (%d starts each)\n", starts);
  if (only.empty() || only == "bare") {
    Print("bare process (workload uid):", Run(api, tenant, shape, starts));
  }
  if (only.empty() || only == "mig") {
#ifdef TESSERA_FAKE_NVML_DIR
    const std::string mig_token =
        Call(api, "POST", "/v1/nodes", kAdmin, {{"name", "mig-01"}}).value("token", "");
    const json nvml = {{"gpus",
                        {{{"name", "NVIDIA A100-SXM4-80GB"},
                          {"uuid", fmt::format("GPU-a1000000-0000-0000-0000-{:012x}", getpid())},
                          {"memory_mib", 81920},
                          {"mig", true},
                          {"mig_model", "A100-80GB"}}}}};
    const std::string config = dir.Write("nvml.json", nvml.dump());
    testing::ChildProcess mig_agent(
        {TESSERA_BIN, "agent", "--server", server.url(), "--token-file",
         testing::WritePrivateFile(dir.File("mig.token"), mig_token), "--backend", "nvml",
         "--work-dir", dir.File("mig-work"), "--cgroup-root", "none"},
        dir.File("mig-agent.log"),
        {{"LD_LIBRARY_PATH", TESSERA_FAKE_NVML_DIR},
         {"TESSERA_FAKE_NVML_CONFIG", config},
         {"TESSERA_FAKE_NVML_STATE", dir.File("nvml-state.json")}});
    bool ready = false;
    for (int i = 0; i < 200 && !ready; ++i) {
      for (const json& n : Call(api, "GET", "/v1/nodes", kAdmin).value("nodes", json::array())) {
        ready |= n["id"] == "mig-01" && n["state"] == "ready";
      }
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    json slice = shape;
    slice.erase("gpus");
    slice["gpu_model"] = "A100-80GB";
    slice["mig_profile"] = "3g.40gb";
    Print("MIG slice, a new device each start:", Run(api, tenant, slice, starts));
#else
    std::printf("MIG slice: skipped: built without the fake NVML library (the tests)\n");
#endif
  }
  if (only.empty() || only == "container") {
    const std::string missing = support::PodmanMissing();
    if (!missing.empty()) {
      std::printf("container: skipped: %s\n", missing.c_str());
      return 0;
    }
    support::BusyboxImage image("localhost/" + support::UniqueName("tessera-start-bench") + ":1");
    if (!image.ok()) {
      std::fprintf(stderr, "image: %s\n", image.error().c_str());
      return 1;
    }
    json body = shape;
    body["image"] = image.reference();
    body["pull_policy"] = "never";
    Print("container, cached image:", Run(api, tenant, body, starts));
  }
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
