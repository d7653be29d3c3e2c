#include "core/state.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>

#include "common/auth.h"
#include "common/json.h"

namespace tessera::core {

namespace {

using catalog::SharingMode;

// Trials of victim sets per node and set size, beyond which preemption falls back to the
// greedy choice (largest victims first). Keeps one preemption decision well under a millisecond.
constexpr size_t kMaxVictimTrials = 256;

std::string Gpus(int64_t milli) {
  return fmt::format("{:g}", static_cast<double>(milli) / fleet::kMilliPerGpu);
}

}  // namespace

State::State(const catalog::Catalog* catalog, const Clock* clock,
             std::unique_ptr<fleet::Fleet> fleet, std::unique_ptr<sched::Scheduler> scheduler,
             bool sim_agents)
    : catalog_(catalog),
      clock_(clock),
      fleet_(std::move(fleet)),
      scheduler_(std::move(scheduler)),
      sim_agents_(sim_agents),
      tenants_(clock) {}

Result<Tenant> State::UpdateTenant(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                                   std::optional<bool> disabled, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Tenant t, tenants_.Update(id, quota_gpu_milli, disabled, batch));
  if (!t.disabled) return t;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Instance& inst = instances_.at(it->second);
    if (inst.tenant != t.id) {
      ++it;
      continue;
    }
    Transition(inst, InstanceState::kTerminated, "its tenant was disabled while it was pending");
    Save(inst, batch);
    it = queue_.erase(it);
  }
  return t;
}

Result<Shape> State::ResolveShape(const CreateInstanceRequest& req) const {
  Shape shape = req.shape;
  if (!req.instance_type.empty()) {
    const catalog::InstanceType* it = catalog_->FindInstanceType(req.instance_type);
    if (!it) {
      return Status::InvalidArgument(
          fmt::format("field 'instance_type': unknown instance type '{}'", req.instance_type));
    }
    shape = Shape{it->id,        it->gpu_model,      it->sharing, it->gpus,       it->mig_profile,
                  it->milli_gpu, it->gpu_memory_mib, it->vcpus,   it->memory_mib, it->nvlink};
    return shape;
  }
  const catalog::GpuModel* model = catalog_->FindGpu(shape.gpu_model);
  if (!model) {
    return Status::InvalidArgument(
        fmt::format("field 'gpu_model': unknown GPU model '{}'", shape.gpu_model));
  }
  shape.gpu_model = model->id;
  if (shape.mode == SharingMode::kMig) {
    if (!model->mig) {
      return Status::InvalidArgument(
          fmt::format("field 'mig_profile': {} does not support MIG", model->id));
    }
    if (!model->mig->Find(shape.mig_profile)) {
      std::vector<std::string> names;
      for (const auto& p : model->mig->profiles) names.push_back(p.name);
      return Status::InvalidArgument(
          fmt::format("field 'mig_profile': '{}' is not a MIG profile of {} (valid: {})",
                      shape.mig_profile, model->id, fmt::join(names, ", ")));
    }
  }
  if (shape.mode == SharingMode::kShared && shape.gpu_memory_mib > model->memory_mib) {
    return Status::InvalidArgument(
        fmt::format("field 'gpu_memory_mib': {} exceeds the {} MiB of a {}", shape.gpu_memory_mib,
                    model->memory_mib, model->id));
  }
  return shape;
}

Result<Money> State::PriceOf(const Shape& shape, Billing billing) const {
  auto pick = [&](const catalog::Price& p) {
    switch (billing) {
      case Billing::kReserved:
        return p.reserved_1y_per_hour;
      case Billing::kOnDemand:
        return p.on_demand_per_hour;
      case Billing::kSpot:
        return p.spot_per_hour;
    }
    return p.on_demand_per_hour;
  };
  if (!shape.instance_type.empty()) {
    const catalog::Price* p = catalog_->FindPrice(shape.instance_type);
    if (!p) return Status::Internal("no price for instance type " + shape.instance_type);
    return pick(*p);
  }
  // A custom shape costs its share of the cheapest whole-GPU price for the model.
  std::optional<Money> per_gpu;
  for (const auto& it : catalog_->instance_types()) {
    if (it.gpu_model != shape.gpu_model || it.sharing != SharingMode::kExclusive || it.gpus < 1) {
      continue;
    }
    const catalog::Price* p = catalog_->FindPrice(it.id);
    if (!p) continue;
    const Money m = pick(*p).MulDiv(1, it.gpus);
    if (!per_gpu || m < *per_gpu) per_gpu = m;
  }
  if (!per_gpu) {
    return Status::InvalidArgument(fmt::format(
        "field 'gpu_model': the price book has no whole-GPU price for {}", shape.gpu_model));
  }
  return per_gpu->MulDiv(shape.GpuMilli(*catalog_), fleet::kMilliPerGpu);
}

