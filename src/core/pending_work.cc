#include "core/pending_work.h"

#include <fmt/format.h>

#include <algorithm>

namespace tessera::core {

void PendingWork::Remove(const std::string& tenant) {
  auto it = count_.find(tenant);
  if (it != count_.end() && --it->second <= 0) count_.erase(it);
}

int64_t PendingWork::Count(const std::string& tenant) const {
  auto it = count_.find(tenant);
  return it == count_.end() ? 0 : it->second;
}

int64_t PendingWork::Room(const Tenant& t) const {
  return std::max<int64_t>(0, CapOf(t) - Count(t.id.str()));
}

Status PendingWork::Admit(const Tenant& t, int64_t count) const {
  const int64_t cap = CapOf(t), pending = Count(t.id.str());
  // In this order, so a count far past the cap cannot overflow.
  if (count <= cap && pending <= cap - count) return Status::Ok();
  return Status::ResourceExhausted(
             fmt::format("too many pending instances: tenant '{}' has {} waiting to be placed "
                         "(members of waiting groups included) and a cap of {}; this asks for "
                         "{} more. Delete pending instances or groups, or wait for some to be "
                         "placed; an operator may raise quota.max_pending",
                         t.name, pending, cap, count))
      .WithReason("too_many_pending");
}

}  // namespace tessera::core
