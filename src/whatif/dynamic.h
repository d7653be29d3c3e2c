// The what-if simulator over time (docs/cost-simulation.md): jobs arrive at their submit time,
// wait in the control plane's own queue, run for their duration once placed, and leave; spot jobs
// are preempted by higher-priority work and start over (their work lost unless they checkpoint);
// jobs of more GPUs than a node holds run as gangs. It drives core::State itself (admission, the
// queue, priorities, preemption, reservations, groups and billing) with a simulated clock, the
// core's simulated agents and no store, so what the server would do is what it shows.
// Thread-safety: RunDynamic builds its own state; runs on separate threads share nothing but the
// catalog, the fleet and the jobs, read-only.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "common/result.h"
#include "fleet/fleet.h"
#include "whatif/jobs.h"

namespace tessera::whatif {

// Which billing each job class uses, and how much of the fleet is reserved.
struct Mix {
  std::string label = "on_demand";
  // The share of the fleet's GPUs under 1-year reservations, [0, 1], in units of the model's
  // exclusive instance types split as the trace's GPU-hours by the tightest type that holds each
  // job (whatif::RunDynamic). A job of any class that free units cover claims them; the rest run
  // as `spot` says.
  double reserved = 0;
  enum class Spot { kNone, kBestEffort, kAll };
  Spot spot = Spot::kNone;  // spot=BE: best-effort jobs run as spot; spot=all: every job.
};

// "on_demand", or a comma list of "reserved=P%" (0..100) and "spot=BE|all|none".
// InvalidArgument naming the part that is wrong.
Result<Mix> ParseMix(std::string_view text);

struct DynamicOptions {
  std::string policy = "guarded-fgd";
  uint64_t seed = 42;
  Mix mix;
  int samples = 400;  // Points of the allocation series.
  // The share of spot instances the provider reclaims in a month of running (AWS's Spot
  // Instance Advisor puts A100 at 5-10%, H100 at 15-20%): each spot run is cut at a random
  // time (exponential, seeded) and starts over.
  double spot_reclaims_per_month = 0.10;
  // How long a spot run preempted by higher-priority work runs on after its notice, as the
  // server gives it (AWS's 2 minutes, reference/spot-and-coldstart.md); 0 stops it at once.
  int64_t spot_notice_s = 120;
  // Whole-GPU jobs may take a shared-mode GPU that holds no share (StateOptions::
  // whole_gpus_on_shared): openb's stand-in fleet sets it (whatif/openb.h); otherwise the
  // server's rule holds, whole GPUs from exclusive-mode GPUs only.
  bool whole_gpus_on_shared = false;
};

struct SeriesPoint {
  int64_t t_s = 0;
  double allocated_gpus = 0;
  int64_t waiting = 0;  // Jobs submitted and not yet started.
};

struct Outcome {
  std::string policy;
  std::string mix;
  int64_t jobs = 0;
  int64_t finished = 0;
  int64_t running = 0;  // Started and not finished when the trace ran out of events.
  int64_t waiting = 0;  // Never started.
  int64_t refused = 0;  // Refused at admission (a shape the fleet can never hold, say).
  std::string first_refusal;
  // Seconds from submission to the first start, over the jobs that started.
  double wait_p50_s = 0, wait_p95_s = 0, wait_p99_s = 0, wait_mean_s = 0;
  // Seconds from submission to finishing, over the finished jobs.
  double jct_p50_s = 0, jct_p95_s = 0, jct_p99_s = 0;
  int64_t preemptions = 0;      // Runs lost to preemption or a spot reclaim.
  int64_t reclaims = 0;         // Of them, spot runs the provider reclaimed.
  double wasted_gpu_hours = 0;  // Their GPU-hours, and those of runs lost to moves.
  // Runs of migratable shares moved to make room ("POLICY-repack"), restarted on another GPU,
  // and the GPU-hours of work they lost (those that do not checkpoint).
  int64_t moves = 0;
  double moved_gpu_hours_lost = 0;
  double allocated_gpu_s = 0;  // The fleet's allocated GPUs integrated over the run.
  double job_gpu_s = 0;        // Jobs' GPUs times their runs' lengths, lost runs included.
  int64_t span_s = 0;          // First submission to the last event.
  int64_t fleet_gpus = 0;
  int64_t reserved_units = 0;                   // Units of every reservation together...
  int64_t reserved_gpus = 0;                    // ...and their GPUs.
  std::map<std::string, int64_t> reservations;  // Units bought, by instance type.
  // What was billed, in micro-USD, by billing ("on_demand", "spot", "reserved"): the ledger's
  // lines, and for "reserved" the reservations' cost over the span (used or not).
  std::map<std::string, int64_t> bill_micros;
  int64_t total_micros() const;
  std::vector<SeriesPoint> series;
  // Each job's first start, in submission order: seconds after the first submission, -1 when it
  // never started.
  std::vector<int64_t> first_start_s;
};

// Runs `jobs` (in submission order) on a copy of `fleet`.
Result<Outcome> RunDynamic(const catalog::Catalog& catalog, const fleet::Fleet& fleet,
                           const std::vector<Job>& jobs, const DynamicOptions& options);

nlohmann::json ToJson(const Outcome& o);

// `policy`'s all on-demand run among `runs`; null when there is none.
const Outcome* OnDemandRun(const std::vector<Outcome>& runs, const std::string& policy);

// Every policy with every mix (policy by policy, each policy's mixes in order; `options` gives
// the rest), run in parallel on `threads` threads. The first error, if any.
Result<std::vector<Outcome>> RunGrid(const catalog::Catalog& catalog, const fleet::Fleet& fleet,
                                     const std::vector<Job>& jobs, const DynamicOptions& options,
                                     const std::vector<std::string>& policies,
                                     const std::vector<Mix>& mixes, int threads);

// --mix sweep: for each policy, every mix of the grid (reserved 0..50% of the fleet by tenths,
// without spot, with spot for the best-effort jobs when the trace has some, and with spot for all),
// and the cheapest that holds the queueing target.
struct Sweep {
  // Policy by policy; each policy's first run is all on-demand.
  std::vector<Outcome> runs;
  double target_p95_wait_s = 0;
  // Per policy, its cheapest run whose p95 wait is within the target (and that left no job
  // waiting); a policy none of whose runs holds it is absent.
  std::map<std::string, int> best_of;
  int best = -1;  // The cheapest of those over all policies; -1 when there is none.
  // Run `i`'s saving against its policy's all on-demand run, in percent of that run's bill.
  double saving_pct(int i) const;
  double saving_pct() const { return saving_pct(best); }
};
std::vector<Mix> SweepGrid(bool has_best_effort);
// `policies` empty: options.policy alone.
Result<Sweep> RunSweep(const catalog::Catalog& catalog, const fleet::Fleet& fleet,
                       const std::vector<Job>& jobs, const DynamicOptions& options,
                       double target_p95_wait_s, int threads,
                       const std::vector<std::string>& policies = {});
nlohmann::json ToJson(const Sweep& s);

// report.html: the runs' GPU allocation and waiting jobs over time (SVG, self-contained), and a
// table of each policy and mix's waits, preemptions and bill, the cheapest within the target
// marked (`best`, -1 for none). Runs are labelled by mix, or by policy and mix when policies
// differ.
std::string ReportHtml(const std::string& title, const std::vector<Outcome>& runs, int best,
                       double target_p95_wait_s);

}  // namespace tessera::whatif
