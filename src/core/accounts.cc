// Accounts: meters into the ledger, the day's roll, reservations, budgets and the lines usage
// reports and invoices sum (docs/billing.md).
#include "core/accounts.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "common/json.h"
#include "common/text.h"
#include "core/usage.h"

namespace tessera::core {

namespace {

std::string InstanceTypeOf(const Shape& shape) {
  return shape.instance_type.empty() ? "custom:" + shape.gpu_model : shape.instance_type;
}

}  // namespace

Accounts::Accounts(const catalog::Catalog& catalog, const Clock& clock, const fleet::Fleet& fleet,
                   Admission& admission, const Tenants& tenants, InstanceTable& instances,
                   Volumes& volumes, Duration node_timeout)
    : catalog_(catalog),
      clock_(clock),
      fleet_(fleet),
      admission_(admission),
      tenants_(tenants),
      instances_(instances),
      volumes_(volumes),
      node_timeout_(node_timeout) {}

billing::Payer Accounts::PayerOf(const Instance& inst) const {
  return {inst.tenant.str(),
          inst.id.str(),
          InstanceTypeOf(inst.shape),
          std::string(BillingName(inst.billing)),
          inst.reservation,
          inst.shape.GpuMilli(catalog_),
          inst.created_by};
}

void Accounts::Open(Instance& inst) {
  // The interval opens when the agent says the workload started: not before the attempt began
  // waiting, and never in the future of the server's clock.
  const Time now = clock_.Now();
  Open(inst, std::clamp(inst.started_at.value_or(now), inst.enqueued_at, now));
}

void Accounts::Open(Instance& inst, Time since) {
  billing::Meter m;
  m.since = billing::UnixSeconds(since);
  if (inst.reservation.empty()) {
    // The price in force now; a catalog changed since the instance was created counts.
    auto price = admission_.PriceOf(inst.shape, inst.billing);
    m.rate = price.ok() ? *price : inst.price_per_hour;
  }
  inst.meter = m;
  metered_.emplace(inst.tenant.str(), inst.id.str());
}

void Accounts::CloseAt(Instance& inst, int64_t end, billing::Ending ending, store::Batch& batch) {
  const size_t first = batch.ledger.size();
  billing::Close(*inst.meter, PayerOf(inst), end, ending, batch.ledger);
  CountSpend(batch, first);
}

void Accounts::CloseVolume(Volume& v, int64_t end, billing::Ending ending, store::Batch& batch) {
  const size_t first = batch.ledger.size();
  billing::Close(v.meter, core::PayerOf(v), end, ending, batch.ledger);
  CountSpend(batch, first);
}

void Accounts::CountSpend(const store::Batch& batch, size_t first) {
  for (size_t i = first; i < batch.ledger.size(); ++i) {
    const store::LedgerRecord& l = batch.ledger[i];
    spent_[{billing::MonthStart(l.start), l.tenant}] += Money::FromMicros(l.amount_micros);
  }
}

void Accounts::Close(Instance& inst, billing::Ending ending, store::Batch& batch,
                     std::optional<int64_t> end) {
  if (!inst.meter) return;
  CloseAt(inst, end.value_or(billing::UnixSeconds(clock_.Now())), ending, batch);
  inst.meter.reset();
  metered_.erase({inst.tenant.str(), inst.id.str()});
}

std::vector<Instance*> Accounts::Roll(store::Batch& batch) {
  std::vector<Instance*> cut;
  const int64_t today = billing::DayStart(billing::UnixSeconds(clock_.Now()));
  if (today <= rolled_day_) return cut;
  rolled_day_ = today;
  for (const auto& [tenant, id] : metered_) {
    Instance* inst = instances_.Find(id);
    if (!inst || !inst->meter || inst->meter->since >= today) continue;
    CloseAt(*inst, today, billing::Ending::kRoll, batch);
    cut.push_back(inst);
  }
  for (Volume* v : volumes_.All()) {
    if (v->deleting || v->meter.since >= today) continue;
    CloseVolume(*v, today, billing::Ending::kRoll, batch);
    volumes_.Save(*v, batch);
  }
  return cut;
}

void Accounts::Observe(const AgentNode& node) {
  if (!node.telemetry) return;
  const int64_t now = billing::UnixSeconds(clock_.Now());
  // A reading stands for the time since the last one, but never for longer than a lease: a
  // silent node's gap is not measured.
  const int64_t max_gap =
      std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(node_timeout_).count());
  for (const std::string& id : node.assigned) {
    Instance* inst = instances_.Find(id);
    if (!inst || !inst->meter || inst->node != node.name || inst->gpus.empty()) continue;
    double sum = 0;
    int readings = 0;
    for (const GpuRef& g : inst->gpus) {
      const auto r = telemetry::ReadHolder(*node.telemetry, g.index, g.mig_profile, g.mig_start);
      if (!r || r->lost) continue;
      sum += r->gpu_util;
      ++readings;
    }
    if (readings > 0) billing::Observe(*inst->meter, sum / readings, now, max_gap);
  }
}

