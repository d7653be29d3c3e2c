// What the core's state is built with (StateOptions) and the counters it keeps for /metrics.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "alerts/evaluator.h"
#include "common/clock.h"
#include "common/money.h"
#include "core/pending_work.h"
#include "core/preemptor.h"

namespace tessera {
class Sealer;
}  // namespace tessera

namespace tessera::core {

// A fixed-bucket histogram of a latency, as Prometheus exposes it.
struct LatencyHistogram {
  // Upper bounds of the buckets, in seconds.
  explicit LatencyHistogram(std::vector<double> upper_bounds)
      : bounds(std::move(upper_bounds)), buckets(bounds.size()) {}
  std::vector<double> bounds;
  std::vector<int64_t> buckets;  // Cumulative counts, as Prometheus wants.
  int64_t count = 0;
  double sum = 0;
  void Observe(double seconds);
};

// Counters for /metrics, read on the core thread.
struct Counters {
  int64_t scheduling_attempts = 0;
  int64_t preemptions = 0;
  int64_t preemption_searches = 0;
  int64_t evicted = 0;  // Ended instances that left memory after the retention period.
  LatencyHistogram scheduling_latency{
      {0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5}};
  // Created (or re-queued) to running, as agents report it: the cold start.
  LatencyHistogram start_latency{{0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 300}};
  int64_t nodes_lost = 0;
  int64_t gpus_unhealthy = 0;  // GPUs taken out of service (by a fault or an operator).
  int64_t agent_reports = 0;
  int64_t agent_reports_refused = 0;
  int64_t agent_times_clamped = 0;  // Reports' start times before the schedule or in the future.
  int64_t repack_moves = 0;  // Migratable instances moved to make room (StateOptions::repack).
};

struct StateOptions {
  bool sim_agents = false;
  // A joined node that has not reported for this long is lost (not_ready); its work moves once
  // its lease has run out (AgentTiming, which takes node_timeout from here).
  Duration node_timeout = std::chrono::seconds(10);
  Duration report_period = std::chrono::seconds(2);
  Duration outage_bound = std::chrono::minutes(5);
  // How long a spot victim on a node with an agent runs after its notice.
  Duration spot_notice = std::chrono::seconds(30);
  // How long an ended instance stays in memory (listed, and read without the store).
  Duration retention = std::chrono::hours(1);
  Preemptor::Limits preemption;
  // How often the alert rules are evaluated.
  Duration alert_interval = std::chrono::seconds(5);
  alerts::EvaluatorOptions alerts;
  // How often autoscaled groups are evaluated (Kubernetes HPA's sync period).
  Duration autoscale_interval = std::chrono::seconds(15);
  // Groups of queued work that may fail to place per queue pass.
  size_t queue_failures_per_pass = 32;
  // The most instances a tenant may have pending, members of waiting groups included, unless
  // its quota says otherwise (PendingWork).
  int64_t max_pending_per_tenant = kDefaultMaxPending;
  // false: a batch's instance records carry the id and state only, not the stored document (the
  // what-if simulator, which has no store).
  bool instance_documents = true;
  // A whole-GPU instance may take a shared-mode GPU that holds no share (HAMi's rule, and openb's
  // cluster's), not only an exclusive-mode one. The what-if simulator sets it for openb's fleet.
  bool whole_gpus_on_shared = false;
  // false: a simulated agent stops a preempted spot instance at once. true: it is given its
  // `spot_notice` as on a joined agent's node, and the caller ends it at its preempt_at with
  // WorkloadExited (the what-if simulator, which drives the clock).
  bool simulated_notice = false;
  // Seals what is stored encrypted (secrets, env literals, registry passwords, webhook URLs;
  // common/envelope.h); null: nothing of the kind can be stored. Must outlive the state.
  Sealer* sealer = nullptr;
  // The batch window (docs/core.md, "A batch window"): each create is held until
  // `batch_window` creates are held or the first of them has waited `batch_wait`; then they are
  // placed together, higher priority first and, within a priority, the largest GPU demand first.
  // 1 = off: a create is placed in the round it arrives in.
  int batch_window = 1;
  Duration batch_wait = std::chrono::milliseconds(200);
  // Repacking (docs/core.md, "Repacking"): a one-GPU request that finds no room may move up to two
  // running `migratable` shares off one GPU to other GPUs, with notice where their agent must stop
  // them, and take that GPU. An instance moved is not moved again for `repack_cooldown`, and one
  // whose run has lasted longer than `repack_max_run` is not moved: a move throws that work away.
  bool repack = false;
  Duration repack_cooldown = std::chrono::hours(1);
  Duration repack_max_run = std::chrono::hours(6);
  // What a GiB of volume costs a month (docs/volumes.md): AWS EBS gp3's list price.
  Money volume_price_per_gib_month = Money::FromMicros(80'000);
};

}  // namespace tessera::core
