// Open-loop load for the server's benchmarks: requests sent on a schedule, whatever happened to
// earlier ones, so a slow answer cannot slow the load that measures it.
// Thread-safety: each call uses its own clients.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
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

}  // namespace tessera::testing
