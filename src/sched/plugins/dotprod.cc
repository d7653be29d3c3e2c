#include "sched/plugins/dotprod.h"

#include "sched/plugins/summary_score.h"

namespace tessera::sched {

namespace {

// The Go code's operations, in its order: normalise both vectors by the max spec, dot product
// from 0, halve, subtract from 1, scale by 100, truncate.
int DotProductScoreFloat(int64_t cpu_free, int64_t gpu_free, int64_t cpu_req, int64_t gpu_req) {
  const double cpu_max = static_cast<double>(kMaxSpecCpuMilli);
  const double gpu_max = static_cast<double>(kMaxSpecGpuMilli);
  const double n0 = static_cast<double>(cpu_free) / cpu_max;
  const double n1 = static_cast<double>(gpu_free) / gpu_max;
  const double p0 = static_cast<double>(cpu_req) / cpu_max;
  const double p1 = static_cast<double>(gpu_req) / gpu_max;
  double dot = 0;
  dot += n0 * p0;
  dot += n1 * p1;
  double score = dot / 2;
  score = 1 - score;
  return static_cast<int>(static_cast<int64_t>(100.0 * score));
}

}  // namespace

int DotProductScore(int64_t cpu_free, int64_t gpu_free, int64_t cpu_req, int64_t gpu_req) {
  // Exactly, score = trunc((D - N) / U) with N = cpu_free*cpu_req + 256*gpu_free*gpu_req,
  // U = 2*128000^2/100 and D = 100*U. Off an integer the float result is at least 1/U away from
  // it, far beyond its rounding error, so integer arithmetic gives the same answer; on an integer
  // only the float arithmetic knows which side its rounding falls.
  constexpr int64_t kUnit = 2 * kMaxSpecCpuMilli * kMaxSpecCpuMilli / 100;
  constexpr int64_t kRatio =
      (kMaxSpecCpuMilli / kMaxSpecGpuMilli) * (kMaxSpecCpuMilli / kMaxSpecGpuMilli);
  const int64_t t = 100 * kUnit - (cpu_free * cpu_req + kRatio * gpu_free * gpu_req);
  if (t % kUnit != 0) return static_cast<int>(t / kUnit);
  return DotProductScoreFloat(cpu_free, gpu_free, cpu_req, gpu_req);
}

std::unique_ptr<Policy> NewDotProductPolicy(const PolicyEnv&) {
  return NewSummaryScorePolicy("dotprod", DotProductScore);
}

}  // namespace tessera::sched
