// Instance groups (docs/groups.md): gangs placed all or nothing with a topology, members that
// carry the distributed-training environment, and whole-group restarts.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "common/text.h"
#include "core/invariant.h"
#include "core/state.h"

namespace tessera::core {

namespace {

constexpr int kMasterPortBase = 29500;  // torchrun's default MASTER_PORT, and the range above it.
constexpr int kMasterPorts = 1000;
// Candidate nodes tried one by one for a member before the policy chooses on its own.
constexpr size_t kMemberTries = 64;
// Groups that may fail to place in one pass.
constexpr int kGroupFailuresPerPass = 16;
// Preemption searches a gang may add to its round: one per member it still needs, up to this.
constexpr size_t kGangSearches = 64;

}  // namespace

Result<nlohmann::json> State::CreateGroup(const Tenant& caller, const GroupRequest& req,
                                          store::Batch& batch) {
  Group g;
  g.id = fmt::format("grp-{:06}", next_group_++);
  g.tenant = caller.id;
  g.spec = req;
  g.seq = next_group_ - 1;
  // The template's values are sealed under the group's own record (its members' under theirs).
  TESSERA_RETURN_IF_ERROR(CheckSecretRefs(caller, g.spec.member, "template."));
  TESSERA_RETURN_IF_ERROR(SealValues(TemplateRecord(g.id), g.spec.member.env, g.spec.member.image));
  g.created_at = g.updated_at = clock_->Now();
  Group& stored = groups_.emplace(g.id, std::move(g)).first->second;
  if (Status s = AddMembers(stored, 0, stored.spec.size, batch); !s.ok()) {
    groups_.erase(stored.id);  // AddMembers made nothing.
    return s;
  }
  batch.settings.emplace_back(std::string(kNextGroup), std::to_string(next_group_));
  if (!PlaceGang(stored, batch)) stored.failed_in = queue_.generation();
  SaveGroup(stored, batch);
  return GroupView(stored);
}

Result<Admitted> State::AdmitMembers(const Group& g, int count, bool readmit) {
  const Tenant* owner = tenants_.Find(g.tenant.str());
  if (!owner) return Status::NotFound(fmt::format("tenant '{}' not found", g.tenant.str()));
  auto admitted = AdmitFor(*owner, g.spec.member, count, readmit, g.id);
  if (admitted.ok()) return admitted;
  // What admission says of the shape is about the template; quota and budget are not.
  const Status& s = admitted.status();
  const bool shape =
      s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition;
  return shape ? s.WithPrefix("template") : s;
}

Status State::AddMembers(Group& g, int from, int to, store::Batch& batch, bool readmit) {
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, AdmitMembers(g, to - from, readmit));
  const Tenant* owner = tenants_.Find(g.tenant.str());
  if (g.spec.member.billing == Billing::kReserved) {
    // Every new member claims a unit: all of them, or none is made.
    TESSERA_RETURN_IF_ERROR(ClaimReservation(*owner, admitted.shape, to - from).status());
  }
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
  g.failed_in = -1;  // New members: worth a try whatever the capacity.
  waiting_groups_.insert(g.id);
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
  if (pending.empty()) {
    waiting_groups_.erase(g.id);
    return true;
  }
  const int64_t needed = used.empty() ? std::max(1, g.spec.min_available) : 1;
  if (pending.front()->billing == Billing::kOnDemand) {
    // On-demand work leaves the capacity that reservations guarantee alone, gangs too.
    if (std::string why = HeldForReservations(*pending.front(), needed); !why.empty()) {
      g.reason = "waiting: " + why;
      return false;
    }
  }
  const bool first = used.empty();
  const Shape& shape = pending.front()->shape;
  sched::Request req = admission_.RequestFor(shape, pending.front()->billing);
  req.observe = false;
  req.source = static_cast<uint32_t>(TenantNumber(g.tenant.str()));
  if (g.spec.topology == Topology::kNvlink && shape.gpus > 1) req.nvlink = true;
  // Members that mount volumes all go to the volumes' node: the one they have, else the one the
  // first member placed takes.
  const bool with_volumes = !pending.front()->volumes.empty();
  std::optional<fleet::NodeIndex> pinned;
  if (const std::string node = VolumeNodeOf(*pending.front()); !node.empty()) {
    auto n = fleet_->Find(node);
    if (!n.ok()) {
      g.reason = fmt::format(
          "waiting for node '{}', which holds its volumes and is not in the fleet", node);
      return false;
    }
    pinned = *n;
  } else if (with_volumes && !used.empty()) {
    pinned = used.front();
  }

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
      // as few islands as it can (a GPU without NVLink peers is an island of its own).
      std::array<int64_t, fleet::kMaxGpusPerNode> islands{};
      int64_t room = 0, alone = 0;
      for (const fleet::Gpu& gpu : n.gpus) {
        const int64_t free = whole
                                 ? (gpu.free_milli == fleet::kMilliPerGpu ? fleet::kMilliPerGpu : 0)
                                 : gpu.free_milli;
        room += free;
        if (gpu.island >= 0 && gpu.island < fleet::kMaxGpusPerNode) {
          islands[static_cast<size_t>(gpu.island)] += free;
        } else {
          alone = std::max(alone, free);
        }
      }
      if (g.spec.topology == Topology::kNvlink) {
        room = std::max(alone, *std::max_element(islands.begin(), islands.end()));
      }
      if (room >= std::min<int64_t>(unit, fleet::kMilliPerGpu)) {
        ranked.push_back({room, fleet::NodeIndex(i)});
      }
    }
    // Only the first few are ever tried: those are put in order, the rest left as they are.
    const size_t wanted = std::min(ranked.size(), kMemberTries + pending.size() + used.size());
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(wanted),
                      ranked.end(), [&](const auto& a, const auto& b) {
                        return a.first != b.first ? a.first > b.first
                                                  : scheduler_->NodeRank(a.second) <
                                                        scheduler_->NodeRank(b.second);
                      });
    ranked.resize(wanted);
  }
  auto is_used = [&](fleet::NodeIndex n) {
    return std::find(used.begin(), used.end(), n) != used.end();
  };
  // One member: pack fills the nodes already used, then the roomiest; spread takes the roomiest
  // node not used yet, then the used ones; `any` with pack leaves the choice to the policy.
  auto place_one = [&]() -> std::optional<fleet::Assignment> {
    if (pinned) return scheduler_->ScheduleOn(req, *pinned);
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
    if (with_volumes) pinned = a->node;
    placed.push_back({inst, *a});
    if (!is_used(a->node)) used.push_back(a->node);
  }
  const int placed_before = static_cast<int>(g.members.size() - pending.size());
  const size_t need =
      first ? static_cast<size_t>(std::max(1, g.spec.min_available - placed_before)) : 1;
  auto release_placed = [&] {
    for (auto it = placed.rbegin(); it != placed.rend(); ++it) {
      CheckInvariant(scheduler_->Release(it->second), "releasing a gang member just booked");
    }
  };
  // Preemption, for on-demand gangs: the members that did not fit try the fewest spot victims
  // each, released for the trial; the victims go only if the whole gang then fits.
  std::vector<Instance*> victims;
  const Time now = clock_->Now();
  bool released = false;
  if (placed.size() < need && g.spec.member.billing != Billing::kSpot &&
      now >= g.awaiting_notice_until) {
    preemptor_.AddSearches(std::min<size_t>(need - placed.size(), kGangSearches));
    for (size_t i = placed.size(); i < pending.size() && placed.size() < need; ++i) {
      auto plan = preemptor_.Find(req, pinned);
      if (!plan) break;
      if (with_volumes) pinned = plan->node;
      for (Instance* v : plan->victims) {
        preemptor_.Untrack(v);
        CheckInvariant(scheduler_->Release(*v->assignment), "releasing a spot victim for a trial");
        victims.push_back(v);
      }
      auto a = scheduler_->ScheduleOn(req, plan->node);
      // The search showed it fits once the victims are gone.
      if (!a) InvariantBroken("a gang member did not fit where the preemption search placed it");
      placed.push_back({pending[i], *a});
    }
    counters_.preemption_searches = preemptor_.searches_total();
    // Back to the fleet as it is; what follows evicts for real, or gives notice.
    release_placed();
    released = true;
    for (auto it = victims.rbegin(); it != victims.rend(); ++it) {
      CheckInvariant(scheduler_->Reserve(*(*it)->assignment), "booking a spot victim back");
      preemptor_.Track(*it);
    }
    if (placed.size() >= need) {
      std::vector<Instance*> warned, now_gone;
      for (Instance* v : victims) (NeedsNotice(*v) ? warned : now_gone).push_back(v);
      if (!warned.empty()) {
        // Their agents stop them after the notice; the gang is placed once they have. The
        // others (no notice due) go now.
        for (Instance* v : now_gone) Evict(*v, batch);
        GiveNotice(warned, *pending.front(), batch);
        g.awaiting_notice_until = now + options_.spot_notice + options_.node_timeout +
                                  std::chrono::seconds(g.spec.member.stop_grace_seconds);
        g.reason = fmt::format(
            "waiting for {} spot instance(s) to stop after their preemption notice", warned.size());
        return false;
      }
      for (Instance* v : victims) Evict(*v, batch);
      for (const auto& [inst, a] : placed) {
        // It fit without them.
        CheckInvariant(scheduler_->Reserve(a), "booking a gang member where it fit");
      }
      released = false;
    }
  }
  if (placed.size() < need) {
    // All or nothing: nothing is held while the gang waits.
    if (!released) release_placed();
    if (now < g.awaiting_notice_until) return false;  // Its reason says whom it waits for.
    g.reason = fmt::format(
        "waiting for room for {} member(s) of {} x {} at once ({} topology, {}): the fleet has "
        "room for {} now",
        need, pending.size(), shape.instance_type.empty() ? shape.gpu_model : shape.instance_type,
        TopologyName(g.spec.topology), PlacementName(g.spec.placement), placed.size());
    return false;
  }
  // Rank 0's node is the rendezvous: MASTER_ADDR, and MASTER_PORT, a port rank 0's agent reserves
  // on that node as it starts rank 0. The other members start once it reported the port
  // (DesiredState holds them back; RendezvousReserved hands it out). Without an agent process
  // (a fleet node with no agent, or rank 0 with nothing to run: no command and no image, whose
  // entrypoint would run), nothing listens: the group gets a port of its own at once.
  const Instance* rank0 = instances_.Find(g.members.front());
  std::string master, port;
  bool rank0_placed = false;
  for (const auto& [inst, a] : placed) {
    if (inst != rank0) continue;
    rank0_placed = true;
    const std::string& node = fleet_->node(a.node).name;
    master = NodeAddress(node);
    const AgentNode* agent = agents_.Find(node);
    if (!agent || !agent->registered() || (rank0->command.empty() && rank0->image.empty())) {
      port = std::to_string(kMasterPortBase + static_cast<int>(g.seq % kMasterPorts));
    }
  }
  if (!rank0_placed && rank0) {
    auto addr = rank0->group_env.find("MASTER_ADDR");
    master = addr != rank0->group_env.end() ? addr->second : NodeAddress(rank0->node);
    auto known = rank0->group_env.find("MASTER_PORT");
    if (known != rank0->group_env.end()) port = known->second;
  }
  for (const auto& [inst, a] : placed) {
    Book(*inst, a);
    SettleVolumes(*inst, batch);
    int local_rank = 0, local_size = 0;
    for (const std::string& id : g.members) {
      const Instance* m = instances_.Find(id);
      if (!m || !m->assignment || m->assignment->node != a.node) continue;
      ++local_size;
      if (m->rank < inst->rank) ++local_rank;
    }
    inst->group_env = {{"MASTER_ADDR", master},
                       {"TESSERA_GROUP", g.id},
                       {"TESSERA_GROUP_RESTARTS", std::to_string(g.restarts)}};
    if (g.spec.elastic) {
      // torchrun reads its flags from PET_*: --nnodes=min:max --rdzv-backend=c10d
      // --rdzv-endpoint=rank 0's node --rdzv-id=the attempt. It numbers the workers itself, and
      // a size that changes leaves no WORLD_SIZE to go stale.
      inst->group_env["PET_NNODES"] =
          fmt::format("{}:{}", g.spec.elastic->min, g.spec.elastic->max);
      inst->group_env["PET_RDZV_BACKEND"] = "c10d";
      inst->group_env["PET_RDZV_ID"] = fmt::format("{}-{}", g.id, g.restarts);
      // Before rank 0's agent reserved its port, the agent fills in {port} (the desired state's
      // port_env, docs/agent.md).
      inst->group_env["PET_RDZV_ENDPOINT"] =
          HostPort(master, port.empty() ? std::string_view("{port}") : std::string_view(port));
    } else {
      inst->group_env["WORLD_SIZE"] = std::to_string(g.spec.size);
      inst->group_env["RANK"] = std::to_string(inst->rank);
      inst->group_env["LOCAL_RANK"] = std::to_string(local_rank);
      inst->group_env["LOCAL_WORLD_SIZE"] = std::to_string(local_size);
    }
    if (!port.empty()) inst->group_env["MASTER_PORT"] = port;
    Transition(*inst, InstanceState::kScheduled, "", batch);
    agents_.Notify(*inst, inst->node);
    Save(*inst, batch);
  }
  g.state = GroupState::kRunning;
  g.reason.clear();
  g.updated_at = clock_->Now();
  if (placed.size() == pending.size()) waiting_groups_.erase(g.id);
  return true;
}

