#include "sim/run.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include "sched/repack.h"
#include "sim/bound.h"
#include "sim/protocol.h"
#include "sim/variant.h"

namespace tessera::sim {

namespace {

double SecondsBetween(Time a, Time b) { return std::chrono::duration<double>(b - a).count(); }

// Publishes progress every this many pods, so the counter moves without contended atomics.
constexpr int64_t kProgressStride = 256;

// Places the pods of `order` one at a time, counting placed and failed in `stats`, and logs a
// Sample after every attempt. With `repack`, a pod that finds no room may move shares first.
Result<std::vector<Sample>> PlaceAll(const std::vector<Pod>& pods,
                                     const std::vector<uint32_t>& order, const fleet::Fleet& fleet,
                                     sched::Scheduler& scheduler, bool repack, RunStats& stats,
                                     GridProgress* progress) {
  std::optional<sched::Repacker> repacker;
  if (repack) repacker.emplace(fleet, scheduler);
  const int64_t capacity = fleet.total_gpus() * fleet::kMilliPerGpu;
  std::vector<Sample> samples;
  samples.reserve(order.size());
  int64_t arrived = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const Pod& pod = pods[order[i]];
    arrived += pod.demand_milli();  // Counted before the attempt, failures included.
    const sched::Request request = ToRequest(pod);
    std::optional<fleet::Assignment> a = scheduler.Schedule(request);
    if (!a && repacker) {
      if (auto plan = repacker->MakeRoom(request)) a = plan->placed;
    }
    // One id per arrival: the tuned workload may hold a pod twice.
    if (a && repacker) repacker->Track(std::to_string(i), request, *a);
    if (a) {
      ++stats.placed;
    } else {
      ++stats.failed;
    }
    const int64_t used = fleet.used_gpu_milli();
    samples.push_back({arrived, used, scheduler.FragmentationMilli(), capacity - used});
    if (progress != nullptr && (i + 1) % kProgressStride == 0) {
      progress->pods_done.fetch_add(kProgressStride, std::memory_order_relaxed);
    }
  }
  if (repacker) {
    if (!repacker->error().ok()) {
      return Status::Internal(
          fmt::format("the repacker lost track of a share: {}", repacker->error().message()));
    }
    stats.moves = repacker->moves();
    stats.moved_milli = repacker->moved_milli();
  }
  if (progress != nullptr) {
    const auto rest = static_cast<int64_t>(order.size()) % kProgressStride;
    progress->pods_done.fetch_add(rest, std::memory_order_relaxed);
  }
  if (!scheduler.last_error().ok()) {
    // A winner the fleet refused is a scheduler bug, not a pod that did not fit: say so.
    return Status::Internal(fmt::format("the scheduler booked an impossible placement: {}",
                                        scheduler.last_error().message()));
  }
  return samples;
}

}  // namespace

Result<RunStats> RunOne(const Scenario& scenario, const RunSpec& spec, const Clock& clock,
                        GridProgress* progress) {
  const Time start = clock.Now();
  if (scenario.fleet == nullptr || scenario.pods == nullptr || scenario.target == nullptr) {
    return Status::InvalidArgument("scenario is incomplete: fleet, pods and target are required");
  }
  RunStats stats;
  stats.trace = scenario.trace;
  stats.spec = spec;
  stats.total_gpus = scenario.fleet->total_gpus();
  if (stats.total_gpus <= 0) return Status::FailedPrecondition("the cluster has no GPUs");
  if (!(spec.inflate > 0)) {
    return Status::InvalidArgument(fmt::format("inflate {} must be above 0", spec.inflate));
  }

  const std::vector<Pod>& pods = *scenario.pods;
  const double capacity_milli = static_cast<double>(stats.total_gpus) * fleet::kMilliPerGpu;
  TESSERA_ASSIGN_OR_RETURN(ArrivalOrder order,
                           BuildArrivalOrder(pods, spec.inflate * capacity_milli, spec.seed));
  stats.copies = order.copies;
  stats.removed = order.removed;
  stats.demand_milli = order.demand_milli;

  TESSERA_ASSIGN_OR_RETURN(const PolicyVariant variant, ParsePolicyVariant(spec.policy));
  if (!variant.plain() && variant.base == kOfflineBoundPolicy) {
    return Status::InvalidArgument(
        fmt::format("policy '{}': the offline bound places nothing to batch or move", spec.policy));
  }
  if (variant.window > 1) {
    const auto window = static_cast<size_t>(variant.window);
    for (size_t begin = 0; begin < order.pods.size(); begin += window) {
      OrderWindow(pods, order.pods, begin, std::min(order.pods.size(), begin + window));
    }
  }
  if (spec.policy == kOfflineBoundPolicy) {
    // Not a scheduler run: the bound on what any policy could allocate from each prefix.
    const Time loop_start = clock.Now();
    stats.curve = BoundCurve(pods, order.pods, *scenario.fleet);
    stats.schedule_seconds = SecondsBetween(loop_start, clock.Now());
    stats.pods = static_cast<int64_t>(order.pods.size());
    stats.wall_seconds = SecondsBetween(start, clock.Now());
    return stats;
  }
  fleet::Fleet fleet = *scenario.fleet;
  sched::Options options;
  options.policy = variant.base;
  options.seed = spec.seed;
  options.target = *scenario.target;
  TESSERA_ASSIGN_OR_RETURN(auto scheduler, sched::Scheduler::Create(&fleet, std::move(options)));
  const Time loop_start = clock.Now();
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Sample> samples,
      PlaceAll(pods, order.pods, fleet, *scheduler, variant.repack, stats, progress));
  stats.schedule_seconds = SecondsBetween(loop_start, clock.Now());
  stats.pods = static_cast<int64_t>(order.pods.size());
  stats.curve = BucketSamples(samples, stats.total_gpus);
  stats.wall_seconds = SecondsBetween(start, clock.Now());
  return stats;
}

