// The pending queue. Requests that could not be placed wait here, grouped by what they ask for
// (shape and billing): the scheduler answers identical requests alike, so one failed attempt
// stands for its whole group and a pass costs one attempt per group, however many wait in it.
// Within a group the oldest goes first; groups go by priority, then by their oldest member, and a
// group that does not fit never holds back the ones after it. A pass makes at most a given number
// of failed attempts; when there are more groups than that, the next pass starts where this one
// stopped, so every group is tried in turn and no input makes a pass cost more than its budget.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "core/instance.h"

namespace tessera::core {

class PendingQueue {
 public:
  // Identical requests: the shape, field by field, and the billing mode.
  using Key = std::tuple<std::string, catalog::SharingMode, int, std::string, int, int64_t, int64_t,
                         int64_t, bool, Billing>;
  static Key KeyOf(const Instance& inst);

  // Queues `inst`. REQUIRES: it is pending and not queued.
  void Push(const Instance& inst);
  // Takes `inst` out; false when it was not queued.
  bool Remove(const Instance& inst);
  // True when requests identical to `inst` wait (a new one must queue behind them).
  bool HasGroup(const Instance& inst) const { return groups_.count(KeyOf(inst)) > 0; }
  size_t size() const { return by_id_.size(); }
  size_t groups() const { return groups_.size(); }

  // One pass: for each group in order, `place(id)` is called on its oldest member, then on the
  // next while it returns true (placed: the pass takes it out of the queue); the first false ends
  // the group. At most `max_failures` groups fail per pass. Returns the placements made.
  size_t Pass(size_t max_failures, const std::function<bool(const std::string& id)>& place);

 private:
  using Members = std::set<std::pair<int64_t, std::string>>;  // (seq, id), oldest first.
  std::map<Key, Members> groups_;
  std::unordered_map<std::string, Key> by_id_;
  std::optional<Key> resume_;  // Where the next pass starts, after a pass ran out of budget.
};

}  // namespace tessera::core