bool AwaitsRendezvous(const Instance& inst) {
  return !inst.group.empty() && !inst.group_env.empty() && !inst.group_env.count("MASTER_PORT");
}

void State::RendezvousReserved(Instance& rank0, std::optional<int> reserved, store::Batch& batch) {
  if (rank0.rank != 0 || !AwaitsRendezvous(rank0)) return;
  auto g = groups_.find(rank0.group);
  if (g == groups_.end()) return;
  const int port =
      reserved.value_or(kMasterPortBase + static_cast<int>(g->second.seq % kMasterPorts));
  const std::string text = std::to_string(port);
  for (const std::string& id : g->second.members) {
    Instance* m = instances_.Find(id);
    if (!m || !m->assignment || !AwaitsRendezvous(*m)) continue;
    m->group_env["MASTER_PORT"] = text;
    if (auto e = m->group_env.find("PET_RDZV_ENDPOINT"); e != m->group_env.end()) {
      e->second = HostPort(m->group_env["MASTER_ADDR"], port);
    }
    if (m != &rank0) {
      agents_.Notify(*m, m->node);
      Save(*m, batch);
    }
  }
  spdlog::info("group {}: rank 0 ({}) reserved MASTER_PORT {} on {}", g->first, rank0.id.str(),
               port, rank0.node);
}

