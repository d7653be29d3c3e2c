#include "core/state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/json.h"
#include "core/invariant.h"
#include "sched/plugins/sole_tenant.h"

namespace tessera::core {

namespace {

// Passes over the queue in one round: a stop an agent reports frees capacity for another pass.
constexpr int kMaxPassesPerRound = 4;

// Gives `scheduler` the filter that keeps a node that cannot isolate tenants to one tenant at a
// time; the scheduler owns it.
sched::SoleTenantFilter* AddSoleTenantFilter(sched::Scheduler& scheduler) {
  auto filter = std::make_unique<sched::SoleTenantFilter>();
  sched::SoleTenantFilter* out = filter.get();
  scheduler.AddFilter(std::move(filter));
  return out;
}

}  // namespace

State::State(const catalog::Catalog* catalog, const Clock* clock,
             std::unique_ptr<fleet::Fleet> fleet, std::unique_ptr<sched::Scheduler> scheduler,
             StateOptions options)
    : catalog_(catalog),
      clock_(clock),
      fleet_(std::move(fleet)),
      scheduler_(std::move(scheduler)),
      sole_tenant_(AddSoleTenantFilter(*scheduler_)),
      options_(options),
      tenants_(clock),
      secrets_(clock, options.sealer),
      admission_(catalog, fleet_.get(), options.whole_gpus_on_shared),
      usage_(catalog),
      user_usage_(catalog),
      pending_(options.max_pending_per_tenant),
      window_(*clock, static_cast<size_t>(std::max(options.batch_window, 1)), options.batch_wait),
      preemptor_(catalog, fleet_.get(), scheduler_.get(), options.preemption),
      agents_(options.sim_agents, options.simulated_notice),
      monitoring_(clock, Monitoring::Options{options.alert_interval, options.node_timeout,
                                             options.alerts, options.sealer}),
      accounts_(*catalog, *clock, *fleet_, admission_, tenants_, instances_, volumes_,
                options.node_timeout) {}

Result<Tenant> State::UpdateTenant(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                                   std::optional<bool> disabled, store::Batch& batch,
                                   std::optional<int64_t> max_pending,
                                   std::optional<int64_t> volumes_gib) {
  TESSERA_ASSIGN_OR_RETURN(
      Tenant t, tenants_.Update(id, quota_gpu_milli, disabled, batch, max_pending, volumes_gib));
  if (!t.disabled) return t;
  std::vector<Instance*> waiting;
  instances_.ForEach([&](Instance& inst) {
    if (inst.tenant == t.id && inst.state == InstanceState::kPending) waiting.push_back(&inst);
  });
  for (Instance* inst : waiting) {
    queue_.Remove(*inst);
    Transition(*inst, InstanceState::kTerminated, "its tenant was disabled while it was pending",
               batch);
    Save(*inst, batch);
  }
  return t;
}

Result<Admitted> State::AdmitFor(const Tenant& caller, const CreateInstanceRequest& req, int count,
                                 bool readmit, std::string_view group) {
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, admission_.Admit(req));
  TESSERA_RETURN_IF_ERROR(secrets_.CheckRefs(caller.id.str(), req.env, req.image));
  TESSERA_RETURN_IF_ERROR(mounts_.Check(caller.id.str(), req, count, group));
  const int64_t want = usage_.Marginal(caller.id.str(), admitted.shape) * count;
  const int64_t used = usage_.Milli(caller.id.str());
  if (used + want > caller.quota_gpu_milli) {
    return Status::ResourceExhausted(fmt::format(
        "quota exceeded by {} GPUs: tenant '{}' has a quota of {} GPUs, uses {}, and asks for {}",
        Gpus(used + want - caller.quota_gpu_milli), caller.name, Gpus(caller.quota_gpu_milli),
        Gpus(used), Gpus(want)));
  }
  // A user's own quota, inside the tenant's.
  const User* user = req.user.empty() ? nullptr : tenants_.users().Find(req.user);
  if (user && user->quota_gpu_milli) {
    const int64_t mine = user_usage_.Milli(user->id);
    const int64_t asks = user_usage_.Marginal(user->id, admitted.shape) * count;
    if (mine + asks > *user->quota_gpu_milli) {
      return Status::ResourceExhausted(fmt::format(
          "quota exceeded by {} GPUs: user '{}' has a quota of {} GPUs, uses {}, and asks for {}",
          Gpus(mine + asks - *user->quota_gpu_milli), user->name, Gpus(*user->quota_gpu_milli),
          Gpus(mine), Gpus(asks)));
    }
  }
  if (!readmit) TESSERA_RETURN_IF_ERROR(pending_.Admit(caller, count));
  TESSERA_RETURN_IF_ERROR(accounts_.CheckBudget(caller, req.billing));
  return admitted;
}

