#include "sim/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace tessera::sim {

namespace {

// Far beyond any sensible inflation of the openb traces (about 11k pods at 1.3x); a guard
// against a target that would exhaust memory.
constexpr int64_t kMaxPods = 20'000'000;

}  // namespace

uint64_t UniformBelow(std::mt19937_64& rng, uint64_t n) {
  // Reject the top partial block of the 64-bit range so every residue is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x = rng();
  while (x >= limit) x = rng();
  return x % n;
}

int64_t TotalDemandMilli(const std::vector<Pod>& pods) {
  int64_t sum = 0;
  for (const Pod& p : pods) sum += p.demand_milli();
  return sum;
}

Result<ArrivalOrder> BuildArrivalOrder(const std::vector<Pod>& trace, double target_milli,
                                       uint64_t seed) {
  if (trace.empty()) return Status::InvalidArgument("the trace has no pods");
  std::vector<uint32_t> by_name(trace.size());
  std::iota(by_name.begin(), by_name.end(), 0u);
  std::stable_sort(by_name.begin(), by_name.end(),
                   [&](uint32_t a, uint32_t b) { return trace[a].name < trace[b].name; });

  std::mt19937_64 rng(seed);
  ArrivalOrder out;
  out.pods = by_name;
  // Fisher-Yates, as Go's rand.Shuffle walks it: from the back.
  for (size_t i = out.pods.size() - 1; i > 0; --i) {
    std::swap(out.pods[i], out.pods[UniformBelow(rng, i + 1)]);
  }
  out.demand_milli = TotalDemandMilli(trace);

  if (static_cast<double>(out.demand_milli) < target_milli) {
    if (out.demand_milli == 0) {
      return Status::FailedPrecondition(
          "cannot tune the trace up to the target GPU demand: no pod asks for a GPU");
    }
    while (true) {
      const uint32_t idx = by_name[UniformBelow(rng, by_name.size())];
      const Pod& p = trace[idx];
      // The stop test uses the per-GPU milli, as the authors' code does; the copy then adds
      // num_gpu x milli, so a multi-GPU copy can overshoot the target.
      if (static_cast<double>(out.demand_milli + p.gpu_milli) > target_milli) break;
      if (static_cast<int64_t>(out.pods.size()) >= kMaxPods) {
        return Status::ResourceExhausted(fmt::format(
            "tuning up to {:.0f} milli-GPU would need more than {} pods", target_milli, kMaxPods));
      }
      out.pods.push_back(idx);
      out.demand_milli += p.demand_milli();
      ++out.copies;
    }
  } else {
    while (static_cast<double>(out.demand_milli) > target_milli && !out.pods.empty()) {
      const auto pos = static_cast<std::ptrdiff_t>(UniformBelow(rng, out.pods.size()));
      out.demand_milli -= trace[out.pods[static_cast<size_t>(pos)]].demand_milli();
      out.pods.erase(out.pods.begin() + pos);
      ++out.removed;
    }
  }
  return out;
}

}  // namespace tessera::sim