void State::PlaceGroups(store::Batch& batch, bool spot) {
  std::vector<Group*> waiting;
  for (auto it = waiting_groups_.begin(); it != waiting_groups_.end();) {
    auto g = groups_.find(*it);
    if (g == groups_.end() || Ended(g->second.state)) {
      it = waiting_groups_.erase(it);
      continue;
    }
    if ((g->second.spec.member.billing == Billing::kSpot) == spot) waiting.push_back(&g->second);
    ++it;
  }
  // Higher priority first, then first come, first served.
  std::sort(waiting.begin(), waiting.end(), [](const Group* a, const Group* b) {
    const int pa = Priority(a->spec.member.billing), pb = Priority(b->spec.member.billing);
    return pa != pb ? pa > pb : a->seq < b->seq;
  });
  // As the queue does: a gang that found no room is not tried again until capacity frees, so
  // waiting gangs cost a round nothing while the fleet is unchanged, however many wait; and the
  // pass that runs out of failures leaves the untried ones for the next, which starts with them.
  const int64_t generation = queue_.generation();
  int failures = 0;
  for (Group* g : waiting) {
    if (g->failed_in == generation) continue;
    const std::string reason = g->reason;
    const bool placed = PlaceGang(*g, batch);
    if (placed || g->reason != reason) SaveGroup(*g, batch);
    if (placed) continue;
    g->failed_in = generation;
    if (++failures >= kGroupFailuresPerPass) {
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
    if (std::erase(g.draining, id) > 0) {
      if (g.draining.empty()) StartAttempt(g, batch);
      continue;
    }
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
    if (g.spec.restart) {
      RestartWhole(g, "its group's attempt ended: " + why, "restarting whole after " + why, batch);
    } else {
      for (const std::string& m : g.members) {
        // The platform ends their runs, not their owner: billed to the second.
        if (Instance* other = instances_.Find(m)) {
          Stop(*other, "its group's attempt ended: " + why, batch, billing::Ending::kPlatform);
        }
      }
      g.state = GroupState::kFailed;
      g.reason = why;
      g.updated_at = clock_->Now();
    }
    SaveGroup(g, batch);
  }
  return true;
}

void State::RestartWhole(Group& g, const std::string& why, std::string reason,
                         store::Batch& batch) {
  for (const std::string& m : g.members) {
    // The platform ends their runs, not their owner: billed to the second.
    if (Instance* other = instances_.Find(m)) Stop(*other, why, batch, billing::Ending::kPlatform);
  }
  ++g.restarts;
  g.state = GroupState::kWaiting;
  g.reason = std::move(reason);
  g.updated_at = clock_->Now();
  // The new attempt is made once the last one's members have all stopped: their GPUs, the owner's
  // quota and a reserved gang's units come back first, so it is admitted as the first one was.
  for (const std::string& m : g.members) {
    const Instance* other = instances_.Find(m);
    if (other && IsActive(other->state)) g.draining.push_back(m);
  }
  ReleaseMembers(g.members);
  g.members.clear();
  if (g.draining.empty()) {
    StartAttempt(g, batch);
  } else {
    g.reason += fmt::format(
        "; waiting for {} member(s) of the last attempt to stop and give back their GPUs{}",
        g.draining.size(),
        g.spec.member.billing == Billing::kReserved ? " and reservation units" : "");
  }
}

void State::StartAttempt(Group& g, store::Batch& batch) {
  // The cap on pending work does not refuse it: the group was admitted at this size.
  if (Status s = AddMembers(g, 0, g.spec.size, batch, /*readmit=*/true); !s.ok()) {
    g.state = GroupState::kFailed;
    g.reason = "cannot restart: " + s.message();
  }
  SaveGroup(g, batch);
}

nlohmann::json State::GroupView(const Group& g) const {
  nlohmann::json j = ToJson(g, Secrets::kHidden);
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
  if (g.spec.autoscale) {
    nlohmann::json status = {{"desired", g.desired > 0 ? g.desired : g.spec.size},
                             {"floor", g.floor > 0 ? g.floor : g.spec.autoscale->min},
                             {"scale_ups", g.scale_ups},
                             {"scale_downs", g.scale_downs}};
    if (g.metric_value) status["value"] = *g.metric_value;
    if (g.backlog) status["backlog"] = *g.backlog;
    if (!g.decision.empty()) status["last_decision"] = g.decision;
    j["autoscale_status"] = std::move(status);
  }
  return j;
}

void State::SaveGroup(Group& g, store::Batch& batch) {
  // A group that ended makes no members again: its template keeps no values.
  if (Ended(g.state)) DropValues(g.spec.member.env, g.spec.member.image);
  batch.settings.emplace_back(std::string(kGroupPrefix) + g.id,
                              DumpJson(ToJson(g, Secrets::kStored)));
}

// The caller's group (any, for the admin); NotFound alike for an unknown id and another's group.
Result<const Group*> State::GroupOf(const Tenant& caller, std::string_view id) const {
  auto it = groups_.find(std::string(id));
  if (it == groups_.end() || !(caller.admin || caller.id == it->second.tenant)) {
    return Status::NotFound(fmt::format("group '{}' not found", Quote(id)));
  }
  return &it->second;
}

Result<Group*> State::GroupOf(const Tenant& caller, std::string_view id) {
  TESSERA_ASSIGN_OR_RETURN(const Group* g, std::as_const(*this).GroupOf(caller, id));
  return const_cast<Group*>(g);
}

Result<nlohmann::json> State::GetGroup(const Tenant& caller, std::string_view id) const {
  TESSERA_ASSIGN_OR_RETURN(const Group* g, GroupOf(caller, id));
  return GroupView(*g);
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
  TESSERA_ASSIGN_OR_RETURN(Group * found, GroupOf(caller, id));
  Group& g = *found;
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
  GroupPatch patch;
  patch.size = size;
  return PatchGroup(caller, id, patch, batch);
}

Result<nlohmann::json> State::PatchGroup(const Tenant& caller, std::string_view id,
                                         const GroupPatch& patch, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Group * found, GroupOf(caller, id));
  Group& g = *found;
  if (Ended(g.state)) {
    return Status::FailedPrecondition(
        fmt::format("group '{}' is {}: it cannot change", g.id, GroupStateName(g.state)));
  }
  // Everything is checked before anything changes: a refused size leaves the autoscale as it was.
  const std::optional<Autoscale>& a = patch.autoscale ? *patch.autoscale : g.spec.autoscale;
  if (patch.autoscale && a) {
    if (a->metric == AutoscaleMetric::kRps && !g.spec.service) {
      return Status::InvalidArgument("field 'autoscale.metric': rps needs a service");
    }
    if (const auto& e = g.spec.elastic; e && (a->min < e->min || a->max > e->max)) {
      return Status::InvalidArgument(fmt::format(
          "field 'autoscale': [{}, {}] is outside the group's elastic [min, max] = [{}, {}] (its "
          "members' rendezvous was made for that range; recreate the group to widen it)",
          a->min, a->max, e->min, e->max));
    }
  }
  if (patch.size) {
    if (*patch.size < 1 || *patch.size > kMaxGroupSize) {
      return Status::InvalidArgument(
          fmt::format("field 'size': {} is out of range [1, {}]", *patch.size, kMaxGroupSize));
    }
    if (patch.autoscale && a && (*patch.size < a->min || *patch.size > a->max)) {
      return Status::InvalidArgument(
          fmt::format("field 'size': {} is outside autoscale's [min, max] = [{}, {}]", *patch.size,
                      a->min, a->max));
    }
    TESSERA_RETURN_IF_ERROR(Resize(g, *patch.size, "its group was scaled in", batch));
  }
  if (patch.autoscale) {
    // The size is left to the next evaluation, whose window starts again.
    g.spec.autoscale = *patch.autoscale;
    g.recommendations.clear();
    g.metric_value.reset();
    g.desired = 0;
    g.floor = 0;
    g.decision.clear();
    g.updated_at = clock_->Now();
    SaveGroup(g, batch);
  }
  return GroupView(g);
}

