#include "billing/recommend.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/text.h"

namespace tessera::billing {

using nlohmann::json;

namespace {

constexpr double kHoursPerMonth = 730;  // What a reservation bills a month, used or not.
constexpr double kMib = 1024;

// Memory a model of `params_b` billion parameters needs in all, in GiB: full training in mixed
// precision with Adam holds about 16 bytes a parameter (weights, gradients, two moments, a master
// copy), plus a fifth for activations; fine-tuning (LoRA-style: frozen 16-bit weights, small
// adapters) about 2 bytes a parameter plus half again; inference 16-bit weights plus a fifth for
// the KV cache. Rendering and HPC give their memory.
double MemoryFor(const std::string& workload, double params_b) {
  const double gb = params_b * 1e9 / (1024.0 * 1024 * 1024);
  if (workload == "training") return gb * 16 * 1.2;
  if (workload == "fine-tuning") return gb * 2 * 1.5;
  return gb * 2 * 1.2;
}

std::optional<double> Number(const std::string& text) {
  double v = 0;
  const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// A type's GPUs: memory per GPU (GiB), GPUs in a unit, and the compute fraction of a GPU each
// is (a MIG slice's slices, a share's milli).
struct Unit {
  double memory_gib = 0;
  int gpus = 0;
  double fraction = 1;
};

std::optional<Unit> UnitOf(const catalog::Catalog& c, const catalog::InstanceType& t) {
  const catalog::GpuModel* g = c.FindGpu(t.gpu_model);
  if (!g) return std::nullopt;
  switch (t.sharing) {
    case catalog::SharingMode::kExclusive:
      return Unit{static_cast<double>(g->memory_mib) / kMib, t.gpus, 1};
    case catalog::SharingMode::kMig: {
      const mig::Profile* p = g->mig ? g->mig->Find(t.mig_profile) : nullptr;
      if (!p) return std::nullopt;
      return Unit{static_cast<double>(p->memory_mib) / kMib, 1,
                  static_cast<double>(p->compute_slices) / g->mig->compute_slices};
    }
    case catalog::SharingMode::kShared: {
      const int64_t mib =
          t.gpu_memory_mib > 0 ? t.gpu_memory_mib : g->memory_mib * t.milli_gpu / 1000;
      return Unit{static_cast<double>(mib) / kMib, 1, t.milli_gpu / 1000.0};
    }
  }
  return std::nullopt;
}

int Percent(Money saved, Money of) {
  return of > Money() ? static_cast<int>(saved.MulDiv(100, of.micros()).micros()) : 0;
}

}  // namespace

Result<RecommendQuery> ParseRecommendQuery(
    const std::function<const std::string*(std::string_view)>& param) {
  RecommendQuery q;
  auto bad = [](std::string_view name, const std::string& text, std::string_view want) {
    return Status::InvalidArgument(
        fmt::format("query parameter '{}': '{}' is not {}", name, Quote(text, 32), want));
  };
  if (const std::string* w = param("workload")) {
    if (*w != "training" && *w != "fine-tuning" && *w != "inference" && *w != "rendering" &&
        *w != "hpc") {
      return bad("workload", *w, "training, fine-tuning, inference, rendering or hpc");
    }
    q.workload = *w;
  }
  for (auto [name, out, max] : {std::tuple{"gpu_memory_gib", &q.gpu_memory_gib, 100'000.0},
                                {"model_params_b", &q.model_params_b, 100'000.0}}) {
    if (const std::string* t = param(name)) {
      auto v = Number(*t);
      if (!v || *v <= 0 || *v > max) return bad(name, *t, "a positive number");
      *out = *v;
    }
  }
  if (q.gpu_memory_gib && q.model_params_b) {
    return Status::InvalidArgument(
        "query parameter 'model_params_b': give gpu_memory_gib or model_params_b, not both");
  }
  if (const std::string* t = param("gpus")) {
    auto v = Number(*t);
    if (!v || *v < 1 || *v > 1024 || *v != std::floor(*v)) return bad("gpus", *t, "1 to 1024");
    q.gpus = static_cast<int>(*v);
  }
  if (const std::string* t = param("hours_per_month")) {
    auto v = Number(*t);
    if (!v || *v <= 0 || *v > kHoursPerMonth) return bad("hours_per_month", *t, "0 to 730");
    q.hours_per_month = *v;
  }
  if (const std::string* t = param("months")) {
    auto v = Number(*t);
    if (!v || *v < 1 || *v > 120 || *v != std::floor(*v)) return bad("months", *t, "1 to 120");
    q.months = static_cast<int>(*v);
  }
  if (const std::string* t = param("budget_usd")) {
    auto m = Money::Parse(*t);
    if (!m.ok() || *m <= Money()) return bad("budget_usd", *t, "a positive amount of dollars");
    q.budget = *m;
  }
  for (auto [name, out] : {std::pair{"interruptible", &q.interruptible}, {"nvlink", &q.nvlink}}) {
    if (const std::string* t = param(name)) {
      if (*t != "true" && *t != "false" && *t != "1" && *t != "0" && !t->empty()) {
        return bad(name, *t, "true or false");
      }
      *out = *t != "false" && *t != "0";
    }
  }
  return q;
}

Recommendation Recommend(
    const catalog::Catalog& catalog, const RecommendQuery& q,
    const std::function<bool(const catalog::InstanceType&, int)>& placeable_now,
    const std::function<bool(const catalog::InstanceType&)>& offered) {
  Recommendation out;
  // Beyond this many GPUs in all, several instances need NVLink inside each (a few large islands
  // with the network between them), not many small GPUs joined only by the network.
  constexpr int kMaxGpusOverNetworkOnly = 8;
  constexpr int kMinIslandForSpread = 4;
  // What the workload needs: in all, and per GPU once the count is known.
  double total = q.gpu_memory_gib   ? *q.gpu_memory_gib * std::max(q.gpus, 1)
                 : q.model_params_b ? MemoryFor(q.workload, *q.model_params_b)
                                    : 1;
  out.memory_gib = total;
  const bool whole_only = q.workload != "inference";  // Training, HPC, rendering: whole GPUs.
  double largest = 0;
  std::string largest_name;
  bool any_memory_fit = false;
  Money cheapest_over_budget;
  for (const catalog::InstanceType& t : catalog.instance_types()) {
    const auto unit = UnitOf(catalog, t);
    const catalog::Price* price = catalog.FindPrice(t.id);
    const catalog::GpuModel* g = catalog.FindGpu(t.gpu_model);
    if (!unit || !price || !g) continue;
    if (unit->memory_gib > largest) {
      largest = unit->memory_gib;
      largest_name = t.gpu_model;
    }
    if (whole_only && t.sharing != catalog::SharingMode::kExclusive) continue;
    // GPUs needed: as asked, or as many as the memory needs.
    const double per_gpu = q.gpus > 0 ? total / q.gpus : std::min(total, unit->memory_gib);
    if (per_gpu > unit->memory_gib + 1e-9) continue;
    any_memory_fit = true;
    const int need =
        q.gpus > 0 ? q.gpus : static_cast<int>(std::ceil(total / unit->memory_gib - 1e-9));
    if (t.sharing != catalog::SharingMode::kExclusive && need > 1) continue;
    // One unit with enough GPUs, or (without NVLink: distributed) several units of the type.
    // Only training and HPC spread over several instances (data parallel); inference,
    // fine-tuning and rendering take one instance with enough GPUs.
    const bool distributed = q.workload == "training" || q.workload == "hpc";
    int units = 1;
    if (unit->gpus < need) {
      if (q.nvlink || !distributed) continue;
      units = (need + unit->gpus - 1) / unit->gpus;
    }
    if (q.nvlink && need > 1 && !t.nvlink) continue;
    if (units > 1 && unit->gpus * units > kMaxGpusOverNetworkOnly &&
        !(t.nvlink && unit->gpus >= kMinIslandForSpread)) {
      continue;
    }
    const double peak = (q.workload == "hpc" || q.workload == "rendering" || g->fp16_tflops <= 0)
                            ? g->fp32_tflops
                            : g->fp16_tflops;
    const double tflops = peak * unit->fraction * unit->gpus * units;
    const Money on_demand = price->on_demand_per_hour.MulDiv(
        static_cast<int64_t>(std::llround(q.hours_per_month * 1000)) * units, 1000);
    struct Mode {
      const char* billing;
      Money monthly;
      double hours;
    };
    std::vector<Mode> modes = {{"on_demand", on_demand, q.hours_per_month}};
    if (q.interruptible) {
      modes.push_back(
          {"spot",
           price->spot_per_hour.MulDiv(
               static_cast<int64_t>(std::llround(q.hours_per_month * 1000)) * units, 1000),
           q.hours_per_month});
    }
    // A reservation bills every hour of the month, used or not, for its whole term.
    if (q.months >= 12) {
      modes.push_back(
          {"reserved_1y",
           price->reserved_1y_per_hour.MulDiv(static_cast<int64_t>(kHoursPerMonth) * units, 1),
           q.hours_per_month});
    }
    if (q.months >= 36) {
      modes.push_back(
          {"reserved_3y",
           price->reserved_3y_per_hour.MulDiv(static_cast<int64_t>(kHoursPerMonth) * units, 1),
           q.hours_per_month});
    }
    const bool here = !offered || offered(t);
    const bool now = here && placeable_now(t, units);
    for (const Mode& m : modes) {
      if (m.monthly <= Money()) continue;
      if (q.budget && m.monthly > *q.budget) {
        if (cheapest_over_budget == Money() || m.monthly < cheapest_over_budget) {
          cheapest_over_budget = m.monthly;
        }
        continue;
      }
      Offer o;
      o.instance_type = t.id;
      o.billing = m.billing;
      o.units = units;
      o.gpus = unit->gpus * units;
      o.memory_gib_per_gpu = unit->memory_gib;
      o.monthly = m.monthly;
      o.per_tflops_hour =
          tflops > 0 ? Money::FromMicros(
                           std::llround(static_cast<double>(m.monthly.micros()) / m.hours / tflops))
                     : Money();
      o.placeable_now = now;
      o.offered_here = here;
      const std::string gpus = o.gpus > 1 ? fmt::format("{} x ", o.gpus) : "";
      if (q.nvlink && o.gpus > 1) {
        o.reason = fmt::format("{}-GPU {}: NVLink island of {}", o.gpus, q.workload, unit->gpus);
      } else {
        o.reason = fmt::format("{:.0f} GB fits on {}{} ({:.0f} GB a GPU)", total, gpus, t.gpu_model,
                               unit->memory_gib);
      }
      if (o.units > 1) o.reason += fmt::format(", over {} instances and the network", o.units);
      const std::string mode = m.billing;
      if (mode == "spot") {
        o.reason += fmt::format("; interruptible: spot saves {}%",
                                Percent(on_demand - m.monthly, on_demand));
      } else if (mode == "reserved_1y" || mode == "reserved_3y") {
        o.reason +=
            fmt::format("; {} months: a {}-year reservation {} {}% over on-demand", q.months,
                        mode == "reserved_3y" ? 3 : 1, m.monthly < on_demand ? "saves" : "costs",
                        std::abs(Percent(on_demand - m.monthly, on_demand)));
      }
      out.offers.push_back(std::move(o));
    }
  }
  std::sort(out.offers.begin(), out.offers.end(), [](const Offer& a, const Offer& b) {
    if (a.offered_here != b.offered_here) return a.offered_here;
    if (a.monthly != b.monthly) return a.monthly < b.monthly;
    if (a.per_tflops_hour != b.per_tflops_hour) return a.per_tflops_hour < b.per_tflops_hour;
    return std::tie(a.instance_type, a.billing) < std::tie(b.instance_type, b.billing);
  });
  if (!out.offers.empty()) {
    // The cheapest on-demand offer says so.
    for (Offer& o : out.offers) {
      if (o.billing == "on_demand" && o.offered_here) {
        o.reason += ", the cheapest per hour";
        break;
      }
    }
    if (out.offers.size() > 10) out.offers.resize(10);
    for (Offer& o : out.offers) {
      if (!o.offered_here) {
        o.reason += "; not offered here: this fleet has none of these GPUs";
      } else if (!o.placeable_now) {
        o.reason += "; would wait: the fleet has no free capacity for it now";
      }
    }
    return out;
  }
  if (!any_memory_fit) {
    out.why_none = fmt::format(
        "{:.0f} GB a GPU fits no GPU of the catalog (the largest is {} with {:.0f} GB); ask for "
        "more GPUs",
        q.gpus > 0 ? total / q.gpus : total, largest_name, largest);
  } else if (q.budget && cheapest_over_budget > Money()) {
    out.why_none =
        fmt::format("the cheapest offer costs {} USD a month, over the budget of {}",
                    cheapest_over_budget.RoundedToCents().ToString(2), q.budget->ToString(2));
  } else {
    out.why_none = q.nvlink ? "no instance type has that many GPUs on one NVLink island"
                            : "no instance type offers that shape";
  }
  return out;
}

json ToJson(const Recommendation& r) {
  json offers = json::array();
  for (const Offer& o : r.offers) {
    offers.push_back({{"instance_type", o.instance_type},
                      {"billing", o.billing},
                      {"units", o.units},
                      {"gpus", o.gpus},
                      {"memory_gib_per_gpu", std::round(o.memory_gib_per_gpu * 10) / 10},
                      {"monthly_usd", o.monthly.RoundedToCents().ToString(2)},
                      {"per_tflops_hour_usd", o.per_tflops_hour.ToString(2)},
                      {"placeable_now", o.placeable_now},
                      {"offered_here", o.offered_here},
                      {"reason", o.reason}});
  }
  json j = {{"memory_gib", std::round(r.memory_gib * 10) / 10}, {"offers", std::move(offers)}};
  if (r.offers.empty()) j["why_none"] = r.why_none;
  return j;
}

}  // namespace tessera::billing
