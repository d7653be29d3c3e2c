// The pending queue: requests waiting for capacity, highest priority first and first-in,
// first-out within a priority. The server's core pushes what it cannot place yet and retries from
// the front when capacity frees up.
// Thread-safety: not thread-safe; one owner.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>

#include "sched/scheduler.h"

namespace tessera::sched {

class Queue {
 public:
  struct Entry {
    uint64_t id = 0;  // The caller's handle, e.g. an instance number.
    Request request;  // Request::mig_profile must stay valid while queued.
  };

  // Adds `request` behind every queued request of the same or higher priority.
  void Push(uint64_t id, const Request& request);
  // The next request to try, or nullptr when empty.
  const Entry* Front() const;
  // Removes and returns the front; nullopt when empty.
  std::optional<Entry> Pop();
  // Removes the entry with `id` (the first, should ids repeat); false when none has it.
  bool Remove(uint64_t id);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

 private:
  std::map<int, std::deque<Entry>, std::greater<int>> by_priority_;
  size_t size_ = 0;
};

}  // namespace tessera::sched
