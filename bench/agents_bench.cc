// Node agents against one server (docs/agent.md): N agents (default 2,000, each with 8 simulated
// H100s) join a real `tessera server` on loopback, run in this process through the agent's own
// code (the sim backend, the workload supervisor, HTTP to the server), and:
//   1. report every 2 s with no wait: the server's CPU (cores, from /proc) and each report's
//      round trip, p50 and p99;
//   2. long-poll as `tessera agent` does: the server's CPU with every agent waiting, then the
//      create-to-running latency (start_latency_seconds) of instances created one by one.
// Usage: agents_bench [--agents N] [--seconds S] [--instances K].
#include <fmt/format.h>
#include <httplib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/sim_backend.h"
#include "catalog/catalog.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using tessera::testing::Percentile;

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000a9";

json Admin(const std::string& url, const std::string& method, const std::string& path,
           const std::string& token, const json& body = nullptr) {
  httplib::Client c(url);
  c.set_read_timeout(30);
  httplib::Headers h = {{"Authorization", "Bearer " + token}};
  auto r = method == "GET" ? c.Get(path, h) : c.Post(path, h, body.dump(), "application/json");
  if (!r || r->status >= 400) {
    std::fprintf(stderr, "%s %s: %s\n", method.c_str(), path.c_str(),
                 r ? r->body.c_str() : "no answer");
    std::exit(1);
  }
  return json::parse(r->body);
}

struct Fleet {
  std::vector<std::unique_ptr<agent::Agent>> agents;
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<double> round_trips_ms;  // Guarded by mu.

  ~Fleet() { Stop(); }
  void Stop() {
    for (auto& a : agents) a->Stop();
    for (auto& t : threads) t.join();
    threads.clear();
    agents.clear();
  }
};

// Starts one agent per token, long-polling or not; each agent's work dir is under `dir`.
void StartAgents(Fleet& fleet, const catalog::Catalog& catalog, const std::string& url,
                 const std::vector<std::string>& tokens, const std::string& dir, bool long_poll) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto gpus = agent::SimBackend::Create(catalog, "H100-80GB:8", fmt::format("bench-{}", i), i);
    agent::WorkloadSupervisor::Options w;
    w.work_dir = fmt::format("{}/agent-{}", dir, i);
    w.cgroup_root = "none";
    auto workloads = agent::WorkloadSupervisor::Open(w);
    auto http = agent::HttpTransport(url, tokens[i]);
    if (!gpus.ok() || !workloads.ok() || !http.ok()) {
      std::fprintf(stderr, "cannot set up agent %zu\n", i);
      std::exit(1);
    }
    // Time each report that the server answers without waiting.
    agent::Transport timed = [&fleet, inner = *http](const std::string& path,
                                                     const std::string& body,
                                                     std::chrono::milliseconds timeout) {
      const auto start = Clock::now();
      auto r = inner(path, body, timeout);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (body.find("\"wait_ms\":0") != std::string::npos) {
        std::lock_guard<std::mutex> lock(fleet.mu);
        fleet.round_trips_ms.push_back(ms);
      }
      return r;
    };
    agent::AgentOptions options;
    options.long_poll = long_poll;
    fleet.agents.push_back(
        std::make_unique<agent::Agent>(options, timed, std::move(*gpus), std::move(*workloads)));
  }
  for (auto& a : fleet.agents) {
    fleet.threads.emplace_back([p = a.get()] { (void)p->Run(); });
    std::this_thread::sleep_for(std::chrono::microseconds(500));  // Spread the joins.
  }
}

int Main(int argc, char** argv) {
  int agents = 2000, seconds = 20, instances = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (flag == "--agents") agents = v;
    if (flag == "--seconds") seconds = v;
    if (flag == "--instances") instances = v;
  }
  // Two descriptors an agent (its connection, its work dir's lock): raise the soft limit.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  auto catalog = catalog::Catalog::LoadEmbedded();
  if (!catalog.ok()) return 1;
  testing::TempDir dir;
  testing::ServerProcess server;
  server.SetBinary(TESSERA_BIN);
  if (!server.Start({"--data", dir.File("data"), "--max-connections", "20000",
                     "--max-connections-per-address", "20000"},
                    kAdmin)) {
    std::fprintf(stderr, "server did not start: %s\n", server.output().c_str());
    return 1;
  }
  server.DiscardOutput();  // It logs a line per node that joins.
  std::vector<std::string> tokens;
  for (int i = 0; i < agents; ++i) {
    tokens.push_back(Admin(server.url(), "POST", "/v1/nodes", kAdmin,
                           {{"name", fmt::format("node-{:05d}", i)}})["token"]);
  }
  const std::string tenant = Admin(server.url(), "POST", "/v1/tenants", kAdmin,
                                   {{"name", "bench"}, {"quota", {{"gpus", 1e6}}}})["token"];
  std::printf("%d agents, 8 simulated H100s each, %d s windows\n", agents, seconds);

  auto window = [&](const char* what) {
    const double cpu0 = testing::CpuSeconds(server.pid());
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    const double cores = (testing::CpuSeconds(server.pid()) - cpu0) /
                         std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%-44s server CPU %.3f cores\n", what, cores);
  };
  {
    Fleet fleet;
    StartAgents(fleet, *catalog, server.url(), tokens, dir.File("a"), /*long_poll=*/false);
    std::this_thread::sleep_for(std::chrono::seconds(5));  // Every agent registered.
    {
      std::lock_guard<std::mutex> lock(fleet.mu);
      fleet.round_trips_ms.clear();
    }
    window("reports every 2 s, no wait:");
    std::lock_guard<std::mutex> lock(fleet.mu);
    std::printf("%-44s %zu reports, p50 %.2f ms, p99 %.2f ms\n",
                "  report round trip:", fleet.round_trips_ms.size(),
                Percentile(fleet.round_trips_ms, 0.5), Percentile(fleet.round_trips_ms, 0.99));
  }
  {
    Fleet fleet;
    StartAgents(fleet, *catalog, server.url(), tokens, dir.File("b"), /*long_poll=*/true);
    std::this_thread::sleep_for(std::chrono::seconds(5));
    window("long polls (2 s), as tessera agent runs:");
    std::vector<std::string> ids;
    for (int i = 0; i < instances; ++i) {
      ids.push_back(Admin(server.url(), "POST", "/v1/instances", tenant,
                          {{"billing", "on_demand"},
                           {"gpu_model", "H100-80GB"},
                           {"gpus", 1},
                           {"vcpus", 4},
                           {"memory_mib", 16384}})["id"]);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::vector<double> starts;
    for (const std::string& id : ids) {
      const json j = Admin(server.url(), "GET", "/v1/instances/" + id, tenant);
      if (j.contains("start_latency_seconds")) {
        starts.push_back(j["start_latency_seconds"].get<double>() * 1000);
      }
    }
    std::printf("%-44s %zu of %d running, p50 %.1f ms, p99 %.1f ms\n",
                "  create to running:", starts.size(), instances, Percentile(starts, 0.5),
                Percentile(starts, 0.99));
  }
  server.Stop(SIGTERM);
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