void Accounts::CountReservationUnit(const Instance& inst, bool add) {
  if (!inst.reservation.empty()) reservation_used_[inst.reservation] += add ? 1 : -1;
}

void Accounts::CountOnDemand(const Instance& inst, bool add) {
  if (inst.billing != Billing::kOnDemand) return;
  const int64_t milli = inst.shape.GpuMilli(catalog_);
  on_demand_milli_[inst.shape.gpu_model] += add ? milli : -milli;
}

void Accounts::Restored(const Instance& inst) {
  if (inst.meter && inst.state == InstanceState::kRunning) {
    metered_.emplace(inst.tenant.str(), inst.id.str());
  }
}

void Accounts::AccruedLines(const std::string& tenant, int64_t from, int64_t to,
                            std::vector<store::LedgerRecord>& lines) const {
  const int64_t now = billing::UnixSeconds(clock_.Now());
  // What an open meter owes up to now, closed on a copy. Only the stretch that holds now is still
  // growing; earlier days' stretches are what the midnight roll writes, to the byte.
  auto accrue = [&](billing::Meter meter, const billing::Payer& payer) {
    const size_t first = lines.size();
    billing::Close(meter, payer, now, billing::Ending::kRoll, lines);
    if (lines.size() > first && lines.back().end == now) lines.back().note = "open";
  };
  for (const auto& [id, r] : reservations_) {
    if (tenant.empty() || r.tenant == tenant) billing::ReservationLines(r, from, to, lines, now);
  }
  for (const Volume* v : volumes_.List(tenant)) {
    if (!v->deleting) accrue(v->meter, core::PayerOf(*v));
  }
  auto it = tenant.empty() ? metered_.begin() : metered_.lower_bound({tenant, ""});
  for (; it != metered_.end() && (tenant.empty() || it->first == tenant); ++it) {
    const Instance* inst = instances_.Find(it->second);
    if (inst && inst->meter) accrue(*inst->meter, PayerOf(*inst));
  }
}

BillingSnapshot Accounts::Snapshot(const store::Store& store, const std::string& tenant,
                                   int64_t from, int64_t to) const {
  BillingSnapshot snap{tenant, from, to, store.LastLedgerSeq(), {}};
  AccruedLines(tenant, from, to, snap.beyond);
  std::erase_if(snap.beyond,
                [&](const store::LedgerRecord& l) { return l.start < from || l.start >= to; });
  return snap;
}

Status BillingSnapshot::Scan(
    store::LedgerReader& reader,
    const std::function<void(const store::LedgerRecord&, bool open)>& fn) const {
  TESSERA_RETURN_IF_ERROR(
      reader.Scan(tenant, from, to, max_seq, [&](const store::LedgerRecord& l) { fn(l, false); }));
  for (const store::LedgerRecord& l : beyond) fn(l, l.note == "open");
  return Status::Ok();
}

