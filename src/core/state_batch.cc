// State's batch window (docs/core.md, "A batch window"): creates are held for a moment and
// then placed together, so that a large request is not shut out by a small one that arrived a
// few milliseconds before it. Off unless StateOptions::batch_window is above 1.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/state.h"

namespace tessera::core {

Duration State::batch_due_in() const {
  if (held_.empty()) return Duration::max();
  if (std::cmp_greater_equal(held_.size(), options_.batch_window)) return Duration::zero();
  const auto waited = std::chrono::duration_cast<Duration>(clock_->Now() - held_since_);
  // A wall clock stepped back (NTP) closes the window rather than holding it shut.
  if (waited < Duration::zero() || waited >= options_.batch_wait) return Duration::zero();
  return options_.batch_wait - waited;
}

void State::Hold(const Instance& inst) {
  if (held_.empty()) held_since_ = clock_->Now();
  held_.push_back(inst.id.str());
}

bool State::IsHeld(const Instance& inst) const {
  return std::find(held_.begin(), held_.end(), inst.id.str()) != held_.end();
}

std::string State::HeldReason() const {
  return fmt::format(
      "in the batch window: placed with up to {} others within {} ms", options_.batch_window - 1,
      std::chrono::duration_cast<std::chrono::milliseconds>(options_.batch_wait).count());
}

void State::PlaceHeld(store::Batch& batch) {
  if (batch_due_in() > Duration::zero()) return;
  struct Due {
    std::string id;
    int priority = 0;
    int64_t demand_milli = 0;
  };
  std::vector<Due> due;
  for (std::string& id : std::exchange(held_, {})) {
    const Instance* inst = instances_.Find(id);
    // Deleted while it waited (or its tenant disabled): nothing to place.
    if (!inst || inst->state != InstanceState::kPending) continue;
    const sched::Request r = admission_.RequestFor(inst->shape, inst->billing);
    due.push_back({std::move(id), r.priority, GpuMilliOf(*inst)});
  }
  std::stable_sort(due.begin(), due.end(), [](const Due& a, const Due& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.demand_milli > b.demand_milli;
  });
  for (const Due& d : due) {
    Instance* inst = instances_.Find(d.id);
    if (!inst) continue;
    PlaceOrQueue(*inst, batch);  // As a create without the window is.
    Save(*inst, batch);
  }
}

}  // namespace tessera::core
