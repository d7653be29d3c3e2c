// Load for the server's benchmarks. Open loop: requests sent on a schedule, whatever happened to
// earlier ones, so a slow answer cannot slow the load that measures it. Closed loop: each client
// sends its next request once the last is answered, for the most the server can take.
// Thread-safety: each call uses its own clients.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "testing/testing.h"

namespace tessera::testing {

// p50 and p99 latency, in ms, of `requests` POSTs of `body` to `path` at `url`, the i-th due at
// i / rate seconds, from `senders` clients; a request's latency counts from when it was due, and
// one not answered 201 counts as 1e9 s.
inline std::pair<double, double> OpenLoopPosts(const std::string& url, const std::string& token,
                                               const std::string& path, const std::string& body,
                                               int requests, double rate, int senders) {
  using Clock = std::chrono::steady_clock;
  std::vector<double> latencies(static_cast<size_t>(requests));
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  std::atomic<int> next{0};
  for (int c = 0; c < senders; ++c) {
    threads.emplace_back([&] {
      httplib::Client client(url);
      const httplib::Headers h = {{"Authorization", "Bearer " + token}};
      for (int i; (i = next++) < requests;) {
        const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(i / rate));
        std::this_thread::sleep_until(due);
        auto r = client.Post(path, h, body, "application/json");
        latencies[static_cast<size_t>(i)] =
            r && r->status == 201 ? std::chrono::duration<double>(Clock::now() - due).count() : 1e9;
      }
    });
  }
  for (auto& t : threads) t.join();
  return {Percentile(latencies, 0.5) * 1e3, Percentile(latencies, 0.99) * 1e3};
}

// Requests per second of `requests` POSTs of `body` to `path` at `url`, by `clients` clients in a
// closed loop. The first answer that is not 201, and how many were not, go to stderr.
inline double ClosedLoopPosts(const std::string& url, const std::string& token,
                              const std::string& path, const std::string& body, int requests,
                              int clients) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> next{0}, failed{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      httplib::Client client(url);
      const httplib::Headers h = {{"Authorization", "Bearer " + token}};
      while (next++ < requests) {
        auto r = client.Post(path, h, body, "application/json");
        if ((!r || r->status != 201) && failed++ == 0) {
          std::fprintf(stderr, "first failure: %s\n",
                       r ? (std::to_string(r->status) + " " + r->body).c_str()
                         : httplib::to_string(r.error()).c_str());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  if (failed > 0) std::fprintf(stderr, "%d requests failed\n", failed.load());
  return requests / secs;
}

}  // namespace tessera::testing
