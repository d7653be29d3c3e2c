#include "core/autoscaler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

namespace tessera::core {

bool Autoscaler::Due(Time now) {
  if (now - last_ < interval_) return false;
  last_ = now;
  return true;
}

Autoscaler::Decision Autoscaler::Decide(Group& g, std::optional<double> metric,
                                        std::optional<Room> room, Time now) const {
  const Autoscale& a = *g.spec.autoscale;
  const int current = g.spec.size;
  // The schedule's floor: the entry that fired last (within a week) sets it.
  int floor = a.min;
  std::string floor_why;
  std::optional<Time> latest;
  for (const ScheduleEntry& e : a.schedule) {
    auto fired = e.cron.Previous(now, std::chrono::hours(24 * 7));
    if (fired && (!latest || *fired > *latest)) {
      latest = fired;
      floor = std::max(a.min, e.min);
      floor_why = fmt::format("; schedule '{}' sets the floor to {}", e.cron.text(), e.min);
    }
  }
  g.metric_value = metric;
  int desired = current;
  std::string why = fmt::format("{}: no readings", AutoscaleMetricName(a.metric));
  if (g.metric_value) {
    const double ratio = *g.metric_value / a.target;
    if (std::abs(ratio - 1) > kAutoscaleTolerance) {
      // In double, and bounded before the cast: a backlog of 2^40 against a target of 0.001
      // asks for ~10^15 members, which no int holds.
      const double wanted = std::ceil(current * ratio - 1e-9);
      desired = wanted >= a.max ? a.max : wanted <= floor ? floor : static_cast<int>(wanted);
    }
    why = fmt::format("{} {:.1f} against a target of {:g} over {} member(s)",
                      AutoscaleMetricName(a.metric), *g.metric_value, a.target, current);
  }
  desired = std::clamp(desired, floor, a.max);
  // Down only to the highest recommendation of the window; up at once.
  const Time window = now - std::chrono::seconds(a.scale_down_stabilization_seconds);
  std::erase_if(g.recommendations, [&](const auto& r) { return r.first < window; });
  g.recommendations.push_back({now, desired});
  int next = desired;
  if (desired < current) {
    for (const auto& [at, size] : g.recommendations) next = std::max(next, size);
    next = std::min(next, current);
    if (now < g.scale_down_after) next = current;
  }
  g.desired = next;
  g.floor = floor;
  // At its owner's cap on pending work it scales out only as far as the cap leaves room, and
  // says so, rather than be refused at every evaluation.
  std::string held;
  if (room && next > current && next - current > room->room) {
    held = fmt::format("; held at {} by its owner's cap on pending instances ({} pending, cap {})",
                       current + room->room, room->pending, room->cap);
    next = current + static_cast<int>(room->room);
  }
  Decision d{current, next, false, false};
  if (next == current) {
    if (held.empty()) return d;
    // Said once, not at every evaluation while it stays held.
    std::string decision =
        fmt::format("{} -> {}: {}{}{}", current, g.desired, why, floor_why, held);
    if (decision != g.decision) {
      g.decision = std::move(decision);
      d.audit = true;
    }
    return d;
  }
  g.decision = fmt::format("{} -> {}: {}{}{}", current, next, why, floor_why, held);
  (next > current ? g.scale_ups : g.scale_downs)++;
  d.resize = d.audit = true;
  return d;
}

}  // namespace tessera::core
