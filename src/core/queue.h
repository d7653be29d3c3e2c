// The pending queue. Requests that could not be placed wait here, grouped by what they ask for
// (shape and billing): the scheduler answers identical requests alike, so one failed attempt
// stands for its whole group and a pass costs one attempt per group, however many wait in it.
// Within a group the oldest goes first; groups go by priority, then by their oldest member, and a
// group that does not fit never holds back the ones after it.
// Where some node hosts one tenant at a time (its agent cannot isolate tenants), the scheduler may
// place one tenant's request and not another's identical one: the caller then keeps tenants
// apart, and each tenant's identical requests form a group of their own.
// The fleet's capacity has generations: the caller starts a new one whenever capacity frees. A
// group that failed in the current generation is not tried again until the next, so a pass over
// an unchanged fleet costs nothing. A pass makes at most a given number of failed attempts; the
// groups it did not reach stay untried, and the next pass starts with them.
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

// What one placement attempt came to.
enum class Attempt {
  kPlaced,    // It holds capacity now.
  kNoRoom,    // Nothing fits, preemption included: its group waits for capacity to free.
  kDeferred,  // Not fully tried (the round's preemption budget was spent): try again soon.
};

class PendingQueue {
 public:
  // Identical requests: the shape, field by field, the billing mode, and while tenants are kept
  // apart the tenant ("" otherwise); with volumes, the tenant and the volumes' names.
  using Key = std::tuple<std::string, catalog::SharingMode, int, std::string, int, int64_t, int64_t,
                         int64_t, bool, Billing, std::string>;
  Key KeyOf(const Instance& inst) const;

  // Whether requests queued from now on group by tenant too. Requests already queued keep their
  // group, so a change costs nothing; the cost of true is an attempt per tenant, not per shape.
  void KeepTenantsApart(bool apart) { tenants_apart_ = apart; }

  // Queues `inst`. REQUIRES: it is pending and not queued. `tried` says whether an attempt for
  // it just found no room in the current generation (its group then waits for the next).
  void Push(const Instance& inst, bool tried = false);
  // Takes `inst` out; false when it was not queued.
  bool Remove(const Instance& inst);
  // True when requests identical to `inst` wait (a new one must queue behind them).
  bool HasGroup(const Instance& inst) const { return groups_.count(KeyOf(inst)) > 0; }
  size_t size() const { return by_id_.size(); }
  size_t groups() const { return groups_.size(); }

  // Starts a new generation: capacity freed, so every group may fit again.
  void CapacityFreed() { ++generation_; }
  // The current generation (the caller's waiting gangs are gated by it too).
  int64_t generation() const { return generation_; }
  // True when some group has not been tried in the current generation.
  bool HasUntried() const;

  // One pass over the untried groups: for each in order, `place(id)` is called on its oldest
  // member, then on the next while it answers kPlaced (the pass takes it out of the queue). A
  // kNoRoom ends the group until the next generation; a kDeferred leaves it untried. At most
  // `max_failures` attempts may fail or defer per pass. Returns the placements made.
  size_t Pass(size_t max_failures, const std::function<Attempt(const std::string& id)>& place);

 private:
  using Members = std::set<std::pair<int64_t, std::string>>;  // (seq, id), oldest first.
  struct Group {
    Members members;
    int64_t failed_in = -1;  // The generation in which it last found no room.
  };
  std::map<Key, Group> groups_;
  std::unordered_map<std::string, Key> by_id_;
  int64_t generation_ = 0;
  bool tenants_apart_ = false;
  std::optional<Key> resume_;  // Where the next pass starts, after a pass ran out of budget.
};

}  // namespace tessera::core
