// The instance lifecycle (instance_service.h): admission, creates, deletes and relabels; every
// transition and what it bills, counts and frees; preempted and displaced work, restarts; a node's
// state in the fleet; restoring instances; and the memory of ended ones.
#include "core/instance_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "common/json.h"
#include "sched/plugins/sole_tenant.h"

namespace tessera::core {

Instances::Instances(const Parts& parts)
    : catalog_(parts.catalog),
      clock_(parts.clock),
      fleet_(parts.fleet),
      scheduler_(parts.scheduler),
      sole_tenant_(parts.sole_tenant),
      agents_(parts.agents),
      tenants_(parts.tenants),
      secrets_(parts.secrets),
      admission_(parts.admission),
      accounts_(parts.accounts),
      mounts_(parts.mounts),
      endpoints_(parts.endpoints),
      node_gpus_(parts.node_gpus),
      views_(parts.views),
      logs_(parts.logs),
      counters_(parts.counters),
      options_(parts.options),
      listener_(parts.listener),
      usage_(catalog_),
      user_usage_(catalog_),
      pending_(options_->max_pending_per_tenant),
      window_(*clock_, static_cast<size_t>(std::max(options_->batch_window, 1)),
              options_->batch_wait),
      preemptor_(catalog_, fleet_, scheduler_, options_->preemption),
      repacker_(*fleet_, *scheduler_) {}

Result<Admitted> Instances::Admit(const Tenant& caller, const CreateInstanceRequest& req, int count,
                                  bool readmit, std::string_view group) {
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, admission_->Admit(req));
  TESSERA_RETURN_IF_ERROR(secrets_->CheckRefs(caller.id.str(), req.env, req.image));
  TESSERA_RETURN_IF_ERROR(mounts_->Check(caller.id.str(), req, count, group));
  if (req.migratable) {
    // What a move could not take along is refused rather than silently never moved.
    if (admitted.shape.mode != catalog::SharingMode::kShared) {
      return Status::InvalidArgument(
          "migratable: only a milli_gpu share moves; whole GPUs and MIG slices stay where they "
          "are");
    }
    if (!group.empty()) {
      return Status::InvalidArgument(
          "migratable: a group's members never move; their gang is placed together");
    }
    if (!req.volumes.empty()) {
      return Status::InvalidArgument(
          "migratable: an instance with volumes stays on the node that holds them");
    }
  }
  const int64_t want = usage_.Marginal(caller.id.str(), admitted.shape) * count;
  const int64_t used = usage_.Milli(caller.id.str());
  if (used + want > caller.quota_gpu_milli) {
    return Status::ResourceExhausted(fmt::format(
        "quota exceeded by {} GPUs: tenant '{}' has a quota of {} GPUs, uses {}, and asks for {}",
        Gpus(used + want - caller.quota_gpu_milli), caller.name, Gpus(caller.quota_gpu_milli),
        Gpus(used), Gpus(want)));
  }
  // A user's own quota, inside the tenant's.
  const User* user = req.user.empty() ? nullptr : tenants_->users().Find(req.user);
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
  TESSERA_RETURN_IF_ERROR(accounts_->CheckBudget(caller, req.billing));
  return admitted;
}

Result<Instance*> Instances::Add(const Tenant& caller, const CreateInstanceRequest& req,
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
      secrets_->SealValues(TenantSecrets::InstanceRecord(id.str()), inst.env, inst.image));
  if (req.billing == Billing::kReserved) {
    TESSERA_ASSIGN_OR_RETURN(inst.reservation, accounts_->ClaimReservation(caller, admitted.shape));
    accounts_->CountReservationUnit(inst, true);
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
  inst.migratable = req.migratable;
  inst.stop_grace_seconds = req.stop_grace_seconds;
  inst.labels = req.labels;
  inst.annotations = req.annotations;
  inst.price_per_hour = admitted.price_per_hour;
  inst.created_at = inst.updated_at = inst.enqueued_at = clock_->Now();
  inst.history.push_back({inst.created_at, InstanceState::kPending, ""});
  Instance& stored = table_.Add(std::move(inst));
  mounts_->Track(stored);
  CountUsage(stored, true);
  pending_.Add(stored.tenant.str());
  return &stored;
}