Status State::Resize(Group& g, int size, const std::string& why, store::Batch& batch) {
  const int from = g.spec.size;
  if (g.spec.elastic && (size < g.spec.elastic->min || size > g.spec.elastic->max)) {
    return Status::InvalidArgument(
        fmt::format("field 'size': {} is outside the group's elastic [min, max] = [{}, {}]", size,
                    g.spec.elastic->min, g.spec.elastic->max));
  }
  const int current = static_cast<int>(g.members.size());
  // Whether the attempt's world has begun: a member placed, so it may run with the old size.
  const bool started = std::any_of(g.members.begin(), g.members.end(), [&](const std::string& m) {
    const Instance* inst = instances_.Find(m);
    return inst && inst->state != InstanceState::kPending;
  });
  const bool runs = !g.spec.member.command.empty() || !g.spec.member.image.empty();
  const bool restart = g.draining.empty() && !g.spec.elastic && started && runs;
  if (!g.draining.empty() || restart) {
    // The next attempt is made at the new size: what it adds must pass the gate now.
    const int base = restart ? current : from;
    if (size > base) {
      TESSERA_ASSIGN_OR_RETURN(Admitted admitted, AdmitMembers(g, size - base));
      if (g.spec.member.billing == Billing::kReserved) {
        TESSERA_RETURN_IF_ERROR(
            ClaimReservation(*tenants_.Find(g.tenant.str()), admitted.shape, size - base).status());
      }
    }
  } else if (size > current) {
    TESSERA_RETURN_IF_ERROR(AddMembers(g, current, size, batch));
  } else {
    // The newest members first.
    for (int rank = current - 1; rank >= size; --rank) {
      const std::string m = g.members[static_cast<size_t>(rank)];
      g.members.pop_back();
      if (Instance* inst = instances_.Find(m)) Stop(*inst, why, batch);
      ReleaseMembers({m});
    }
  }
  // A gang placed whole stays whole at its new size.
  g.spec.min_available = g.spec.min_available == from ? size : std::min(g.spec.min_available, size);
  g.spec.size = size;
  g.updated_at = clock_->Now();
  if (restart) {
    // Every rank of a world that is not elastic must agree on WORLD_SIZE: a new world.
    RestartWhole(
        g, fmt::format("its group was resized from {} to {}, and is not elastic", from, size),
        fmt::format("restarting whole at size {} (was {}): the group is not elastic", size, from),
        batch);
  } else {
    if (!PlaceGang(g, batch)) g.failed_in = queue_.generation();
  }
  SaveGroup(g, batch);
  return Status::Ok();
}

