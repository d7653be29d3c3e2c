// Instance groups (docs/groups.md): gangs placed all or nothing with a topology, members that
// carry the distributed-training environment, and whole-group restarts.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "common/text.h"
#include "core/state.h"

namespace tessera::core {

namespace {

constexpr int kMasterPortBase = 29500;  // torchrun's default MASTER_PORT, and the range above it.
constexpr int kMasterPorts = 1000;
// Candidate nodes tried one by one for a member before the policy chooses on its own.
constexpr size_t kMemberTries = 64;
// Groups that may fail to place in one pass.
constexpr int kGroupFailuresPerPass = 16;

bool Ended(GroupState s) { return s != GroupState::kWaiting && s != GroupState::kRunning; }

}  // namespace

Result<nlohmann::json> State::CreateGroup(const Tenant& caller, const GroupRequest& req,
                                          store::Batch& batch) {
  auto admitted = AdmitFor(caller, req.member, req.size);
  if (!admitted.ok()) return admitted.status().WithPrefix("template");
  if (req.member.billing == Billing::kReserved) {
    return Status::InvalidArgument(
        "field 'template.billing': a group's members are on_demand or spot (reserved groups are "
        "not supported yet)");
  }
  Group g;
  g.id = fmt::format("grp-{:06}", next_group_++);
  g.tenant = caller.id;
  g.spec = req;
  g.seq = next_group_ - 1;
  g.created_at = g.updated_at = clock_->Now();
  Group& stored = groups_.emplace(g.id, std::move(g)).first->second;
  TESSERA_RETURN_IF_ERROR(AddMembers(stored, 0, stored.spec.size, batch));
  batch.settings.emplace_back(std::string(kNextGroup), std::to_string(next_group_));
  PlaceGang(stored, batch);
  SaveGroup(stored, batch);
  return GroupView(stored);
}

Status State::AddMembers(Group& g, int from, int to, store::Batch& batch) {
  const Tenant* owner = tenants_.Find(g.tenant.str());
  if (!owner) return Status::NotFound(fmt::format("tenant '{}' not found", g.tenant.str()));
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, admission_.Admit(g.spec.member));
  g.members.resize(static_cast<size_t>(to));
  for (int rank = from; rank < to; ++rank) {
    CreateInstanceRequest req = g.spec.member;
    req.name = fmt::format("{}-{}", g.spec.name.empty() ? g.id : g.spec.name, rank);
    TESSERA_ASSIGN_OR_RETURN(Instance * inst, AddInstance(*owner, req, admitted));
    inst->group = g.id;
    inst->rank = rank;
    g.members[static_cast<size_t>(rank)] = inst->id.str();
    Save(*inst, batch);
  }
  groups_retry_ = true;
  return Status::Ok();
}

