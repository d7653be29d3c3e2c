#include "core/instance_table.h"

#include <fmt/format.h>

#include "common/text.h"

namespace tessera::core {

Instance& InstanceTable::Add(Instance inst) {
  const int64_t seq = inst.seq;
  by_id_[inst.id.str()] = seq;
  by_tenant_[inst.tenant.str()].insert(seq);
  if (!IsActive(inst.state)) ended_.insert({inst.updated_at, seq});
  return by_seq_[seq] = std::move(inst);
}

Instance* InstanceTable::Find(std::string_view id) {
  auto it = by_id_.find(std::string(id));
  return it == by_id_.end() ? nullptr : &by_seq_.at(it->second);
}

const Instance* InstanceTable::Find(std::string_view id) const {
  auto it = by_id_.find(std::string(id));
  return it == by_id_.end() ? nullptr : &by_seq_.at(it->second);
}

Status InstanceNotFound(std::string_view id) {
  return Status::NotFound(fmt::format("instance '{}' not found", Quote(id)));
}

Result<Instance*> InstanceTable::FindFor(const Tenant& caller, std::string_view id) {
  Instance* inst = Find(id);
  if (!inst || !Visible(caller, *inst)) return InstanceNotFound(id);
  return inst;
}

Result<const Instance*> InstanceTable::FindFor(const Tenant& caller, std::string_view id) const {
  const Instance* inst = Find(id);
  if (!inst || !Visible(caller, *inst)) return InstanceNotFound(id);
  return inst;
}

std::vector<const Instance*> InstanceTable::Page(const std::string& tenant, int64_t after_seq,
                                                 size_t limit,
                                                 const std::function<bool(const Instance&)>& keep,
                                                 bool* more) const {
  std::vector<const Instance*> out;
  *more = false;
  auto take = [&](const Instance& inst) {
    if (!keep(inst)) return true;
    if (out.size() == limit) {
      *more = true;
      return false;
    }
    out.push_back(&inst);
    return true;
  };
  if (tenant.empty()) {
    for (auto it = by_seq_.upper_bound(after_seq); it != by_seq_.end(); ++it) {
      if (!take(it->second)) break;
    }
    return out;
  }
  auto t = by_tenant_.find(tenant);
  if (t == by_tenant_.end()) return out;
  for (auto it = t->second.upper_bound(after_seq); it != t->second.end(); ++it) {
    if (!take(by_seq_.at(*it))) break;
  }
  return out;
}

size_t InstanceTable::EvictEndedBefore(Time cutoff,
                                       const std::function<bool(const Instance&)>& evict) {
  size_t evicted = 0;
  for (auto it = ended_.begin(); it != ended_.end() && it->first < cutoff;) {
    auto inst = by_seq_.find(it->second);
    // An instance may have left its terminal state since (a preempted one that restarts).
    if (inst != by_seq_.end() && !IsActive(inst->second.state) &&
        inst->second.updated_at == it->first && (!evict || evict(inst->second))) {
      by_id_.erase(inst->second.id.str());
      auto t = by_tenant_.find(inst->second.tenant.str());
      t->second.erase(it->second);
      if (t->second.empty()) by_tenant_.erase(t);
      by_seq_.erase(inst);
      ++evicted;
    }
    it = ended_.erase(it);
  }
  return evicted;
}

}  // namespace tessera::core
