#include "core/queue.h"

#include <algorithm>
#include <vector>

namespace tessera::core {

PendingQueue::Key PendingQueue::KeyOf(const Instance& inst) const {
  const Shape& s = inst.shape;
  // Volumes hold an instance to their node: only those that mount the same ones are identical.
  std::string apart = tenants_apart_ || !inst.volumes.empty() ? inst.tenant.str() : "";
  for (const VolumeMount& m : inst.volumes) apart += "/" + m.name;
  return {s.gpu_model, s.mode,       s.gpus,   s.mig_profile, s.milli_gpu,     s.gpu_memory_mib,
          s.vcpus,     s.memory_mib, s.nvlink, inst.billing,  std::move(apart)};
}

void PendingQueue::Push(const Instance& inst, bool tried) {
  Key key = KeyOf(inst);
  Group& g = groups_[key];
  g.members.insert({inst.seq, inst.id.str()});
  if (tried) g.failed_in = generation_;
  by_id_[inst.id.str()] = std::move(key);
}

bool PendingQueue::Remove(const Instance& inst) {
  auto it = by_id_.find(inst.id.str());
  if (it == by_id_.end()) return false;
  auto g = groups_.find(it->second);
  g->second.members.erase({inst.seq, inst.id.str()});
  if (g->second.members.empty()) groups_.erase(g);
  by_id_.erase(it);
  return true;
}

bool PendingQueue::HasUntried() const {
  return std::any_of(groups_.begin(), groups_.end(),
                     [&](const auto& g) { return g.second.failed_in != generation_; });
}

size_t PendingQueue::Pass(size_t max_failures,
                          const std::function<Attempt(const std::string& id)>& place) {
  // The untried groups in order: priority first (the billing mode is the key's last field),
  // then the oldest member.
  std::vector<std::pair<std::pair<int, int64_t>, Key>> order;
  for (const auto& [key, g] : groups_) {
    if (g.failed_in == generation_) continue;
    order.push_back({{-Priority(std::get<Billing>(key)), g.members.begin()->first}, key});
  }
  std::sort(order.begin(), order.end());
  size_t start = 0;
  if (resume_) {
    auto at = std::find_if(order.begin(), order.end(),
                           [&](const auto& o) { return o.second == *resume_; });
    if (at != order.end()) start = static_cast<size_t>(at - order.begin());
    resume_.reset();
  }
  size_t placed = 0, failures = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const Key& key = order[(start + i) % order.size()].second;
    if (failures == max_failures) {
      resume_ = key;
      break;
    }
    for (;;) {
      auto g = groups_.find(key);
      if (g == groups_.end()) break;  // Every member was placed.
      const std::pair<int64_t, std::string> member = *g->second.members.begin();
      const Attempt a = place(member.second);
      if (a == Attempt::kNoRoom) {
        g->second.failed_in = generation_;
        ++failures;
        break;
      }
      if (a == Attempt::kDeferred) {
        ++failures;  // It cost an attempt all the same.
        break;
      }
      // Placed: it leaves the queue (`place` may have emptied the group already).
      if (auto left = by_id_.find(member.second); left != by_id_.end()) {
        g = groups_.find(left->second);
        g->second.members.erase(member);
        if (g->second.members.empty()) groups_.erase(g);
        by_id_.erase(left);
      }
      ++placed;
    }
  }
  return placed;
}

}  // namespace tessera::core