Result<Instance> Instances::Create(const Tenant& caller, const CreateInstanceRequest& req,
                                   store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted,
                           Admit(caller, req, 1, /*readmit=*/false, /*group=*/""));
  TESSERA_ASSIGN_OR_RETURN(Instance * created, Add(caller, req, std::move(admitted)));
  Instance& stored = *created;
  if (window_.enabled() && !queue_.HasGroup(stored)) {
    window_.Hold(stored.id.str());
  } else {
    PlaceOrQueue(stored, batch);
  }
  Save(stored, batch);
  return views_->Shown(stored);
}

Result<Instance> Instances::Delete(const Tenant& caller, std::string_view id, store::Batch& batch) {
  Result<Instance*> found = table_.FindFor(caller, id);
  if (!found.ok()) return found.status();
  Instance& inst = **found;
  if (!inst.group.empty() && IsActive(inst.state)) {
    return Status::FailedPrecondition(
        fmt::format("instance '{}' is rank {} of group '{}': scale or delete the group instead", id,
                    inst.rank, inst.group));
  }
  Stop(inst, "deleted by its owner", batch, billing::Ending::kCustomer);
  return views_->Shown(inst);
}

Result<Instance> Instances::Relabel(const Tenant& caller, std::string_view id,
                                    std::map<std::string, std::string> labels,
                                    std::map<std::string, std::string> annotations,
                                    store::Batch& batch) {
  Result<Instance*> found = table_.FindFor(caller, id);
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
  return views_->Shown(inst);
}

void Instances::Stop(Instance& inst, const std::string& why, store::Batch& batch,
                     billing::Ending ending) {
  if (!IsActive(inst.state) || inst.state == InstanceState::kStopping) return;
  if (inst.state == InstanceState::kPending) {
    StopWaiting(inst);
    Transition(inst, InstanceState::kTerminated, why + " while pending", batch);
  } else if (agents_->Serves(inst.node)) {
    // Being stopped: never a preemption victim from now on, so never restarted either. The
    // capacity frees when the agent reports the stop.
    preemptor_.Untrack(&inst);
    Transition(inst, InstanceState::kStopping, why, batch, ending);
    agents_->Notify(inst, inst.node);
  } else {
    // No agent serves the node, so nothing runs there to wait for.
    Release(inst);
    Transition(inst, InstanceState::kTerminated, why, batch, ending);
  }
  Save(inst, batch);
}

void Instances::Start(Instance& inst, store::Batch& batch) {
  Transition(inst, InstanceState::kScheduled, "", batch);
  agents_->Notify(inst, inst.node);
  Save(inst, batch);
}

void Instances::Transition(Instance& inst, InstanceState to, std::string reason,
                           store::Batch& batch, billing::Ending ending) {
  if (inst.state == InstanceState::kRunning && to != InstanceState::kRunning) {
    accounts_->Close(inst, ending, batch);
  }
  if (to == InstanceState::kRunning && inst.state != InstanceState::kRunning) accounts_->Open(inst);
  const bool was_active = IsActive(inst.state);
  if (was_active && !IsActive(to)) {
    CountUsage(inst, false);
    accounts_->CountReservationUnit(inst, false);
  }
  if (!was_active && IsActive(to)) CountUsage(inst, true);
  if (inst.state == InstanceState::kPending && to != InstanceState::kPending) {
    pending_.Remove(inst.tenant.str());
  } else if (inst.state != InstanceState::kPending && to == InstanceState::kPending) {
    pending_.Add(inst.tenant.str());
  }
  inst.state = to;
  if (!inst.endpoints.empty()) endpoints_->Index(inst);  // Serving only while it runs.
  inst.pull.reset();  // A pull belongs to a scheduled attempt: it started, ended or moved.
  // Work that ended for good keeps no values in memory or at rest (a preempted instance may be
  // queued again: EndPreempted drops them when it is not).
  if (to == InstanceState::kTerminated || to == InstanceState::kSucceeded ||
      to == InstanceState::kFailed) {
    TenantSecrets::DropValues(inst.env, inst.image);
  }
  Record(inst, std::move(reason));
  if (!IsActive(to)) table_.Ended(inst);
  // Only active instances hold their volumes (a preempted one queued again comes back).
  mounts_->Track(inst);
  if (was_active && !IsActive(to) && !inst.group.empty()) listener_->MemberEnded(inst);
}

