// The evaluator's index of alerts by 64-bit fingerprint: open addressing with linear probing in
// one array, so a lookup costs one cache line, not a bucket and a node, and a scan over every
// alert walks memory in order. Key 0 marks an empty slot (fingerprints are never 0).
// Thread-safety: none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tessera::alerts {

struct Alert;

class AlertIndex {
 public:
  struct Slot {
    uint64_t key = 0;
    uint64_t seen = 0;  // The last evaluation round its condition held.
    Alert* alert = nullptr;
  };

  // The slot of `key`, or nullptr.
  Slot* Find(uint64_t key);
  // The slot of `key`, made with `alert` when absent (its alert replaced when present).
  Slot& Put(uint64_t key, Alert* alert);
  void Erase(uint64_t key);
  std::vector<Slot>& slots() { return slots_; }
  size_t size() const { return size_; }

 private:
  size_t Home(uint64_t key) const { return static_cast<size_t>(key) & (slots_.size() - 1); }
  void Grow();

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace tessera::alerts