Result<std::string> Accounts::ClaimReservation(const Tenant& caller, const Shape& shape,
                                               int units) const {
  const int64_t now = billing::UnixSeconds(clock_.Now());
  std::vector<std::string> held;
  // Of the covering reservations with a free unit, the tightest (fewest GPUs, then vCPUs, then
  // memory a unit): a 1-GPU instance does not take a 4-GPU unit while a 1-GPU one is free.
  std::string tightest;
  const catalog::InstanceType* tightest_type = nullptr;
  int free = 0;
  for (const auto& [id, r] : reservations_) {
    if (r.tenant != caller.id.str()) continue;
    const int used = ReservationUnitsUsed(id);
    const catalog::InstanceType* type = catalog_.FindInstanceType(r.instance_type);
    if (type && UnitCovers(*type, shape) && r.active(now) && used < r.count) {
      free += r.count - used;
      if (!tightest_type ||
          std::tie(type->gpus, type->vcpus, type->memory_mib) <
              std::tie(tightest_type->gpus, tightest_type->vcpus, tightest_type->memory_mib)) {
        tightest = id;
        tightest_type = type;
      }
    }
    held.push_back(fmt::format("{} ({} x {}, {} in use, {})", id, r.count, r.instance_type, used,
                               r.active(now) ? "active"
                               : now < r.start
                                   ? "starts " + FormatRfc3339(Time(std::chrono::seconds(r.start)))
                                   : "ended"));
  }
  if (tightest_type && free >= units) return tightest;
  const std::string type = shape.instance_type.empty()
                               ? "this shape (a unit of an instance type it fits in)"
                               : shape.instance_type;
  std::string msg =
      units == 1
          ? fmt::format("billing 'reserved' needs a free unit of an active reservation for {}; ",
                        type)
          : fmt::format(
                "billing 'reserved' needs {} free units of active reservations for {} (one a "
                "member); {} free; ",
                units, type, free);
  if (held.empty()) {
    msg += "this tenant has no reservation (POST /v1/reservations)";
  } else {
    msg += "this tenant has: ";
    for (size_t i = 0; i < held.size(); ++i) msg += (i ? "; " : "") + held[i];
  }
  return Status::FailedPrecondition(msg).WithReason("no_reservation");
}

int Accounts::ReservationUnitsUsed(const std::string& id) const {
  auto it = reservation_used_.find(id);
  return it == reservation_used_.end() ? 0 : it->second;
}

Result<billing::Reservation> Accounts::CreateReservation(const Tenant& caller,
                                                         const billing::ReservationRequest& req,
                                                         store::Batch& batch) {
  const int64_t now = billing::UnixSeconds(clock_.Now());
  CreateInstanceRequest probe;
  probe.billing = Billing::kReserved;
  probe.instance_type = req.instance_type;
  // An instance type the fleet can host at all; errors name the field.
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, admission_.Admit(probe));
  const catalog::Price* price = catalog_.FindPrice(req.instance_type);
  const Money rate = !price             ? Money()
                     : req.term == "3y" ? price->reserved_3y_per_hour
                                        : price->reserved_1y_per_hour;
  if (rate <= Money()) {
    return Status::InvalidArgument(
        fmt::format("field 'term': the price book has no {} reserved rate for {}", req.term,
                    req.instance_type));
  }
  const int64_t start = req.start.value_or(now);
  // A minute's slack for a client's clock; a reservation never bills time already past.
  if (start < now - 60 || start > now + 366 * billing::kSecondsPerDay) {
    return Status::InvalidArgument(
        "field 'start': must be from now to a year ahead (a reservation cannot begin in the past)");
  }
  billing::Reservation r;
  r.id = fmt::format("resv-{:06}", next_reservation_);
  r.tenant = caller.id.str();
  r.created_by = req.user;
  r.instance_type = req.instance_type;
  r.count = req.count;
  r.term = req.term;
  r.start = std::max(start, now - 60);
  r.end = r.start + *billing::TermSeconds(req.term);
  r.rate = rate;
  r.created_at = now;
  r.gpu_model = admitted.shape.gpu_model;
  r.unit_milli = admitted.shape.GpuMilli(catalog_);
  // The capacity it guarantees: every reservation of the model overlapping this one's term, at
  // once, must fit the fleet's GPUs of that model.
  int64_t reserved = r.unit_milli * r.count;
  for (const auto& [id, other] : reservations_) {
    if (other.end > r.start && other.start < r.end && other.gpu_model == r.gpu_model) {
      reserved += other.unit_milli * other.count;
    }
  }
  const int64_t capacity = FleetMilliOf(r.gpu_model);
  if (r.unit_milli > 0 && reserved > capacity) {
    return Status::ResourceExhausted(fmt::format(
        "the fleet has {:.3f} {} GPUs and reservations over this term would hold {:.3f}: no "
        "capacity to guarantee {} x {}",
        static_cast<double>(capacity) / 1000, r.gpu_model, static_cast<double>(reserved) / 1000,
        r.count, r.instance_type));
  }
  TESSERA_RETURN_IF_ERROR(AdmitReservation(caller, r));
  if (req.dry_run) {
    r.id.clear();  // Priced, checked, and not made.
    return r;
  }
  ++next_reservation_;
  reservations_.emplace(r.id, r);
  SaveReservation(r, batch);
  batch.settings.emplace_back(std::string(kNextReservation), std::to_string(next_reservation_));
  return r;
}