bool State::PlaceGang(Group& g, store::Batch& batch) {
  std::vector<Instance*> pending;
  std::vector<fleet::NodeIndex> used;  // Nodes of placed members, in rank order.
  for (const std::string& id : g.members) {
    Instance* inst = instances_.Find(id);
    if (!inst) continue;
    if (inst->state == InstanceState::kPending) {
      pending.push_back(inst);
    } else if (inst->assignment &&
               std::find(used.begin(), used.end(), inst->assignment->node) == used.end()) {
      used.push_back(inst->assignment->node);
    }
  }
  if (pending.empty()) return true;
  const bool first = used.empty();
  const Shape& shape = pending.front()->shape;
  sched::Request req = admission_.RequestFor(shape, pending.front()->billing);
  req.observe = false;
  req.source = static_cast<uint32_t>(TenantNumber(g.tenant.str()));
  if (g.spec.topology == Topology::kNvlink && shape.gpus > 1) req.nvlink = true;

  // Nodes that could take a member, roomiest first: whole free GPUs for whole-GPU members,
  // free thousandths for fractions.
  std::vector<std::pair<int64_t, fleet::NodeIndex>> ranked;
  const auto model = catalog_->FindGpuIndex(shape.gpu_model);
  const int64_t unit = shape.GpuMilli(*catalog_);
  const bool whole = unit >= fleet::kMilliPerGpu;
  if (g.spec.topology != Topology::kAny || g.spec.placement == Placement::kSpread) {
    for (uint32_t i = 0; i < fleet_->nodes().size(); ++i) {
      const fleet::Node& n = fleet_->nodes()[i];
      if (n.state != fleet::NodeState::kReady || (model && n.model != *model)) continue;
      // With the nvlink topology, a node's room is its roomiest island's, so a gang packs onto
      // as few islands as it can.
      std::map<int, int64_t> islands;
      int64_t room = 0;
      for (size_t k = 0; k < n.gpus.size(); ++k) {
        const fleet::Gpu& gpu = n.gpus[k];
        const int64_t free = whole
                                 ? (gpu.free_milli == fleet::kMilliPerGpu ? fleet::kMilliPerGpu : 0)
                                 : gpu.free_milli;
        room += free;
        islands[gpu.island >= 0 ? gpu.island : -1 - static_cast<int>(k)] += free;
      }
      if (g.spec.topology == Topology::kNvlink) {
        room = 0;
        for (const auto& [island, free] : islands) room = std::max(room, free);
      }
      if (room >= std::min<int64_t>(unit, fleet::kMilliPerGpu)) {
        ranked.push_back({room, fleet::NodeIndex(i)});
      }
    }
    std::sort(ranked.begin(), ranked.end(), [&](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first
                                : scheduler_->NodeRank(a.second) < scheduler_->NodeRank(b.second);
    });
  }
  auto is_used = [&](fleet::NodeIndex n) {
    return std::find(used.begin(), used.end(), n) != used.end();
  };
  // One member: pack fills the nodes already used, then the roomiest; spread takes the roomiest
  // node not used yet, then the used ones; `any` with pack leaves the choice to the policy.
  auto place_one = [&]() -> std::optional<fleet::Assignment> {
    const bool pack = g.spec.placement == Placement::kPack;
    if (pack && g.spec.topology == Topology::kAny) return scheduler_->Schedule(req);
    if (pack) {
      for (fleet::NodeIndex n : used) {
        if (auto a = scheduler_->ScheduleOn(req, n)) return a;
      }
    }
    size_t tries = 0;
    for (const auto& [room, n] : ranked) {
      if (is_used(n)) continue;
      if (++tries > kMemberTries) break;
      if (auto a = scheduler_->ScheduleOn(req, n)) return a;
    }
    if (!pack) {
      for (fleet::NodeIndex n : used) {
        if (auto a = scheduler_->ScheduleOn(req, n)) return a;
      }
    }
    return scheduler_->Schedule(req);
  };

  std::vector<std::pair<Instance*, fleet::Assignment>> placed;
  for (Instance* inst : pending) {
    auto a = place_one();
    ++counters_.scheduling_attempts;
    if (!a) break;
    placed.push_back({inst, *a});
    if (!is_used(a->node)) used.push_back(a->node);
  }
  const int placed_before = static_cast<int>(g.members.size() - pending.size());
  const size_t need =
      first ? static_cast<size_t>(std::max(1, g.spec.min_available - placed_before)) : 1;
  if (placed.size() < need) {
    // All or nothing: nothing is held while the gang waits.
    for (const auto& [inst, a] : placed) {
      if (Status s = scheduler_->Release(a); !s.ok()) std::abort();  // Just booked: a bug.
    }
    g.reason = fmt::format(
        "waiting for room for {} member(s) of {} x {} at once ({} topology, {}): the fleet has "
        "room for {} now",
        need, pending.size(), shape.instance_type.empty() ? shape.gpu_model : shape.instance_type,
        TopologyName(g.spec.topology), PlacementName(g.spec.placement), placed.size());
    return false;
  }
  // Rank 0's node is the rendezvous: MASTER_ADDR, and a port of the group's own.
  const Instance* rank0 = instances_.Find(g.members.front());
  std::string master;
  for (const auto& [inst, a] : placed) {
    if (inst == rank0) master = fleet_->node(a.node).name;
  }
  if (master.empty() && rank0) master = rank0->node;
  const int port = kMasterPortBase + static_cast<int>(g.seq % kMasterPorts);
  for (const auto& [inst, a] : placed) {
    Book(*inst, a);
    int local_rank = 0, local_size = 0;
    for (const std::string& id : g.members) {
      const Instance* m = instances_.Find(id);
      if (!m || !m->assignment || m->assignment->node != a.node) continue;
      ++local_size;
      if (m->rank < inst->rank) ++local_rank;
    }
    inst->group_env = {{"WORLD_SIZE", std::to_string(g.spec.size)},
                       {"RANK", std::to_string(inst->rank)},
                       {"LOCAL_RANK", std::to_string(local_rank)},
                       {"LOCAL_WORLD_SIZE", std::to_string(local_size)},
                       {"MASTER_ADDR", master},
                       {"MASTER_PORT", std::to_string(port)},
                       {"TESSERA_GROUP", g.id},
                       {"TESSERA_GROUP_RESTARTS", std::to_string(g.restarts)}};
    Transition(*inst, InstanceState::kScheduled, "", batch);
    agents_.Notify(*inst, inst->node);
    Save(*inst, batch);
  }
  g.state = GroupState::kRunning;
  g.reason.clear();
  g.updated_at = clock_->Now();
  return true;
}