Result<Instance*> State::AddInstance(const Tenant& caller, const CreateInstanceRequest& req,
                                     Admitted admitted) {
  Instance inst;
  // Sealed under this instance's own record before anything changes: a keyring that fails
  // leaves the state as it was.
  const InstanceId id = InstanceId::FromNumber(next_instance_);
  inst.env = req.env;
  inst.image = req.image;
  for (auto& [name, v] : inst.env) v.sealed.clear();  // A template's, under the group's record.
  if (inst.image.auth) inst.image.auth->sealed.clear();
  TESSERA_RETURN_IF_ERROR(
      secrets_.SealValues(TenantSecrets::InstanceRecord(id.str()), inst.env, inst.image));
  if (req.billing == Billing::kReserved) {
    TESSERA_ASSIGN_OR_RETURN(inst.reservation, accounts_.ClaimReservation(caller, admitted.shape));
    accounts_.CountReservationUnit(inst, true);
  }
  inst.id = id;
  inst.seq = next_instance_++;
  inst.created_by = req.user;
  inst.tenant = caller.id;
  inst.name = req.name.empty() ? inst.id.str() : req.name;
  inst.billing = req.billing;
  inst.shape = std::move(admitted.shape);
  inst.command = req.command;
  inst.volumes = req.volumes;
  inst.ports = req.ports;
  inst.restart = req.restart;
  inst.stop_grace_seconds = req.stop_grace_seconds;
  inst.labels = req.labels;
  inst.annotations = req.annotations;
  inst.price_per_hour = admitted.price_per_hour;
  inst.created_at = inst.updated_at = inst.enqueued_at = clock_->Now();
  inst.history.push_back({inst.created_at, InstanceState::kPending, ""});
  Instance& stored = instances_.Add(std::move(inst));
  mounts_.Track(stored);
  CountUsage(stored, true);
  pending_.Add(stored.tenant.str());
  return &stored;
}

Result<Instance> State::CreateInstance(const Tenant& caller, const CreateInstanceRequest& req,
                                       store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, AdmitFor(caller, req, 1));
  TESSERA_ASSIGN_OR_RETURN(Instance * created, AddInstance(caller, req, std::move(admitted)));
  Instance& stored = *created;
  if (window_.enabled() && !queue_.HasGroup(stored)) {
    window_.Hold(stored.id.str());
  } else {
    PlaceOrQueue(stored, batch);
  }
  Save(stored, batch);
  return views_.Shown(stored);
}

void State::PlaceOrQueue(Instance& inst, store::Batch& batch) {
  // Identical requests already waiting go first: this one queues behind them.
  if (queue_.HasGroup(inst)) {
    queue_.Push(inst);
  } else if (const Attempt a = Place(inst, batch, /*first_attempt=*/true); a != Attempt::kPlaced) {
    queue_.Push(inst, /*tried=*/a == Attempt::kNoRoom);
  }
}

Result<Instance> State::DeleteInstance(const Tenant& caller, std::string_view id,
                                       store::Batch& batch) {
  Result<Instance*> found = instances_.FindFor(caller, id);
  if (!found.ok()) return found.status();
  Instance& inst = **found;
  if (!inst.group.empty() && IsActive(inst.state)) {
    return Status::FailedPrecondition(
        fmt::format("instance '{}' is rank {} of group '{}': scale or delete the group instead", id,
                    inst.rank, inst.group));
  }
  Stop(inst, "deleted by its owner", batch);
  return views_.Shown(inst);
}

