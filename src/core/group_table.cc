#include "core/group_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/json.h"
#include "common/text.h"
#include "core/secrets.h"

namespace tessera::core {

void GroupTable::Save(Group& g, store::Batch& batch) {
  if (Ended(g.state)) TenantSecrets::DropValues(g.spec.member.env, g.spec.member.image);
  batch.settings.emplace_back(std::string(kPrefix) + g.id, DumpJson(ToJson(g, Secrets::kStored)));
}

void GroupTable::Number(Group& g) {
  g.seq = next_++;
  g.id = fmt::format("grp-{:06}", g.seq);
}

Group& GroupTable::Add(Group g) {
  const std::string id = g.id;
  return groups_.insert_or_assign(id, std::move(g)).first->second;
}

Group* GroupTable::Find(std::string_view id) {
  auto it = groups_.find(std::string(id));
  return it == groups_.end() ? nullptr : &it->second;
}

const Group* GroupTable::Find(std::string_view id) const {
  auto it = groups_.find(std::string(id));
  return it == groups_.end() ? nullptr : &it->second;
}

Result<const Group*> GroupTable::Of(const Tenant& caller, std::string_view id) const {
  const Group* g = Find(id);
  if (!g || !(caller.admin || caller.id == g->tenant)) {
    return Status::NotFound(fmt::format("group '{}' not found", Quote(id)));
  }
  return g;
}

Result<Group*> GroupTable::Of(const Tenant& caller, std::string_view id) {
  TESSERA_ASSIGN_OR_RETURN(const Group* g, std::as_const(*this).Of(caller, id));
  return const_cast<Group*>(g);
}

bool GroupTable::Lists(const Instance& inst) const {
  const Group* g = inst.group.empty() ? nullptr : Find(inst.group);
  return g && std::find(g->members.begin(), g->members.end(), inst.id.str()) != g->members.end();
}

std::vector<Group*> GroupTable::Waiting(bool spot) {
  std::vector<Group*> out;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Group* g = Find(*it);
    if (!g || Ended(g->state)) {
      it = waiting_.erase(it);
      continue;
    }
    if ((g->spec.member.billing == Billing::kSpot) == spot) out.push_back(g);
    ++it;
  }
  std::sort(out.begin(), out.end(), [](const Group* a, const Group* b) {
    const int pa = Priority(a->spec.member.billing), pb = Priority(b->spec.member.billing);
    return pa != pb ? pa > pb : a->seq < b->seq;
  });
  return out;
}

void GroupTable::EvictEnded(Time cutoff, Duration retention,
                            const std::function<void(const Group&)>& evicted) {
  // Ended groups wait an hour by default: a sweep a minute is plenty.
  if (cutoff - last_sweep_ < std::min<Duration>(std::chrono::minutes(1), retention)) return;
  last_sweep_ = cutoff;
  std::erase_if(groups_, [&](const auto& entry) {
    const Group& g = entry.second;
    if (!Ended(g.state) || g.updated_at >= cutoff) return false;
    if (evicted) evicted(g);
    return true;
  });
}

}  // namespace tessera::core
