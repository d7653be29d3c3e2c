#include "sched/plugins/learned_workload.h"

#include <algorithm>
#include <map>

namespace tessera::sched {

std::vector<double> HoleWaste(const std::vector<std::pair<int, double>>& sizes) {
  std::vector<double> waste(fleet::kMilliPerGpu + 1, 0.0);
  for (int h = 1; h <= fleet::kMilliPerGpu; ++h) {
    double fitting = 0, after = 0;
    for (const auto& [milli, weight] : sizes) {
      if (milli > h || weight <= 0) continue;
      fitting += weight;
      after += weight * waste[static_cast<size_t>(h - milli)];
    }
    waste[static_cast<size_t>(h)] = fitting > 0 ? after / fitting : h;
  }
  return waste;
}

size_t LearnedWorkload::CountKeyHash::operator()(const std::pair<uint32_t, ClassKey>& k) const {
  const auto& [cpu, milli, gpus, mask] = k.second;
  uint64_t h = static_cast<uint64_t>(cpu) * 0x9e3779b97f4a7c15ULL;
  h ^= (static_cast<uint64_t>(static_cast<uint32_t>(milli)) << 32 |
        static_cast<uint64_t>(static_cast<uint32_t>(gpus))) *
       0xc2b2ae3d27d4eb4fULL;
  h ^= mask * 0x165667b19e3779f9ULL;
  h ^= static_cast<uint64_t>(k.first) * 0xd6e8feb86659fd93ULL;
  return static_cast<size_t>(h ^ (h >> 29));
}

LearnedWorkload::LearnedWorkload() : hole_waste_(fleet::kMilliPerGpu + 1, 0.0) {}

bool LearnedWorkload::Add(const Need& need, uint32_t source) {
  if (need.kind == Kind::kMig) return false;
  Source& s = SourceOf(source);
  s.requests += 1;
  requests_ += 1;
  if (s.requests > sources_[heaviest_].requests) {
    heaviest_ = static_cast<uint32_t>(&s - sources_.data());
  }
  const auto cpu = static_cast<double>(need.cpu);
  totals_.cpu += cpu;
  s.sums.cpu += cpu;
  const double milli = static_cast<double>(need.milli) * need.count;
  if (milli > 0) {
    totals_.gpu_milli += milli;
    totals_.gpu_request_cpu += cpu;
    s.sums.gpu_milli += milli;
    s.sums.gpu_request_cpu += cpu;
    if (need.mask != 0) AddPinned(source, need.mask, milli);
  }
  CountClass(source, {need.cpu, need.milli, need.count, need.mask});
  if (++seen_ < next_rebuild_) return false;
  Rebuild();
  next_rebuild_ = std::max(seen_ + 64, seen_ + seen_ / 4);
  return true;
}

LearnedWorkload::Heaviest LearnedWorkload::HeaviestNow() const {
  if (sources_.empty()) return {};
  const Source& h = sources_[heaviest_];
  const double rest = requests_ - h.requests;
  // Strictly more than the rest, and a rest at all: one source alone keeps weight 1 exactly.
  if (rest <= 0 || h.requests <= rest) return {h.id, 1.0};
  return {h.id, rest / h.requests};
}

LearnedSums LearnedWorkload::sums() const {
  const Heaviest h = HeaviestNow();
  if (h.weight == 1.0) return totals_;
  const LearnedSums& own = sources_[heaviest_].sums;
  const double cut = 1.0 - h.weight;
  return {totals_.cpu - cut * own.cpu, totals_.gpu_milli - cut * own.gpu_milli,
          totals_.gpu_request_cpu - cut * own.gpu_request_cpu};
}

double LearnedWorkload::Share(uint32_t source) const {
  const auto it = source_index_.find(source);
  if (it == source_index_.end() || requests_ <= 0) return 0;
  const Heaviest h = HeaviestNow();
  const double heaviest = sources_[heaviest_].requests;
  const double total = requests_ - (1.0 - h.weight) * heaviest;
  const double own = sources_[it->second].requests * (source == h.source ? h.weight : 1.0);
  return own / total;
}

LearnedWorkload::Source& LearnedWorkload::SourceOf(uint32_t id) {
  const auto it = source_index_.find(id);
  if (it != source_index_.end()) return sources_[it->second];
  if (sources_.size() >= kMaxSources) {
    // Drop the lightest source's own sums (never the heaviest's). What it sent stays counted,
    // at full weight, in the classes and the totals.
    size_t lightest = heaviest_ == 0 ? 1 : 0;
    for (size_t i = 0; i < sources_.size(); ++i) {
      if (i != heaviest_ && sources_[i].requests < sources_[lightest].requests) lightest = i;
    }
    source_index_.erase(sources_[lightest].id);
    if (lightest != sources_.size() - 1) {
      sources_[lightest] = sources_.back();
      source_index_[sources_[lightest].id] = static_cast<uint32_t>(lightest);
      if (heaviest_ == sources_.size() - 1) heaviest_ = static_cast<uint32_t>(lightest);
    }
    sources_.pop_back();
  }
  source_index_.emplace(id, static_cast<uint32_t>(sources_.size()));
  sources_.push_back(Source{.id = id, .requests = 0, .sums = {}});
  return sources_.back();
}

void LearnedWorkload::CountClass(uint32_t source, const ClassKey& key) {
  const auto it = class_index_.find({source, key});
  if (it != class_index_.end()) {
    Count& c = classes_[it->second];
    c.count += 1;
    c.last_seen = seen_;
    return;
  }
  if (classes_.size() >= kMaxClasses) {
    // Full: the least-counted class makes room, the least recently seen among equal counts, so
    // that a stream of one-off sizes keeps replacing one-offs and the frequent classes stay.
    size_t victim = 0;
    for (size_t i = 1; i < classes_.size(); ++i) {
      const Count& c = classes_[i];
      const Count& v = classes_[victim];
      if (c.count < v.count || (c.count == v.count && c.last_seen < v.last_seen)) victim = i;
    }
    class_index_.erase({classes_[victim].source, classes_[victim].key});
    if (victim != classes_.size() - 1) {
      classes_[victim] = classes_.back();
      class_index_[{classes_[victim].source, classes_[victim].key}] = static_cast<uint32_t>(victim);
    }
    classes_.pop_back();
  }
  class_index_.emplace(std::pair{source, key}, static_cast<uint32_t>(classes_.size()));
  classes_.push_back(Count{.source = source, .key = key, .count = 1, .last_seen = seen_});
}

void LearnedWorkload::AddPinned(uint32_t source, ModelMask mask, double milli) {
  auto it = std::find_if(pinned_.begin(), pinned_.end(),
                         [&](const Pinned& p) { return p.source == source && p.mask == mask; });
  if (it != pinned_.end()) {
    it->milli += milli;
    return;
  }
  if (pinned_.size() >= kMaxPinned) {
    // Full: the smallest sum makes room. Erasing (not swapping) keeps the first-seen order.
    pinned_.erase(std::min_element(pinned_.begin(), pinned_.end(),
                                   [](const auto& a, const auto& b) { return a.milli < b.milli; }));
  }
  pinned_.push_back(Pinned{source, mask, milli});
}

void LearnedWorkload::Rebuild() {
  // Weighed counts per class, in class order (so that sums are taken in a fixed order).
  const Heaviest h = HeaviestNow();
  std::map<ClassKey, double> per_class;
  for (const Count& c : classes_) {
    per_class[c.key] += c.source == h.source ? c.count * h.weight : c.count;
  }
  double total = 0;
  std::vector<std::pair<double, ClassKey>> by_count;
  for (const auto& [key, count] : per_class) {
    by_count.emplace_back(count, key);
    total += count;
  }
  std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second > b.second;
  });
  Workload w;
  double kept = 0;
  for (const auto& [count, key] : by_count) {
    if (kept >= kCoverage * total) break;
    kept += count;
    const auto& [cpu, milli, gpus, mask] = key;
    w.push_back({cpu, gpus, milli, mask, count});
  }
  for (WorkloadClass& c : w) c.weight /= kept;
  model_ = FragModel(w);
  workload_ = std::move(w);
  std::map<int, double> per_gpu;  // Per-GPU milli -> GPUs asked; every class, rare ones too.
  for (const auto& [key, count] : per_class) {
    const auto& [cpu, milli, gpus, mask] = key;
    if (milli > 0) per_gpu[milli] += count * gpus;
  }
  hole_waste_ = HoleWaste({per_gpu.begin(), per_gpu.end()});
}

}  // namespace tessera::sched
