// Accounts: what tenants owe and may spend (docs/billing.md). It meters running instances and
// volumes into the store's ledger, in the batch that changes their state, and cuts their open
// intervals at each UTC midnight; it keeps reservations with the units active work holds of each,
// the capacity on-demand work holds by GPU model, and budgets with each tenant's spend this
// month; and it answers a billing read as of an instant.
// It owns none of the instances or volumes it meters: their meters live on their records
// (Instance::meter, Volume::meter), and the state tells it when work starts, stops or moves.
// Its memory: reservations and budgets until deleted; spend by month since start-up.
//
// Stored records (settings): "reservation/<id>" and "billing/next_reservation", "budget/<tenant>"
// and "billing/fleet_since".
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "billing/budget.h"
#include "billing/meter.h"
#include "billing/reservation.h"
#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/money.h"
#include "common/result.h"
#include "core/admission.h"
#include "core/agents.h"
#include "core/instance.h"
#include "core/instance_table.h"
#include "core/tenants.h"
#include "core/volumes.h"
#include "fleet/fleet.h"
#include "store/store.h"
#include "telemetry/series.h"

namespace tessera::core {

// A billing read's view of one instant, taken on the core thread: the ledger's last seq then,
// and the billing lines of `tenant` ("" = every tenant) starting in [from, to) that the ledger
// does not hold (reservations' monthly lines, what running instances accrued up to then). Read
// with a ledger reader up to that seq, on any thread, it is exactly what the core saw.
struct BillingSnapshot {
  std::string tenant;
  int64_t from = 0, to = 0;
  int64_t max_seq = 0;
  std::vector<store::LedgerRecord> beyond;  // Note "open": a stretch still running.

  // Calls `fn` with every line: the ledger's, then `beyond` (open = the stretch still runs).
  Status Scan(store::LedgerReader& reader,
              const std::function<void(const store::LedgerRecord&, bool open)>& fn) const;
};

// A budget's state this month: what its tenant spent so far (its ledger lines, its reservations'
// monthly lines and what its running instances and volumes accrued) and the share of the budget
// that is, in basis points: integers, so no binary fraction decides a threshold.
struct BudgetUse {
  Money spent;
  int64_t basis_points = 0;
  bool stopping = false;  // A hard stop that now refuses new on-demand and spot instances.
};

struct BudgetStatus {
  std::string tenant;
  billing::Budget budget;
  std::string month;  // "2026-12": the month it counts.
  BudgetUse use;
};

class Accounts {
 public:
  // Every argument must outlive it. `node_timeout`: the longest gap a utilization reading
  // stands for (a silent node's gap is not measured).
  Accounts(const catalog::Catalog& catalog, const Clock& clock, const fleet::Fleet& fleet,
           Admission& admission, const Tenants& tenants, InstanceTable& instances, Volumes& volumes,
           Duration node_timeout);
  Accounts(const Accounts&) = delete;
  Accounts& operator=(const Accounts&) = delete;

  // Meters. Open starts `inst`'s interval when its workload started (clamped to its attempt's
  // wait and to now), or at `since` (billing resumes when a silent node reports again), at the
  // price in force now. Close ends it now, or at Unix second `end`, into the batch's ledger.
  void Open(Instance& inst);
  void Open(Instance& inst, Time since);
  void Close(Instance& inst, billing::Ending ending, store::Batch& batch,
             std::optional<int64_t> end = std::nullopt);
  // Closes a volume's bill at Unix second `end` (its lines into the batch, counted as spend).
  void CloseVolume(Volume& v, int64_t end, billing::Ending ending, store::Batch& batch);
  // At a UTC midnight not rolled yet: cuts every open interval there (volumes are saved into
  // `batch`). Returns the instances whose meters it cut, for the caller to save.
  std::vector<Instance*> Roll(store::Batch& batch);
  // Counts the node's latest readings into its running instances' meters (the cost report's
  // utilization).
  void Observe(const AgentNode& node);

  // What active work holds: `inst` (add) in, or out of, its reservation's units in use, and
  // on-demand `inst` booked, or unbooked, on its GPU model. Restored: a restored instance that
  // runs with its meter open.
  void CountReservationUnit(const Instance& inst, bool add);
  void CountOnDemand(const Instance& inst, bool add);
  void Restored(const Instance& inst);

  // Reservations: a tenant's own (the admin's: all). Creating one checks that the fleet could
  // host every active reservation of the GPU model at once; ResourceExhausted otherwise.
  Result<billing::Reservation> CreateReservation(const Tenant& caller,
                                                 const billing::ReservationRequest& req,
                                                 store::Batch& batch);
  std::vector<billing::Reservation> ListReservations(const Tenant& caller) const;
  // NotFound for an unknown id and for another tenant's reservation alike.
  Result<billing::Reservation> GetReservation(const Tenant& caller, std::string_view id) const;
  // Only before its start: FailedPrecondition once its term began.
  Status DeleteReservation(const Tenant& caller, std::string_view id, store::Batch& batch);
  // Units of the reservation that active instances hold.
  int ReservationUnitsUsed(const std::string& id) const;
  // For `billing: reserved`: a free unit of the caller's matching active reservation, or 409
  // no_reservation naming what exists. Holding it is counted (CountReservationUnit) until the
  // instance ends. With `units` > 1, only when that many are free (a gang's members claim one
  // each).
  Result<std::string> ClaimReservation(const Tenant& caller, const Shape& shape,
                                       int units = 1) const;
  // Why on-demand `inst` (or `count` like it, a gang's) may not take capacity now: what is free
  // of its GPU model is held for active reservations' unclaimed units; "" when it may.
  std::string HeldForReservations(const Instance& inst, int64_t count = 1) const;
  // Rebuilds reservations from their stored records (kReservationPrefix, kNextReservation).
  Status RestoreReservations(const std::vector<std::pair<std::string, std::string>>& records);
  static constexpr std::string_view kReservationPrefix = "reservation/";
  static constexpr std::string_view kNextReservation = "billing/next_reservation";