Result<nlohmann::json> State::SetGroupBacklog(const Tenant& caller, std::string_view id,
                                              int64_t pending) {
  TESSERA_ASSIGN_OR_RETURN(Group * g, GroupOf(caller, id));
  g->backlog = pending;
  return GroupView(*g);
}

std::optional<double> State::GroupMetric(const Group& g) const {
  const Autoscale& a = *g.spec.autoscale;
  if (a.metric == AutoscaleMetric::kRps) {
    int running = 0;
    for (const std::string& id : g.members) {
      const Instance* inst = instances_.Find(id);
      running += inst && inst->state == InstanceState::kRunning;
    }
    return service_stats_.Rate(g.id) / std::max(1, running);
  }
  if (a.metric == AutoscaleMetric::kPending) {
    if (!g.backlog) return std::nullopt;
    return static_cast<double>(*g.backlog) / std::max(1, g.spec.size);
  }
  double sum = 0;
  int n = 0, missing = 0;
  for (const std::string& id : g.members) {
    const Instance* inst = instances_.Find(id);
    if (!inst) continue;
    auto node = agents_.nodes().find(inst->node);
    if (inst->state != InstanceState::kRunning || node == agents_.nodes().end() ||
        !node->second.telemetry) {
      missing += std::max(1, inst->shape.gpus);
      continue;
    }
    for (const GpuRef& ref : inst->gpus) {
      const auto r =
          telemetry::ReadHolder(*node->second.telemetry, ref.index, ref.mig_profile, ref.mig_start);
      if (!r || r->lost) {
        ++missing;
        continue;
      }
      ++n;
      if (a.metric == AutoscaleMetric::kGpuUtil) {
        sum += r->gpu_util;
      } else if (r->fb_total_mib > 0) {
        sum += 100.0 * static_cast<double>(r->fb_used_mib) / static_cast<double>(r->fb_total_mib);
      }
    }
  }
  if (n == 0) return std::nullopt;
  const double ready = sum / n;
  if (missing == 0) return ready;
  // As HPA does: GPUs without readings (members starting, say) count as idle when the ready
  // ones ask for more and as on target when they ask for fewer, so a scale-out that has not
  // started yet does not scale out again; and when that reverses the direction, nothing moves.
  const double value = (sum + (ready > a.target ? 0 : a.target) * missing) / (n + missing);
  return (ready > a.target) == (value > a.target) ? value : a.target;
}

