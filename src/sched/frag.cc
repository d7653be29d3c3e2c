#include "sched/frag.h"

#include <algorithm>
#include <array>

#include "fleet/fleet.h"

namespace tessera::sched {

namespace {

// The categories of frag.go, in the order its FragAmountSumExceptQ3 adds them (Q3 left out; a
// hosted class adds its partial fragment to Q2, as the Go code does).
enum Category { kQ1LackBoth, kQ2LackGpu, kQ4LackCpu, kXlSatisfied, kXrLackCpu, kNoAccess, kCount };

double SumCategories(const std::array<double, kCount>& d) {
  double out = 0;
  for (double v : d) out += v;
  return out;
}

}  // namespace

double NodeFragmentationMilli(const Workload& target, ModelMask model_bit, int64_t cpu_free,
                              std::span<const int16_t> gpu_free) {
  int64_t total = 0;
  for (int16_t v : gpu_free) total += v;
  std::array<double, kCount> d{};
  for (const WorkloadClass& c : target) {
    const double idle = static_cast<double>(total);
    const bool cpu_ok = cpu_free >= c.cpu_milli;
    if (c.gpu_milli == 0) {
      d[cpu_ok ? kXlSatisfied : kXrLackCpu] += c.weight * idle;
      continue;
    }
    if (!AllowsModel(c.allowed_models, model_bit)) {
      d[kNoAccess] += c.weight * idle;
      continue;
    }
    int fit = 0;
    int64_t partial = 0;
    for (int16_t v : gpu_free) {
      if (v >= c.gpu_milli) {
        ++fit;
      } else {
        partial += v;
      }
    }
    const bool gpu_ok = fit >= c.gpu_count;
    if (gpu_ok && cpu_ok) {
      d[kQ2LackGpu] += c.weight * static_cast<double>(partial);
    } else if (gpu_ok) {
      d[kQ4LackCpu] += c.weight * idle;
    } else if (cpu_ok) {
      d[kQ2LackGpu] += c.weight * idle;
    } else {
      d[kQ1LackBoth] += c.weight * idle;
    }
  }
  return SumCategories(d);
}

FragModel::FragModel(const Workload& target) {
  for (const WorkloadClass& w : target) {
    if (w.gpu_milli > 0) millis_.push_back(w.gpu_milli);
    cpus_.push_back(w.cpu_milli);
  }
  std::sort(millis_.begin(), millis_.end());
  millis_.erase(std::unique(millis_.begin(), millis_.end()), millis_.end());
  std::sort(cpus_.begin(), cpus_.end());
  cpus_.erase(std::unique(cpus_.begin(), cpus_.end()), cpus_.end());
  for (const WorkloadClass& w : target) {
    Class c{.cpu = w.cpu_milli,
            .weight = w.weight,
            .mask = w.allowed_models,
            .milli = w.gpu_milli,
            .count = w.gpu_count};
    if (w.gpu_milli > 0) {
      c.milli_index = static_cast<int>(std::lower_bound(millis_.begin(), millis_.end(), c.milli) -
                                       millis_.begin());
    }
    classes_.push_back(c);
  }
}

double FragModel::NodeFrag(ModelMask model_bit, int64_t cpu_free,
                           std::span<const int16_t> gpu_free) const {
  // Sort the free milli ascending, then walk the distinct class milli once to get, per milli, how
  // many GPUs have at least that much free and the free milli on the others.
  std::array<int16_t, fleet::kMaxGpusPerNode> s{};
  const size_t n = std::min(gpu_free.size(), s.size());
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    int16_t v = gpu_free[i];
    total += v;
    size_t j = i;
    for (; j > 0 && s[j - 1] > v; --j) s[j] = s[j - 1];
    s[j] = v;
  }
  if (total == 0) return 0.0;  // Every term is weight * 0.
  constexpr size_t kMaxMillis = fleet::kMilliPerGpu + 1;
  std::array<int8_t, kMaxMillis> fit;  // Only the first millis_.size() entries are used.
  std::array<int32_t, kMaxMillis> partial;
  size_t p = 0;
  int32_t prefix = 0;
  for (size_t k = 0; k < millis_.size(); ++k) {
    while (p < n && s[p] < millis_[k]) prefix += s[p++];
    fit[k] = static_cast<int8_t>(n - p);
    partial[k] = prefix;
  }
  const double idle = static_cast<double>(total);
  std::array<double, kCount> d{};
  for (const Class& c : classes_) {
    const bool cpu_ok = cpu_free >= c.cpu;
    if (c.milli_index < 0) {
      d[cpu_ok ? kXlSatisfied : kXrLackCpu] += c.weight * idle;
    } else if (!AllowsModel(c.mask, model_bit)) {
      d[kNoAccess] += c.weight * idle;
    } else {
      const auto k = static_cast<size_t>(c.milli_index);
      const bool gpu_ok = fit[k] >= c.count;
      if (gpu_ok && cpu_ok) {
        d[kQ2LackGpu] += c.weight * static_cast<double>(partial[k]);
      } else {
        d[gpu_ok ? kQ4LackCpu : (cpu_ok ? kQ2LackGpu : kQ1LackBoth)] += c.weight * idle;
      }
    }
  }
  return SumCategories(d);
}

bool FragModel::CpuChangeMatters(int64_t cpu_a, int64_t cpu_b) const {
  const int64_t lo = std::min(cpu_a, cpu_b), hi = std::max(cpu_a, cpu_b);
  // A class's test cpu_free >= c flips iff lo < c <= hi.
  auto it = std::upper_bound(cpus_.begin(), cpus_.end(), lo);
  return it != cpus_.end() && *it <= hi;
}

}  // namespace tessera::sched
