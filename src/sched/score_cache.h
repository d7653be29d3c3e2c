// Per-node score caches for policies whose score of a node depends only on the request's shape
// and the node's state: one value per (shape, node), kept while the node's NodeTable epoch is
// unchanged, or one per (shape, NodeTable group), kept while the group's generation is. In a
// replay most decisions then read the cache and recompute only the nodes the last placements
// touched.
// Thread-safety: owned by one policy, on the scheduler's thread.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sched/fit.h"

namespace tessera::sched {

// What a cached score depends on in a request (not its allowed models: the score of a node the
// request may use does not read them).
struct ShapeKey {
  int64_t cpu = 0;
  int64_t gpu_mem = 0;
  int milli = 0;
  int count = 0;
  Kind kind = Kind::kCpuOnly;
  bool exclusive_mode = false;  // Which whole GPUs a placement takes.
  bool operator==(const ShapeKey&) const = default;
  static ShapeKey Of(const Need& need) {
    return {need.cpu, need.gpu_mem, need.milli, need.count, need.kind, need.exclusive_mode};
  }
};

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.cpu) * 0x9e3779b97f4a7c15ULL;
    h ^= (static_cast<uint64_t>(k.milli) << 20 | static_cast<uint64_t>(k.count) << 8 |
          static_cast<uint64_t>(k.kind) << 1 | static_cast<uint64_t>(k.exclusive_mode)) *
         0xc2b2ae3d27d4eb4fULL;
    h ^= static_cast<uint64_t>(k.gpu_mem) * 0x165667b19e3779f9ULL;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

template <typename T>
class NodeScoreCache {
 public:
  struct Slot {
    uint32_t epoch = 0;  // The node's epoch when `value` was computed; 0: nothing cached.
    T value{};
  };

  // The slots of `need`'s shape, one per node or group id (at least `nodes` of them).
  std::vector<Slot>& For(const Need& need, size_t nodes) {
    const ShapeKey key = ShapeKey::Of(need);
    auto it = shapes_.find(key);
    if (it == shapes_.end()) {
      if (shapes_.size() >= kMaxShapes) shapes_.clear();
      it = shapes_.emplace(key, std::vector<Slot>{}).first;
    }
    if (it->second.size() < nodes) it->second.resize(nodes);
    return it->second;
  }

  // The value cached in `slot` for a node now at `epoch` (or a group at that generation), after
  // compute() refreshed it if the node changed since it was cached.
  template <typename F>
  static const T& Get(Slot& slot, uint32_t epoch, F&& compute) {
    if (slot.epoch != epoch) {
      slot.value = compute();
      slot.epoch = epoch;
    }
    return slot.value;
  }

  // Forgets everything, e.g. when what the scores are computed against has changed.
  void Clear() { shapes_.clear(); }

 private:
  // A bound on the shapes kept; past it the cache starts over (the openb traces have at most a
  // few hundred shapes, so this never happens there).
  static constexpr size_t kMaxShapes = 1024;
  std::unordered_map<ShapeKey, std::vector<Slot>, ShapeKeyHash> shapes_;
};

}  // namespace tessera::sched