  // Budgets: a tenant sets its own, the admin any tenant's. NotFound for an unknown tenant and
  // for another tenant's alike.
  Result<billing::Budget> SetBudget(const Tenant& caller, std::string_view tenant,
                                    const billing::Budget& budget, store::Batch& batch);
  Status DeleteBudget(const Tenant& caller, std::string_view tenant, store::Batch& batch);
  // Each budget the caller may see (a tenant's own; the admin's: all), with this month's spend
  // (GET /v1/budgets).
  std::vector<BudgetStatus> Budgets(const Tenant& caller) const;
  const std::map<std::string, billing::Budget>& budgets() const { return budgets_; }
  BudgetUse UseOf(const std::string& tenant, const billing::Budget& budget) const;
  // Appends one series per budget: its tenant's spend this month in percent of it.
  void BudgetTargets(std::vector<telemetry::Target>& out) const;
  // 403 budget_exceeded when the caller's hard-stop budget is spent and `billing` would spend.
  Status CheckBudget(const Tenant& caller, Billing billing) const;
  // Rebuilds budgets from their records (kBudgetPrefix) and this month's ledger spend by tenant.
  Status RestoreBudgets(const std::vector<std::pair<std::string, std::string>>& records,
                        int64_t month, const std::map<std::string, Money>& spent);
  static constexpr std::string_view kBudgetPrefix = "budget/";

  // A billing read's view of this instant, for a ledger reader off the core thread to finish.
  BillingSnapshot Snapshot(const store::Store& store, const std::string& tenant, int64_t from,
                           int64_t to) const;
  // The fleet's GPUs of `model`, in milli-GPU. FleetChanged: a node left the fleet.
  int64_t FleetMilliOf(const std::string& model) const;
  void FleetChanged() { fleet_milli_nodes_ = 0; }
  // The fleet's first start: when the control plane first served this store, in Unix seconds.
  // Cost reports count nothing before it, idle capacity included (docs/billing.md).
  int64_t fleet_since() const { return fleet_since_; }
  // Restores it from its record (kFleetSince). DataLoss for a record that is not a time.
  Status RestoreFleetSince(const std::string& record);
  // Dates a store without that record (a new store, or one from before it was kept) `since`, and
  // records the date in `batch`.
  void DateFleetSince(Time since, store::Batch& batch);
  static constexpr std::string_view kFleetSince = "billing/fleet_since";

 private:
  billing::Payer PayerOf(const Instance& inst) const;
  // Closes `inst`'s interval at `end` into the batch's ledger and counts the lines' spend.
  void CloseAt(Instance& inst, int64_t end, billing::Ending ending, store::Batch& batch);
  // Counts the ledger lines of `batch` from `first` on into the months' spend.
  void CountSpend(const store::Batch& batch, size_t first);
  // The lines `tenant` ("" = every tenant) owes beyond the ledger: its reservations' monthly
  // lines over [from, to) and its running instances' and volumes' open intervals up to now,
  // where only the stretch that holds now is marked "open". Lines are not filtered by start.
  void AccruedLines(const std::string& tenant, int64_t from, int64_t to,
                    std::vector<store::LedgerRecord>& lines) const;
  Money MonthSpend(const std::string& tenant) const;
  // The admission gate for a reservation (tenants; the operator's pass): its GPUs and those of
  // the tenant's reservations overlapping its term fit the quota, and what it bills this month
  // fits a hard-stop budget.
  Status AdmitReservation(const Tenant& caller, const billing::Reservation& r) const;
  // Fills the reservation's GPU model and unit size from the catalog.
  Status SizeReservation(billing::Reservation& r);
  void SaveReservation(const billing::Reservation& r, store::Batch& batch) const;

  const catalog::Catalog& catalog_;
  const Clock& clock_;
  const fleet::Fleet& fleet_;
  Admission& admission_;
  const Tenants& tenants_;
  InstanceTable& instances_;
  Volumes& volumes_;
  Duration node_timeout_;

  // Running instances with an open interval, and the last midnight rolled.
  std::set<std::pair<std::string, std::string>> metered_;  // (tenant, instance id).
  int64_t rolled_day_ = 0;
  std::map<std::string, billing::Reservation> reservations_;
  std::map<std::string, int> reservation_used_;
  int64_t next_reservation_ = 1;
  std::map<std::string, int64_t> on_demand_milli_;  // Held by on-demand work, by GPU model.
  // The fleet's GPUs by model index, in milli-GPU, as of `fleet_milli_nodes_` nodes (hardware
  // never changes while a node is in the fleet; FleetChanged counts them again).
  mutable std::vector<int64_t> fleet_milli_;
  mutable size_t fleet_milli_nodes_ = 0;
  std::map<std::string, billing::Budget> budgets_;  // By tenant id.
  // Ledger spend by (month start, tenant), for the months since start-up.
  std::map<std::pair<int64_t, std::string>, Money> spent_;
  int64_t fleet_since_ = 0;  // Unix seconds; RestoreFleetSince sets it.
};

}  // namespace tessera::core