Status Accounts::AdmitReservation(const Tenant& caller, const billing::Reservation& r) const {
  if (caller.admin) return Status::Ok();
  // The quota: the tenant's reservations over any part of this term, with this one, hold no more
  // GPUs than it may use at once.
  int64_t held = r.unit_milli * r.count;
  for (const auto& [id, other] : reservations_) {
    if (other.tenant == r.tenant && other.end > r.start && other.start < r.end) {
      held += other.unit_milli * other.count;
    }
  }
  if (held > caller.quota_gpu_milli) {
    return Status::ResourceExhausted(fmt::format(
        "quota exceeded by {} GPUs: tenant '{}' has a quota of {} GPUs, and its reservations over "
        "this term with this one would hold {}",
        Gpus(held - caller.quota_gpu_milli), caller.name, Gpus(caller.quota_gpu_milli),
        Gpus(held)));
  }
  // A hard-stop budget: what the reservation bills this month must fit what is left of it.
  auto budget = budgets_.find(caller.id.str());
  if (budget == budgets_.end() || !budget->second.hard_stop) return Status::Ok();
  const int64_t now = billing::UnixSeconds(clock_.Now());
  std::vector<store::LedgerRecord> lines;
  billing::ReservationLines(r, billing::MonthStart(now), billing::NextMonthStart(now), lines);
  Money month;
  for (const store::LedgerRecord& l : lines) month += Money::FromMicros(l.amount_micros);
  const Money spent = MonthSpend(caller.id.str());
  if (spent + month <= budget->second.monthly) return Status::Ok();
  return Status::PermissionDenied(
             fmt::format(
                 "the reservation would bill {} USD this month; the monthly budget of {} "
                 "USD has {} USD left",
                 month.RoundedToCents().ToString(2), budget->second.monthly.ToString(2),
                 std::max(Money(), budget->second.monthly - spent).RoundedToCents().ToString(2)))
      .WithReason("budget_exceeded");
}

Status Accounts::SizeReservation(billing::Reservation& r) {
  CreateInstanceRequest probe;
  probe.billing = Billing::kReserved;
  probe.instance_type = r.instance_type;
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, admission_.Admit(probe));
  r.gpu_model = admitted.shape.gpu_model;
  r.unit_milli = admitted.shape.GpuMilli(catalog_);
  return Status::Ok();
}

int64_t Accounts::FleetMilliOf(const std::string& model) const {
  if (fleet_milli_nodes_ != fleet_.nodes().size()) {
    fleet_milli_.assign(catalog_.gpus().size(), 0);
    for (const fleet::Node& n : fleet_.nodes()) {
      if (n.model.valid() && !n.removed) {
        fleet_milli_[n.model.value] += static_cast<int64_t>(n.gpus.size()) * fleet::kMilliPerGpu;
      }
    }
    fleet_milli_nodes_ = fleet_.nodes().size();
  }
  const auto index = catalog_.FindGpuIndex(model);
  return index && index->value < fleet_milli_.size() ? fleet_milli_[index->value] : 0;
}

std::string Accounts::HeldForReservations(const Instance& inst, int64_t count) const {
  const int64_t now = billing::UnixSeconds(clock_.Now());
  const std::string& model = inst.shape.gpu_model;
  int64_t reserved = 0;
  for (const auto& [id, r] : reservations_) {
    if (r.active(now) && r.gpu_model == model) reserved += r.unit_milli * r.count;
  }
  if (reserved == 0) return "";
  auto it = on_demand_milli_.find(model);
  const int64_t on_demand = it == on_demand_milli_.end() ? 0 : it->second;
  const int64_t capacity = FleetMilliOf(model);
  if (on_demand + inst.shape.GpuMilli(catalog_) * count + reserved <= capacity) return "";
  return fmt::format(
      "of the fleet's {:.3f} {} GPUs, {:.3f} are held for reservations and {:.3f} run on-demand "
      "work",
      static_cast<double>(capacity) / 1000, model, static_cast<double>(reserved) / 1000,
      static_cast<double>(on_demand) / 1000);
}