void State::AutoscaleGroups(store::Batch& batch) {
  const Time now = clock_->Now();
  if (now - last_autoscale_ < options_.autoscale_interval) return;
  last_autoscale_ = now;
  for (auto& entry : groups_) {
    Group& g = entry.second;  // A reference, not a binding: the audit lambda below captures it.
    if (!g.spec.autoscale || Ended(g.state)) continue;
    const Autoscale& a = *g.spec.autoscale;
    const int current = g.spec.size;
    // The schedule's floor: the entry that fired last (within a week) sets it.
    int floor = a.min;
    std::string floor_why;
    std::optional<Time> latest;
    for (const ScheduleEntry& e : a.schedule) {
      auto fired = e.cron.Previous(now, std::chrono::hours(24 * 7));
      if (fired && (!latest || *fired > *latest)) {
        latest = fired;
        floor = std::max(a.min, e.min);
        floor_why = fmt::format("; schedule '{}' sets the floor to {}", e.cron.text(), e.min);
      }
    }
    g.metric_value = GroupMetric(g);
    int desired = current;
    std::string why = fmt::format("{}: no readings", AutoscaleMetricName(a.metric));
    if (g.metric_value) {
      const double ratio = *g.metric_value / a.target;
      if (std::abs(ratio - 1) > kAutoscaleTolerance) {
        // In double, and bounded before the cast: a backlog of 2^40 against a target of 0.001
        // asks for ~10^15 members, which no int holds.
        const double wanted = std::ceil(current * ratio - 1e-9);
        desired = wanted >= a.max ? a.max : wanted <= floor ? floor : static_cast<int>(wanted);
      }
      why = fmt::format("{} {:.1f} against a target of {:g} over {} member(s)",
                        AutoscaleMetricName(a.metric), *g.metric_value, a.target, current);
    }
    desired = std::clamp(desired, floor, a.max);
    // Down only to the highest recommendation of the window; up at once.
    const Time window = now - std::chrono::seconds(a.scale_down_stabilization_seconds);
    std::erase_if(g.recommendations, [&](const auto& r) { return r.first < window; });
    g.recommendations.push_back({now, desired});
    int next = desired;
    if (desired < current) {
      for (const auto& [at, size] : g.recommendations) next = std::max(next, size);
      next = std::min(next, current);
      if (now < g.scale_down_after) next = current;
    }
    g.desired = next;
    g.floor = floor;
    // At its owner's cap on pending work it scales out only as far as the cap leaves room, and
    // says so, rather than be refused at every evaluation.
    std::string held;
    if (const Tenant* owner = tenants_.Find(g.tenant.str()); owner && next > current) {
      const int64_t room = pending_.Room(*owner);
      if (next - current > room) {
        held =
            fmt::format("; held at {} by its owner's cap on pending instances ({} pending, cap {})",
                        current + room, pending_.Count(owner->id.str()), pending_.CapOf(*owner));
        next = current + static_cast<int>(room);
      }
    }
    auto audit = [&] {
      nlohmann::json detail = {
          {"from", current},     {"to", next},     {"metric", AutoscaleMetricName(a.metric)},
          {"target", a.target},  {"floor", floor}, {"max", a.max},
          {"reason", g.decision}};
      if (g.metric_value) detail["value"] = *g.metric_value;
      batch.audit.push_back(
          {0, FormatRfc3339(now), "autoscaler", "scale group", g.id, 200, DumpJson(detail)});
      spdlog::info("group {} autoscaled {}", g.id, g.decision);
    };
    if (next == current) {
      if (held.empty()) continue;
      // Said once, not at every evaluation while it stays held.
      std::string decision =
          fmt::format("{} -> {}: {}{}{}", current, g.desired, why, floor_why, held);
      if (decision != g.decision) {
        g.decision = std::move(decision);
        audit();
      }
      continue;
    }
    g.decision = fmt::format("{} -> {}: {}{}{}", current, next, why, floor_why, held);
    (next > current ? g.scale_ups : g.scale_downs)++;
    if (Status s = Resize(g, next, "scaled in by its autoscaler", batch); !s.ok()) {
      g.decision += "; refused: " + s.message();
    }
    audit();
  }
}