Result<Instance> State::Relabel(const Tenant& caller, std::string_view id,
                                std::map<std::string, std::string> labels,
                                std::map<std::string, std::string> annotations,
                                store::Batch& batch) {
  Result<Instance*> found = instances_.FindFor(caller, id);
  if (!found.ok()) return found.status();
  Instance& inst = **found;
  if (!IsActive(inst.state)) {
    return Status::FailedPrecondition(fmt::format(
        "instance '{}' ended ({}): its labels stay as they were", id, StateName(inst.state)));
  }
  if (!inst.group.empty()) {
    return Status::FailedPrecondition(
        fmt::format("instance '{}' is rank {} of group '{}': its labels are its group's", id,
                    inst.rank, inst.group));
  }
  inst.labels = std::move(labels);
  inst.annotations = std::move(annotations);
  inst.updated_at = clock_->Now();
  Save(inst, batch);
  return views_.Shown(inst);
}

void State::Stop(Instance& inst, const std::string& why, store::Batch& batch,
                 billing::Ending ending) {
  if (!IsActive(inst.state) || inst.state == InstanceState::kStopping) return;
  if (inst.state == InstanceState::kPending) {
    queue_.Remove(inst);
    window_.Forget(inst.id.str());  // Deleted in the batch window: it no longer counts there.
    awaiting_notice_.erase(inst.id.str());
    Transition(inst, InstanceState::kTerminated, why + " while pending", batch);
  } else if (agents_.Serves(inst.node)) {
    // Being stopped: never a preemption victim from now on, so never restarted either. The
    // capacity frees when the agent reports the stop.
    preemptor_.Untrack(&inst);
    Transition(inst, InstanceState::kStopping, why, batch, ending);
    agents_.Notify(inst, inst.node);
  } else {
    // No agent serves the node, so nothing runs there to wait for.
    Unbook(inst);
    Transition(inst, InstanceState::kTerminated, why, batch, ending);
    CapacityFreed();
  }
  Save(inst, batch);
}

Status State::SetNodeDrained(const std::string& node, bool drained, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex n, fleet_->Find(node));
  if (AgentNode* joined = agents_.Find(node)) {
    // A lost node stays down until its agent reports; the flag applies then.
    joined->drained = drained;
    ApplyNodeState(*joined);
    AgentSupervisor::Save(*joined, batch);
  } else {
    TESSERA_RETURN_IF_ERROR(
        fleet_->SetNodeState(n, drained ? fleet::NodeState::kDraining : fleet::NodeState::kReady));
  }
  batch.settings.emplace_back("node_state/" + node, drained ? "draining" : "ready");
  if (!drained) CapacityFreed();
  return Status::Ok();
}

void State::ApplyNodeState(const AgentNode& node) {
  auto n = fleet_->Find(node.name);
  if (!n.ok()) return;
  const fleet::NodeState s = node.lost || node.all_gpus_unhealthy() ? fleet::NodeState::kDown
                             : node.drained                         ? fleet::NodeState::kDraining
                                                                    : fleet::NodeState::kReady;
  if (fleet_->node(*n).state != s) (void)fleet_->SetNodeState(*n, s);
  for (size_t g = 0; g < fleet_->node(*n).gpus.size(); ++g) {
    (void)fleet_->SetGpuHealthy(*n, static_cast<int>(g),
                                !node.unhealthy.contains(static_cast<int>(g)));
    (void)fleet_->SetGpuHeld(*n, static_cast<int>(g), node.mode_held(static_cast<int>(g)));
  }
  // A joined node's agent runs real processes, and unless it runs each tenant's under a uid of
  // their own, one tenant's workload could read or signal another's: such a node is shared, and
  // hosts one tenant at a time. The nodes of the in-core simulated agents (StateOptions::
  // sim_agents: the what-if simulator) and fleet-file nodes without an agent run nothing, so
  // they are never shared and the filter never refuses them.
  sole_tenant_->SetShared(*n, !node.isolated());
  queue_.KeepTenantsApart(sole_tenant_->shared_nodes() > 0);
}

