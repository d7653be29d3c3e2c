// LearnedWorkload: what an online policy (plugins/adaptive_fgd.h) learns from the requests it is
// shown, and the fragmentation model it builds from them, in bounded memory and with no single
// sender able to dominate it.
//
// Classes. Requests are counted by class (cpu, per-GPU milli, GPU count, allowed models). The
// model keeps the most frequent classes up to 95% of the weight counted, weighted by frequency,
// and is rebuilt whenever the requests seen have grown by a quarter (at least 64), so a run
// rebuilds it a few dozen times. It also sums, for guarded-fgd's guards, the CPU every request
// asked, the milli-GPU the GPU requests asked and their CPU, and the milli-GPU asked per set of
// allowed models (gpu_spec). MIG requests are not counted: FGD's fragmentation has no MIG class.
//
// Bounded memory, whatever the requests. At most kMaxClasses counts (per source and class) are
// kept: a request of a new class when the table is full takes the place of the least-counted one
// (the least recently seen among equals), so a flood of distinct sizes holds the table at the
// cap while the frequent classes stay. Pinned demand (per source and model mask) and per-source
// sums are capped the same way, dropping the smallest. The paper's traces have at most 330
// classes and 16 masks, far below the caps, so no simulated result depends on them.
//
// Sources. Each request counts 1 for its source (Request::source: the tenant in the server, 0
// everywhere in the simulator). Once two or more sources have been seen, the heaviest counts at
// most as much as all the others together: when its count H exceeds the rest R, each of its
// requests weighs R / H, in the classes, the sums and the pinned demand alike, so it holds at most
// half of the model's weight however much it sends; the others count in full. A single source is
// never weighed down, so a one-source run learns exactly what it did before sources existed. The
// weighing applies to the whole history (the per-source counts are kept), so a tenant that sent
// everything before a second one appeared is cut to half at once.
//
// Thread-safety: not thread-safe; owned by one policy on the scheduler's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sched/fit.h"
#include "sched/frag.h"
#include "sched/scheduler.h"

namespace tessera::sched {

// What the requests seen asked in total, as weighed (see above).
// W(h) for h = 0..1000: the milli a GPU with h milli free ends up wasting when it keeps being
// filled by requests drawn from `sizes` (per-GPU milli, weight; a whole GPU is 1000), each next
// filler drawn by weight among those that fit, until none fits: W(h) = h when nothing fits, else
// the weighted mean of W(h - m) over the sizes m <= h.
std::vector<double> HoleWaste(const std::vector<std::pair<int, double>>& sizes);

struct LearnedSums {
  double cpu = 0;              // CPU milli asked by every request, CPU-only included.
  double gpu_milli = 0;        // Milli-GPU asked by the GPU requests.
  double gpu_request_cpu = 0;  // CPU milli those GPU requests asked.
};

class LearnedWorkload {
 public:
  static constexpr size_t kMaxClasses = 1024;  // Counts held, per (source, class).
  static constexpr size_t kMaxPinned = 256;    // Pinned-demand sums, per (source, model mask).
  static constexpr size_t kMaxSources = 1024;  // Sources whose own sums are held.

  LearnedWorkload();

  // Counts `need`, sent by `source`. True when the model was rebuilt, so that scores computed
  // against the old one are stale.
  bool Add(const Need& need, uint32_t source);

  // The model built at the last rebuild, and the classes and weights it was built from (the
  // weights sum to 1; empty before the first request).
  const FragModel& model() const { return model_; }
  const Workload& workload() const { return workload_; }
  // W(h), h = 0..1000 milli: HoleWaste() over the per-GPU sizes counted, rare ones included, as
  // of the last rebuild.
  std::span<const double> hole_waste() const { return hole_waste_; }

  // The sums over every request counted, as weighed now.
  LearnedSums sums() const;
  // True once a GPU request pinned to some models has been counted.
  bool any_pinned() const { return !pinned_.empty(); }
  // Calls fn(mask, milli) for each pinned-demand sum, as weighed now, in the order first seen.
  template <typename F>
  void ForEachPinned(F&& fn) const {
    const Heaviest h = HeaviestNow();
    for (const Pinned& p : pinned_) fn(p.mask, p.source == h.source ? p.milli * h.weight : p.milli);
  }

  // The share of the model's weight that `source` holds now, 0..1 (0 for a source not held).
  double Share(uint32_t source) const;
  // How many counts, pinned sums and sources are held (each at most its cap).
  size_t classes() const { return classes_.size(); }
  size_t pinned() const { return pinned_.size(); }
  size_t sources() const { return sources_.size(); }

 private:
  using ClassKey = std::tuple<int64_t, int, int, ModelMask>;  // cpu, milli, GPU count, mask.
  struct Count {
    uint32_t source = 0;
    ClassKey key;
    double count = 0;
    int64_t last_seen = 0;
  };
  struct CountKeyHash {
    size_t operator()(const std::pair<uint32_t, ClassKey>& k) const;
  };
  struct Pinned {
    uint32_t source = 0;
    ModelMask mask = 0;
    double milli = 0;
  };
  struct Source {
    uint32_t id = 0;
    double requests = 0;
    LearnedSums sums;
  };
  // The heaviest source and the weight of each of its requests: 1 unless it outweighs the rest.
  struct Heaviest {
    uint64_t source = UINT64_MAX;  // No source: matches no uint32_t.
    double weight = 1;
  };

  Heaviest HeaviestNow() const;
  Source& SourceOf(uint32_t id);
  void CountClass(uint32_t source, const ClassKey& key);
  void AddPinned(uint32_t source, ModelMask mask, double milli);
  void Rebuild();

  static constexpr double kCoverage = 0.95;
  std::vector<Count> classes_;
  std::unordered_map<std::pair<uint32_t, ClassKey>, uint32_t, CountKeyHash> class_index_;
  std::vector<Pinned> pinned_;
  std::vector<Source> sources_;
  std::unordered_map<uint32_t, uint32_t> source_index_;
  uint32_t heaviest_ = 0;  // Index into sources_ when it is not empty.
  double requests_ = 0;    // Every request counted, from sources dropped since included.
  LearnedSums totals_;     // Unweighed.
  int64_t seen_ = 0;
  int64_t next_rebuild_ = 1;
  FragModel model_{Workload{}};
  Workload workload_;
  std::vector<double> hole_waste_;
};

}  // namespace tessera::sched
