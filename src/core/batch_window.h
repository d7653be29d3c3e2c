// BatchWindow: new creates held for a moment, then placed together (docs/core.md, "A batch
// window"), so that a large request is not shut out by a small one that came a few milliseconds
// before it. It holds ids only: what the held creates are, and in which order they go, is the
// state's (Instances::PlaceHeld). Its memory is what it holds, at most `size` ids and never longer
// than `wait` past the first; nothing of it is stored, so a restart queues what was held.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"

namespace tessera::core {

class BatchWindow {
 public:
  // `clock` must outlive it. A window of `size` 1 or less is off: nothing is held.
  BatchWindow(const Clock& clock, size_t size, Duration wait)
      : clock_(clock), size_(size), wait_(wait) {}

  bool enabled() const { return size_ > 1; }
  bool empty() const { return held_.empty(); }
  // Holds create `id`; the window's time starts with the first it holds.
  void Hold(std::string id);
  bool Holds(std::string_view id) const;
  // A held create was deleted: it no longer counts towards the window's size.
  void Forget(std::string_view id);
  // How soon what it holds is due: zero once `size` are held, `wait` has passed since the first,
  // or the wall clock stepped back (it never holds the window shut); Duration::max() when empty.
  Duration DueIn() const;
  // The held ids in the order they came, when due (the window is empty again); none before.
  std::vector<std::string> TakeDue();
  // What a held create's reason says.
  std::string Reason() const;

 private:
  const Clock& clock_;
  size_t size_;
  Duration wait_;
  std::vector<std::string> held_;  // In arrival order.
  Time since_{};                   // When the first of them came.
};

}  // namespace tessera::core