void Accounts::SaveReservation(const billing::Reservation& r, store::Batch& batch) const {
  batch.settings.emplace_back(std::string(kReservationPrefix) + r.id, DumpJson(ToJson(r)));
}

std::vector<billing::Reservation> Accounts::ListReservations(const Tenant& caller) const {
  std::vector<billing::Reservation> out;
  for (const auto& [id, r] : reservations_) {
    if (caller.admin || r.tenant == caller.id.str()) out.push_back(r);
  }
  return out;
}

Result<billing::Reservation> Accounts::GetReservation(const Tenant& caller,
                                                      std::string_view id) const {
  auto it = reservations_.find(std::string(id));
  if (it == reservations_.end() || !(caller.admin || it->second.tenant == caller.id.str())) {
    return Status::NotFound(fmt::format("reservation '{}' not found", Quote(id)));
  }
  return it->second;
}

Status Accounts::DeleteReservation(const Tenant& caller, std::string_view id, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(billing::Reservation r, GetReservation(caller, id));
  const int64_t now = billing::UnixSeconds(clock_.Now());
  const int64_t window_end = r.created_at + billing::kCancelWindowSeconds;
  if (now >= r.start && now >= window_end) {
    return Status::FailedPrecondition(fmt::format(
        "reservation '{}' began at {} and its {}-minute cancellation window closed at {}: its "
        "term is committed and billed to its end",
        r.id, FormatRfc3339(Time(std::chrono::seconds(r.start))),
        billing::kCancelWindowSeconds / 60, FormatRfc3339(Time(std::chrono::seconds(window_end)))));
  }
  if (const int used = ReservationUnitsUsed(r.id); used > 0) {
    return Status::FailedPrecondition(
        fmt::format("reservation '{}' has {} unit(s) in use by reserved instances: delete them "
                    "first",
                    r.id, used));
  }
  reservations_.erase(r.id);
  batch.deleted_settings.push_back(std::string(kReservationPrefix) + r.id);
  return Status::Ok();
}

Status Accounts::RestoreReservations(
    const std::vector<std::pair<std::string, std::string>>& records) {
  for (const auto& [key, value] : records) {
    if (key == kNextReservation) {
      next_reservation_ = std::max<int64_t>(next_reservation_, std::atoll(value.c_str()));
      continue;
    }
    auto j = ParseJson(value, "setting " + key);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(billing::Reservation r,
                             billing::ReservationFromJson(*j, "setting " + key));
    // A reservation whose type left the catalog still bills its term; it guarantees nothing.
    (void)SizeReservation(r);
    reservations_[r.id] = r;
  }
  return Status::Ok();
}

Money Accounts::MonthSpend(const std::string& tenant) const {
  const int64_t now = billing::UnixSeconds(clock_.Now());
  const int64_t month = billing::MonthStart(now);
  Money total;
  if (auto it = spent_.find({month, tenant}); it != spent_.end()) total = it->second;
  std::vector<store::LedgerRecord> lines;
  AccruedLines(tenant, month, now + 1, lines);
  for (const store::LedgerRecord& l : lines) {
    if (l.start >= month) total += Money::FromMicros(l.amount_micros);
  }
  return total;
}

void Accounts::BudgetTargets(std::vector<telemetry::Target>& out) const {
  for (const auto& [tenant, budget] : budgets_) {
    telemetry::Target t;
    t.labels = {{"tenant", tenant}};
    t.tenant = tenant;
    t.set(telemetry::Field::kBudgetUsedPercent,
          static_cast<double>(UseOf(tenant, budget).basis_points) / 100);
    out.push_back(std::move(t));
  }
}

