// State's side of the batch window (batch_window.h; docs/core.md, "A batch window"): the order
// in which the held creates go once they are due.
#include <algorithm>
#include <utility>

#include "core/state.h"

namespace tessera::core {

void State::PlaceHeld(store::Batch& batch) {
  struct Due {
    std::string id;
    int priority = 0;
    int64_t demand_milli = 0;
  };
  std::vector<Due> due;
  for (std::string& id : window_.TakeDue()) {
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
