// Curves of a run: the per-pod log (one Sample after every attempt, placed or failed) bucketed
// by arrived GPU demand into 0..130 % of capacity, exactly as the FGD authors' merge scripts do,
// so that our numbers compare with theirs cell by cell:
//   arrive = round_half_even(arrived_milli / total_gpus / 10)
//   bucket b = the rows with arrive == b; if none, those with b-1 <= arrive <= b+1; else empty
//   allocated% = round(mean of round(used_milli / total_gpus / 10, 2), 2); unallocated = 100 - it
//   frag%      = round(100 * mean(frag_milli) / 1000 / total_gpus, 2)
//   frag_ratio = mean of frag_milli / idle_milli * 100 (0 for a row with no idle GPU), unrounded
// Rounding follows Python's round(): to the nearest, exact halves to even, on the exact binary
// value of the double.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"

namespace tessera::sim {

inline constexpr int kMaxArrivedPct = 130;

// One row of the per-pod log, taken after an attempt.
struct Sample {
  int64_t arrived_milli = 0;  // Sum of num_gpu * gpu_milli of every pod attempted so far.
  int64_t used_milli = 0;     // Allocated GPU milli in the fleet.
  double frag_milli = 0;      // Fragmentation against the target workload.
  int64_t idle_milli = 0;     // Unallocated GPU milli in the fleet.
};

// One bucket of a curve. `has_data` is false for an empty bucket; its figures are then 0.
struct CurvePoint {
  int arrived_pct = 0;
  bool has_data = false;
  double allocated_pct = 0;
  double unallocated_pct = 0;
  double frag_pct = 0;
  double frag_ratio_pct = 0;
};

// kMaxArrivedPct + 1 points, arrived_pct 0..130 in order.
using Curve = std::vector<CurvePoint>;

// Python's round(x) and round(x, 2): nearest, exact halves to even.
double RoundHalfEven(double x);
double Round2(double x);

// Buckets a run's log. `total_gpus` > 0.
Curve BucketSamples(const std::vector<Sample>& samples, int64_t total_gpus);

// The pointwise mean of `curves` (each from BucketSamples): a bucket averages the curves that
// have data there, and is empty when none has.
Curve MeanCurve(const std::vector<Curve>& curves);

// The unallocated GPU % at `pct`, or nullopt when that bucket is empty.
std::optional<double> UnallocatedAt(const Curve& curve, int pct);

// The CSV form: header "arrived_pct,allocated_pct,unallocated_pct,frag_pct,frag_ratio_pct" and
// one row per bucket; an empty bucket has empty figure fields.
std::string CurveCsv(const Curve& curve);

// Writes CurveCsv(curve) to `path`; errors name the path.
Status WriteCurveCsv(const Curve& curve, const std::string& path);

}  // namespace tessera::sim
