// Autoscaler: each autoscaled group's size, decided every interval as Kubernetes' HPA decides a
// Deployment's (docs/groups.md, "Autoscaling"): desired = ceil(size x value / target), unchanged
// within kAutoscaleTolerance of the target; never below min or the floor its schedule set last,
// nor above max; up at once, down only to the highest recommendation of the stabilization
// window; and at its owner's cap on pending work, out only as far as the cap leaves room.
// It decides; Groups measures the metric (Groups::Metric), resizes and audits. Its memory is
// each group's own (Group::recommendations and the decision fields), not stored: a restart
// forgets the window, and no scale-down comes before a window has passed again.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <optional>

#include "common/clock.h"
#include "core/group.h"

namespace tessera::core {

class Autoscaler {
 public:
  explicit Autoscaler(Duration interval) : interval_(interval) {}

  // True once an interval: an evaluation is due at `now`, which the next one counts from.
  bool Due(Time now);

  // What the owner's cap on pending work leaves: room for `room` more pending instances, with
  // `pending` of `cap` pending now.
  struct Room {
    int64_t room = 0, pending = 0, cap = 0;
  };
  struct Decision {
    int from = 0, to = 0;
    // Resize to `to`; else the size stays. Audit: the decision changed and is worth a line (every
    // resize, and a hold at the cap said once, not at every evaluation).
    bool resize = false;
    bool audit = false;
  };
  // Decides autoscaled group `g`'s size at `now` from `metric` (none: no readings), with the
  // owner's `room` (none: its owner is gone). Records the reading, floor, desired size and
  // decision on `g`, the recommendation in its window and, for a resize, its count.
  Decision Decide(Group& g, std::optional<double> metric, std::optional<Room> room, Time now) const;

 private:
  Duration interval_;
  Time last_{};
};

}  // namespace tessera::core
