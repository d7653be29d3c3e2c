#include "alerts/alert_index.h"

#include <utility>

namespace tessera::alerts {

AlertIndex::Slot* AlertIndex::Find(uint64_t key) {
  if (slots_.empty()) return nullptr;
  for (size_t i = Home(key);; i = (i + 1) & (slots_.size() - 1)) {
    if (slots_[i].key == key) return &slots_[i];
    if (slots_[i].key == 0) return nullptr;
  }
}

AlertIndex::Slot& AlertIndex::Put(uint64_t key, Alert* alert) {
  if (Slot* s = Find(key)) {
    s->alert = alert;
    return *s;
  }
  if (2 * (size_ + 1) > slots_.size()) Grow();  // At most half full: probes stay short.
  size_t i = Home(key);
  while (slots_[i].key != 0) i = (i + 1) & (slots_.size() - 1);
  slots_[i] = Slot{key, 0, alert};
  ++size_;
  return slots_[i];
}

void AlertIndex::Erase(uint64_t key) {
  if (slots_.empty()) return;
  const size_t mask = slots_.size() - 1;
  size_t i = Home(key);
  while (slots_[i].key != key) {
    if (slots_[i].key == 0) return;
    i = (i + 1) & mask;
  }
  // Backward-shift deletion: move later members of the probe run into the hole.
  for (size_t j = (i + 1) & mask; slots_[j].key != 0; j = (j + 1) & mask) {
    const size_t home = Home(slots_[j].key);
    // Slot j may fill the hole at i when its home is not cyclically in (i, j].
    const bool movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
    if (movable) {
      slots_[i] = slots_[j];
      i = j;
    }
  }
  slots_[i] = Slot{};
  --size_;
}

void AlertIndex::Grow() {
  std::vector<Slot> old =
      std::exchange(slots_, std::vector<Slot>(slots_.empty() ? 64 : 2 * slots_.size()));
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key == 0) continue;
    Slot& n = Put(s.key, s.alert);
    n.seen = s.seen;
  }
}

}  // namespace tessera::alerts
