// Benchmarks of the control-plane server, run against the real binary on loopback:
//   1. durable instance creations per second through the API (closed loop, 32 clients);
//   2. p50 and p99 latency of POST /v1/instances at a fixed request rate (open loop);
//   3. start-up time, process start to /readyz, with 10,000 instances in the store;
//   4. connections held per GiB: 10,000 idle connections, the server's resident memory before
//      and after, and /healthz's latency while they are open.
// With TESSERA_BASELINE_BIN naming an earlier build (scripts/build-baseline.sh), 1-3 run on both
// binaries in alternating rounds on the same machine, and the table gives each one's median and
// the ratio, so a regression shows whatever the machine's speed that minute.
// Usage: server_bench [--requests N] [--rate R] [--rounds K] [--connections C].
#include <fmt/format.h>
#include <httplib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "testing/open_loop.h"
#include "testing/raw_http.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using tessera::testing::Percentile;

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b1";
constexpr int kClients = 32;
const std::string kShare = R"({"billing":"spot","instance_type":"shared.l40s.half"})";

// Many nodes of 8 shared L40S: room for every share the benchmark creates.
std::string WriteFleet(const testing::TempDir& dir) {
  return dir.Write("fleet.json", R"({"name": "bench", "shapes": [
    {"name": "l40s", "count": 1000, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"}]})");
}

std::string NewTenant(const std::string& url, const std::string& name) {
  httplib::Client c(url);
  json body = {{"name", name}, {"quota", {{"gpus", 1e6}}}};
  auto r = c.Post("/v1/tenants", {{"Authorization", std::string("Bearer ") + kAdmin}}, body.dump(),
                  "application/json");
  if (!r || r->status != 201) {
    std::fprintf(stderr, "cannot create a tenant: %s\n", r ? r->body.c_str() : "no answer");
    std::exit(1);
  }
  return json::parse(r->body)["token"];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// Durable creations per second with kClients clients in a closed loop.
double Throughput(const std::string& url, const std::string& token, int requests) {
  return testing::ClosedLoopPosts(url, token, "/v1/instances", kShare, requests, kClients);
}

// Seconds from process start to /readyz with what `data` holds.
double StartUp(const std::string& bin, const std::string& data, const std::string& fleet) {
  const auto start = Clock::now();
  testing::ServerProcess server;
  server.SetBinary(bin);
  if (!server.Start({"--data", data, "--fleet", fleet}, kAdmin)) {
    std::fprintf(stderr, "restart failed:\n%s\n", server.output().c_str());
    std::exit(1);
  }
  httplib::Client c(server.url());
  while (true) {
    auto r = c.Get("/readyz");
    if (r && r->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Figures {
  double creates_per_s = 0, p50_ms = 0, p99_ms = 0, startup_s = 0;
  double cpu_ms_per_1k = 0;  // The server's CPU time (user + system) per 1,000 closed-loop creates.
};

// One round on `bin`: a fresh store, the closed loop, the open loop, then a restart over the
// 10,000 instances they made.
Figures Round(const std::string& bin, int requests, double rate) {
  testing::TempDir dir;
  const std::string fleet = WriteFleet(dir);
  const std::string data = dir.File("data");
  Figures f;
  {
    testing::ServerProcess server;
    server.SetBinary(bin);
    if (!server.Start({"--data", data, "--fleet", fleet}, kAdmin)) {
      std::fprintf(stderr, "%s failed to start:\n%s\n", bin.c_str(), server.output().c_str());
      std::exit(1);
    }
    const std::string token = NewTenant(server.url(), "bench");
    const double cpu_before = testing::CpuSeconds(server.pid());
    f.creates_per_s = Throughput(server.url(), token, requests);
    f.cpu_ms_per_1k = (testing::CpuSeconds(server.pid()) - cpu_before) * 1e6 / requests;
    std::tie(f.p50_ms, f.p99_ms) = testing::OpenLoopPosts(
        server.url(), token, "/v1/instances", kShare, std::min(requests, 5000), rate, 16);
    server.Stop(SIGTERM);
  }
  f.startup_s = StartUp(bin, data, fleet);
  return f;
}

int64_t ResidentKiB(int pid) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

// Opens `count` idle connections (a thousand per loopback source address, under the per-address
// limit) and reports what they cost the server and how fast it answers meanwhile.
void Connections(const std::string& bin, int count) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  testing::TempDir dir;
  testing::ServerProcess server;
  server.SetBinary(bin);
  if (!server.Start({"--data", dir.File("data"), "--fleet", WriteFleet(dir)}, kAdmin)) {
    std::fprintf(stderr, "server failed to start:\n%s\n", server.output().c_str());
    std::exit(1);
  }
  httplib::Client client(server.url());
  (void)client.Get("/healthz");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int64_t before = ResidentKiB(server.pid());
  std::vector<std::unique_ptr<testing::RawConnection>> held;
  for (int i = 0; i < count; ++i) {
    auto c = testing::RawConnection::Open(server.port(), fmt::format("127.0.2.{}", 1 + i / 1000));
    if (!c) {
      std::fprintf(stderr, "connection %d failed (descriptor limit %lu)\n", i,
                   static_cast<unsigned long>(limit.rlim_cur));
      break;
    }
    held.push_back(std::move(c));
  }
  // Let the server accept them all.
  for (int i = 0; i < 100; ++i) {
    auto m = client.Get("/metrics", {{"Authorization", std::string("Bearer ") + kAdmin}});
    if (m && m->body.find(fmt::format("tessera_http_connections {}", held.size() + 1)) !=
                 std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int64_t after = ResidentKiB(server.pid());
  std::vector<double> health;
  for (int i = 0; i < 200; ++i) {
    const auto t0 = Clock::now();
    auto r = client.Get("/healthz");
    if (r && r->status == 200) {
      health.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  }
  const double per_conn_kib =
      static_cast<double>(after - before) / static_cast<double>(std::max<size_t>(1, held.size()));
  fmt::print(
      "idle connections held: {}; server RSS {:.1f} -> {:.1f} MiB ({:.2f} KiB each, "
      "{:.0f} connections per GiB); /healthz meanwhile p50 {:.2f} ms, p99 {:.2f} ms\n",
      held.size(), static_cast<double>(before) / 1024.0, static_cast<double>(after) / 1024.0,
      per_conn_kib, per_conn_kib > 0 ? 1024.0 * 1024.0 / per_conn_kib : 0.0, Median(health),
      Percentile(health, 0.99));
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  int requests = 5000;  // Plus 5,000 at the fixed rate: 10,000 stored for the start-up figure.
  double rate = 1000;
  int rounds = 3;
  int connections = 10000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--requests") requests = std::atoi(argv[i + 1]);
    if (a == "--rate") rate = std::atof(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (a == "--connections") connections = std::atoi(argv[i + 1]);
  }
  const std::string current = TESSERA_BIN;
  const char* baseline_env = std::getenv("TESSERA_BASELINE_BIN");
  const std::string baseline = baseline_env && *baseline_env ? baseline_env : "";
  std::map<std::string, std::vector<Figures>> runs;
  for (int r = 0; r < rounds; ++r) {
    if (!baseline.empty()) runs["baseline"].push_back(Round(baseline, requests, rate));
    runs["current"].push_back(Round(current, requests, rate));
  }
  auto median = [&](const std::string& who, double Figures::*field) {
    std::vector<double> v;
    for (const Figures& f : runs[who]) v.push_back(f.*field);
    return Median(v);
  };
  fmt::print(
      "server: {} requests closed-loop ({} clients), {} at {:.0f} req/s, {} round(s); "
      "medians\n",
      requests, kClients, std::min(requests, 5000), rate, rounds);
  fmt::print("{:<36}{:>12}{:>12}{:>10}\n", "", baseline.empty() ? "" : "baseline", "current",
             baseline.empty() ? "" : "ratio");
  for (const auto& [name, field] : std::vector<std::pair<std::string, double Figures::*>>{
           {"durable creations/s", &Figures::creates_per_s},
           {fmt::format("p50 ms at {:.0f} req/s", rate), &Figures::p50_ms},
           {fmt::format("p99 ms at {:.0f} req/s", rate), &Figures::p99_ms},
           {"start-up s with 10,000 instances", &Figures::startup_s},
           {"server CPU ms per 1,000 creates", &Figures::cpu_ms_per_1k}}) {
    const double cur = median("current", field);
    if (baseline.empty()) {
      fmt::print("{:<36}{:>12}{:>12.2f}\n", name, "", cur);
    } else {
      const double base = median("baseline", field);
      fmt::print("{:<36}{:>12.2f}{:>12.2f}{:>10.2f}\n", name, base, cur, cur / base);
    }
  }
  if (connections > 0) Connections(current, connections);
  return 0;
}
