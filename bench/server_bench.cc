// Benchmarks of the control-plane server, run against the real binary on loopback:
//   1. durable instance creations per second through the API (closed loop, 32 clients);
//   2. p50 and p99 latency of POST /v1/instances at a fixed request rate (open loop);
//   3. start-up time, process start to /readyz, with 10,000 instances in the store.
// Usage: server_bench [--requests N] [--rate R]; TESSERA_BIN names the binary.
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "testing/testing.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b1";

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
    std::fprintf(stderr, "cannot create a tenant\n");
    std::exit(1);
  }
  return json::parse(r->body)["token"];
}

constexpr int kClients = 32;
const std::string kShare = R"({"billing":"spot","instance_type":"shared.l40s.half"})";

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

void Throughput(const std::string& url, const std::string& token, int requests) {
  std::atomic<int> next{0}, failed{0};
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&] {
      httplib::Client client(url);
      const httplib::Headers h = {{"Authorization", "Bearer " + token}};
      while (next++ < requests) {
        const auto t0 = Clock::now();
        auto r = client.Post("/v1/instances", h, kShare, "application/json");
        if (!r || r->status != 201) {
          if (failed++ == 0) {
            std::fprintf(stderr, "first failure after %.3f s: %s\n",
                         std::chrono::duration<double>(Clock::now() - t0).count(),
                         r ? fmt::format("HTTP {}: {}", r->status, r->body).c_str()
                           : httplib::to_string(r.error()).c_str());
          }
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  fmt::print("durable creations/s ({} clients, {} requests): {:.0f}  [failed {}]\n", kClients,
             requests, requests / secs, failed.load());
}

void FixedRate(const std::string& url, const std::string& token, int requests, double rate) {
  std::vector<double> latencies(static_cast<size_t>(requests));
  std::vector<std::thread> senders;
  const auto start = Clock::now();
  std::atomic<int> next{0};
  // Open loop: request i is due at start + i/rate whatever happened to earlier ones.
  for (int c = 0; c < 16; ++c) {
    senders.emplace_back([&] {
      httplib::Client client(url);
      const httplib::Headers h = {{"Authorization", "Bearer " + token}};
      for (int i; (i = next++) < requests;) {
        const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(i / rate));
        std::this_thread::sleep_until(due);
        auto r = client.Post("/v1/instances", h, kShare, "application/json");
        latencies[static_cast<size_t>(i)] =
            r && r->status == 201 ? std::chrono::duration<double>(Clock::now() - due).count() : 1e9;
      }
    });
  }
  for (auto& t : senders) t.join();
  fmt::print("latency at {:.0f} req/s ({} requests): p50 {:.2f} ms, p99 {:.2f} ms\n", rate,
             requests, Percentile(latencies, 0.5) * 1e3, Percentile(latencies, 0.99) * 1e3);
}

void StartUp(const std::string& data, const std::string& fleet) {
  const auto start = Clock::now();
  testing::ServerProcess server;
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
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  auto list = c.Get("/v1/instances", {{"Authorization", std::string("Bearer ") + kAdmin}});
  const size_t n = list ? json::parse(list->body)["instances"].size() : 0;
  fmt::print("start-up to ready with {} stored instances: {:.3f} s\n", n, secs);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  int requests = 5000;  // Plus 5,000 at the fixed rate: 10,000 stored for the start-up figure.
  double rate = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--requests") requests = std::atoi(argv[i + 1]);
    if (a == "--rate") rate = std::atof(argv[i + 1]);
  }
  setenv("TESSERA_BIN", TESSERA_BIN, 0);
  testing::TempDir dir;
  const std::string fleet = WriteFleet(dir);
  const std::string data = dir.File("data");
  {
    testing::ServerProcess server;
    if (!server.Start({"--data", data, "--fleet", fleet}, kAdmin)) {
      std::fprintf(stderr, "server failed to start:\n%s\n", server.output().c_str());
      return 1;
    }
    const std::string token = NewTenant(server.url(), "bench");
    Throughput(server.url(), token, requests);
    FixedRate(server.url(), token, std::min(requests, 5000), rate);
    server.Stop(SIGTERM);
  }
  StartUp(data, fleet);
  return 0;
}
