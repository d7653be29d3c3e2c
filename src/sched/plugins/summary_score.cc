#include "sched/plugins/summary_score.h"

namespace tessera::sched {

namespace {

class SummaryScorePolicy final : public Policy {
 public:
  SummaryScorePolicy(std::string_view name, SummaryScore score) : name_(name), score_(score) {}
  std::string_view Name() const override { return name_; }

  void Score(const Need& need, const NodeTable& nodes, std::span<const uint32_t> feasible,
             std::span<int32_t> scores) override {
    const int64_t gpu_req = int64_t{need.milli} * need.count;
    for (size_t i = 0; i < feasible.size(); ++i) {
      const NodeFit& f = nodes.fit(feasible[i]);
      scores[i] = score_(f.cpu_free, f.gpu_free, need.cpu, gpu_req);
    }
  }

  bool SelectGpus(const Need& need, const NodeTable& nodes, uint32_t n,
                  fleet::Assignment* a) override {
    return GrantBest(need, nodes, n, a);
  }

 private:
  const std::string_view name_;
  const SummaryScore score_;
};

}  // namespace

std::unique_ptr<Policy> NewSummaryScorePolicy(std::string_view name, SummaryScore score) {
  return std::make_unique<SummaryScorePolicy>(name, score);
}

}  // namespace tessera::sched