void Instances::CountUsage(const Instance& inst, bool add) {
  if (add) {
    usage_.Add(inst.tenant.str(), inst.shape);
    if (!inst.created_by.empty()) user_usage_.Add(inst.created_by, inst.shape);
  } else {
    usage_.Remove(inst.tenant.str(), inst.shape);
    if (!inst.created_by.empty()) user_usage_.Remove(inst.created_by, inst.shape);
  }
}

void Instances::Record(Instance& inst, std::string reason) {
  inst.reason = std::move(reason);
  inst.updated_at = clock_->Now();
  if (inst.history.size() == kHistoryKept) inst.history.erase(inst.history.begin());
  inst.history.push_back({inst.updated_at, inst.state, inst.reason});
}

void Instances::Note(Instance& inst, std::string reason, store::Batch& batch) {
  Record(inst, std::move(reason));
  Save(inst, batch);
}

void Instances::Save(const Instance& inst, store::Batch& batch) {
  batch.instances.push_back(StoredRecord(inst, *fleet_, options_->instance_documents));
}

void Instances::Release(Instance& inst) {
  Unbook(inst);
  CapacityFreed();
}

void Instances::Displace(Instance& inst, const std::string& why, store::Batch& batch) {
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

void Instances::EndPreempted(Instance& v, const std::string& why, store::Batch& batch) {
  Transition(v, InstanceState::kPreempted, why, batch, billing::Ending::kPlatform);
  v.preempted_at = clock_->Now();
  // A group member's group restarts whole (Groups::Settle).
  if (v.restart && v.group.empty()) {
    Requeue(v, why, batch);
  } else {
    TenantSecrets::DropValues(v.env, v.image);
  }
}

void Instances::Requeue(Instance& inst, const std::string& why, store::Batch& batch) {
  if (!inst.group.empty()) {
    // A member does not wait alone: its attempt fails, and its group restarts whole.
    Transition(inst, InstanceState::kFailed, why, batch, billing::Ending::kPlatform);
    return;
  }
  if (const std::string gone = secrets_->Missing(inst.tenant.str(), inst.env, inst.image);
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

void Instances::WorkloadExited(const std::string& id, int exit_code) {
  const Instance* inst = table_.Find(id);
  if (inst && (inst->state == InstanceState::kRunning || inst->state == InstanceState::kPreempting))
    agents_->Exited(*inst, exit_code);
}

void Instances::ReclaimSpot(const std::string& id, store::Batch& batch) {
  Instance* inst = table_.Find(id);
  if (!inst || inst->billing != Billing::kSpot || inst->state != InstanceState::kRunning) return;
  if (options_->simulated_notice) {
    Warn(*inst, "spot capacity reclaimed by the provider", batch);
    return;
  }
  Displace(*inst, "spot capacity reclaimed by the provider", batch);  // Which frees its capacity.
}

void Instances::ApplyNodeState(const AgentNode& node) {
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

Status Instances::Restore(const std::vector<store::InstanceRecord>& records, store::Batch& batch,
                          RecoveryReport& report) {
  std::vector<Instance*> moving;  // Moves under way, booked once every running instance is.
  for (const auto& rec : records) {
    auto j = ParseJson(rec.doc, "stored instance " + rec.id);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(StoredInstance stored, FromStoredJson(*j, *fleet_));
    // Values sealed at rest are opened now: a key the keyring lacks stops the start, naming it.
    TESSERA_ASSIGN_OR_RETURN(const bool changed,
                             secrets_->OpenValues(TenantSecrets::InstanceRecord(rec.id),
                                                  !IsActive(stored.instance.state),
                                                  stored.instance.env, stored.instance.image));
    Instance& inst = table_.Add(std::move(stored.instance));
    if (changed) Save(inst, batch);
    next_instance_ = std::max(next_instance_, inst.seq + 1);
    ++report.instances;
    if (!IsActive(inst.state)) continue;
    mounts_->Track(inst);
    endpoints_->Index(inst);
    CountUsage(inst, true);
    if (inst.state == InstanceState::kPending) pending_.Add(inst.tenant.str());
    accounts_->CountReservationUnit(inst, true);
    stored.instance = inst;  // WhyNotRestorable reads the shape and the binding.
    std::string why = WhyNotRestorable(stored, *catalog_);
    if (why.empty() && !inst.assignment && inst.state != InstanceState::kPending) {
      why = fmt::format("it was {} but its record holds no capacity", StateName(inst.state));
    }
    if (why.empty() && !inst.assignment) {
      // Waiting work the fleet as it is now can never host fails too, rather than wait for ever.
      if (Status s = admission_->CheckShape(inst.shape); s.code() == StatusCode::kInvalidArgument) {
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
      inst.move_to.reset();
      inst.moving = false;
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
      accounts_->CountOnDemand(inst, true);
      accounts_->Restored(inst);
      if (inst.billing == Billing::kSpot && inst.state != InstanceState::kStopping &&
          inst.state != InstanceState::kPreempting) {
        preemptor_.Track(&inst);
      }
      if (inst.move_to) moving.push_back(&inst);
      if (inst.migratable) {
        repacker_.Track(inst.id.str(), RequestOf(inst), *inst.assignment, &inst);
      }
      // An agent picks up where the last run left off.
      node_gpus_->UseReportedMigUuids(inst);
      agents_->Notify(inst, inst.node);
    } else {
      if (inst.group.empty()) queue_.Push(inst);  // Members wait with their group.
      ++report.queued;
    }
  }
  // A move under way keeps the place booked for it if that can be booked again; else it waits in
  // the queue once it stopped (FinishMove).
  for (Instance* inst : moving) {
    if (scheduler_->Reserve(*inst->move_to).ok()) {
      sole_tenant_->Hold(inst->move_to->node, SourceOf(*inst));
    } else {
      inst->move_to.reset();
    }
  }
  return Status::Ok();
}

void Instances::EndPendingOf(const TenantId& tenant, const std::string& why, store::Batch& batch) {
  std::vector<Instance*> waiting;
  table_.ForEach([&](Instance& inst) {
    if (inst.tenant == tenant && inst.state == InstanceState::kPending) waiting.push_back(&inst);
  });
  for (Instance* inst : waiting) {
    StopWaiting(*inst);
    Transition(*inst, InstanceState::kTerminated, why, batch);
    Save(*inst, batch);
  }
}

void Instances::StopWaiting(const Instance& inst) {
  queue_.Remove(inst);
  window_.Forget(inst.id.str());  // Ended in the batch window: it no longer counts there.
  awaiting_notice_.erase(inst.id.str());
}

void Instances::CapacityFreed() {
  queue_.CapacityFreed();
  listener_->GangsMayFit();
}

size_t Instances::EvictEnded(Time cutoff) {
  return table_.EvictEndedBefore(cutoff, [this](const Instance& inst) {
    // A member of a group's attempt stays while its group may still need its outcome; the
    // group lists it again when it leaves (Groups::EvictEnded).
    if (listener_->Keeps(inst)) return false;
    logs_->Erase(inst.id.str());
    return true;
  });
}

}  // namespace tessera::core
