#include "sim/bound.h"

#include <algorithm>
#include <limits>

namespace tessera::sim {

namespace {

constexpr size_t kSource = 0, kSink = 1, kFirstKind = 2;

constexpr int kWhole = fleet::kMilliPerGpu;

}  // namespace

// The family (Fekete and Schepers, "New classes of fast lower bounds for bin packing problems",
// 2001), with x in milli and one GPU = 1000:
//   u_k(x) = x if (k+1)x is a multiple of 1000, else floor((k+1)x / 1000) * 1000 / k, k = 1..10;
//   v_t(x) = 1000 if x > 1000 - t, 0 if x < t, x otherwise, for 1 <= t <= 500, with one t for
//            each share size seen: t = m + 1 (size m drops to 0) or t = 1001 - m (m rounds up).
// Each is dual feasible: sizes that sum to at most 1000 have u-sizes that sum to at most 1000.
// So the shares and whole GPUs of any placement have total u-size at most the fleet's GPUs, and
// the fractional knapsack that keeps the most milli under that budget is an upper bound on it.
PackingBound::PackingBound(int64_t total_gpus)
    : capacity_(total_gpus * kWhole * kScale), count_(kWhole + 1, 0) {
  for (int64_t k = 1; k <= 10; ++k) {
    std::vector<int64_t> u(kWhole + 1);
    for (int64_t x = 0; x <= kWhole; ++x) {
      const int64_t y = (k + 1) * x;
      u[static_cast<size_t>(x)] = y % kWhole == 0 ? x * kScale : y / kWhole * kWhole * kScale / k;
    }
    AddFunction(std::move(u));
  }
}

bool PackingBound::Function::Worse(int a, int b) const {
  // a keeps less milli per unit of u than b; sizes with u = 0 cost nothing and come last.
  const int64_t ua = u[static_cast<size_t>(a)], ub = u[static_cast<size_t>(b)];
  if (ua == 0 || ub == 0) return ub == 0 && ua != 0;
  return int64_t{a} * ub < int64_t{b} * ua;
}

void PackingBound::AddFunction(std::vector<int64_t> u) {
  Function f{std::move(u), sizes_};
  std::stable_sort(f.by_value.begin(), f.by_value.end(),
                   [&f](int a, int b) { return f.Worse(a, b); });
  functions_.push_back(std::move(f));
}

void PackingBound::AddSize(int m) {
  sizes_.push_back(m);
  for (Function& f : functions_) {
    // After the sizes it is not worse than, so the order stays the stable sort's.
    auto it = std::upper_bound(f.by_value.begin(), f.by_value.end(), m,
                               [&f](int a, int b) { return f.Worse(a, b); });
    f.by_value.insert(it, m);
  }
  if (m >= kWhole) return;
  for (int t : {m + 1, kWhole + 1 - m}) {
    if (t < 1 || t > kWhole / 2) continue;
    std::vector<int64_t> u(kWhole + 1);
    for (int x = 0; x <= kWhole; ++x) {
      const int v = x > kWhole - t ? kWhole : (x < t ? 0 : x);
      u[static_cast<size_t>(x)] = int64_t{v} * kScale;
    }
    AddFunction(std::move(u));
  }
}

void PackingBound::Add(const Pod& pod) {
  if (pod.demand_milli() <= 0) return;
  const int m = pod.gpu_milli >= kWhole ? kWhole : pod.gpu_milli;
  if (count_[static_cast<size_t>(m)] == 0) AddSize(m);
  count_[static_cast<size_t>(m)] += pod.gpu_milli >= kWhole ? pod.num_gpu : 1;
}

int64_t PackingBound::Bound() const {
  int64_t placed = 0;
  for (int m : sizes_) placed += int64_t{m} * count_[static_cast<size_t>(m)];
  int64_t best = placed;
  for (const Function& f : functions_) {
    int64_t size = 0;
    for (int m : sizes_) size += f.u[static_cast<size_t>(m)] * count_[static_cast<size_t>(m)];
    int64_t excess = size - capacity_;
    int64_t kept = placed;
    // Drop the sizes that keep the least milli per unit of u first, fractionally; the milli
    // dropped is rounded down, so what is kept stays an upper bound.
    for (size_t i = 0; excess > 0 && i < f.by_value.size(); ++i) {
      const int m = f.by_value[i];
      const int64_t um = f.u[static_cast<size_t>(m)];
      if (um == 0) break;
      const int64_t drop = std::min(excess, um * count_[static_cast<size_t>(m)]);
      kept -= drop * m / um;
      excess -= drop;
    }
    best = std::min(best, kept);
  }
  return best;
}

OfflineBound::OfflineBound(const fleet::Fleet& fleet) : packing_(fleet.total_gpus()) {
  for (size_t i = 0; i < fleet.size(); ++i) {
    const fleet::Node& node = fleet.node(fleet::NodeIndex(static_cast<uint32_t>(i)));
    const int gpus = static_cast<int>(node.gpus.size());
    if (gpus == 0) continue;
    const sched::ModelMask bit = sched::ModelBit(node.model);
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
    if (!sched::AllowsModel(pod.allowed_models, kind.model_bit) || kind.gpus < count) continue;
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
  if (pod.demand_milli() <= 0) return bound_milli();
  packing_.Add(pod);
  const size_t v = group_vertex_[GroupOf(pod)];
  cap_[kSource * n_ + v] += pod.demand_milli();
  // Only the new source capacity can open paths, so augmenting until none is left restores a
  // maximum flow.
  for (int64_t f = Augment(); f > 0; f = Augment()) flow_ += f;
  return bound_milli();
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
