// Container start latency on this node (issue 24): `podman run --rm` with the agent's whole flag
// set (BuildPodmanRun: runc, --init, user namespace, limits, env file), image cached, timed from
// exec to exit of /bin/true and from exec to the moment the command runs; and, for comparison,
// the same container through podman's REST service, and `runc run` of /bin/true on an OCI bundle
// prepared once. Each benchmark reports p50 and p95 over
// its iterations as counters.
// Needs root, podman, runc and busybox-static (scripts/bootstrap.sh); skips otherwise.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <httplib.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/container.h"
#include "agent/container_exec.h"
#include "agent/container_test_support.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

using Clock = std::chrono::steady_clock;

void ReportPercentiles(benchmark::State& state, const std::vector<double>& ms) {
  if (ms.empty()) return;
  state.counters["p50_ms"] = tessera::testing::Percentile(ms, 0.50);
  state.counters["p95_ms"] = tessera::testing::Percentile(ms, 0.95);
  state.counters["max_ms"] = tessera::testing::Percentile(ms, 1.0);
}

// The run of one container: its spec, argv and control files, with the image it runs.
struct BenchContainer {
  explicit BenchContainer(const std::vector<std::string>& args)
      : image("localhost/" + testing_support::UniqueName("tessera-bench") + ":1") {
    host = DetectContainerHost();
    files = ControlFilesIn(dir.path() + "/ctl");
    spec.name = testing_support::UniqueName("bench");
    spec.image = image.reference();
    spec.image_has_shell = false;
    spec.args = args;
    spec.env = {{"TESSERA_INSTANCE_ID", "inst-bench"}, {"CUDA_VISIBLE_DEVICES", ""}};
    spec.cpu_milli = 1000;
    spec.memory_mib = 256;
    spec.pids_limit = 256;
    spec.work_dir = dir.path();
    spec.uid = spec.gid = 1999000903;
  }
  // Builds the argv for `network` (0 none, 1 private) and `user` (0 namespace, 1 host uid).
  std::string Build(int64_t network, int64_t user) {
    spec.network = network == 0 ? ContainerNetwork::kNone : ContainerNetwork::kPrivate;
    spec.user_mode = user == 0 ? DefaultUserMode(host) : ContainerUserMode::kHostUid;
    if (!image.ok()) return image.error();
    auto built = BuildPodmanRun(spec, host, files);
    if (!built.ok()) return built.status().ToString();
    run = *built;
    return "";
  }
  std::string Label() const {
    return std::string(spec.network == ContainerNetwork::kNone ? "network none" : "bridge") +
           (spec.user_mode == ContainerUserMode::kUserNamespace ? ", userns=auto" : ", host uid");
  }

  testing_support::BusyboxImage image;
  tessera::testing::TempDir dir;
  ContainerHost host;
  ContainerControlFiles files;
  ContainerSpec spec;
  ContainerRun run;
};

// Runs `command` under `podman run` once per iteration, timing each run with `time_ms` (from the
// run's own start and its output). Args: network (0 none, 1 private bridge), user (0 user
// namespace, 1 host uid).
template <typename TimeMs>
void TimePodmanRuns(benchmark::State& state, std::vector<std::string> command, TimeMs time_ms) {
  std::string error = testing_support::PodmanMissing();
  BenchContainer c(std::move(command));
  if (error.empty()) error = c.Build(state.range(0), state.range(1));
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  std::vector<double> ms;
  for (auto _ : state) {
    if (!PrepareContainerRun(c.run, c.files).ok()) {
      state.SkipWithError("cannot prepare the control files");
      break;
    }
    const auto start = Clock::now();
    const double start_s = tessera::testing::BootSeconds();
    auto r = RunCommand(c.run.argv);
    if (!r.ok() || r->exit_code != 0) {
      state.SkipWithError(r.ok() ? r->err.c_str() : "podman did not start");
      break;
    }
    const double took = time_ms(start, start_s, r->out);
    state.SetIterationTime(took / 1000);
    ms.push_back(took);
  }
  ReportPercentiles(state, ms);
  state.SetLabel(c.Label());
}