void State::EvictEndedGroups(Time cutoff) {
  // A sweep a minute at most (or a retention, when shorter): ended groups wait an hour by default.
  if (cutoff - last_group_sweep_ <
      std::min<Duration>(std::chrono::minutes(1), options_.retention)) {
    return;
  }
  last_group_sweep_ = cutoff;
  std::erase_if(groups_, [&](const auto& entry) {
    const Group& g = entry.second;
    if (!Ended(g.state) || g.updated_at >= cutoff) return false;
    ReleaseMembers(g.members);
    service_stats_.Forget(g.id);
    return true;
  });
}

std::string State::NodeAddress(const std::string& node) const {
  auto it = agents_.nodes().find(node);
  return it != agents_.nodes().end() && !it->second.address.empty() ? it->second.address : node;
}

void State::ReleaseMembers(const std::vector<std::string>& ids) {
  // The eviction sweep kept them while their group listed them: they may go now.
  for (const std::string& id : ids) {
    if (const Instance* inst = instances_.Find(id); inst && !IsActive(inst->state)) {
      instances_.Ended(*inst);
    }
  }
}

Status State::RestoreGroups(const std::vector<std::pair<std::string, std::string>>& records,
                            store::Batch& batch) {
  for (const auto& [key, value] : records) {
    if (key == kNextGroup) {
      next_group_ = std::max<int64_t>(next_group_, std::atoll(value.c_str()));
      continue;
    }
    auto j = ParseJson(value, "setting " + key);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(Group g, GroupFromJson(*j, "setting " + key));
    next_group_ = std::max(next_group_, g.seq + 1);
    TESSERA_ASSIGN_OR_RETURN(
        const bool changed,
        OpenValues(TemplateRecord(g.id), Ended(g.state), g.spec.member.env, g.spec.member.image));
    if (changed) SaveGroup(g, batch);
    // As in a running server, an ended group stays in memory for the retention only.
    if (Ended(g.state) && g.updated_at < clock_->Now() - options_.retention) continue;
    // The window's recommendations are gone with the last run: none is made up.
    if (g.spec.autoscale) {
      g.scale_down_after =
          clock_->Now() + std::chrono::seconds(g.spec.autoscale->scale_down_stabilization_seconds);
    }
    if (!Ended(g.state)) waiting_groups_.insert(g.id);  // PlaceGang drops those with none.
    for (const std::string& id : g.draining) {
      // Instances are restored first: one that ended lets the next attempt start.
      const Instance* inst = instances_.Find(id);
      if (!inst || !IsActive(inst->state)) ended_members_.push_back(id);
    }
    groups_[g.id] = std::move(g);
  }
  groups_retry_ = true;
  return Status::Ok();
}

}  // namespace tessera::core
