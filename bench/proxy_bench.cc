// The proxy to an instance's port (issue 30): what going through the server adds to a request,
// side by side with the same request sent straight to the instance's endpoint, in one run. A
// real `tessera server` and `tessera agent` (sim GPUs) on loopback, and one instance serving a
// small HTTP answer (Python's http.server, HTTP/1.0: a connection per request) on its mapped
// port. Each request opens a connection either way (the proxy hands the client's connection to
// the workload and closes it after the answer), so the difference is the proxy's own work: the
// token check, the endpoint lookup, the connection to the endpoint and the copying.
// Latency: requests one at a time, direct and proxied alternately; prints p50 and p99 of each and
// the difference. Throughput: `--clients` (default 8) threads for `--seconds` (default 3) each way.
// Then a group of 4 such members behind its service (/v1/groups/{id}/service/...): the same
// latency and throughput through the balancer, against the one instance's proxy.
// Usage: proxy_bench [--requests N] [--clients C] [--seconds S]. Needs root (workload uids).
#include <fmt/format.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
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
    "tsr_00000000000000000000000000000000000000000000000000000000000000b8";

using bench::Call;

// One GET on a connection of its own; its latency in milliseconds, or -1 when it failed.
double Once(int port, const std::string& path, const std::string& token) {
  httplib::Client c("127.0.0.1", port);
  c.set_keep_alive(false);
  httplib::Headers h;
  if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
  const auto t0 = Clock::now();
  auto r = c.Get(path, h);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return r && r->status == 200 && r->body == "ok\n" ? ms : -1;
}

// Requests per second that `clients` threads get for `seconds`, and the failures.
std::pair<double, int64_t> Throughput(int port, const std::string& path, const std::string& token,
                                      int clients, int seconds) {
  std::atomic<int64_t> done{0}, failed{0};
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&] {
      while (Clock::now() < until) (Once(port, path, token) >= 0 ? done : failed)++;
    });
  }
  for (auto& t : threads) t.join();
  return {static_cast<double>(done) / seconds, failed.load()};
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  int requests = 2000, clients = 8, seconds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--requests") requests = std::max(10, std::atoi(argv[i + 1]));
    if (flag == "--clients") clients = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--seconds") seconds = std::max(1, std::atoi(argv[i + 1]));
  }
  auto stack = bench::Stack::Start("proxy_bench", kAdmin, 8);
  if (!stack) return geteuid() == 0 ? 1 : 0;
  testing::ServerProcess& server = stack->server;
  httplib::Client& api = *stack->api;
  const std::string& tenant = stack->tenant;
  const json body = {
      {"billing", "on_demand"},
      {"gpu_model", "H100-80GB"},
      {"gpus", 1},
      {"vcpus", 2},
      {"memory_mib", 4096},
      {"ports", {8000}},
      {"command",
       "echo ok > ok; exec python3 -m http.server \"$TESSERA_PORT_8000\" --bind 127.0.0.1"}};
  std::string id;
  for (int i = 0; i < 200 && id.empty(); ++i) {
    id = Call(api, "POST", "/v1/instances", tenant, body).value("id", "");
    if (id.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int host_port = 0;
  for (int i = 0; i < 400 && host_port == 0; ++i) {
    const json inst = Call(api, "GET", "/v1/instances/" + id, tenant);
    if (inst.contains("endpoints")) host_port = inst["endpoints"][0].value("host_port", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string proxied = "/v1/instances/" + id + "/ports/8000/ok";
  for (int i = 0;
       i < 400 && (Once(host_port, "/ok", "") < 0 || Once(server.port(), proxied, tenant) < 0);
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (host_port == 0 || Once(server.port(), proxied, tenant) < 0) {
    std::fprintf(stderr, "proxy_bench: the instance never answered (agent log: %s)\n",
                 stack->dir.File("agent.log").c_str());
    return 1;
  }
  std::vector<double> direct, through;
  int failures = 0;
  for (int i = 0; i < requests; ++i) {
    const double d = Once(host_port, "/ok", "");
    const double p = Once(server.port(), proxied, tenant);
    if (d < 0 || p < 0) {
      ++failures;
      continue;
    }
    direct.push_back(d);
    through.push_back(p);
  }
  std::printf("one request at a time, a connection each (%zu pairs, %d failed)\n", direct.size(),
              failures);
  std::printf("  direct to the endpoint:  p50 %.3f ms  p99 %.3f ms\n", Percentile(direct, 0.5),
              Percentile(direct, 0.99));
  std::printf("  through the server:      p50 %.3f ms  p99 %.3f ms\n", Percentile(through, 0.5),
              Percentile(through, 0.99));
  std::printf("  added by the proxy:      p50 %.3f ms  p99 %.3f ms\n",
              Percentile(through, 0.5) - Percentile(direct, 0.5),
              Percentile(through, 0.99) - Percentile(direct, 0.99));
  const auto [direct_rps, direct_failed] = Throughput(host_port, "/ok", "", clients, seconds);
  const auto [proxy_rps, proxy_failed] =
      Throughput(server.port(), proxied, tenant, clients, seconds);
  std::printf("%d clients for %d s each way\n", clients, seconds);
  std::printf("  direct:  %.0f requests/s (%lld failed)\n", direct_rps,
              static_cast<long long>(direct_failed));
  std::printf("  proxied: %.0f requests/s (%lld failed)\n", proxy_rps,
              static_cast<long long>(proxy_failed));

  json group = {{"name", "web"},
                {"size", 4},
                {"placement", "spread"},
                {"service", {{"port", 8000}, {"health_path", "/ok"}}},
                {"template", body}};
  const std::string gid = Call(api, "POST", "/v1/groups", tenant, group).value("id", "");
  const std::string service = "/v1/groups/" + gid + "/service/ok";
  // Every member checked healthy: 40 requests in a row all answered.
  for (int i = 0; i < 400; ++i) {
    int ok = 0;
    for (int k = 0; k < 40; ++k) ok += Once(server.port(), service, tenant) >= 0;
    if (ok == 40) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::vector<double> balanced;
  for (int i = 0; i < requests; ++i) {
    const double b = Once(server.port(), service, tenant);
    if (b >= 0) balanced.push_back(b);
  }
  std::printf("a group of 4 behind its service (%zu of %d answered)\n", balanced.size(), requests);
  std::printf("  through the service:     p50 %.3f ms  p99 %.3f ms\n", Percentile(balanced, 0.5),
              Percentile(balanced, 0.99));
  const auto [service_rps, service_failed] =
      Throughput(server.port(), service, tenant, clients, seconds);
  std::printf("  %d clients for %d s: %.0f requests/s (%lld failed)\n", clients, seconds,
              service_rps, static_cast<long long>(service_failed));
  return 0;
}
