#include "billing/report.h"

#include <fmt/format.h>

#include <cmath>

#include "billing/invoice.h"
#include "billing/meter.h"

namespace tessera::billing {

using nlohmann::json;

namespace {

constexpr std::string_view kCustom = "custom:";

// Money from a double amount of micro-dollars, rounded; for ratios only.
Money Micros(long double micros) { return Money::FromMicros(std::llround(micros)); }

}  // namespace

std::string CostReport::ModelOf(const std::string& instance_type) const {
  if (instance_type.rfind(kCustom, 0) == 0) return instance_type.substr(kCustom.size());
  const catalog::InstanceType* t = catalog_->FindInstanceType(instance_type);
  return t ? t->gpu_model : "";
}

namespace {

// The price book's entry a line's instance type is priced by: its own, or for a custom shape the
// model's cheapest whole GPU (per GPU, as custom shapes are priced).
struct UnitPrice {
  Money on_demand, spot, reserved_1y;
  bool per_gpu = false;  // A custom shape's: per whole GPU, not per instance-type unit.
};

std::optional<UnitPrice> PriceOf(const catalog::Catalog& c, const std::string& type,
                                 const std::string& model) {
  if (const catalog::Price* p = c.FindPrice(type)) {
    return UnitPrice{p->on_demand_per_hour, p->spot_per_hour, p->reserved_1y_per_hour, false};
  }
  std::optional<UnitPrice> best;
  for (const catalog::InstanceType& t : c.instance_types()) {
    if (t.gpu_model != model || t.sharing != catalog::SharingMode::kExclusive || t.gpus < 1)
      continue;
    const catalog::Price* p = c.FindPrice(t.id);
    if (!p) continue;
    UnitPrice u{p->on_demand_per_hour.MulDiv(1, t.gpus), p->spot_per_hour.MulDiv(1, t.gpus),
                p->reserved_1y_per_hour.MulDiv(1, t.gpus), true};
    if (!best || u.on_demand < best->on_demand) best = u;
  }
  return best;
}

}  // namespace

void CostReport::Accumulate(Sums& s, const store::LedgerRecord& l) const {
  s.gpu_milli_seconds += l.gpu_milli * l.seconds;
  s.cost += Money::FromMicros(l.amount_micros);
  s.util_weighted += static_cast<long double>(l.gpu_milli) * l.util_pct_seconds;
  s.observed_weighted += static_cast<long double>(l.gpu_milli) * l.util_observed_seconds;
  const std::string model = ModelOf(l.instance_type);
  if (const catalog::GpuModel* g = model.empty() ? nullptr : catalog_->FindGpu(model)) {
    const double peak = g->fp16_tflops > 0 ? g->fp16_tflops : g->fp32_tflops;
    // Peak x measured utilization x GPU-seconds, over the seconds that had readings.
    s.effective_tflops_seconds += peak * static_cast<double>(l.gpu_milli) / 1000 *
                                  static_cast<double>(l.util_pct_seconds) / 100;
  }
  if (l.billing == "on_demand") {
    s.on_demand_cost += Money::FromMicros(l.amount_micros);
    if (auto p = PriceOf(*catalog_, l.instance_type, model); p && p->on_demand > Money()) {
      s.spot_cost +=
          Money::FromMicros(l.amount_micros).MulDiv(p->spot.micros(), p->on_demand.micros());
    } else {
      s.spot_cost += Money::FromMicros(l.amount_micros);
    }
    if (l.instance_type.rfind(kCustom, 0) != 0) s.on_demand_unit_seconds += l.seconds;
  }
}

void CostReport::Add(const store::LedgerRecord& l) {
  Accumulate(by_tenant_[l.tenant], l);
  Accumulate(by_type_[l.instance_type], l);
  held_by_model_[ModelOf(l.instance_type)] += l.gpu_milli * l.seconds;
}

json CostReport::RowJson(const Sums& s, const std::string& type) const {
  const long double gpu_hours = static_cast<long double>(s.gpu_milli_seconds) / 1000 / 3600;
  json j = {{"gpu_hours", static_cast<double>(std::round(gpu_hours * 1000) / 1000)},
            {"cost_usd", Usd(s.cost)},
            {"mean_gpu_util_percent", nullptr},
            {"cost_per_utilized_gpu_hour_usd", nullptr},
            {"cost_per_effective_tflops_hour_usd", nullptr},
            {"spot_would_save_usd", Usd(s.on_demand_cost - s.spot_cost)}};
  if (s.observed_weighted > 0) {
    const long double util = s.util_weighted / s.observed_weighted;  // Percent.
    j["mean_gpu_util_percent"] = static_cast<double>(std::round(util * 100) / 100);
    const long double utilized_hours = gpu_hours * util / 100;
    if (utilized_hours > 0) {
      j["cost_per_utilized_gpu_hour_usd"] =
          Usd(Micros(static_cast<long double>(s.cost.micros()) / utilized_hours));
    }
    if (s.effective_tflops_seconds > 0) {
      j["cost_per_effective_tflops_hour_usd"] = Usd(
          Micros(static_cast<long double>(s.cost.micros()) / (s.effective_tflops_seconds / 3600)));
    }
  }
  if (!type.empty()) {
    // A reservation sized to the on-demand usage seen: enough 1-year units for its average
    // concurrency, paid for the whole period.
    json saving = nullptr;
    const catalog::Price* p = catalog_->FindPrice(type);
    const int64_t period = to_ - from_;
    if (p && period > 0 && s.on_demand_unit_seconds > 0) {
      const int64_t units = (s.on_demand_unit_seconds + period - 1) / period;
      const Money reserved = p->reserved_1y_per_hour.MulDiv(units * period, 3600);
      saving = {{"units", units},
                {"cost_usd", Usd(reserved)},
                {"saves_usd", Usd(s.on_demand_cost - reserved)}};
    }
    j["reservation_1y"] = std::move(saving);
  }
  return j;
}

json CostReport::ToJson() const {
  json tenants = json::array(), types = json::array();
  for (const auto& [tenant, s] : by_tenant_) {
    json j = RowJson(s, "");
    j["tenant"] = tenant;
    tenants.push_back(std::move(j));
  }
  for (const auto& [type, s] : by_type_) {
    json j = RowJson(s, type);
    j["instance_type"] = type;
    types.push_back(std::move(j));
  }
  json out = {{"tenants", std::move(tenants)}, {"instance_types", std::move(types)}};
  if (!fleet_.empty()) {
    json idle = json::array();
    const int64_t period = std::max<int64_t>(0, to_ - from_);
    for (const auto& [model, milli] : fleet_) {
      auto held = held_by_model_.find(model);
      const int64_t idle_milli_seconds =
          std::max<int64_t>(0, milli * period - (held == held_by_model_.end() ? 0 : held->second));
      auto price = PriceOf(*catalog_, "", model);
      json row = {{"gpu_model", model},
                  {"gpus", static_cast<double>(milli) / 1000},
                  {"idle_gpu_hours",
                   std::round(static_cast<double>(idle_milli_seconds) / 1000 / 3600 * 1000) / 1000},
                  {"idle_cost_usd", nullptr}};
      if (price) {
        row["idle_cost_usd"] = Usd(price->on_demand.MulDiv(idle_milli_seconds, 1000 * 3600));
      }
      idle.push_back(std::move(row));
    }
    out["idle"] = std::move(idle);
  }
  return out;
}

}  // namespace tessera::billing
