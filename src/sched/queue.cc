#include "sched/queue.h"

namespace tessera::sched {

void Queue::Push(uint64_t id, const Request& request) {
  by_priority_[request.priority].push_back({id, request});
  ++size_;
}

const Queue::Entry* Queue::Front() const {
  return by_priority_.empty() ? nullptr : &by_priority_.begin()->second.front();
}

std::optional<Queue::Entry> Queue::Pop() {
  if (by_priority_.empty()) return std::nullopt;
  auto it = by_priority_.begin();
  Entry e = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) by_priority_.erase(it);
  --size_;
  return e;
}

bool Queue::Remove(uint64_t id) {
  for (auto it = by_priority_.begin(); it != by_priority_.end(); ++it) {
    std::deque<Entry>& q = it->second;
    for (auto e = q.begin(); e != q.end(); ++e) {
      if (e->id != id) continue;
      q.erase(e);
      if (q.empty()) by_priority_.erase(it);
      --size_;
      return true;
    }
  }
  return false;
}

}  // namespace tessera::sched
