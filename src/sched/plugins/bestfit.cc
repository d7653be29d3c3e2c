#include "sched/plugins/bestfit.h"

#include "sched/plugins/dotprod.h"
#include "sched/plugins/summary_score.h"

namespace tessera::sched {

namespace {

// The Go code's operations in its order: per resource (free - req) / max * weight, summed from 0,
// then (1 - sum) * 100, truncated.
int BestFitScoreFloat(int64_t cpu_free, int64_t gpu_free, int64_t cpu_req, int64_t gpu_req) {
  double score = 0;
  score += (static_cast<double>(cpu_free) - static_cast<double>(cpu_req)) /
           static_cast<double>(kMaxSpecCpuMilli) * 0.5;
  score += (static_cast<double>(gpu_free) - static_cast<double>(gpu_req)) /
           static_cast<double>(kMaxSpecGpuMilli) * 0.5;
  score = (1.0 - score) * 100.0;
  return static_cast<int>(static_cast<int64_t>(score));
}

}  // namespace

int BestFitScore(int64_t cpu_free, int64_t gpu_free, int64_t cpu_req, int64_t gpu_req) {
  // Exactly, score = trunc(t / 2560) with t = 256000 - [(cpu_free - cpu_req) + 16 * (gpu_free -
  // gpu_req)]. Off an integer the float value is at least 1/2560 away from one, far beyond its
  // rounding error, so the integer quotient is the answer; on an integer only the float arithmetic
  // knows which side its rounding falls.
  constexpr int64_t kRatio = kMaxSpecCpuMilli / kMaxSpecGpuMilli;
  constexpr int64_t kUnit = 2 * kMaxSpecCpuMilli / 100;
  const int64_t t = 100 * kUnit - ((cpu_free - cpu_req) + kRatio * (gpu_free - gpu_req));
  if (t % kUnit != 0) return static_cast<int>(t / kUnit);
  return BestFitScoreFloat(cpu_free, gpu_free, cpu_req, gpu_req);
}

std::unique_ptr<Policy> NewBestFitPolicy(const PolicyEnv&) {
  return NewSummaryScorePolicy("bestfit", BestFitScore);
}

}  // namespace tessera::sched
