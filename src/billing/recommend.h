// The recommender (GET /v1/recommend, `tessera recommend`; docs/billing.md): the seed articles'
// GPU selection decision tree as a tool. From a workload, its memory (or model size), GPU count,
// hours a month, horizon, interruptibility, budget and NVLink need, it ranks the catalog's
// offers (instance type x billing mode) by monthly cost, each with a one-line reason, and says
// which the fleet could place now.
// Thread-safety: pure functions over the catalog.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "common/money.h"
#include "common/result.h"

namespace tessera::billing {

struct RecommendQuery {
  std::string workload = "training";     // training, fine-tuning, inference, rendering, hpc.
  std::optional<double> gpu_memory_gib;  // Memory per GPU...
  std::optional<double> model_params_b;  // ...or the model's size, in billions of parameters.
  int gpus = 0;                          // 0: as many as the memory needs.
  double hours_per_month = 730;
  bool interruptible = false;
  int months = 1;               // The horizon.
  std::optional<Money> budget;  // Per month.
  bool nvlink = false;
};

// The query from named parameters (the API's snake_case query parameters): `param(name)` gives a
// parameter's text or nullptr. InvalidArgument naming the parameter.
Result<RecommendQuery> ParseRecommendQuery(
    const std::function<const std::string*(std::string_view)>& param);

struct Offer {
  std::string instance_type;
  std::string billing;  // on_demand, spot, reserved_1y, reserved_3y.
  int units = 1;        // Instances of the type.
  int gpus = 0;         // GPUs in all (a MIG slice or a share counts 1).
  double memory_gib_per_gpu = 0;
  Money monthly;
  Money per_tflops_hour;
  std::string reason;
  bool placeable_now = true;
  bool offered_here = true;  // The fleet has the type's GPUs at all.
};

struct Recommendation {
  double memory_gib = 0;      // What the workload needs in all.
  std::vector<Offer> offers;  // Cheapest first; empty when nothing fits.
  std::string why_none;       // When nothing fits.
};

// Ranks the offers: what this fleet offers first (`offered(type)`: it has the type's GPUs; null:
// every type), cheapest first within each; the rest say "not offered here". `placeable_now(type,
// units)` says whether the fleet could place that many instances of the type now. Several
// instances of a type are offered only over NVLink-connected GPUs of 4 or more an instance, or
// for 8 GPUs in all at most: never dozens of small GPUs with only the network between them.
Recommendation Recommend(
    const catalog::Catalog& catalog, const RecommendQuery& q,
    const std::function<bool(const catalog::InstanceType&, int)>& placeable_now,
    const std::function<bool(const catalog::InstanceType&)>& offered = nullptr);

nlohmann::json ToJson(const Recommendation& r);

}  // namespace tessera::billing