// Exec of `podman run` to its exit: create, start, the command, and --rm's removal.
void BM_PodmanRunTrue(benchmark::State& state) {
  TimePodmanRuns(state, {"/bin/true"}, [](Clock::time_point start, double, const std::string&) {
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  });
}
BENCHMARK(BM_PodmanRunTrue)
    ->Args({0, 0})
    ->Args({0, 1})
    ->Args({1, 0})
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// Exec of `podman run` to the moment the command runs (create to running): the command prints
// /proc/uptime, the boot-time clock the host and the container share (no time namespace), to
// 10 ms (busybox's date has no nanoseconds).
void BM_PodmanRunToCommand(benchmark::State& state) {
  TimePodmanRuns(state, {"/bin/cat", "/proc/uptime"},
                 [](Clock::time_point, double start_s, const std::string& out) {
                   return (std::stod(out) - start_s) * 1000;
                 });
}
BENCHMARK(BM_PodmanRunToCommand)
    ->Args({0, 0})
    ->Args({1, 0})
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// The same container through podman's REST service (`podman system service` on a unix socket, the
// libpod API): create, start, wait for the exit and remove, timed from the create request to the
// removal's answer; the service is started once, outside the timing.
void BM_PodmanServiceRunTrue(benchmark::State& state) {
  std::string error = testing_support::PodmanMissing();
  BenchContainer c({"/bin/true"});
  if (error.empty()) error = c.Build(0, 1);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  const std::string socket = c.dir.path() + "/podman.sock";
  tessera::testing::ChildProcess service(
      {"/usr/bin/podman", "system", "service", "--time=0", "unix://" + socket},
      c.dir.path() + "/service.log");
  httplib::Client api(socket);
  api.set_address_family(AF_UNIX);
  // Go's server refuses the socket's path as a Host header.
  api.set_default_headers({{"Host", "podman"}});
  api.set_read_timeout(60);
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    const auto res = api.Get("/v4.0.0/libpod/_ping");
    up = res && res->status == 200;
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!up) {
    state.SkipWithError("podman system service did not answer");
    return;
  }
  const nlohmann::json create = {
      {"image", c.spec.image},
      {"command", {"/bin/true"}},
      {"netns", {{"nsmode", "none"}}},
      {"user", fmt::format("{}:{}", c.spec.uid, c.spec.gid)},
      {"no_new_privileges", true},
      // As the CLI's --ulimit: a container's rlimits may not exceed the caller's.
      {"r_limits",
       {{{"type", "NOFILE"}, {"soft", c.spec.nofile_limit}, {"hard", c.spec.nofile_limit}},
        {{"type", "NPROC"}, {"soft", c.spec.nproc_limit}, {"hard", c.spec.nproc_limit}}}},
      {"resource_limits", {{"pids", {{"limit", c.spec.pids_limit}}}}}};
  std::vector<double> ms;
  for (auto _ : state) {
    const auto start = Clock::now();
    const auto made =
        api.Post("/v4.0.0/libpod/containers/create", create.dump(), "application/json");
    if (!made || made->status != 201) {
      state.SkipWithError(made ? made->body.c_str() : "create: no answer");
      break;
    }
    const std::string id = nlohmann::json::parse(made->body).value("Id", "");
    const std::string at = "/v4.0.0/libpod/containers/" + id;
    const auto started = api.Post(at + "/start");
    const auto waited = api.Post(at + "/wait?condition=exited");
    const auto removed = api.Delete(at + "?force=true");
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    const std::string why = !started                     ? "start: no answer"
                            : started->status != 204     ? "start: " + started->body
                            : !waited                    ? "wait: no answer"
                            : waited->body.rfind("0", 0) ? "wait: exit " + waited->body
                            : !removed                   ? "remove: no answer"
                                                         : "";
    if (!why.empty()) {
      state.SkipWithError(why.c_str());
      break;
    }
    state.SetIterationTime(took / 1000);
    ms.push_back(took);
  }
  ReportPercentiles(state, ms);
  state.SetLabel("REST service, network none, host uid");
}
BENCHMARK(BM_PodmanServiceRunTrue)->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);

// runc alone on a bundle made once: the floor under podman's own work (image, storage, conmon).
void BM_RuncRunTrue(benchmark::State& state) {
  const std::string missing = testing_support::PodmanMissing();
  if (!missing.empty()) {
    state.SkipWithError(missing.c_str());
    return;
  }
  tessera::testing::TempDir bundle;
  const std::string rootfs = bundle.path() + "/rootfs";
  testing_support::RunTool({"mkdir", "-p", rootfs + "/bin", rootfs + "/proc", rootfs + "/dev"});
  testing_support::RunTool({"cp", "/bin/busybox", rootfs + "/bin/busybox"});
  testing_support::RunTool({"ln", "-s", "busybox", rootfs + "/bin/true"});
  if (testing_support::RunTool({"runc", "spec", "--bundle", bundle.path()}).exit_code != 0) {
    state.SkipWithError("runc spec failed");
    return;
  }
  std::ifstream in(bundle.File("config.json"));
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  config["process"]["args"] = {"/bin/true"};
  config["process"]["terminal"] = false;
  config["root"]["readonly"] = true;
  bundle.Write("config.json", config.dump());
  std::vector<double> ms;
  int n = 0;
  for (auto _ : state) {
    const std::string id = testing_support::UniqueName("tessera-runc-bench") + std::to_string(n++);
    const auto start = Clock::now();
    const ExecResult r = testing_support::RunTool({"runc", "run", "--bundle", bundle.path(), id});
    const double took = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (r.exit_code != 0) {
      state.SkipWithError(r.err.c_str());
      break;
    }
    state.SetIterationTime(took / 1000);
    ms.push_back(took);
  }
  ReportPercentiles(state, ms);
}
BENCHMARK(BM_RuncRunTrue)->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera::agent

BENCHMARK_MAIN();
