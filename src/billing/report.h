// The cost report (GET /v1/reports/cost, docs/billing.md): billing lines summed per tenant and per
// instance type into GPU-hours, cost, measured utilization, cost per utilized GPU-hour, cost per
// effective TFLOPS-hour, and what spot or a reservation would have saved on the usage observed;
// for the operator, the idle cost per GPU model (capacity nobody paid for).
// Money sums are exact; the ratios (per utilized GPU-hour, per TFLOPS-hour) are rounded to the
// micro-dollar.
// Thread-safety: a CostReport is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "catalog/catalog.h"
#include "common/money.h"
#include "store/store.h"

namespace tessera::billing {

class CostReport {
 public:
  // `catalog` must outlive this. The period is [from, to) in Unix seconds.
  CostReport(const catalog::Catalog* catalog, int64_t from, int64_t to)
      : catalog_(catalog), from_(from), to_(to) {}

  void Add(const store::LedgerRecord& line);
  // Adds the idle rows: the fleet's GPUs of each model (milli-GPU) over the period, less what
  // every tenant's lines held.
  void SetFleet(std::map<std::string, int64_t> milli_by_model) {
    fleet_ = std::move(milli_by_model);
  }

  // {"from", "to", "tenants": [...], "instance_types": [...], "idle": [...] (with SetFleet)}.
  nlohmann::json ToJson() const;

 private:
  struct Sums {
    int64_t gpu_milli_seconds = 0;  // GPUs held x billed seconds.
    Money cost;
    Money on_demand_cost;  // Of on-demand lines: what the savings are computed on.
    Money spot_cost;       // The same usage at the spot price.
    // GPU-weighted utilization: sum of gpu_milli x percent-seconds, over gpu_milli x seconds
    // observed.
    long double util_weighted = 0;
    long double observed_weighted = 0;
    double effective_tflops_seconds = 0;  // Peak x utilization x GPU-seconds.
    int64_t on_demand_unit_seconds = 0;   // Instance-type units x seconds, of on-demand lines.
  };
  void Accumulate(Sums& s, const store::LedgerRecord& line) const;
  nlohmann::json RowJson(const Sums& s, const std::string& type) const;
  // The catalog GPU model a line's instance type runs on ("" for none).
  std::string ModelOf(const std::string& instance_type) const;

  const catalog::Catalog* catalog_;
  int64_t from_, to_;
  std::map<std::string, Sums> by_tenant_;
  std::map<std::string, Sums> by_type_;
  std::map<std::string, int64_t> held_by_model_;  // milli-GPU-seconds.
  std::map<std::string, int64_t> fleet_;
};

}  // namespace tessera::billing
