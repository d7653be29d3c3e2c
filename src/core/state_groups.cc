// The groups a stack replaced (stacks.h), retired once their replacements run.
#include <algorithm>
#include <utility>

#include "core/state.h"

namespace tessera::core {

void State::RetireReplacedGroups(store::Batch& batch) {
  std::vector<StackRecord> changed;
  for (const StackRecord* r : stacks_.Retiring()) {
    const Tenant* owner = tenants_.Find(r->tenant);
    if (!owner) continue;
    StackRecord next = *r;
    bool retired = false;
    for (StackObjectRecord& o : next.objects) {
      if (o.retiring.empty()) continue;
      auto g = groups_.table().Of(*owner, o.id);
      if (!g.ok() || (*g)->state != GroupState::kRunning) continue;  // Not ready: the old stay.
      const Group& group = **g;
      const bool all_run =
          std::all_of(group.members.begin(), group.members.end(), [&](const std::string& id) {
            const Instance* m = instances_.table().Find(id);
            return m && m->state == InstanceState::kRunning;
          });
      if (!all_run || group.members.empty()) continue;
      for (const std::string& old : o.retiring) {
        auto was = groups_.table().Of(*owner, old);
        if (was.ok() && !Ended((*was)->state)) (void)groups_.Delete(*owner, old, batch);
      }
      o.retiring.clear();
      retired = true;
    }
    if (retired) changed.push_back(std::move(next));
  }
  // Put replaces a record the tenant holds already, which is never refused.
  for (StackRecord& r : changed) (void)stacks_.Put(std::move(r), batch);
}

}  // namespace tessera::core