sched::Request State::ToRequest(const Instance& inst) const {
  const Shape& s = inst.shape;
  sched::Request r;
  r.cpu_milli = s.vcpus * 1000;
  r.memory_mib = s.memory_mib;
  if (auto idx = catalog_->FindGpuIndex(s.gpu_model)) r.allowed_models = uint64_t{1} << idx->value;
  switch (s.mode) {
    case SharingMode::kExclusive:
      r.gpu_count = s.gpus;
      r.gpu_milli = s.gpus > 0 ? fleet::kMilliPerGpu : 0;
      r.nvlink = s.nvlink;
      break;
    case SharingMode::kShared:
      r.gpu_count = 1;
      r.gpu_milli = s.milli_gpu;
      r.gpu_memory_mib = s.gpu_memory_mib;
      break;
    case SharingMode::kMig:
      r.gpu_count = 1;
      r.gpu_milli = fleet::kMilliPerGpu;
      r.mig_profile = s.mig_profile;
      break;
  }
  r.priority = Priority(inst.billing);
  return r;
}

int64_t State::TenantGpuMilli(const TenantId& tenant) const {
  auto it = tenant_gpu_milli_.find(tenant.str());
  return it == tenant_gpu_milli_.end() ? 0 : it->second;
}

Result<Instance> State::CreateInstance(const Tenant& caller, const CreateInstanceRequest& req,
                                       store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Shape shape, ResolveShape(req));
  TESSERA_ASSIGN_OR_RETURN(Money price, PriceOf(shape, req.billing));
  const int64_t want = shape.GpuMilli(*catalog_);
  const int64_t used = TenantGpuMilli(caller.id);
  if (used + want > caller.quota_gpu_milli) {
    return Status::ResourceExhausted(fmt::format(
        "quota exceeded by {} GPUs: tenant '{}' has a quota of {} GPUs, uses {}, and asks for {}",
        Gpus(used + want - caller.quota_gpu_milli), caller.name, Gpus(caller.quota_gpu_milli),
        Gpus(used), Gpus(want)));
  }
  Instance inst;
  inst.id = InstanceId::FromNumber(next_instance_);
  inst.seq = next_instance_++;
  inst.tenant = caller.id;
  inst.name = req.name.empty() ? inst.id.str() : req.name;
  inst.billing = req.billing;
  inst.shape = std::move(shape);
  inst.command = req.command;
  inst.restart = req.restart;
  inst.labels = req.labels;
  inst.annotations = req.annotations;
  inst.price_per_hour = price;
  inst.created_at = inst.updated_at = clock_->Now();
  tenant_gpu_milli_[caller.id.str()] += want;
  Instance& stored = instances_[inst.id.str()] = std::move(inst);
  if (!Place(stored, batch)) queue_[{-Priority(stored.billing), stored.seq}] = stored.id.str();
  Save(stored, batch);
  Instance placed = stored;
  // Spot work preempted for this instance may restart at once wherever else it fits.
  if (requeued_) DrainQueue(batch);
  return placed;
}

Result<Instance> State::GetInstance(const Tenant& caller, const std::string& id) const {
  auto it = instances_.find(id);
  if (it == instances_.end() || (!caller.admin && it->second.tenant != caller.id)) {
    return Status::NotFound(fmt::format("instance '{}' not found", id));
  }
  return it->second;
}

std::vector<Instance> State::ListInstances(const Tenant& caller, std::optional<InstanceState> state,
                                           const LabelSelector& selector) const {
  std::vector<Instance> out;
  for (const auto& [id, inst] : instances_) {
    if (!caller.admin && inst.tenant != caller.id) continue;
    if (state && inst.state != *state) continue;
    if (!Matches(selector, inst.labels)) continue;
    out.push_back(inst);
  }
  return out;
}

Result<Instance> State::DeleteInstance(const Tenant& caller, const std::string& id,
                                       store::Batch& batch) {
  auto it = instances_.find(id);
  if (it == instances_.end() || (!caller.admin && it->second.tenant != caller.id)) {
    return Status::NotFound(fmt::format("instance '{}' not found", id));
  }
  Instance& inst = it->second;
  if (!IsActive(inst.state) || inst.state == InstanceState::kStopping) return inst;
  if (inst.state == InstanceState::kPending) {
    queue_.erase({-Priority(inst.billing), inst.seq});
    Transition(inst, InstanceState::kTerminated, "deleted while pending");
  } else if (sim_agents_) {
    // The node's agent stops the workload; capacity frees when it reports the stop.
    Transition(inst, InstanceState::kStopping, "deleted by its owner");
  } else {
    // No agent serves the node, so nothing runs there to wait for.
    Unbook(inst);
    Transition(inst, InstanceState::kTerminated, "deleted by its owner");
  }
  Save(inst, batch);
  if (!IsActive(inst.state)) DrainQueue(batch);
  return inst;
}