BudgetUse Accounts::UseOf(const std::string& tenant, const billing::Budget& budget) const {
  BudgetUse use;
  use.spent = MonthSpend(tenant);
  use.basis_points = use.spent.MulDiv(10'000, budget.monthly.micros()).micros();
  use.stopping = budget.hard_stop && use.spent >= budget.monthly;
  return use;
}

Status Accounts::CheckBudget(const Tenant& caller, Billing billing) const {
  auto it = budgets_.find(caller.id.str());
  if (it == budgets_.end() || !it->second.hard_stop || billing == Billing::kReserved) {
    return Status::Ok();
  }
  const BudgetUse use = UseOf(caller.id.str(), it->second);
  if (!use.stopping) return Status::Ok();
  return Status::PermissionDenied(
             fmt::format("the monthly budget of {} USD is spent ({} USD this month) and stops new "
                         "on-demand and spot instances; running work goes on",
                         it->second.monthly.ToString(2), use.spent.RoundedToCents().ToString(2)))
      .WithReason("budget_exceeded");
}

Result<billing::Budget> Accounts::SetBudget(const Tenant& caller, std::string_view tenant,
                                            const billing::Budget& budget, store::Batch& batch) {
  const Tenant* t = tenants_.Find(tenant);
  if (!t || !(caller.admin || caller.id == t->id)) {
    return Status::NotFound(fmt::format("tenant '{}' not found", Quote(tenant)));
  }
  billing::Budget set = budget;
  set.by_operator = caller.admin;
  auto old = budgets_.find(t->id.str());
  if (!caller.admin && old != budgets_.end() && old->second.by_operator) {
    if (set.monthly > old->second.monthly || (old->second.hard_stop && !set.hard_stop)) {
      return Status::PermissionDenied(fmt::format(
          "the operator set this budget ({} USD a month{}): a tenant may lower it or make it a "
          "hard stop, never raise or soften it",
          old->second.monthly.ToString(2), old->second.hard_stop ? ", hard stop" : ""));
    }
    set.by_operator = true;  // Still the operator's: lowered, not taken over.
  }
  budgets_[t->id.str()] = set;
  batch.settings.emplace_back(std::string(kBudgetPrefix) + t->id.str(), DumpJson(ToJson(set)));
  return set;
}

Status Accounts::DeleteBudget(const Tenant& caller, std::string_view tenant, store::Batch& batch) {
  const Tenant* t = tenants_.Find(tenant);
  if (!t || !(caller.admin || caller.id == t->id) || !budgets_.contains(t->id.str())) {
    return Status::NotFound(fmt::format("no budget for tenant '{}'", Quote(tenant)));
  }
  if (!caller.admin && budgets_.at(t->id.str()).by_operator) {
    return Status::PermissionDenied("the operator set this budget: only the operator deletes it");
  }
  budgets_.erase(t->id.str());
  batch.deleted_settings.push_back(std::string(kBudgetPrefix) + t->id.str());
  return Status::Ok();
}

std::vector<BudgetStatus> Accounts::Budgets(const Tenant& caller) const {
  std::vector<BudgetStatus> out;
  const std::string month = billing::MonthName(billing::UnixSeconds(clock_.Now()));
  for (const auto& [tenant, b] : budgets_) {
    if (caller.admin || tenant == caller.id.str()) {
      out.push_back({tenant, b, month, UseOf(tenant, b)});
    }
  }
  return out;
}

Status Accounts::RestoreFleetSince(const std::string& record) {
  auto since = ParseRfc3339(record);
  if (!since.ok()) {
    return Status::DataLoss(
        fmt::format("stored setting '{}': {}", kFleetSince, since.status().message()));
  }
  fleet_since_ = billing::UnixSeconds(*since);
  return Status::Ok();
}

void Accounts::DateFleetSince(Time since, store::Batch& batch) {
  fleet_since_ = billing::UnixSeconds(since);
  batch.settings.emplace_back(std::string(kFleetSince), FormatRfc3339(since));
}

Status Accounts::RestoreBudgets(const std::vector<std::pair<std::string, std::string>>& records,
                                int64_t month, const std::map<std::string, Money>& spent) {
  for (const auto& [key, value] : records) {
    auto j = ParseJson(value, "setting " + key);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(billing::Budget b, billing::BudgetFromJson(*j, "setting " + key));
    budgets_[key.substr(kBudgetPrefix.size())] = b;
  }
  for (const auto& [tenant, amount] : spent) spent_[{month, tenant}] = amount;
  return Status::Ok();
}

}  // namespace tessera::core
