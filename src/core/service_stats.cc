#include "core/service_stats.h"

#include <algorithm>

namespace tessera::core {

int64_t ServiceStats::NowSecond() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ServiceStats::Record(const std::string& group, double seconds, bool failed) {
  const int64_t now = NowSecond();
  std::lock_guard lock(mu_);
  Group& g = groups_[group];
  first_.emplace(group, now);
  ++g.requests;
  if (failed) {
    ++g.failed;
  } else {
    g.seconds += seconds;
    for (size_t i = 0; i < kBounds.size(); ++i) {
      if (seconds <= kBounds[i]) ++g.buckets[i];
    }
  }
  if (failed) return;  // The rate is what members served.
  const size_t slot = static_cast<size_t>(now % kWindowSeconds);
  if (g.second_of[slot] != now) {
    g.second_of[slot] = now;
    g.by_second[slot] = 0;
  }
  ++g.by_second[slot];
}

double ServiceStats::Rate(const std::string& group) const {
  const int64_t now = NowSecond();
  std::lock_guard lock(mu_);
  auto it = groups_.find(group);
  return it == groups_.end() ? 0 : RateOf(it, now);
}

double ServiceStats::RateOf(std::map<std::string, Group>::const_iterator it, int64_t now) const {
  int64_t sum = 0;
  for (size_t i = 0; i < kWindowSeconds; ++i) {
    if (now - it->second.second_of[i] < kWindowSeconds) sum += it->second.by_second[i];
  }
  const int64_t span = std::clamp<int64_t>(now - first_.at(it->first) + 1, 1, kWindowSeconds);
  return static_cast<double>(sum) / static_cast<double>(span);
}

void ServiceStats::Forget(const std::string& group) {
  std::lock_guard lock(mu_);
  groups_.erase(group);
  first_.erase(group);
}

std::map<std::string, ServiceStats::Group> ServiceStats::Snapshot() const {
  const int64_t now = NowSecond();
  std::lock_guard lock(mu_);
  std::map<std::string, Group> out = groups_;
  for (auto it = groups_.begin(); it != groups_.end(); ++it) out[it->first].rate = RateOf(it, now);
  return out;
}

}  // namespace tessera::core
