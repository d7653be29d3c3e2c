// The registry: every filter and policy the scheduler knows, named in one place.
#include <fmt/format.h>

#include <array>

#include "sched/plugin.h"
#include "sched/plugins/adaptive_fgd.h"
#include "sched/plugins/bestfit.h"
#include "sched/plugins/dotprod.h"
#include "sched/plugins/fgd.h"
#include "sched/plugins/gpu_clustering.h"
#include "sched/plugins/gpu_packing.h"
#include "sched/plugins/random.h"

namespace tessera::sched {

namespace {

struct Entry {
  std::string_view name;
  std::unique_ptr<Policy> (*make)(const PolicyEnv&);
};

// The FGD paper's six policies, in its order (01-Random ... 06-FGD), then Tessera's own.
constexpr std::array<Entry, 8> kPolicies{{
    {"random", NewRandomPolicy},
    {"dotprod", NewDotProductPolicy},
    {"gpu-clustering", NewGpuClusteringPolicy},
    {"gpu-packing", NewGpuPackingPolicy},
    {"bestfit", NewBestFitPolicy},
    {"fgd", NewFgdPolicy},
    {"adaptive-fgd", NewAdaptiveFgdPolicy},
    {"guarded-fgd", NewGuardedFgdPolicy},
}};

class FitFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "fit"; }
  size_t Filter(const Need& need, const NodeTable& nodes, std::span<const uint32_t> in,
                uint32_t* out) const override {
    size_t kept = 0;
    if (!need.detail) {
      for (uint32_t n : in) {
        out[kept] = n;
        kept += FitsSummary(need, nodes.fit(n)) ? 1 : 0;
      }
      return kept;
    }
    for (uint32_t n : in) {
      if (Fits(need, nodes, n)) out[kept++] = n;
    }
    return kept;
  }
};

}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const Entry& e : kPolicies) names.emplace_back(e.name);
  return names;
}

Result<std::unique_ptr<Policy>> NewPolicy(std::string_view name, const PolicyEnv& env) {
  for (const Entry& e : kPolicies) {
    if (e.name == name) return e.make(env);
  }
  return Status::NotFound(fmt::format("unknown scheduling policy '{}' (known: {})", name,
                                      fmt::join(PolicyNames(), ", ")));
}

std::unique_ptr<FilterPlugin> NewFitFilter() { return std::make_unique<FitFilter>(); }

}  // namespace tessera::sched