void State::PlaceGroups(store::Batch& batch) {
  if (!groups_retry_) return;
  groups_retry_ = false;
  std::vector<Group*> waiting;
  for (auto& [id, g] : groups_) {
    if (Ended(g.state)) continue;
    for (const std::string& m : g.members) {
      const Instance* inst = instances_.Find(m);
      if (inst && inst->state == InstanceState::kPending) {
        waiting.push_back(&g);
        break;
      }
    }
  }
  // Higher priority first, then first come, first served.
  std::sort(waiting.begin(), waiting.end(), [](const Group* a, const Group* b) {
    const int pa = Priority(a->spec.member.billing), pb = Priority(b->spec.member.billing);
    return pa != pb ? pa > pb : a->seq < b->seq;
  });
  int failures = 0;
  for (Group* g : waiting) {
    const std::string reason = g->reason;
    const bool placed = PlaceGang(*g, batch);
    if (placed || g->reason != reason) SaveGroup(*g, batch);
    if (!placed && ++failures >= kGroupFailuresPerPass) {
      groups_retry_ = true;  // The rest are tried in a later pass.
      break;
    }
  }
}

bool State::SettleGroups(store::Batch& batch) {
  if (ended_members_.empty()) return false;
  std::vector<std::string> ended = std::exchange(ended_members_, {});
  for (const std::string& id : ended) {
    Instance* inst = instances_.Find(id);
    if (!inst) continue;
    auto it = groups_.find(inst->group);
    if (it == groups_.end()) continue;
    Group& g = it->second;
    if (Ended(g.state)) continue;
    if (std::find(g.members.begin(), g.members.end(), id) == g.members.end()) continue;
    if (inst->state == InstanceState::kSucceeded) {
      const bool all = std::all_of(g.members.begin(), g.members.end(), [&](const std::string& m) {
        const Instance* other = instances_.Find(m);
        return other && other->state == InstanceState::kSucceeded;
      });
      if (all) {
        g.state = GroupState::kSucceeded;
        g.reason = "every member exited 0";
        g.updated_at = clock_->Now();
        SaveGroup(g, batch);
      }
      continue;
    }
    // A member failed, was preempted or lost: the attempt ends for every member.
    const std::string why =
        fmt::format("rank {} ({}) {}: {}", inst->rank, id, StateName(inst->state), inst->reason);
    for (const std::string& m : g.members) {
      if (Instance* other = instances_.Find(m); other && other != inst) {
        Stop(*other, "its group's attempt ended: " + why, batch);
      }
    }
    g.updated_at = clock_->Now();
    if (g.spec.restart) {
      ++g.restarts;
      g.state = GroupState::kWaiting;
      g.reason = "restarting whole after " + why;
      g.members.clear();
      if (Status s = AddMembers(g, 0, g.spec.size, batch); !s.ok()) {
        g.state = GroupState::kFailed;
        g.reason = "cannot restart: " + s.message();
      }
    } else {
      g.state = GroupState::kFailed;
      g.reason = why;
    }
    SaveGroup(g, batch);
  }
  return true;
}

