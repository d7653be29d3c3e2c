// Benchmark of declarative stacks (docs/stacks.md) against the real server on loopback: a stack
// of N instances (default 500, the most a stack holds), each round
//   1. the plan of the new stack (N creates),
//   2. its apply (N instances made and recorded, one operation on the core thread),
//   3. the plan of the converged stack (N objects compared with the server, nothing to do),
//   4. its destroy.
// Each figure is the server's answer time as the client sees it (the request's round trip), the
// median over the rounds. After an apply it waits until every instance runs, after a destroy
// until none is stopping, and then --settle seconds more (default 1), so each figure is the
// stack's own work rather than a wait behind the agents' reports. Usage: stacks_bench [--objects N]
// [--rounds K] [--settle S].
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_stack.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using testing::Percentile;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b2";

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "stacks_bench: %s\n", what.c_str());
  std::exit(1);
}

// One request; its answer and how long it took, in milliseconds. An error answer ends the run.
json Timed(httplib::Client& c, const std::string& token, const std::string& method,
           const std::string& path, const json& body, double& ms) {
  const auto start = Clock::now();
  json answer = bench::Call(c, method, path, token, body);
  ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!answer.is_object() || answer.contains("error")) {
    Die(fmt::format("{} {}: {}", method, path, answer.dump().substr(0, 300)));
  }
  return answer;
}

// Waits until `count` of the tenant's instances read `state` (at most a minute), then `settle`
// seconds more: the agents' start or stop reports are read by then.
void AwaitInstances(httplib::Client& c, const std::string& token, const char* state, size_t count,
                    int settle) {
  for (int i = 0; i < 600; ++i) {
    const json list =
        bench::Call(c, "GET", fmt::format("/v1/instances?state={}&limit=1000", state), token);
    if (list.value("instances", json::array()).size() == count) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::seconds(settle));
}

json Objects(int n) {
  json objects = json::array();
  for (int i = 0; i < n; ++i) {
    objects.push_back({{"kind", "instance"},
                       {"name", fmt::format("w{:04d}", i)},
                       {"billing", "spot"},
                       {"gpu_model", "L40S-48GB"},
                       {"milli_gpu", 100},
                       {"vcpus", 1},
                       {"memory_mib", 1024},
                       {"command", "sleep 600"},
                       {"labels", {{"idx", std::to_string(i)}}}});
  }
  return {{"objects", std::move(objects)}};
}

int Run(int argc, char** argv) {
  int objects = 500, rounds = 5, settle = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--objects") {
      objects = std::atoi(argv[i + 1]);
    } else if (flag == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else if (flag == "--settle") {
      settle = std::atoi(argv[i + 1]);
    } else {
      Die("unknown flag " + flag + " (--objects N, --rounds K, --settle S)");
    }
  }
  if (objects < 1 || objects > 500 || rounds < 1 || settle < 0) {
    Die("--objects 1..500, --rounds >= 1, --settle >= 0");
  }
  testing::TempDir dir;
  const std::string fleet = dir.Write("fleet.json", R"({"name": "bench", "shapes": [
    {"name": "l40s", "count": 100, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"}]})");
  testing::ServerProcess server;
  server.SetBinary(TESSERA_BIN);
  if (!server.Start({"--data", dir.File("data"), "--fleet", fleet, "--sim-agents"}, kAdmin)) {
    Die("the server did not start:\n" + server.output());
  }
  server.DiscardOutput();
  httplib::Client c(server.url());
  c.set_read_timeout(120);
  double ms = 0;
  const json tenant_body = {{"name", "bench"}, {"quota", {{"gpus", 1e6}}}};
  const std::string token = Timed(c, kAdmin, "POST", "/v1/tenants", tenant_body, ms)["token"];
  const json body = Objects(objects);
  std::vector<double> plan_new, apply, plan_done, destroy;
  for (int r = 0; r < rounds; ++r) {
    const json plan = Timed(c, token, "POST", "/v1/stacks/bench/plan", body, ms);
    plan_new.push_back(ms);
    if (plan["counts"].value("create", 0) != objects) Die("the plan does not create them all");
    json request = body;
    request["plan_digest"] = plan["digest"];
    const json applied = Timed(c, token, "POST", "/v1/stacks/bench/apply", request, ms);
    apply.push_back(ms);
    if (!applied.value("complete", false)) Die("the apply was not complete");
    // The agents start the workloads meanwhile, and the core reads their reports: a request
    // sent at once waits behind that work, which is not the stack's.
    AwaitInstances(c, token, "running", static_cast<size_t>(objects), settle);
    const json again = Timed(c, token, "POST", "/v1/stacks/bench/plan", body, ms);
    plan_done.push_back(ms);
    if (again.value("changes", true)) Die("the converged stack plans changes");
    Timed(c, token, "DELETE", "/v1/stacks/bench", nullptr, ms);
    destroy.push_back(ms);
    AwaitInstances(c, token, "stopping", 0, settle);
    std::fprintf(stderr, "round %d: %.1f %.1f %.1f %.1f ms\n", r + 1, plan_new.back(), apply.back(),
                 plan_done.back(), destroy.back());
  }
  auto row = [](const char* what, std::vector<double> v) {
    const double lo = *std::min_element(v.begin(), v.end());
    const double hi = *std::max_element(v.begin(), v.end());
    std::printf("%-40s %9.1f %9.1f %9.1f\n", what, lo, Percentile(std::move(v), 0.5), hi);
  };
  std::printf("stacks of %d instances, %d rounds; milliseconds per request\n", objects, rounds);
  std::printf("%-40s %9s %9s %9s\n", "", "min", "median", "max");
  row("plan, new stack (all create)", plan_new);
  row("apply (all made and recorded)", apply);
  row("plan, converged (nothing to do)", plan_done);
  row("destroy (all deleted)", destroy);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Run(argc, argv); }
