// State's parts of billing that need more than Accounts holds: the recommender's questions of
// the scheduler (PlaceableNow, OfferedHere) and the fleet's first start, dated by the tenants and
// the joined nodes (docs/billing.md).
#include <algorithm>

#include "core/invariant.h"
#include "core/state.h"

namespace tessera::core {

bool State::OfferedHere(const catalog::InstanceType& t) const {
  // From the per-model count FleetMilliOf keeps, not a walk of the fleet for every type.
  return accounts_.FleetMilliOf(t.gpu_model) > 0;
}

bool State::PlaceableNow(const catalog::InstanceType& t, int units) {
  CreateInstanceRequest probe;
  probe.instance_type = t.id;
  auto admitted = admission_.Admit(probe);
  if (!admitted.ok()) return false;
  if (units > kDryRunUnits) {
    // Too many to try one by one on the core thread: count, node by node, the units its free
    // capacity could hold (wholly free GPUs for whole-GPU shapes, free thousandths for
    // fractions, and free vCPUs and memory), an upper bound on what the scheduler would place.
    const Shape& shape = admitted->shape;
    const auto model = catalog_->FindGpuIndex(shape.gpu_model);
    const int64_t unit_milli = std::max<int64_t>(shape.GpuMilli(*catalog_), 1);
    const int64_t unit_gpus = std::max(shape.gpus, 1);
    int64_t fit = 0;
    for (const fleet::Node& n : fleet_->nodes()) {
      if (!model || n.model != *model || n.state != fleet::NodeState::kReady) continue;
      int64_t whole = 0, milli = 0;
      for (const fleet::Gpu& g : n.gpus) {
        whole += g.free_milli == fleet::kMilliPerGpu;
        milli += g.free_milli;
      }
      int64_t here = unit_milli >= fleet::kMilliPerGpu ? whole / unit_gpus : milli / unit_milli;
      if (shape.vcpus > 0) here = std::min(here, n.cpu_milli_free / (shape.vcpus * 1000));
      if (shape.memory_mib > 0) here = std::min(here, n.memory_mib_free / shape.memory_mib);
      fit += here;
    }
    return fit >= units;
  }
  sched::Request req = admission_.RequestFor(admitted->shape, Billing::kOnDemand);
  req.observe = false;
  std::vector<fleet::Assignment> held;
  bool all = true;
  for (int i = 0; i < units && all; ++i) {
    auto a = scheduler_->Schedule(req);
    if (a) {
      held.push_back(*a);
    } else {
      all = false;
    }
  }
  for (const fleet::Assignment& a : held) {
    CheckInvariant(scheduler_->Release(a), "releasing a trial booking");
  }
  return all;
}

Status State::RestoreFleetSince(const std::optional<std::string>& record, store::Batch& batch) {
  if (record) return accounts_.RestoreFleetSince(*record);
  // Nothing was billed before the first tenant existed, and no node joined before the store.
  Time since = clock_->Now();
  for (const Tenant* t : tenants_.List()) since = std::min(since, t->created_at);
  for (const auto& [name, node] : agents_.nodes()) since = std::min(since, node.created_at);
  accounts_.DateFleetSince(since, batch);
  return Status::Ok();
}

}  // namespace tessera::core
