// What the state does for groups (group_service.h): the instance lifecycle their members go
// through (Groups::Lifecycle), and the groups a stack replaced, retired once their replacements
// run.
#include <algorithm>
#include <utility>

#include "core/state.h"

namespace tessera::core {

Result<Admitted> State::AdmitMember(const Tenant& owner, const CreateInstanceRequest& req,
                                    int count, bool readmit, std::string_view group) {
  return AdmitFor(owner, req, count, readmit, group);
}

Result<Instance*> State::AddMember(const Tenant& owner, const CreateInstanceRequest& req,
                                   Admitted admitted) {
  return AddInstance(owner, req, std::move(admitted));
}

void State::BookMember(Instance& inst, const fleet::Assignment& a, store::Batch& batch) {
  Book(inst, a);
  mounts_.Settle(inst, batch);
}

void State::StartMember(Instance& inst, store::Batch& batch) {
  Transition(inst, InstanceState::kScheduled, "", batch);
  agents_.Notify(inst, inst.node);
  Save(inst, batch);
}

void State::StopMember(Instance& inst, const std::string& why, store::Batch& batch,
                       billing::Ending ending) {
  Stop(inst, why, batch, ending);
}

size_t State::PreemptFor(const std::vector<Instance*>& victims, Instance& for_whom,
                         store::Batch& batch) {
  std::vector<Instance*> warned, now_gone;
  for (Instance* v : victims) (NeedsNotice(*v) ? warned : now_gone).push_back(v);
  for (Instance* v : now_gone) Evict(*v, batch);
  if (!warned.empty()) GiveNotice(warned, for_whom, batch);
  return warned.size();
}

void State::SaveMember(const Instance& inst, store::Batch& batch) { Save(inst, batch); }

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
            const Instance* m = instances_.Find(id);
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
