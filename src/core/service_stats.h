// What groups' services serve (docs/volumes.md, "A group's service"): requests and their
// latency per group, counted by the API's I/O threads as each proxied request ends, and read by
// /metrics and by the autoscaler (metric rps) on the core thread.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::core {

class ServiceStats {
 public:
  // Upper bounds of the latency buckets, in seconds.
  static constexpr std::array<double, 10> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                     0.05,  0.1,    0.25,  1,    5};
  static constexpr int kWindowSeconds = 30;

  struct Group {
    int64_t requests = 0;
    int64_t failed = 0;  // No healthy member, or its endpoint could not be reached.
    // The latency of those served (requests - failed), cumulative, as Prometheus wants.
    std::array<int64_t, kBounds.size()> buckets{};
    double seconds = 0;
    // Requests by second of the steady clock, for the last kWindowSeconds.
    std::array<int64_t, kWindowSeconds> by_second{};
    std::array<int64_t, kWindowSeconds> second_of{};
    double rate = 0;  // In a Snapshot: Rate() as it was.
  };

  // One request of `group` ended after `seconds`; `failed` when it was not served.
  void Record(const std::string& group, double seconds, bool failed);
  // Requests served per second over the last kWindowSeconds (the seconds since the group's first
  // request, when fewer). Those not served do not count: a group whose members are not up yet
  // does not scale out for the requests it refused meanwhile.
  double Rate(const std::string& group) const;
  // Every group's counts and rate, by id.
  std::map<std::string, Group> Snapshot() const;
  // Drops a group's counts (it left memory).
  void Forget(const std::string& group);

 private:
  static int64_t NowSecond();
  // Rate() of the group at `it` (of groups_), mu_ held.
  double RateOf(std::map<std::string, Group>::const_iterator it, int64_t now) const;

  mutable std::mutex mu_;
  std::map<std::string, Group> groups_;   // Guarded by mu_.
  std::map<std::string, int64_t> first_;  // Guarded by mu_: each group's first second.
};

}  // namespace tessera::core
