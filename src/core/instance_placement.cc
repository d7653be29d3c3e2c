// Where instances go (instance_service.h): placed as they come, from the batch window and from the
// queue's budgeted passes; spot victims evicted or given notice; capacity booked and released.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>

#include "core/instance_service.h"
#include "core/invariant.h"
#include "sched/plugins/sole_tenant.h"

namespace tessera::core {

void Instances::PlaceOrQueue(Instance& inst, store::Batch& batch) {
  // Identical requests already waiting go first: this one queues behind them.
  if (queue_.HasGroup(inst)) {
    queue_.Push(inst);
  } else if (const Attempt a = Place(inst, batch, /*first_attempt=*/true); a != Attempt::kPlaced) {
    queue_.Push(inst, /*tried=*/a == Attempt::kNoRoom);
  }
}

void Instances::PlaceHeld(store::Batch& batch) {
  struct Due {
    std::string id;
    int priority = 0;
    int64_t demand_milli = 0;
  };
  std::vector<Due> due;
  for (std::string& id : window_.TakeDue()) {
    const Instance* inst = table_.Find(id);
    // Deleted while it waited (or its tenant disabled): nothing to place.
    if (!inst || inst->state != InstanceState::kPending) continue;
    const sched::Request r = admission_->RequestFor(inst->shape, inst->billing);
    due.push_back({std::move(id), r.priority, GpuMilliOf(*inst)});
  }
  std::stable_sort(due.begin(), due.end(), [](const Due& a, const Due& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.demand_milli > b.demand_milli;
  });
  for (const Due& d : due) {
    Instance* inst = table_.Find(d.id);
    if (!inst) continue;
    PlaceOrQueue(*inst, batch);  // As a create without the window is.
    Save(*inst, batch);
  }
}

void Instances::PlaceQueued(store::Batch& batch) {
  queue_.Pass(options_->queue_failures_per_pass, [&](const std::string& id) {
    Instance* inst = table_.Find(id);
    if (!inst || inst->state != InstanceState::kPending) return Attempt::kPlaced;  // Stale.
    const Attempt a = Place(*inst, batch, /*first_attempt=*/false);
    if (a == Attempt::kPlaced) Save(*inst, batch);
    return a;
  });
}

Attempt Instances::Place(Instance& inst, store::Batch& batch, bool first_attempt) {
  if (inst.billing == Billing::kOnDemand) {
    if (std::string why = accounts_->HeldForReservations(inst); !why.empty()) {
      inst.reason = std::move(why);
      return Attempt::kNoRoom;
    }
  }
  sched::Request req = RequestOf(inst);
  // The policy learns each request once, weighed by its tenant, so a queue's retries and one
  // tenant's flood do not steer where everyone else's work goes.
  req.observe = first_attempt;
  // An instance whose volumes have a node goes there or nowhere.
  std::optional<fleet::NodeIndex> pinned;
  if (const std::string node = mounts_->NodeOf(inst); !node.empty()) {
    auto n = fleet_->Find(node);
    if (!n.ok()) {
      inst.reason = fmt::format(
          "waiting for node '{}', which holds its volumes and is not in the fleet", node);
      return Attempt::kNoRoom;
    }
    pinned = *n;
  }
  const auto start = std::chrono::steady_clock::now();
  std::optional<fleet::Assignment> a =
      pinned ? scheduler_->ScheduleOn(req, *pinned) : scheduler_->Schedule(req);
  counters_->scheduling_latency.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  ++counters_->scheduling_attempts;
  bool deferred = false;
  // Victims already have notice for this one: wait for them rather than take more.
  auto awaiting = awaiting_notice_.find(inst.id.str());
  if (!a && awaiting != awaiting_notice_.end() && clock_->Now() < awaiting->second) {
    return Attempt::kNoRoom;
  }
  // Moving a migratable share restarts it elsewhere, which costs less than ending spot work.
  if (!a && !pinned) {
    if (std::optional<Room> room = Repack(inst, req, batch)) {
      if (!room->now) return Attempt::kNoRoom;  // After the moved shares' notice.
      a = room->now;
    }
  }
  if (!a && inst.billing != Billing::kSpot) {
    // With the round's searches spent, a request that preemption might help is tried again in
    // a later round rather than written off until capacity frees.
    deferred = preemptor_.budget_spent() && preemptor_.CountFor(req) > 0;
    if (auto plan = preemptor_.Find(req, pinned)) {
      if (PreemptFor(plan->victims, inst, batch) > 0) return Attempt::kNoRoom;  // After notice.
      a = scheduler_->ScheduleOn(req, plan->node);
      // The search showed it fits once the victims are gone; anything else is a bug.
      if (!a) InvariantBroken("an instance did not fit where the preemption search placed it");
    }
    counters_->preemption_searches = preemptor_.searches_total();
  }
  if (!a) {
    if (pinned) {
      inst.reason = fmt::format("waiting for room on node '{}', which holds its volumes",
                                fleet_->node(*pinned).name);
    }
    return deferred ? Attempt::kDeferred : Attempt::kNoRoom;
  }
  Book(inst, *a, batch);
  Transition(inst, InstanceState::kScheduled, "", batch);
  agents_->Notify(inst, inst.node);
  return Attempt::kPlaced;
}

sched::Request Instances::RequestOf(const Instance& inst) const {
  sched::Request req = admission_->RequestFor(inst.shape, inst.billing);
  req.source = SourceOf(inst);
  return req;
}

namespace {
constexpr int kRepackSearchesPerRound = 2;
constexpr std::string_view kMoved = "moved to another GPU to make room for waiting work";
// The longest stop grace a share may ask for and still be moved. The create that waits for a move
// waits through the moved share's grace too, and the share's billing stops at its notice: a
// longer grace would hold the create back and run unbilled, on a move its own tenant may cause.
constexpr int kMaxMoveGraceSeconds = 30;
}  // namespace

std::optional<Instances::Room> Instances::Repack(Instance& inst, const sched::Request& req,
                                                 store::Batch& batch) {
  if (!options_->repack || repack_searches_ >= kRepackSearchesPerRound) return std::nullopt;
  ++repack_searches_;
  const Time now = clock_->Now();
  std::optional<sched::Repacker::Plan> plan = repacker_.MakeRoom(req, [&](const void* owner) {
    const auto* s = static_cast<const Instance*>(owner);  // Track's: the instance itself.
    // A move costs the work the share did in this run: one that ran longer stays. Lower-priority
    // work never restarts higher-priority work (spot never moves on-demand or reserved).
    // A long stop grace would hold the create back, unbilled (kMaxMoveGraceSeconds).
    return s->state == InstanceState::kRunning && !s->moving && s->started_at &&
           s->stop_grace_seconds <= kMaxMoveGraceSeconds &&
           now - *s->started_at <= options_->repack_max_run &&
           (!s->moved_at || now - *s->moved_at >= options_->repack_cooldown) &&
           Priority(s->billing) <= req.priority;
  });
  if (!plan) return std::nullopt;
  // The scheduler now holds the request's room and the moved shares' new places, their old ones
  // released.
  std::vector<Instance*> moved;
  bool notice = false;
  for (const sched::Repacker::Move& m : plan->moves) {
    moved.push_back(table_.Find(m.id));
    notice = notice || NeedsNotice(*moved.back());
  }
  if (notice) {
    // Shares that must be told run on where they are until they stop: their old places are
    // booked again, and the request waits for them. Where a new place overlaps an old one, no
    // move is made and all is as it was.
    CheckInvariant(scheduler_->Release(plan->placed), "repacking: releasing the room it made");
    size_t held = 0;
    while (held < plan->moves.size() && scheduler_->Reserve(plan->moves[held].from).ok()) ++held;
    if (held < plan->moves.size()) {
      for (size_t i = 0; i < plan->moves.size(); ++i) {
        const sched::Repacker::Move& m = plan->moves[i];
        if (i < held) CheckInvariant(scheduler_->Release(m.from), "repacking: undoing a move");
        CheckInvariant(scheduler_->Release(m.to), "repacking: undoing a move");
      }
      for (size_t i = 0; i < plan->moves.size(); ++i) {
        const sched::Repacker::Move& m = plan->moves[i];
        CheckInvariant(scheduler_->Reserve(m.from), "repacking: undoing a move");
        repacker_.Track(m.id, RequestOf(*moved[i]), m.from, moved[i]);
      }
      return std::nullopt;
    }
  }
  int grace_s = 0;  // The longest of the moved shares' stop graces.
  for (size_t i = 0; i < moved.size(); ++i) {
    Instance& s = *moved[i];
    s.moving = true;
    s.move_to = plan->moves[i].to;
    s.moved_at = now;
    ++counters_->repack_moves;
    // Its new place's node is its tenant's from now, as the capacity is: on a node that cannot
    // isolate tenants, no other tenant's work lands beside it meanwhile (FinishMove lets go).
    sole_tenant_->Hold(s.move_to->node, SourceOf(s));
    if (NeedsNotice(s)) {
      grace_s = std::max(grace_s, s.stop_grace_seconds);
      Warn(s, std::string(kMoved), batch);
    } else {
      FinishMove(s, batch, /*old_held=*/notice);
    }
  }
  if (!notice) return Room{plan->placed};
  const Time deadline = now + options_->spot_notice;
  awaiting_notice_[inst.id.str()] =
      deadline + options_->node_timeout + std::chrono::seconds(grace_s);
  // The reason names no instance: the moved ones may be another tenant's.
  inst.reason =
      fmt::format("waiting for {} instance(s) to move to other GPUs after their notice (until {})",
                  moved.size(), FormatRfc3339(deadline));
  return Room{};
}

void Instances::FinishMove(Instance& s, store::Batch& batch, bool old_held) {
  std::optional<fleet::Assignment> to = std::exchange(s.move_to, std::nullopt);
  if (to) sole_tenant_->Release(to->node, SourceOf(s));  // Assign holds it again.
  s.moving = false;
  if (old_held) {
    Release(s);
  } else {
    Forget(s);
    CapacityFreed();
  }
  const auto usable = [this, &s](const fleet::Assignment& a) {
    const fleet::Node& n = fleet_->node(a.node);
    for (int g = 0; g < a.gpu_count; ++g) {
      const fleet::Gpu& gpu = n.gpus[static_cast<size_t>(a.gpus[static_cast<size_t>(g)].gpu)];
      if (!gpu.grantable()) return false;
    }
    return n.state == fleet::NodeState::kReady &&
           secrets_->Missing(s.tenant.str(), s.env, s.image).empty();
  };
  if (to && usable(*to)) {
    ++s.restarts;
    s.started_at.reset();
    s.enqueued_at = clock_->Now();
    Book(s, *to, batch);
    Transition(s, InstanceState::kScheduled,
               fmt::format("{}; restarting on node '{}'", kMoved, s.node), batch,
               billing::Ending::kPlatform);
    agents_->Notify(s, s.node);
  } else {
    // Its new place was lost while it stopped (its node or GPU out of service, or at a restart),
    // or a secret it needs was deleted: it waits as any restart does (Requeue fails it then).
    if (to) CheckInvariant(scheduler_->Release(*to), "repacking: releasing a lost destination");
    Requeue(s, std::string(kMoved), batch);
  }
  Save(s, batch);
}

bool Instances::NeedsNotice(const Instance& v) const {
  if (const AgentNode* joined = agents_->Find(v.node)) return !joined->simulated;
  return options_->simulated_notice && v.state == InstanceState::kRunning;
}

void Instances::GiveNotice(const std::vector<Instance*>& victims, Instance& for_whom,
                           store::Batch& batch) {
  const Time deadline = clock_->Now() + options_->spot_notice;
  for (Instance* v : victims) {
    Warn(*v, "preempted by higher-priority work", batch);
    ++counters_->preemptions;
  }
  // The victims' stops free the capacity; until then (and a margin for their agent to report),
  // this one waits for them instead of taking more victims. The reason names no instance.
  awaiting_notice_[for_whom.id.str()] =
      deadline + options_->node_timeout + std::chrono::seconds(for_whom.stop_grace_seconds);
  for_whom.reason = fmt::format(
      "waiting for {} spot instance(s) to stop after their preemption notice (until "
      "{})",
      victims.size(), FormatRfc3339(deadline));
}

void Instances::Warn(Instance& v, const std::string& why, store::Batch& batch) {
  const Time deadline = clock_->Now() + options_->spot_notice;
  preemptor_.Untrack(&v);
  Transition(v, InstanceState::kPreempting,
             fmt::format("{}; stops at {} after its notice", why, FormatRfc3339(deadline)), batch,
             billing::Ending::kPlatform);
  v.preempt_at = deadline;
  agents_->Notify(v, v.node);
  Save(v, batch);
}

void Instances::Evict(Instance& v, store::Batch& batch) {
  Unbook(v);
  // The reason names no instance: the one that took the capacity may be another tenant's.
  ++counters_->preemptions;
  EndPreempted(v, "preempted by higher-priority work", batch);
  Save(v, batch);
}

size_t Instances::PreemptFor(const std::vector<Instance*>& victims, Instance& for_whom,
                             store::Batch& batch) {
  std::vector<Instance*> warned, now_gone;
  for (Instance* v : victims) (NeedsNotice(*v) ? warned : now_gone).push_back(v);
  for (Instance* v : now_gone) Evict(*v, batch);
  if (!warned.empty()) GiveNotice(warned, for_whom, batch);
  return warned.size();
}

void Instances::Book(Instance& inst, const fleet::Assignment& a, store::Batch& batch) {
  Assign(inst, a);
  mounts_->Settle(inst, batch);
}

void Instances::Assign(Instance& inst, const fleet::Assignment& a) {
  inst.assignment = a;
  inst.node = fleet_->node(a.node).name;
  inst.gpus = DescribeGpus(a, *fleet_);
  node_gpus_->UseReportedMigUuids(inst);
  sole_tenant_->Hold(a.node, SourceOf(inst));
  if (inst.billing == Billing::kSpot) preemptor_.Track(&inst);
  accounts_->CountOnDemand(inst, true);
  awaiting_notice_.erase(inst.id.str());
  if (inst.migratable) repacker_.Track(inst.id.str(), RequestOf(inst), a, &inst);
}

void Instances::Unbook(Instance& inst) {
  if (!inst.assignment) return;
  // The scheduler refuses only what is not held, which would be a bookkeeping bug: surface it
  // loudly rather than leak or double-free capacity.
  CheckInvariant(scheduler_->Release(*inst.assignment),
                 fmt::format("releasing {}'s capacity", inst.id.str()));
  Forget(inst);
}

void Instances::Forget(Instance& inst) {
  if (!inst.assignment) return;
  preemptor_.Untrack(&inst);
  repacker_.Untrack(inst.id.str());
  accounts_->CountOnDemand(inst, false);
  if (inst.move_to) {
    // Stopped or lost before its move finished: the place booked for it is free again.
    CheckInvariant(scheduler_->Release(*inst.move_to),
                   fmt::format("releasing {}'s place after a move", inst.id.str()));
    sole_tenant_->Release(inst.move_to->node, SourceOf(inst));
    inst.move_to.reset();
  }
  inst.moving = false;
  // Until now, even while stopping or preempting: its workload may run until its agent reported
  // the stop, so a node that cannot isolate tenants stays closed to the others until then.
  sole_tenant_->Release(inst.assignment->node, SourceOf(inst));
  inst.assignment.reset();
  inst.endpoints.clear();
  endpoints_->Index(inst);
  inst.ran_on = inst.node;
  inst.ran_gpus = std::move(inst.gpus);
  const std::string node = std::move(inst.node);
  inst.node.clear();
  inst.gpus.clear();
  agents_->Notify(inst, node);  // Its agent forgets it.
}

}  // namespace tessera::core
