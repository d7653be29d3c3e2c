#include "telemetry/history.h"

#include <algorithm>

namespace tessera::telemetry {
namespace {

int64_t UnixMillis(Time t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

}  // namespace

void History::Push(std::deque<Point>& d, const Point& p) {
  d.push_back(p);
  const int64_t oldest =
      p.t_ms - std::chrono::duration_cast<std::chrono::milliseconds>(keep_).count();
  while (!d.empty() && (d.size() > max_points_ || d.front().t_ms < oldest)) d.pop_front();
}

void History::Record(const std::string& node, Time now, const Telemetry& t) {
  const int64_t ms = UnixMillis(now);
  auto& devices = nodes_[node];
  for (const GpuSample& s : t.gpus) {
    if (s.lost) continue;
    const auto power = static_cast<float>(s.power_w);
    const auto temp = static_cast<float>(s.temperature_c);
    Push(devices[{s.index, -1}], Point{ms, static_cast<float>(s.gpu_util),
                                       static_cast<float>(s.memory_used_mib), power, temp});
    for (const MigSample& m : s.mig) {
      Push(devices[{s.index, m.start}],
           Point{ms, static_cast<float>(100 * m.gr_engine_active.value_or(0)),
                 static_cast<float>(m.fb_used_mib), power, temp});
    }
  }
}

std::vector<Point> History::Points(const std::string& node, int gpu, int mig_start,
                                   Time since) const {
  std::vector<Point> out;
  auto n = nodes_.find(node);
  if (n == nodes_.end()) return out;
  auto d = n->second.find({gpu, mig_start});
  if (d == n->second.end()) return out;
  const int64_t from = UnixMillis(since);
  auto first = std::lower_bound(d->second.begin(), d->second.end(), from,
                                [](const Point& p, int64_t t) { return p.t_ms < t; });
  out.assign(first, d->second.end());
  return out;
}

size_t History::devices() const {
  size_t n = 0;
  for (const auto& [node, devices] : nodes_) n += devices.size();
  return n;
}

}  // namespace tessera::telemetry
