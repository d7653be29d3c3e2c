// Groups (group_service.h): gangs placed all or nothing with a topology, members that carry the
// distributed-training environment and its rendezvous, a group's fate when a member ends, and
// whole-group restarts.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "common/text.h"
#include "core/group_service.h"
#include "core/invariant.h"

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

bool Groups::PlaceGang(Group& g, store::Batch& batch) {
  std::vector<Instance*> pending;
  std::vector<fleet::NodeIndex> used;  // Nodes of placed members, in rank order.
  for (const std::string& id : g.members) {
    Instance* inst = instances_->Find(id);
    if (!inst) continue;
    if (inst->state == InstanceState::kPending) {
      pending.push_back(inst);
    } else if (inst->assignment &&
               std::find(used.begin(), used.end(), inst->assignment->node) == used.end()) {
      used.push_back(inst->assignment->node);
    }
  }
  if (pending.empty()) {
    table_.DoneWaiting(g.id);
    return true;
  }
  const int64_t needed = used.empty() ? std::max(1, g.spec.min_available) : 1;
  if (pending.front()->billing == Billing::kOnDemand) {
    // On-demand work leaves the capacity that reservations guarantee alone, gangs too.
    if (std::string why = accounts_->HeldForReservations(*pending.front(), needed); !why.empty()) {
      g.reason = "waiting: " + why;
      return false;
    }
  }
  const bool first = used.empty();
  const Shape& shape = pending.front()->shape;
  sched::Request req = admission_->RequestFor(shape, pending.front()->billing);
  req.observe = false;
  req.source = static_cast<uint32_t>(TenantNumber(g.tenant.str()));
  if (g.spec.topology == Topology::kNvlink && shape.gpus > 1) req.nvlink = true;
  // Members that mount volumes all go to the volumes' node: the one they have, else the one the
  // first member placed takes.
  const bool with_volumes = !pending.front()->volumes.empty();
  std::optional<fleet::NodeIndex> pinned;
  if (const std::string node = mounts_->NodeOf(*pending.front()); !node.empty()) {
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
    ++counters_->scheduling_attempts;
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
    preemptor_->AddSearches(std::min<size_t>(need - placed.size(), kGangSearches));
    for (size_t i = placed.size(); i < pending.size() && placed.size() < need; ++i) {
      auto plan = preemptor_->Find(req, pinned);
      if (!plan) break;
      if (with_volumes) pinned = plan->node;
      for (Instance* v : plan->victims) {
        preemptor_->Untrack(v);
        CheckInvariant(scheduler_->Release(*v->assignment), "releasing a spot victim for a trial");
        victims.push_back(v);
      }
      auto a = scheduler_->ScheduleOn(req, plan->node);
      // The search showed it fits once the victims are gone.
      if (!a) InvariantBroken("a gang member did not fit where the preemption search placed it");
      placed.push_back({pending[i], *a});
    }
    counters_->preemption_searches = preemptor_->searches_total();
    // Back to the fleet as it is; what follows evicts for real, or gives notice.
    release_placed();
    released = true;
    for (auto it = victims.rbegin(); it != victims.rend(); ++it) {
      CheckInvariant(scheduler_->Reserve(*(*it)->assignment), "booking a spot victim back");
      preemptor_->Track(*it);
    }
    if (placed.size() >= need) {
      // Those due notice are stopped by their agents after it, and the gang is placed once they
      // have; the others go now.
      if (const size_t warned = lifecycle_->PreemptFor(victims, *pending.front(), batch)) {
        g.awaiting_notice_until = now + options_->spot_notice + options_->node_timeout +
                                  std::chrono::seconds(g.spec.member.stop_grace_seconds);
        g.reason = fmt::format(
            "waiting for {} spot instance(s) to stop after their preemption notice", warned);
        return false;
      }
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
  const Instance* rank0 = instances_->Find(g.members.front());
  std::string master, port;
  bool rank0_placed = false;
  for (const auto& [inst, a] : placed) {
    if (inst != rank0) continue;
    rank0_placed = true;
    const std::string& node = fleet_->node(a.node).name;
    master = NodeAddress(node);
    const AgentNode* agent = agents_->Find(node);
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
    lifecycle_->Book(*inst, a, batch);
    int local_rank = 0, local_size = 0;
    for (const std::string& id : g.members) {
      const Instance* m = instances_->Find(id);
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
    lifecycle_->Start(*inst, batch);
  }
  g.state = GroupState::kRunning;
  g.reason.clear();
  g.updated_at = clock_->Now();
  if (placed.size() == pending.size()) table_.DoneWaiting(g.id);
  return true;
}

bool AwaitsRendezvous(const Instance& inst) {
  return !inst.group.empty() && !inst.group_env.empty() && !inst.group_env.count("MASTER_PORT");
}

void Groups::RendezvousReserved(Instance& rank0, std::optional<int> reserved, store::Batch& batch) {
  if (rank0.rank != 0 || !AwaitsRendezvous(rank0)) return;
  const Group* g = table_.Find(rank0.group);
  if (!g) return;
  const int port = reserved.value_or(kMasterPortBase + static_cast<int>(g->seq % kMasterPorts));
  const std::string text = std::to_string(port);
  for (const std::string& id : g->members) {
    Instance* m = instances_->Find(id);
    if (!m || !m->assignment || !AwaitsRendezvous(*m)) continue;
    m->group_env["MASTER_PORT"] = text;
    if (auto e = m->group_env.find("PET_RDZV_ENDPOINT"); e != m->group_env.end()) {
      e->second = HostPort(m->group_env["MASTER_ADDR"], port);
    }
    if (m != &rank0) {
      agents_->Notify(*m, m->node);
      lifecycle_->Save(*m, batch);
    }
  }
  spdlog::info("group {}: rank 0 ({}) reserved MASTER_PORT {} on {}", g->id, rank0.id.str(), port,
               rank0.node);
}

void Groups::Place(store::Batch& batch, bool spot) {
  // Higher priority first, then first come, first served.
  const std::vector<Group*> waiting = table_.Waiting(spot);
  // As the queue does: a gang that found no room is not tried again until capacity frees, so
  // waiting gangs cost a round nothing while the fleet is unchanged, however many wait; and the
  // pass that runs out of failures leaves the untried ones for the next, which starts with them.
  const int64_t generation = queue_->generation();
  int failures = 0;
  for (Group* g : waiting) {
    if (g->failed_in == generation) continue;
    const std::string reason = g->reason;
    const bool placed = PlaceGang(*g, batch);
    if (placed || g->reason != reason) table_.Save(*g, batch);
    if (placed) continue;
    g->failed_in = generation;
    if (++failures >= kGroupFailuresPerPass) {
      table_.Retry();  // The rest are tried in a later pass.
      break;
    }
  }
}

bool Groups::Settle(store::Batch& batch) {
  const std::vector<std::string> ended = table_.TakeEndedMembers();
  if (ended.empty()) return false;
  for (const std::string& id : ended) {
    Instance* inst = instances_->Find(id);
    if (!inst) continue;
    Group* found = table_.Find(inst->group);
    if (!found) continue;
    Group& g = *found;
    if (Ended(g.state)) continue;
    if (std::erase(g.draining, id) > 0) {
      if (g.draining.empty()) StartAttempt(g, batch);
      continue;
    }
    if (std::find(g.members.begin(), g.members.end(), id) == g.members.end()) continue;
    if (inst->state == InstanceState::kSucceeded) {
      const bool all = std::all_of(g.members.begin(), g.members.end(), [&](const std::string& m) {
        const Instance* other = instances_->Find(m);
        return other && other->state == InstanceState::kSucceeded;
      });
      if (all) {
        g.state = GroupState::kSucceeded;
        g.reason = "every member exited 0";
        g.updated_at = clock_->Now();
        table_.Save(g, batch);
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
        if (Instance* other = instances_->Find(m)) {
          lifecycle_->Stop(*other, "its group's attempt ended: " + why, batch,
                           billing::Ending::kPlatform);
        }
      }
      g.state = GroupState::kFailed;
      g.reason = why;
      g.updated_at = clock_->Now();
    }
    table_.Save(g, batch);
  }
  return true;
}

void Groups::RestartWhole(Group& g, const std::string& why, std::string reason,
                          store::Batch& batch) {
  for (const std::string& m : g.members) {
    // The platform ends their runs, not their owner: billed to the second.
    if (Instance* other = instances_->Find(m))
      lifecycle_->Stop(*other, why, batch, billing::Ending::kPlatform);
  }
  ++g.restarts;
  g.state = GroupState::kWaiting;
  g.reason = std::move(reason);
  g.updated_at = clock_->Now();
  // The new attempt is made once the last one's members have all stopped: their GPUs, the owner's
  // quota and a reserved gang's units come back first, so it is admitted as the first one was.
  for (const std::string& m : g.members) {
    const Instance* other = instances_->Find(m);
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

void Groups::StartAttempt(Group& g, store::Batch& batch) {
  // The cap on pending work does not refuse it: the group was admitted at this size.
  if (Status s = AddMembers(g, 0, g.spec.size, batch, /*readmit=*/true); !s.ok()) {
    g.state = GroupState::kFailed;
    g.reason = "cannot restart: " + s.message();
  }
  table_.Save(g, batch);
}

}  // namespace tessera::core
