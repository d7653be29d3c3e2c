#include "core/state.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "common/json.h"
#include "core/invariant.h"
#include "sched/plugins/sole_tenant.h"

namespace tessera::core {

namespace {

// Passes over the queue in one round: a stop an agent reports frees capacity for another pass.
constexpr int kMaxPassesPerRound = 4;

// Gives `scheduler` the filter that keeps a node that cannot isolate tenants to one tenant at a
// time; the scheduler owns it.
sched::SoleTenantFilter* AddSoleTenantFilter(sched::Scheduler& scheduler) {
  auto filter = std::make_unique<sched::SoleTenantFilter>();
  sched::SoleTenantFilter* out = filter.get();
  scheduler.AddFilter(std::move(filter));
  return out;
}

}  // namespace

State::State(const catalog::Catalog* catalog, const Clock* clock,
             std::unique_ptr<fleet::Fleet> fleet, std::unique_ptr<sched::Scheduler> scheduler,
             StateOptions options)
    : catalog_(catalog),
      clock_(clock),
      fleet_(std::move(fleet)),
      scheduler_(std::move(scheduler)),
      sole_tenant_(AddSoleTenantFilter(*scheduler_)),
      options_(options),
      tenants_(clock),
      secrets_(clock, options.sealer),
      admission_(catalog, fleet_.get(), options.whole_gpus_on_shared),
      agents_(options.sim_agents, options.simulated_notice),
      monitoring_(clock, Monitoring::Options{options.alert_interval, options.node_timeout,
                                             options.alerts, options.sealer}),
      accounts_(*catalog, *clock, *fleet_, admission_, tenants_, instances_.table(), volumes_,
                options.node_timeout) {}

Result<Tenant> State::UpdateTenant(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                                   std::optional<bool> disabled, store::Batch& batch,
                                   std::optional<int64_t> max_pending,
                                   std::optional<int64_t> volumes_gib) {
  TESSERA_ASSIGN_OR_RETURN(
      Tenant t, tenants_.Update(id, quota_gpu_milli, disabled, batch, max_pending, volumes_gib));
  if (t.disabled) {
    instances_.EndPendingOf(t.id, "its tenant was disabled while it was pending", batch);
  }
  return t;
}

void State::EndRound(store::Batch& batch) {
  // Agents act, freed capacity is offered to the queue, and placed work is started, until
  // nothing moves (each pass is budgeted, and so is the number of passes).
  health_.ExpireLeases(batch);
  health_.FinishRemovals(batch);
  groups_.RunAutoscaler(batch);
  instances_.PlaceHeld(batch);
  for (int i = 0; i < kMaxPassesPerRound; ++i) {
    const bool reported = instances_.ApplyAgentReports(batch);
    const bool settled = groups_.Settle(batch);
    if (i > 0 && !reported && !settled) break;
    const bool groups = groups_.TakeRetry();
    if (groups) groups_.Place(batch, /*spot=*/false);
    if (instances_.queue().HasUntried()) instances_.PlaceQueued(batch);
    if (groups) groups_.Place(batch, /*spot=*/true);
  }
  RetireReplacedGroups(batch);
  // Ended work leaves memory after the retention: instances with their log tails, and groups.
  const Time cutoff = clock_->Now() - options_.retention;
  counters_.evicted += static_cast<int64_t>(instances_.EvictEnded(cutoff));
  groups_.EvictEnded(cutoff);
  monitoring_.Sweep();
  for (Instance* inst : accounts_.Roll(batch)) instances_.Save(*inst, batch);
  EvaluateAlerts(batch);
}

Result<RecoveryReport> State::Restore(const std::vector<store::TenantRecord>& tenants,
                                      const std::vector<store::InstanceRecord>& instances,
                                      const std::map<std::string, fleet::NodeState>& node_states,
                                      store::Batch& batch) {
  RecoveryReport report;
  TESSERA_RETURN_IF_ERROR(tenants_.Restore(tenants));
  report.tenants = tenants.size();
  TESSERA_RETURN_IF_ERROR(instances_.Restore(instances, batch, report));
  // Node states last: a drained node keeps the work it held.
  for (const auto& [name, state] : node_states) {
    auto n = fleet_->Find(name);
    if (n.ok()) TESSERA_RETURN_IF_ERROR(fleet_->SetNodeState(*n, state));
  }
  return report;
}

std::shared_ptr<const EndpointIndex> State::EndpointSnapshot() {
  return endpoints_.Snapshot(groups_.all());
}

void LatencyHistogram::Observe(double seconds) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (seconds <= bounds[i]) ++buckets[i];
  }
  ++count;
  sum += seconds;
}

}  // namespace tessera::core
