#include "sched/target_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

namespace tessera::sched {

namespace {

// The key FGD groups pods by, compared field by field as its PodResource.Less does.
using ClassKey = std::tuple<int64_t, int, int, std::string>;

struct Group {
  ClassKey key;
  double count = 0;
  ModelMask mask = 0;
};

std::string NormalizeSpec(std::string_view spec) {
  std::string out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find('|', start);
    if (end == std::string_view::npos) end = spec.size();
    if (end > start) {
      if (!out.empty()) out += '|';
      out.append(spec.substr(start, end - start));
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

TypicalWorkload BuildTypicalWorkload(std::span<const PodShape> pods, double threshold_percent) {
  std::map<ClassKey, Group> by_key;
  for (const PodShape& p : pods) {
    ClassKey key{p.cpu_milli, p.gpu_milli, p.gpu_count, NormalizeSpec(p.gpu_spec)};
    Group& g = by_key[key];
    if (g.count == 0) {
      g.key = std::move(key);
      g.mask = p.allowed_models;
    }
    g.count += 1;
  }
  std::vector<Group> groups;
  groups.reserve(by_key.size());
  for (auto& [key, g] : by_key) groups.push_back(std::move(g));
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) {
    if (a.count != b.count) return a.count > b.count;
    return a.key > b.key;
  });

  TypicalWorkload out;
  out.distinct = groups.size();
  const auto total = static_cast<double>(pods.size());
  const double expected = threshold_percent * total / 100.0;
  double cumulative = 0;
  size_t kept = 0;
  while (cumulative < expected && kept < groups.size()) cumulative += groups[kept++].count;
  if (kept == 0) return out;
  out.coverage = cumulative / total;
  // Two divisions, as the Go code renormalises count/total by cumulative/total.
  for (size_t i = 0; i < kept; ++i) {
    const Group& g = groups[i];
    out.workload.push_back({.cpu_milli = std::get<0>(g.key),
                            .gpu_count = std::get<2>(g.key),
                            .gpu_milli = std::get<1>(g.key),
                            .allowed_models = g.mask,
                            .weight = (g.count / total) / (cumulative / total)});
  }
  return out;
}

Result<ModelMask> ParseGpuSpec(const catalog::Catalog& catalog, std::string_view spec) {
  ModelMask mask = 0;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find('|', start);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view piece = spec.substr(start, end - start);
    start = end + 1;
    if (piece.empty()) continue;
    const std::optional<catalog::GpuModelIndex> index = catalog.FindGpuIndex(piece);
    if (!index) {
      return Status::NotFound(
          fmt::format("gpu_spec '{}': unknown GPU model '{}' (not in the catalog)", spec, piece));
    }
    if (index->value >= 64) {
      return Status::InvalidArgument(
          fmt::format("gpu_spec '{}': model '{}' has index {}, beyond the 64 a ModelMask holds",
                      spec, piece, index->value));
    }
    mask |= ModelMask{1} << index->value;
  }
  return mask;
}

}  // namespace tessera::sched