Result<std::vector<RunStats>> RunGrid(const std::vector<GridTask>& tasks, int jobs,
                                      const Clock& clock, GridProgress* progress) {
  std::vector<std::optional<RunStats>> results(tasks.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  std::optional<std::pair<size_t, Status>> first_error;  // Guarded by error_mu.

  auto worker = [&] {
    while (!failed.load(std::memory_order_acquire)) {
      const size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= tasks.size()) return;
      auto r = RunOne(*tasks[i].scenario, tasks[i].spec, clock, progress);
      if (!r.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        // Report the earliest task's error, so the message does not depend on thread timing.
        if (!first_error || i < first_error->first) first_error.emplace(i, r.status());
        failed.store(true, std::memory_order_release);
        return;
      }
      results[i] = std::move(r).value();
      if (progress != nullptr) progress->runs_done.fetch_add(1, std::memory_order_relaxed);
    }
  };
  const size_t threads = std::min(tasks.size(), static_cast<size_t>(std::max(1, jobs)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();

  if (first_error) {
    const GridTask& t = tasks[first_error->first];
    return first_error->second.WithPrefix(
        fmt::format("{} policy {} seed {}", t.scenario->trace, t.spec.policy, t.spec.seed));
  }
  std::vector<RunStats> out;
  out.reserve(tasks.size());
  for (auto& r : results) out.push_back(std::move(*r));
  return out;
}

namespace {

Result<uint64_t> ParseSeed(std::string_view s, std::string_view piece) {
  uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not a seed (expected a non-negative integer or a range such as 42-51)", piece));
  }
  return v;
}

}  // namespace

Result<std::vector<uint64_t>> ParseSeeds(std::string_view text) {
  constexpr uint64_t kMaxSeeds = 100'000;
  std::vector<uint64_t> seeds;
  if (text.empty()) return Status::InvalidArgument("the seed list is empty");
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view piece = text.substr(0, comma);
    const size_t dash = piece.find('-');
    if (dash == std::string_view::npos) {
      TESSERA_ASSIGN_OR_RETURN(const uint64_t v, ParseSeed(piece, piece));
      seeds.push_back(v);
    } else {
      TESSERA_ASSIGN_OR_RETURN(const uint64_t lo, ParseSeed(piece.substr(0, dash), piece));
      TESSERA_ASSIGN_OR_RETURN(const uint64_t hi, ParseSeed(piece.substr(dash + 1), piece));
      if (hi < lo || hi - lo >= kMaxSeeds) {
        return Status::InvalidArgument(fmt::format(
            "'{}' is not a seed range (expected low-high, low <= high, at most {} seeds)", piece,
            kMaxSeeds));
      }
      // Counts from lo up to hi inclusive without `s <= hi`, which never fails when hi is the
      // largest uint64_t.
      for (uint64_t s = lo;; ++s) {
        seeds.push_back(s);
        if (s == hi) break;
      }
    }
    if (seeds.size() > kMaxSeeds) {
      return Status::InvalidArgument(fmt::format("more than {} seeds", kMaxSeeds));
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return seeds;
}

}  // namespace tessera::sim