void State::Transition(Instance& inst, InstanceState to, std::string reason) {
  const bool was_active = IsActive(inst.state);
  const int64_t milli = inst.shape.GpuMilli(*catalog_);
  if (was_active && !IsActive(to)) tenant_gpu_milli_[inst.tenant.str()] -= milli;
  if (!was_active && IsActive(to)) tenant_gpu_milli_[inst.tenant.str()] += milli;
  inst.state = to;
  inst.reason = std::move(reason);
  inst.updated_at = clock_->Now();
}

void State::Save(const Instance& inst, store::Batch& batch) {
  batch.instances.push_back({inst.id.str(), inst.tenant.str(), std::string(StateName(inst.state)),
                             ToStoredJson(inst, *fleet_).dump()});
}

void State::Book(Instance& inst, const fleet::Assignment& a) {
  inst.assignment = a;
  inst.node = fleet_->node(a.node).name;
  inst.gpus = DescribeGpus(a, *fleet_);
}

void State::Unbook(Instance& inst) {
  if (!inst.assignment) return;
  // The scheduler refuses only what is not held, which would be a bookkeeping bug: surface it
  // loudly rather than leak or double-free capacity.
  Status s = scheduler_->Release(*inst.assignment);
  if (!s.ok()) std::abort();
  inst.assignment.reset();
  inst.node.clear();
  inst.gpus.clear();
}

bool State::Place(Instance& inst, store::Batch& batch) {
  const sched::Request req = ToRequest(inst);
  const auto start = std::chrono::steady_clock::now();
  std::optional<fleet::Assignment> a = scheduler_->Schedule(req);
  counters_.scheduling_latency.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  ++counters_.scheduling_attempts;
  if (!a && inst.billing != Billing::kSpot && Preempt(inst, batch)) return true;
  if (!a) return false;
  Book(inst, *a);
  Transition(inst, InstanceState::kScheduled, "");
  return true;
}

bool State::Preempt(Instance& inst, store::Batch& batch) {
  const sched::Request req = ToRequest(inst);
  // Candidate victims, grouped by node: placed spot instances. Reserved and on-demand work is
  // never preempted.
  std::map<uint32_t, std::vector<Instance*>> by_node;
  for (auto& [id, other] : instances_) {
    if (other.assignment && IsActive(other.state) && other.billing == Billing::kSpot) {
      by_node[other.assignment->node.value].push_back(&other);
    }
  }
  struct Choice {
    fleet::NodeIndex node;
    std::vector<Instance*> victims;
    int64_t freed = 0;
  };
  std::optional<Choice> best;
  for (auto& [node_value, victims] : by_node) {
    const fleet::NodeIndex node(node_value);
    if (fleet_->node(node).state != fleet::NodeState::kReady) continue;
    std::sort(victims.begin(), victims.end(), [&](Instance* a, Instance* b) {
      return a->shape.GpuMilli(*catalog_) > b->shape.GpuMilli(*catalog_);
    });
    // Release the first k (largest first) and see whether the request fits: this bounds the
    // smallest victim count on this node. Then look for a cheaper set of that size.
    auto fits_without = [&](const std::vector<Instance*>& set) {
      for (Instance* v : set) (void)scheduler_->Release(*v->assignment);
      std::optional<fleet::Assignment> trial = scheduler_->ScheduleOn(req, node);
      if (trial) (void)scheduler_->Release(*trial);
      for (Instance* v : set) {
        if (!scheduler_->Reserve(*v->assignment).ok()) std::abort();
      }
      return trial.has_value();
    };
    for (size_t k = 1; k <= victims.size(); ++k) {
      if (best && k > best->victims.size()) break;
      std::vector<Instance*> prefix(victims.begin(), victims.begin() + static_cast<long>(k));
      if (!fits_without(prefix)) continue;
      // k victims suffice. Among sets of size k, prefer the one that frees the least GPU.
      Choice choice{node, prefix, 0};
      for (Instance* v : prefix) choice.freed += v->shape.GpuMilli(*catalog_);
      std::vector<bool> mask(victims.size(), false);
      std::fill(mask.end() - static_cast<long>(k), mask.end(), true);
      size_t trials = 0;
      do {
        if (++trials > kMaxVictimTrials) break;
        std::vector<Instance*> set;
        int64_t freed = 0;
        for (size_t i = 0; i < victims.size(); ++i) {
          if (mask[i]) {
            set.push_back(victims[i]);
            freed += victims[i]->shape.GpuMilli(*catalog_);
          }
        }
        if (freed < choice.freed && fits_without(set)) choice = {node, set, freed};
      } while (std::next_permutation(mask.begin(), mask.end()));
      if (!best || k < best->victims.size() ||
          (k == best->victims.size() && choice.freed < best->freed)) {
        best = choice;
      }
      break;
    }
  }
  if (!best) return false;
  const Time now = clock_->Now();
  for (Instance* v : best->victims) {
    Unbook(*v);
    Transition(*v, InstanceState::kPreempted,
               fmt::format("preempted by {} ({})", inst.id.str(), BillingName(inst.billing)));
    v->preempted_at = now;
    ++counters_.preemptions;
    if (v->restart) {
      ++v->restarts;
      const std::string why = v->reason;
      Transition(*v, InstanceState::kPending, why + "; restarting");
      queue_[{-Priority(v->billing), v->seq}] = v->id.str();
      requeued_ = true;
    }
    Save(*v, batch);
  }
  std::optional<fleet::Assignment> a = scheduler_->ScheduleOn(req, best->node);
  if (!a) std::abort();  // The trial above showed it fits; anything else is a bug.
  Book(inst, *a);
  Transition(inst, InstanceState::kScheduled, "");
  return true;
}