void State::EndRound(store::Batch& batch) {
  // Agents act, freed capacity is offered to the queue, and placed work is started, until
  // nothing moves (each pass is budgeted, and so is the number of passes).
  health_.ExpireLeases(batch);
  health_.FinishRemovals(batch);
  groups_.RunAutoscaler(batch);
  PlaceHeld(batch);
  for (int i = 0; i < kMaxPassesPerRound; ++i) {
    const bool reported = ApplyAgentReports(batch);
    const bool settled = groups_.Settle(batch);
    if (i > 0 && !reported && !settled) break;
    const bool groups = groups_.TakeRetry();
    if (groups) groups_.Place(batch, /*spot=*/false);
    if (queue_.HasUntried()) PlaceQueued(batch);
    if (groups) groups_.Place(batch, /*spot=*/true);
  }
  RetireReplacedGroups(batch);
  // Ended work leaves memory after the retention: instances with their log tails, and groups.
  const Time cutoff = clock_->Now() - options_.retention;
  counters_.evicted +=
      static_cast<int64_t>(instances_.EvictEndedBefore(cutoff, [this](const Instance& inst) {
        // A member of a group's attempt stays while its group may still need its outcome; the
        // group lists it again when it leaves (Groups::EvictEnded).
        if (groups_.Lists(inst)) return false;
        logs_.Erase(inst.id.str());
        return true;
      }));
  groups_.EvictEnded(cutoff);
  monitoring_.Sweep();
  for (Instance* inst : accounts_.Roll(batch)) Save(*inst, batch);
  EvaluateAlerts(batch);
}

bool State::ApplyAgentReports(store::Batch& batch) {
  bool changed = false;
  for (const AgentReport& report : agents_.Collect()) {
    Instance* inst = instances_.Find(report.instance);
    if (inst && ApplyReport(*inst, report, batch)) {
      Save(*inst, batch);
      changed = true;
    }
  }
  return changed;
}

void State::PlaceQueued(store::Batch& batch) {
  queue_.Pass(options_.queue_failures_per_pass, [&](const std::string& id) {
    Instance* inst = instances_.Find(id);
    if (!inst || inst->state != InstanceState::kPending) return Attempt::kPlaced;  // Stale.
    const Attempt a = Place(*inst, batch, /*first_attempt=*/false);
    if (a == Attempt::kPlaced) Save(*inst, batch);
    return a;
  });
}

void State::Transition(Instance& inst, InstanceState to, std::string reason, store::Batch& batch,
                       billing::Ending ending) {
  if (inst.state == InstanceState::kRunning && to != InstanceState::kRunning) {
    accounts_.Close(inst, ending, batch);
  }
  if (to == InstanceState::kRunning && inst.state != InstanceState::kRunning) accounts_.Open(inst);
  const bool was_active = IsActive(inst.state);
  if (was_active && !IsActive(to)) {
    CountUsage(inst, false);
    accounts_.CountReservationUnit(inst, false);
  }
  if (!was_active && IsActive(to)) CountUsage(inst, true);
  if (inst.state == InstanceState::kPending && to != InstanceState::kPending) {
    pending_.Remove(inst.tenant.str());
  } else if (inst.state != InstanceState::kPending && to == InstanceState::kPending) {
    pending_.Add(inst.tenant.str());
  }
  inst.state = to;
  if (!inst.endpoints.empty()) endpoints_.Index(inst);  // Serving only while it runs.
  inst.pull.reset();  // A pull belongs to a scheduled attempt: it started, ended or moved.
  // Work that ended for good keeps no values in memory or at rest (a preempted instance may be
  // queued again: EndPreempted drops them when it is not).
  if (to == InstanceState::kTerminated || to == InstanceState::kSucceeded ||
      to == InstanceState::kFailed) {
    TenantSecrets::DropValues(inst.env, inst.image);
  }
  Record(inst, std::move(reason));
  if (!IsActive(to)) instances_.Ended(inst);
  // Only active instances hold their volumes (a preempted one queued again comes back).
  mounts_.Track(inst);
  if (was_active && !IsActive(to) && !inst.group.empty()) groups_.MemberEnded(inst);
}

void State::CountUsage(const Instance& inst, bool add) {
  if (add) {
    usage_.Add(inst.tenant.str(), inst.shape);
    if (!inst.created_by.empty()) user_usage_.Add(inst.created_by, inst.shape);
  } else {
    usage_.Remove(inst.tenant.str(), inst.shape);
    if (!inst.created_by.empty()) user_usage_.Remove(inst.created_by, inst.shape);
  }
}

void State::Record(Instance& inst, std::string reason) {
  inst.reason = std::move(reason);
  inst.updated_at = clock_->Now();
  if (inst.history.size() == kHistoryKept) inst.history.erase(inst.history.begin());
  inst.history.push_back({inst.updated_at, inst.state, inst.reason});
}

