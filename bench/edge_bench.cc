// The edge under hostile load, against the real binary on loopback (docs/http.md):
//   1. 100,000 requests with made-up methods: the server's resident memory and the size and
//      render time of /metrics before, halfway and after (they should stay flat);
//   2. tenant B's create latency (p50, p99, open loop) alone, and while tenant A holds 300
//      connections that announce 1 MiB bodies and send nothing, reopening each a second after it
//      is answered (429 past its share) or cut off (408 below the minimum body rate).
// Usage: edge_bench [--requests N] [--rate R] [--seconds S] [--holders H].
#include <fmt/format.h>
#include <httplib.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "testing/open_loop.h"
#include "testing/raw_http.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b1";
const std::string kShare = R"({"billing":"spot","instance_type":"shared.l40s.half"})";

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}

std::string NewTenant(const std::string& url, const std::string& name) {
  httplib::Client c(url);
  const json body = {{"name", name}, {"quota", {{"gpus", 1e6}}}};
  auto r = c.Post("/v1/tenants", {{"Authorization", std::string("Bearer ") + kAdmin}}, body.dump(),
                  "application/json");
  if (!r || r->status != 201) Die("cannot create a tenant: " + (r ? r->body : "no answer"));
  return json::parse(r->body)["token"];
}

// The process's resident memory in MiB, from /proc.
double RssMib(int pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024;
  }
  return -1;
}

struct Scrape {
  double rss_mib = 0;
  size_t metrics_bytes = 0;
  double render_ms = 0;
};

Scrape Measure(testing::ServerProcess& server) {
  httplib::Client c(server.url());
  c.set_read_timeout(60);
  const auto t0 = Clock::now();
  auto r = c.Get("/metrics", {{"Authorization", std::string("Bearer ") + kAdmin}});
  if (!r || r->status != 200) Die("/metrics failed");
  return {RssMib(server.pid()), r->body.size(),
          std::chrono::duration<double, std::milli>(Clock::now() - t0).count()};
}

// `n` requests with random made-up methods on 8 keep-alive connections.
void MadeUpMethods(int port, int n) {
  std::vector<std::thread> threads;
  std::atomic<int> next{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::uniform_int_distribution<int> letter('A', 'Z'), length(3, 12);
      std::unique_ptr<testing::RawConnection> c;
      while (next++ < n) {
        std::string method;
        for (int i = length(rng); i > 0; --i) method += static_cast<char>(letter(rng));
        if (!c) c = testing::RawConnection::Open(port);
        if (!c || !c->Send(testing::HttpRequestText(method, "/v1/instances")) || !c->Read(5s)) {
          c.reset();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  int requests = 100'000, holders = 300;
  double rate = 100, seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--requests") requests = std::atoi(argv[i + 1]);
    if (a == "--rate") rate = std::atof(argv[i + 1]);
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--holders") holders = std::atoi(argv[i + 1]);
  }
  testing::TempDir dir;
  const std::string fleet = dir.Write("fleet.json", R"({"name": "bench", "shapes": [
    {"name": "l40s", "count": 1000, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"}]})");
  testing::ServerProcess server;
  server.SetBinary(TESSERA_BIN);
  if (!server.Start({"--data", dir.File("data"), "--fleet", fleet}, kAdmin)) {
    Die("the server failed to start:\n" + server.output());
  }
  server.DiscardOutput();

  // 1. Made-up methods.
  const Scrape before = Measure(server);
  MadeUpMethods(server.port(), requests / 2);
  const Scrape half = Measure(server);
  MadeUpMethods(server.port(), requests - requests / 2);
  const Scrape after = Measure(server);
  fmt::print("{} requests with random made-up methods:\n", requests);
  for (const auto& [when, s] : {std::pair{"before", before}, {"halfway", half}, {"after", after}}) {
    fmt::print("  {:8} RSS {:7.1f} MiB, /metrics {:7} bytes, rendered in {:.1f} ms\n", when,
               s.rss_mib, s.metrics_bytes, s.render_ms);
  }

  // 2. Body-budget hold.
  const std::string a = NewTenant(server.url(), "holder"), b = NewTenant(server.url(), "other");
  const int creates = static_cast<int>(rate * seconds);
  const auto [alone_p50, alone_p99] =
      testing::OpenLoopPosts(server.url(), b, "/v1/instances", kShare, creates, rate, 8);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> opened{0}, refused{0};
  std::thread hold([&] {
    const std::string head = fmt::format(
        "POST /v1/instances HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
        "Authorization: Bearer {}\r\nContent-Length: 1048576\r\n\r\n",
        a);
    std::vector<std::unique_ptr<testing::RawConnection>> held(static_cast<size_t>(holders));
    std::vector<Clock::time_point> since(held.size());
    while (!stop) {
      for (size_t i = 0; i < held.size(); ++i) {
        // A held connection answered (429, 408) or closed is opened again after the second its
        // Retry-After asks for.
        auto& c = held[i];
        pollfd p{c ? c->fd() : -1, POLLIN, 0};
        if (c && (poll(&p, 1, 0) == 0 || Clock::now() - since[i] < 1s)) continue;
        if (c) ++refused;
        c = testing::RawConnection::Open(server.port());
        since[i] = Clock::now();
        if (c && c->Send(head)) ++opened;
      }
      std::this_thread::sleep_for(20ms);
    }
  });
  std::this_thread::sleep_for(1s);
  const auto [held_p50, held_p99] =
      testing::OpenLoopPosts(server.url(), b, "/v1/instances", kShare, creates, rate, 8);
  stop = true;
  hold.join();
  fmt::print("tenant B creating at {:.0f}/s for {:.0f} s:\n", rate, seconds);
  fmt::print("  alone:                                   p50 {:6.2f} ms, p99 {:6.2f} ms\n",
             alone_p50, alone_p99);
  fmt::print("  while A holds {} announced 1 MiB bodies: p50 {:6.2f} ms, p99 {:6.2f} ms\n", holders,
             held_p50, held_p99);
  fmt::print("  (A opened {} connections; {} were answered or cut off and reopened)\n",
             opened.load(), refused.load());
  server.Stop(SIGTERM);
  return held_p99 < 1e6 ? 0 : 1;
}
