#include "sim/bound.h"

#include <algorithm>
#include <limits>

namespace tessera::sim {

namespace {

constexpr size_t kSource = 0, kSink = 1, kFirstKind = 2;

sched::ModelMask BitOf(const fleet::Node& node) {
  if (!node.model.valid() || node.model.value >= 64) return 0;
  return sched::ModelMask{1} << node.model.value;
}

}  // namespace

OfflineBound::OfflineBound(const fleet::Fleet& fleet) {
  for (size_t i = 0; i < fleet.size(); ++i) {
    const fleet::Node& node = fleet.node(fleet::NodeIndex(static_cast<uint32_t>(i)));
    const int gpus = static_cast<int>(node.gpus.size());
    if (gpus == 0) continue;
    const sched::ModelMask bit = BitOf(node);
    auto it = std::find_if(kinds_.begin(), kinds_.end(),
                           [&](const Kind& k) { return k.model_bit == bit && k.gpus == gpus; });
    if (it == kinds_.end()) {
      kinds_.push_back({bit, gpus, 0});
      it = kinds_.end() - 1;
    }
    ++it->nodes;
  }
  Grow(kFirstKind + kinds_.size());
  for (size_t k = 0; k < kinds_.size(); ++k) {
    cap_[(kFirstKind + k) * n_ + kSink] =
        kinds_[k].nodes * kinds_[k].gpus * int64_t{fleet::kMilliPerGpu};
  }
}

void OfflineBound::Grow(size_t vertices) {
  std::vector<int64_t> next(vertices * vertices, 0);
  for (size_t a = 0; a < n_; ++a) {
    std::copy_n(cap_.begin() + static_cast<std::ptrdiff_t>(a * n_), n_,
                next.begin() + static_cast<std::ptrdiff_t>(a * vertices));
  }
  cap_ = std::move(next);
  n_ = vertices;
}

size_t OfflineBound::GroupOf(const Pod& pod) {
  const int count = pod.gpu_milli >= fleet::kMilliPerGpu ? pod.num_gpu : 1;
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].mask == pod.allowed_models && groups_[g].count == count) return g;
  }
  groups_.push_back({pod.allowed_models, count});
  const size_t v = n_;
  Grow(n_ + 1);
  group_vertex_.push_back(v);
  for (size_t k = 0; k < kinds_.size(); ++k) {
    const Kind& kind = kinds_[k];
    const bool model_ok = pod.allowed_models == 0 || (pod.allowed_models & kind.model_bit) != 0;
    if (!model_ok || kind.gpus < count) continue;
    // k-GPU pods use at most floor(g / k) * k of a g-GPU node's GPUs.
    const int64_t usable = kind.gpus / count * count;
    cap_[v * n_ + kFirstKind + k] = kind.nodes * usable * int64_t{fleet::kMilliPerGpu};
  }
  return groups_.size() - 1;
}

int64_t OfflineBound::Augment() {
  std::vector<size_t> parent(n_, n_);
  std::vector<size_t> queue{kSource};
  parent[kSource] = kSource;
  for (size_t head = 0; head < queue.size() && parent[kSink] == n_; ++head) {
    const size_t u = queue[head];
    for (size_t v = 0; v < n_; ++v) {
      if (parent[v] == n_ && cap_[u * n_ + v] > 0) {
        parent[v] = u;
        queue.push_back(v);
      }
    }
  }
  if (parent[kSink] == n_) return 0;
  int64_t push = std::numeric_limits<int64_t>::max();
  for (size_t v = kSink; v != kSource; v = parent[v]) {
    push = std::min(push, cap_[parent[v] * n_ + v]);
  }
  for (size_t v = kSink; v != kSource; v = parent[v]) {
    cap_[parent[v] * n_ + v] -= push;
    cap_[v * n_ + parent[v]] += push;
  }
  return push;
}

int64_t OfflineBound::Add(const Pod& pod) {
  if (pod.demand_milli() <= 0) return flow_;
  const size_t v = group_vertex_[GroupOf(pod)];
  cap_[kSource * n_ + v] += pod.demand_milli();
  // Only the new source capacity can open paths, so augmenting until none is left restores a
  // maximum flow.
  for (int64_t f = Augment(); f > 0; f = Augment()) flow_ += f;
  return flow_;
}

Curve BoundCurve(const std::vector<Pod>& pods, const std::vector<uint32_t>& order,
                 const fleet::Fleet& fleet) {
  OfflineBound bound(fleet);
  const int64_t capacity = fleet.total_gpus() * fleet::kMilliPerGpu;
  std::vector<Sample> samples;
  samples.reserve(order.size());
  int64_t arrived = 0;
  for (uint32_t i : order) {
    arrived += pods[i].demand_milli();
    const int64_t used = bound.Add(pods[i]);
    samples.push_back({arrived, used, 0.0, capacity - used});
  }
  return BucketSamples(samples, fleet.total_gpus());
}

}  // namespace tessera::sim