void State::Note(Instance& inst, std::string reason, store::Batch& batch) {
  Record(inst, std::move(reason));
  Save(inst, batch);
}

void State::Save(const Instance& inst, store::Batch& batch) {
  batch.instances.push_back(StoredRecord(inst, *fleet_, options_.instance_documents));
}

void State::WorkloadExited(const std::string& id, int exit_code) {
  const Instance* inst = instances_.Find(id);
  if (inst && (inst->state == InstanceState::kRunning || inst->state == InstanceState::kPreempting))
    agents_.Exited(*inst, exit_code);
}

void State::Book(Instance& inst, const fleet::Assignment& a) {
  inst.assignment = a;
  inst.node = fleet_->node(a.node).name;
  inst.gpus = DescribeGpus(a, *fleet_);
  node_gpus_.UseReportedMigUuids(inst);
  sole_tenant_->Hold(a.node, SourceOf(inst));
  if (inst.billing == Billing::kSpot) preemptor_.Track(&inst);
  accounts_.CountOnDemand(inst, true);
  awaiting_notice_.erase(inst.id.str());
}

void State::Unbook(Instance& inst) {
  if (!inst.assignment) return;
  preemptor_.Untrack(&inst);
  accounts_.CountOnDemand(inst, false);
  // The scheduler refuses only what is not held, which would be a bookkeeping bug: surface it
  // loudly rather than leak or double-free capacity.
  CheckInvariant(scheduler_->Release(*inst.assignment),
                 fmt::format("releasing {}'s capacity", inst.id.str()));
  // Until now, even while stopping or preempting: its workload may run until its agent reported
  // the stop, so a node that cannot isolate tenants stays closed to the others until then.
  sole_tenant_->Release(inst.assignment->node, SourceOf(inst));
  inst.assignment.reset();
  inst.endpoints.clear();
  endpoints_.Index(inst);
  inst.ran_on = inst.node;
  inst.ran_gpus = std::move(inst.gpus);
  const std::string node = std::move(inst.node);
  inst.node.clear();
  inst.gpus.clear();
  agents_.Notify(inst, node);  // Its agent forgets it.
}