void State::DrainQueue(store::Batch& batch) {
  requeued_ = false;
  // A request that failed stops identical ones from being retried in this pass; a large request
  // that does not fit never blocks smaller ones behind it.
  using Key = std::tuple<std::string, catalog::SharingMode, int, std::string, int, int64_t, int64_t,
                         int64_t, bool, Billing>;
  std::set<Key> failed;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Instance& inst = instances_.at(it->second);
    const Shape& sh = inst.shape;
    Key key{sh.gpu_model,      sh.mode,  sh.gpus,       sh.mig_profile, sh.milli_gpu,
            sh.gpu_memory_mib, sh.vcpus, sh.memory_mib, sh.nvlink,      inst.billing};
    if (failed.count(key) == 0 && Place(inst, batch)) {
      Save(inst, batch);
      it = queue_.erase(it);
    } else {
      failed.insert(std::move(key));
      ++it;
    }
  }
}

Status State::SetNodeDrained(const std::string& node, bool drained, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex n, fleet_->Find(node));
  TESSERA_RETURN_IF_ERROR(
      fleet_->SetNodeState(n, drained ? fleet::NodeState::kDraining : fleet::NodeState::kReady));
  batch.settings.emplace_back("node_state/" + node, drained ? "draining" : "ready");
  if (!drained) DrainQueue(batch);
  return Status::Ok();
}

bool State::TickAgents(store::Batch& batch) {
  if (!sim_agents_) return false;
  bool freed = false, changed = false;
  for (auto& [id, inst] : instances_) {
    if (inst.state == InstanceState::kScheduled) {
      Transition(inst, InstanceState::kRunning, "");
      Save(inst, batch);
      changed = true;
    } else if (inst.state == InstanceState::kStopping) {
      Unbook(inst);
      Transition(inst, InstanceState::kTerminated, "stopped by its agent");
      Save(inst, batch);
      changed = freed = true;
    }
  }
  if (freed) DrainQueue(batch);
  return changed;
}

void LatencyHistogram::Observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) ++buckets[i];
  }
  ++count;
  sum += seconds;
}

Status State::Restore(const std::vector<store::TenantRecord>& tenants,
                      const std::vector<store::InstanceRecord>& instances) {
  TESSERA_RETURN_IF_ERROR(tenants_.Restore(tenants));
  for (const auto& rec : instances) {
    auto j = ParseJson(rec.doc, "stored instance " + rec.id);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(Instance inst, FromStoredJson(*j, *fleet_));
    next_instance_ = std::max(next_instance_, inst.seq + 1);
    if (IsActive(inst.state)) {
      tenant_gpu_milli_[inst.tenant.str()] += inst.shape.GpuMilli(*catalog_);
      if (inst.assignment) {
        Status s = scheduler_->Reserve(*inst.assignment);
        if (!s.ok()) {
          return Status::DataLoss(
              fmt::format("stored instance {} cannot be re-booked: {}", rec.id, s.message()));
        }
      } else {
        queue_[{-Priority(inst.billing), inst.seq}] = inst.id.str();
      }
    }
    instances_[inst.id.str()] = std::move(inst);
  }
  return Status::Ok();
}

}  // namespace tessera::core