nlohmann::json State::GroupView(const Group& g) const {
  nlohmann::json j = ToJson(g);
  j.erase("seq");
  nlohmann::json members = nlohmann::json::array();
  int placed = 0;
  for (const std::string& id : g.members) {
    const Instance* inst = instances_.Find(id);
    nlohmann::json m = {{"instance", id}};
    if (inst) {
      m["rank"] = inst->rank;
      m["state"] = StateName(inst->state);
      m["node"] = inst->node.empty() ? nlohmann::json() : nlohmann::json(inst->node);
      if (inst->assignment) ++placed;
    }
    members.push_back(std::move(m));
  }
  j["members"] = std::move(members);
  j["placed"] = placed;
  return j;
}

void State::SaveGroup(const Group& g, store::Batch& batch) {
  batch.settings.emplace_back(std::string(kGroupPrefix) + g.id, DumpJson(ToJson(g)));
}

Result<nlohmann::json> State::GetGroup(const Tenant& caller, std::string_view id) const {
  auto it = groups_.find(std::string(id));
  if (it == groups_.end() || !(caller.admin || caller.id == it->second.tenant)) {
    return Status::NotFound(fmt::format("group '{}' not found", Quote(id)));
  }
  return GroupView(it->second);
}

nlohmann::json State::ListGroups(const Tenant& caller) const {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [id, g] : groups_) {
    if (caller.admin || caller.id == g.tenant) list.push_back(GroupView(g));
  }
  return nlohmann::json{{"groups", std::move(list)}};
}

Result<nlohmann::json> State::DeleteGroup(const Tenant& caller, std::string_view id,
                                          store::Batch& batch) {
  auto it = groups_.find(std::string(id));
  if (it == groups_.end() || !(caller.admin || caller.id == it->second.tenant)) {
    return Status::NotFound(fmt::format("group '{}' not found", Quote(id)));
  }
  Group& g = it->second;
  if (g.state != GroupState::kDeleted) {
    g.state = GroupState::kDeleted;
    g.reason = "deleted by its owner";
    g.updated_at = clock_->Now();
    for (const std::string& m : g.members) {
      if (Instance* inst = instances_.Find(m)) Stop(*inst, "its group was deleted", batch);
    }
    SaveGroup(g, batch);
  }
  return GroupView(g);
}

Result<nlohmann::json> State::ScaleGroup(const Tenant& caller, std::string_view id, int size,
                                         store::Batch& batch) {
  auto it = groups_.find(std::string(id));
  if (it == groups_.end() || !(caller.admin || caller.id == it->second.tenant)) {
    return Status::NotFound(fmt::format("group '{}' not found", Quote(id)));
  }
  Group& g = it->second;
  if (Ended(g.state)) {
    return Status::FailedPrecondition(
        fmt::format("group '{}' is {}: it cannot be scaled", g.id, GroupStateName(g.state)));
  }
  if (size < 1 || size > kMaxGroupSize) {
    return Status::InvalidArgument(
        fmt::format("field 'size': {} is out of range [1, {}]", size, kMaxGroupSize));
  }
  const int current = static_cast<int>(g.members.size());
  if (size > current) {
    TESSERA_ASSIGN_OR_RETURN(Admitted admitted,
                             AdmitFor(caller.admin ? *tenants_.Find(g.tenant.str()) : caller,
                                      g.spec.member, size - current));
    (void)admitted;
    TESSERA_RETURN_IF_ERROR(AddMembers(g, current, size, batch));
  } else {
    // The newest members first.
    for (int rank = current - 1; rank >= size; --rank) {
      const std::string m = g.members[static_cast<size_t>(rank)];
      g.members.pop_back();
      if (Instance* inst = instances_.Find(m)) Stop(*inst, "its group was scaled in", batch);
    }
  }
  g.spec.size = size;
  g.spec.min_available = std::min(g.spec.min_available, size);
  g.updated_at = clock_->Now();
  PlaceGang(g, batch);
  SaveGroup(g, batch);
  return GroupView(g);
}

Status State::RestoreGroups(const std::vector<std::pair<std::string, std::string>>& records) {
  for (const auto& [key, value] : records) {
    if (key == kNextGroup) {
      next_group_ = std::max<int64_t>(next_group_, std::atoll(value.c_str()));
      continue;
    }
    auto j = ParseJson(value, "setting " + key);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(Group g, GroupFromJson(*j, "setting " + key));
    next_group_ = std::max(next_group_, g.seq + 1);
    groups_[g.id] = std::move(g);
  }
  groups_retry_ = true;
  return Status::Ok();
}

}  // namespace tessera::core