Attempt State::Place(Instance& inst, store::Batch& batch, bool first_attempt) {
  if (inst.billing == Billing::kOnDemand) {
    if (std::string why = accounts_.HeldForReservations(inst); !why.empty()) {
      inst.reason = std::move(why);
      return Attempt::kNoRoom;
    }
  }
  sched::Request req = admission_.RequestFor(inst.shape, inst.billing);
  // The policy learns each request once, weighed by its tenant, so a queue's retries and one
  // tenant's flood do not steer where everyone else's work goes.
  req.observe = first_attempt;
  req.source = SourceOf(inst);
  // An instance whose volumes have a node goes there or nowhere.
  std::optional<fleet::NodeIndex> pinned;
  if (const std::string node = mounts_.NodeOf(inst); !node.empty()) {
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
  counters_.scheduling_latency.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  ++counters_.scheduling_attempts;
  bool deferred = false;
  // Victims already have notice for this one: wait for them rather than take more.
  auto awaiting = awaiting_notice_.find(inst.id.str());
  if (!a && awaiting != awaiting_notice_.end() && clock_->Now() < awaiting->second) {
    return Attempt::kNoRoom;
  }
  if (!a && inst.billing != Billing::kSpot) {
    // With the round's searches spent, a request that preemption might help is tried again in
    // a later round rather than written off until capacity frees.
    deferred = preemptor_.budget_spent() && preemptor_.CountFor(req) > 0;
    if (auto plan = preemptor_.Find(req, pinned)) {
      std::vector<Instance*> warned;
      for (Instance* v : plan->victims) {
        if (NeedsNotice(*v)) {
          warned.push_back(v);
        } else {
          Evict(*v, batch);
        }
      }
      if (!warned.empty()) {
        GiveNotice(warned, inst, batch);
        return Attempt::kNoRoom;
      }
      a = scheduler_->ScheduleOn(req, plan->node);
      // The search showed it fits once the victims are gone; anything else is a bug.
      if (!a) InvariantBroken("an instance did not fit where the preemption search placed it");
    }
    counters_.preemption_searches = preemptor_.searches_total();
  }
  if (!a) {
    if (pinned) {
      inst.reason = fmt::format("waiting for room on node '{}', which holds its volumes",
                                fleet_->node(*pinned).name);
    }
    return deferred ? Attempt::kDeferred : Attempt::kNoRoom;
  }
  Book(inst, *a);
  mounts_.Settle(inst, batch);
  Transition(inst, InstanceState::kScheduled, "", batch);
  agents_.Notify(inst, inst.node);
  return Attempt::kPlaced;
}

bool State::NeedsNotice(const Instance& v) {
  if (const AgentNode* joined = agents_.Find(v.node)) return !joined->simulated;
  return options_.simulated_notice && v.state == InstanceState::kRunning;
}

void State::GiveNotice(const std::vector<Instance*>& victims, Instance& for_whom,
                       store::Batch& batch) {
  const Time deadline = clock_->Now() + options_.spot_notice;
  for (Instance* v : victims) {
    Warn(*v, "preempted by higher-priority work", batch);
    ++counters_.preemptions;
  }
  // The victims' stops free the capacity; until then (and a margin for their agent to report),
  // this one waits for them instead of taking more victims. The reason names no instance.
  awaiting_notice_[for_whom.id.str()] =
      deadline + options_.node_timeout + std::chrono::seconds(for_whom.stop_grace_seconds);
  for_whom.reason = fmt::format(
      "waiting for {} spot instance(s) to stop after their preemption notice (until "
      "{})",
      victims.size(), FormatRfc3339(deadline));
}

void State::Warn(Instance& v, const std::string& why, store::Batch& batch) {
  const Time deadline = clock_->Now() + options_.spot_notice;
  preemptor_.Untrack(&v);
  Transition(v, InstanceState::kPreempting,
             fmt::format("{}; stops at {} after its notice", why, FormatRfc3339(deadline)), batch,
             billing::Ending::kPlatform);
  v.preempt_at = deadline;
  agents_.Notify(v, v.node);
  Save(v, batch);
}

void State::Evict(Instance& v, store::Batch& batch) {
  Unbook(v);
  // The reason names no instance: the one that took the capacity may be another tenant's.
  ++counters_.preemptions;
  EndPreempted(v, "preempted by higher-priority work", batch);
  Save(v, batch);
}

void State::EndPreempted(Instance& v, const std::string& why, store::Batch& batch) {
  Transition(v, InstanceState::kPreempted, why, batch, billing::Ending::kPlatform);
  v.preempted_at = clock_->Now();
  // A group member's group restarts whole (Groups::Settle).
  if (v.restart && v.group.empty()) {
    Requeue(v, why, batch);
  } else {
    TenantSecrets::DropValues(v.env, v.image);
  }
}

void State::Requeue(Instance& inst, const std::string& why, store::Batch& batch) {
  if (!inst.group.empty()) {
    // A member does not wait alone: its attempt fails, and its group restarts whole.
    Transition(inst, InstanceState::kFailed, why, batch, billing::Ending::kPlatform);
    return;
  }
  if (const std::string gone = secrets_.Missing(inst.tenant.str(), inst.env, inst.image);
      !gone.empty()) {
    Transition(inst, InstanceState::kFailed,
               fmt::format("{}; it cannot restart: its secret '{}' was deleted", why, gone), batch,
               billing::Ending::kPlatform);
    return;
  }
  ++inst.restarts;
  inst.started_at.reset();
  inst.enqueued_at = clock_->Now();
  Transition(inst, InstanceState::kPending, why + "; restarting", batch,
             billing::Ending::kPlatform);
  queue_.Push(inst);  // Untried: it may fit elsewhere at once.
}

void State::Release(Instance& inst) {
  Unbook(inst);
  CapacityFreed();
}

void State::Displace(Instance& inst, const std::string& why, store::Batch& batch) {
  Release(inst);
  if (inst.state == InstanceState::kStopping) {
    Transition(inst, InstanceState::kTerminated, why + " while it was stopping", batch);
  } else if (inst.billing == Billing::kSpot) {
    EndPreempted(inst, why, batch);
  } else {
    Requeue(inst, why, batch);
  }
  Save(inst, batch);
}

void State::ReclaimSpot(const std::string& id, store::Batch& batch) {
  Instance* inst = instances_.Find(id);
  if (!inst || inst->billing != Billing::kSpot || inst->state != InstanceState::kRunning) return;
  if (options_.simulated_notice) {
    Warn(*inst, "spot capacity reclaimed by the provider", batch);
    return;
  }
  Displace(*inst, "spot capacity reclaimed by the provider", batch);
  CapacityFreed();
}

Result<RecoveryReport> State::Restore(const std::vector<store::TenantRecord>& tenants,
                                      const std::vector<store::InstanceRecord>& instances,
                                      const std::map<std::string, fleet::NodeState>& node_states,
                                      store::Batch& batch) {
  RecoveryReport report;
  TESSERA_RETURN_IF_ERROR(tenants_.Restore(tenants));
  report.tenants = tenants.size();
  for (const auto& rec : instances) {
    auto j = ParseJson(rec.doc, "stored instance " + rec.id);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(StoredInstance stored, FromStoredJson(*j, *fleet_));
    // Values sealed at rest are opened now: a key the keyring lacks stops the start, naming it.
    TESSERA_ASSIGN_OR_RETURN(
        const bool changed,
        secrets_.OpenValues(TenantSecrets::InstanceRecord(rec.id), !IsActive(stored.instance.state),
                            stored.instance.env, stored.instance.image));
    Instance& inst = instances_.Add(std::move(stored.instance));
    if (changed) Save(inst, batch);
    next_instance_ = std::max(next_instance_, inst.seq + 1);
    ++report.instances;
    if (!IsActive(inst.state)) continue;
    mounts_.Track(inst);
    endpoints_.Index(inst);
    CountUsage(inst, true);
    if (inst.state == InstanceState::kPending) pending_.Add(inst.tenant.str());
    accounts_.CountReservationUnit(inst, true);
    stored.instance = inst;  // WhyNotRestorable reads the shape and the binding.
    std::string why = WhyNotRestorable(stored, *catalog_);
    if (why.empty() && !inst.assignment && inst.state != InstanceState::kPending) {
      why = fmt::format("it was {} but its record holds no capacity", StateName(inst.state));
    }
    if (why.empty() && !inst.assignment) {
      // Waiting work the fleet as it is now can never host fails too, rather than wait for ever.
      if (Status s = admission_.CheckShape(inst.shape); s.code() == StatusCode::kInvalidArgument) {
        why = "no node of the fleet can host it any more: " + s.message();
      }
    }
    if (why.empty() && inst.assignment) {
      if (Status s = scheduler_->Reserve(*inst.assignment); !s.ok()) {
        why = fmt::format("its capacity on node '{}' cannot be booked again: {}", inst.node,
                          s.message());
      }
    }
    if (!why.empty()) {
      inst.assignment.reset();
      inst.node.clear();
      inst.gpus.clear();
      Transition(inst, InstanceState::kFailed, "failed at restart: " + why, batch,
                 billing::Ending::kPlatform);
      Save(inst, batch);
      report.failed.push_back(fmt::format("{}: {}", inst.id.str(), why));
      continue;
    }
    if (inst.assignment) {
      ++report.rebooked;
      sole_tenant_->Hold(inst.assignment->node, SourceOf(inst));
      accounts_.CountOnDemand(inst, true);
      accounts_.Restored(inst);
      if (inst.billing == Billing::kSpot && inst.state != InstanceState::kStopping &&
          inst.state != InstanceState::kPreempting) {
        preemptor_.Track(&inst);
      }
      // An agent picks up where the last run left off.
      node_gpus_.UseReportedMigUuids(inst);
      agents_.Notify(inst, inst.node);
    } else {
      if (inst.group.empty()) queue_.Push(inst);  // Members wait with their group.
      ++report.queued;
    }
  }
  // Node states last: a drained node keeps the work it held.
  for (const auto& [name, state] : node_states) {
    auto n = fleet_->Find(name);
    if (n.ok()) TESSERA_RETURN_IF_ERROR(fleet_->SetNodeState(*n, state));
  }
  return report;
}

void LatencyHistogram::Observe(double seconds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (seconds <= bounds[i]) ++buckets[i];
  }
  ++count;
  sum += seconds;
}

}  // namespace tessera::core
