// `tessera sim`: replays an openb trace through the scheduler under the FGD protocol and writes
// curves and reports; `tessera sim repro` runs the paper's whole grid and writes the comparison
// with the authors' results (docs/fgd-reproduction.md).
#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/csv.h"
#include "common/text.h"
#include "fleet/fleet_file.h"
#include "sched/scheduler.h"
#include "sim/bound.h"
#include "sim/fgd_expected.h"
#include "sim/progress.h"
#include "sim/report.h"
#include "sim/repro.h"
#include "sim/run.h"
#include "sim/trace.h"
#include "sim/variant.h"
#include "whatif/dynamic.h"
#include "whatif/jobs.h"
#include "whatif/openb.h"

namespace tessera::cli {

namespace {

struct SimArgs {
  std::string nodes, pods, policy, seed, seeds, out = "sim-out";
  std::string mode = "static", mix = "on_demand", wait_target = "10m", price_as = "gpu.1xt4";
  double inflate = 1.3;
  int jobs = 0;
};

struct ReproArgs {
  std::string datasets, nodes, expected, traces, policy = "all", seeds = "42-51";
  std::string out = "docs/fgd-reproduction.md", runs_csv;
  double inflate = 1.3, tolerance = 1.0;
  int jobs = 0;
};

int Usage(std::string_view message) {
  std::cerr << "tessera sim: " << message << "\n";
  return kExitUsage;
}

int Failure(const Status& s) {
  std::cerr << "tessera sim: " << s.message() << "\n";
  return kExitFailure;
}

// "all", one name, or a comma list, each checked against the registry.
Result<std::vector<std::string>> ParsePolicies(const std::string& text) {
  const std::vector<std::string> known = sched::PolicyNames();
  if (text == "all") return known;
  std::vector<std::string> out;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string name(rest.substr(0, comma));
    auto variant = sim::ParsePolicyVariant(name);
    if (!variant.ok()) return variant.status().WithPrefix("--policy");
    if (name != sim::kOfflineBoundPolicy &&
        std::find(known.begin(), known.end(), variant->base) == known.end()) {
      return Status::InvalidArgument(fmt::format(
          "--policy: unknown policy '{}' (known: {}, {}, all; POLICY-batchK places K arrivals "
          "together, POLICY-repack moves shares)",
          name, fmt::join(known, ", "), sim::kOfflineBoundPolicy));
    }
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

int DefaultJobs(int requested) {
  if (requested > 0) return requested;
  return std::max(1u, std::thread::hardware_concurrency());
}

bool StderrIsTty() { return isatty(fileno(stderr)) == 1; }

// The grid of runs over scenario(s), with progress on a terminal.
Result<std::vector<sim::RunStats>> RunWithProgress(const std::vector<sim::GridTask>& tasks,
                                                   int jobs) {
  const Clock& clock = SystemClock::Get();
  sim::GridProgress progress;
  sim::ProgressLine line(&progress, static_cast<int64_t>(tasks.size()), &clock, StderrIsTty());
  return sim::RunGrid(tasks, jobs, clock, &progress);
}

// Everything the runs over one trace share, kept alive together.
struct LoadedTrace {
  std::string name;
  std::vector<sim::Pod> pods;
  sched::TypicalWorkload typical;
  sim::Scenario scenario;
};

Result<std::unique_ptr<LoadedTrace>> LoadTrace(const catalog::Catalog& catalog,
                                               const fleet::Fleet& fleet, std::string name,
                                               const std::string& path) {
  auto t = std::make_unique<LoadedTrace>();
  t->name = std::move(name);
  TESSERA_ASSIGN_OR_RETURN(t->pods, sim::LoadOpenbPods(catalog, path));
  t->typical = sim::TypicalWorkloadOf(t->pods);
  t->scenario = {t->name, &fleet, &t->pods, &t->typical.workload};
  return t;
}

// Writes OUT/summary.json (`summary`, with the run's inputs and wall time added) and
// OUT/report.html for the dynamic mode's runs.
Status WriteDynamicOutputs(const SimArgs& a, nlohmann::json summary, const std::string& policy,
                           double wall, const std::vector<whatif::Outcome>& runs, int best,
                           double target_s, bool openb) {
  summary["trace"] = a.pods;
  summary["nodes"] = a.nodes;
  // openb's GPUs ran as the stand-in model, priced per GPU as its instance type (whatif/openb.h).
  if (openb) summary["gpus_priced_as"] = a.price_as;
  summary["policy"] = policy;
  summary["wall_seconds"] = wall;
  std::error_code ec;
  std::filesystem::create_directories(a.out, ec);
  TESSERA_RETURN_IF_ERROR(WriteFile(a.out + "/summary.json", summary.dump(2) + "\n"));
  return WriteFile(a.out + "/report.html",
                   whatif::ReportHtml("What-if: " + a.pods, runs, best, target_s));
}

// --mode dynamic: the trace through time, through the control plane's own state
// (docs/cost-simulation.md).
int RunDynamicSim(const SimArgs& a) {
  if (a.nodes.empty()) return Usage("--nodes is required (a fleet JSON or an openb node list)");
  if (a.pods.empty())
    return Usage("--pods is required (a Philly job summary or an openb pod list with its times)");
  const bool sweep = a.mix == "sweep";
  auto mix = whatif::ParseMix(sweep ? "on_demand" : a.mix);
  if (!mix.ok()) return Usage(mix.status().message());
  // --wait-target: "10m", "90s", "2h" or seconds.
  double target_s = 0;
  {
    const std::string& w = a.wait_target;
    char* end = nullptr;
    const double v = std::strtod(w.c_str(), &end);
    const std::string unit(end ? end : "");
    const double scale = unit.empty() || unit == "s" ? 1
                         : unit == "m"               ? 60
                         : unit == "h"               ? 3600
                                                     : -1;
    if (w.empty() || end == w.c_str() || scale < 0 || !(v >= 0)) {
      return Usage(fmt::format("--wait-target: '{}' is not a duration (e.g. 10m, 90s, 2h)", w));
    }
    target_s = v * scale;
  }
  whatif::DynamicOptions options;
  options.mix = *mix;
  std::vector<std::string> policies = {options.policy};
  if (!a.policy.empty()) {
    auto parsed = ParsePolicies(a.policy);
    if (!parsed.ok()) return Usage(parsed.status().message());
    if (std::find(parsed->begin(), parsed->end(), sim::kOfflineBoundPolicy) != parsed->end()) {
      return Usage(fmt::format(
          "--policy: '{}' is the static mode's offline bound, not a scheduler to replay in time",
          sim::kOfflineBoundPolicy));
    }
    policies = std::move(*parsed);
    options.policy = policies.front();
  }
  const std::string policy_list = fmt::format("{}", fmt::join(policies, ","));
  if (!a.seed.empty()) {
    auto seeds = sim::ParseSeeds(a.seed);
    if (!seeds.ok() || seeds->size() != 1) return Usage("--seed: one seed, e.g. 42");
    options.seed = seeds->front();
  }
  auto embedded = catalog::Catalog::LoadEmbedded();
  if (!embedded.ok()) return Failure(embedded.status());
  auto loaded = fleet::LoadFleetFile(*embedded, a.nodes);
  if (!loaded.ok()) return Failure(loaded.status());
  auto jobs = whatif::LoadJobs(*embedded, a.pods);
  if (!jobs.ok()) return Failure(jobs.status());
  // An openb pod list runs on openb's stand-in fleet and prices (whatif/openb.h).
  const catalog::Catalog* catalog = &*embedded;
  const fleet::Fleet* fleet = &*loaded;
  std::unique_ptr<whatif::StandIn> standin;
  if (whatif::AreOpenbJobs(*jobs)) {
    auto made = whatif::OpenbStandIn(*loaded, *jobs, a.price_as);
    if (!made.ok()) {
      // InvalidArgument: the type to price by (the nodes were checked as the fleet loaded).
      return made.status().code() == StatusCode::kInvalidArgument
                 ? Usage("--price-as: " + made.status().message())
                 : Failure(made.status());
    }
    standin = std::move(*made);
    options.whole_gpus_on_shared = true;
    catalog = &standin->catalog;
    fleet = standin->fleet.get();
    std::cout << fmt::format(
        "openb: {} GPUs of {} nodes run as one stand-in model priced per GPU as {} "
        "(docs/cost-simulation.md)\n",
        fleet->total_gpus(), fleet->nodes().size(), a.price_as);
  }
  const auto began = std::chrono::steady_clock::now();
  // One line a run, its policy first when there are several.
  auto print_runs = [&](const std::vector<whatif::Outcome>& runs) {
    const bool several = policies.size() > 1;
    size_t width = 16;
    for (const std::string& p : policies) width = std::max(width, p.size() + 2);
    std::cout << fmt::format("{}{:<28} {:>14} {:>10} {:>10} {:>12} {:>6}\n",
                             several ? fmt::format("{:<{}}", "policy", width) : "", "mix",
                             "bill USD", "wait p95", "wait p99", "preemptions", "moves");
    for (const whatif::Outcome& o : runs) {
      std::cout << fmt::format("{}{:<28} {:>14.2f} {:>9.0f}s {:>9.0f}s {:>12} {:>6}\n",
                               several ? fmt::format("{:<{}}", o.policy, width) : "", o.mix,
                               static_cast<double>(o.total_micros()) / 1e6, o.wait_p95_s,
                               o.wait_p99_s, o.preemptions, o.moves);
    }
  };
  auto seconds_since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  };
  if (sweep) {
    auto swept =
        whatif::RunSweep(*catalog, *fleet, *jobs, options, target_s, DefaultJobs(a.jobs), policies);
    if (!swept.ok()) return Failure(swept.status());
    const double wall = seconds_since();
    if (Status s = WriteDynamicOutputs(a, whatif::ToJson(*swept), policy_list, wall, swept->runs,
                                       swept->best, target_s, standin != nullptr);
        !s.ok()) {
      return Failure(s);
    }
    print_runs(swept->runs);
    for (const std::string& p : policies) {
      auto it = swept->best_of.find(p);
      const std::string who = policies.size() > 1 ? p + ": " : "";
      if (it == swept->best_of.end()) {
        std::cout << fmt::format("{}no mix holds a p95 wait of {:.0f} s\n", who, target_s);
      } else {
        std::cout << fmt::format(
            "{}cheapest mix with a p95 wait within {:.0f} s: {}, {:.1f}% below all on-demand\n",
            who, target_s, swept->runs[static_cast<size_t>(it->second)].mix,
            swept->saving_pct(it->second));
      }
    }
    std::cout << fmt::format("{} runs in {:.2f} s; wrote {}/summary.json and {}/report.html\n",
                             swept->runs.size(), wall, a.out, a.out);
    return kExitOk;
  }
  if (policies.size() > 1) {
    auto runs = whatif::RunGrid(*catalog, *fleet, *jobs, options, policies, {options.mix},
                                DefaultJobs(a.jobs));
    if (!runs.ok()) return Failure(runs.status());
    const double wall = seconds_since();
    nlohmann::json summary = {{"runs", nlohmann::json::array()}};
    for (const whatif::Outcome& o : *runs) summary["runs"].push_back(whatif::ToJson(o));
    if (Status s = WriteDynamicOutputs(a, std::move(summary), policy_list, wall, *runs, -1,
                                       target_s, standin != nullptr);
        !s.ok()) {
      return Failure(s);
    }
    print_runs(*runs);
    std::cout << fmt::format("{} runs in {:.2f} s; wrote {}/summary.json and {}/report.html\n",
                             runs->size(), wall, a.out, a.out);
    return kExitOk;
  }
  auto outcome = whatif::RunDynamic(*catalog, *fleet, *jobs, options);
  if (!outcome.ok()) return Failure(outcome.status());
  const double wall = seconds_since();
  nlohmann::json summary = whatif::ToJson(*outcome);
  if (Status s = WriteDynamicOutputs(a, summary, options.policy, wall, {*outcome}, -1, target_s,
                                     standin != nullptr);
      !s.ok()) {
    return Failure(s);
  }
  const whatif::Outcome& o = *outcome;
  std::cout << fmt::format(
      "{} jobs on {} GPUs ({}, mix {}): {} finished, {} still running, {} never started, {} "
      "refused\n"
      "wait p50 {:.0f} s, p95 {:.0f} s, p99 {:.0f} s; {} preemptions, {} moves ({:.1f} "
      "GPU-hours lost)\n"
      "mean GPUs allocated {:.2f}\nbill {} USD; {:.2f} s\nwrote {}/summary.json and report.html\n",
      o.jobs, o.fleet_gpus, options.policy, o.mix, o.finished, o.running, o.waiting, o.refused,
      o.wait_p50_s, o.wait_p95_s, o.wait_p99_s, o.preemptions, o.moves, o.wasted_gpu_hours,
      o.span_s > 0 ? o.allocated_gpu_s / static_cast<double>(o.span_s) : 0.0,
      summary["total_usd"].get<std::string>(), wall, a.out);
  return kExitOk;
}

int RunSim(const SimArgs& a) {
  if (a.mode == "dynamic") return RunDynamicSim(a);
  if (a.mode != "static")
    return Usage(fmt::format("--mode: '{}' is not static or dynamic", a.mode));
  if (a.nodes.empty()) return Usage("--nodes is required (an openb node list or a fleet JSON)");
  if (a.pods.empty()) return Usage("--pods is required (an openb pod list)");
  if (a.policy.empty()) return Usage("--policy is required (a policy name, a comma list or all)");
  if (!(a.inflate > 0 && a.inflate <= 100)) {
    return Usage(fmt::format("--inflate: {} is out of range (0, 100]", a.inflate));
  }
  if (!a.seed.empty() && !a.seeds.empty()) return Usage("--seed and --seeds are exclusive");
  auto policies = ParsePolicies(a.policy);
  if (!policies.ok()) return Usage(policies.status().message());
  const std::string seed_text = a.seeds.empty() ? (a.seed.empty() ? "42" : a.seed) : a.seeds;
  auto seeds = sim::ParseSeeds(seed_text);
  if (!seeds.ok()) {
    return Usage(
        fmt::format("{}: {}", a.seeds.empty() ? "--seed" : "--seeds", seeds.status().message()));
  }
  if (!a.seed.empty() && seeds->size() != 1) return Usage("--seed takes one seed; use --seeds");

  auto catalog = catalog::Catalog::LoadEmbedded();
  if (!catalog.ok()) return Failure(catalog.status());
  auto fleet = fleet::LoadFleetFile(*catalog, a.nodes);
  if (!fleet.ok()) return Failure(fleet.status());
  auto trace = LoadTrace(*catalog, *fleet, a.pods, a.pods);
  if (!trace.ok()) return Failure(trace.status());

  std::vector<sim::GridTask> tasks;
  for (const std::string& p : *policies) {
    for (const uint64_t s : *seeds) tasks.push_back({&(*trace)->scenario, {p, s, a.inflate}});
  }
  auto runs = RunWithProgress(tasks, DefaultJobs(a.jobs));
  if (!runs.ok()) return Failure(runs.status());

  sim::ReportInfo info;
  info.trace = a.pods;
  info.nodes = a.nodes;
  info.node_count = static_cast<int64_t>(fleet->size());
  info.gpu_count = fleet->total_gpus();
  info.inflate = a.inflate;
  info.trace_pods = static_cast<int64_t>((*trace)->pods.size());
  info.typical_classes = static_cast<int64_t>((*trace)->typical.workload.size());
  std::cout << sim::SummaryText(info, sim::Summarize(*runs));
  if (Status s = sim::WriteReports(a.out, info, *runs); !s.ok()) return Failure(s);
  std::cout << fmt::format("\nwrote {0}/report.html, {0}/summary.json, {0}/runs.csv and curves\n",
                           a.out);
  return kExitOk;
}

void AddSimOptions(CLI::App* sim, SimArgs& a) {
  sim->add_option("--nodes", a.nodes, "Node list: an openb node CSV or a fleet JSON");
  sim->add_option("--pods", a.pods,
                  "Pod list: an openb pod CSV (any variant; --mode dynamic: with its times, or a "
                  "Philly job summary)");
  sim->add_option("--policy", a.policy,
                  "Scheduling policy, a comma list, or 'all' (" +
                      fmt::format("{}", fmt::join(sched::PolicyNames(), ", ")) + ")");
  sim->add_option("--inflate", a.inflate, "Target GPU demand as a multiple of capacity (1.3)");
  sim->add_option("--seed", a.seed, "Seed of one run (default 42)");
  sim->add_option("--seeds", a.seeds, "Several seeds, run in parallel: 42-51 or 1,2,3");
  sim->add_option("--out", a.out, "Output directory (default sim-out)");
  sim->add_option("--jobs", a.jobs, "Runs in parallel (default: one per core)");
  sim->add_option("--mode", a.mode,
                  "static: the FGD protocol (default); dynamic: jobs arrive, run and leave through "
                  "the control plane's own state, with billing (docs/cost-simulation.md)");
  sim->add_option("--mix", a.mix,
                  "--mode dynamic: billing by job class and reserved capacity, e.g. "
                  "reserved=40%,spot=BE (default on_demand), or sweep: a grid, in parallel");
  sim->add_option("--wait-target", a.wait_target,
                  "--mix sweep: the p95 queueing delay the cheapest mix must hold (default 10m)");
  sim->add_option("--price-as", a.price_as,
                  "--mode dynamic on an openb pod list: the 1-GPU instance type whose rates "
                  "price openb's stand-in GPUs (default gpu.1xt4)");
}

// The traces to reproduce: the paper's 17, or the --traces comma list (names or paths).
std::vector<std::string> ReproTraces(const std::string& list) {
  if (list.empty()) return sim::PaperTraces();
  std::vector<std::string> traces;
  for (std::string_view t : Split(list, ',')) traces.emplace_back(t);
  return traces;
}

// Writes the comparison document (and the per-run CSV when asked) and prints its summary.
int WriteRepro(const ReproArgs& a, sim::ReproSetup setup, const std::vector<sim::RunStats>& runs,
               const sim::FgdExpected& expected) {
  setup.command = fmt::format("tessera sim repro --seeds {} --inflate {:g}{}{}", a.seeds, a.inflate,
                              a.traces.empty() ? "" : " --traces " + a.traces,
                              a.policy == "all" ? "" : " --policy " + a.policy);
  setup.inflate = a.inflate;
  setup.seeds = a.seeds;
  setup.runs = static_cast<int64_t>(runs.size());
  double sum = 0;
  for (const sim::RunStats& r : runs) sum += r.wall_seconds;
  setup.mean_run_seconds = runs.empty() ? 0 : sum / static_cast<double>(runs.size());
  setup.tolerance_pct = a.tolerance;
  const std::string md = sim::ReproMarkdown(setup, sim::CompareWithAuthors(runs, expected));
  if (Status s = WriteFile(a.out, md); !s.ok()) return Failure(s);
  const size_t slash = a.out.rfind('/');
  const std::string chart =
      (slash == std::string::npos ? "" : a.out.substr(0, slash + 1)) + sim::kReproChartFile;
  if (const std::string svg = sim::ReproChartSvg(runs, "default"); !svg.empty()) {
    if (Status s = WriteFile(chart, svg); !s.ok()) return Failure(s);
  }
  if (!a.runs_csv.empty()) {
    if (Status s = WriteFile(a.runs_csv, sim::RunsCsv(runs)); !s.ok()) return Failure(s);
  }
  std::cout << md.substr(0, md.find("## Best policy")) << "wrote " << a.out << "\n";
  return kExitOk;
}

int RunRepro(const ReproArgs& a) {
  if (a.datasets.empty() && (a.nodes.empty() || a.expected.empty())) {
    return Usage(
        "repro: --datasets is required (or both --nodes and --expected, with traces "
        "given as paths)");
  }
  if (!(a.inflate > 0 && a.inflate <= 100)) {
    return Usage(fmt::format("--inflate: {} is out of range (0, 100]", a.inflate));
  }
  if (!(a.tolerance >= 0)) return Usage("--tolerance: must be 0 or more");
  auto policies = ParsePolicies(a.policy);
  if (!policies.ok()) return Usage(policies.status().message());
  auto seeds = sim::ParseSeeds(a.seeds);
  if (!seeds.ok()) return Usage("--seeds: " + seeds.status().message());
  const std::string openb = a.datasets + "/openb/";
  const std::string nodes = a.nodes.empty() ? openb + "openb_node_list_gpu_node.csv" : a.nodes;

  auto catalog = catalog::Catalog::LoadEmbedded();
  if (!catalog.ok()) return Failure(catalog.status());
  auto fleet = fleet::LoadFleetFile(*catalog, nodes);
  if (!fleet.ok()) return Failure(fleet.status());
  auto expected = sim::FgdExpected::Load(
      a.expected.empty() ? a.datasets + "/fgd_expected_results/analysis_allo_discrete.csv"
                         : a.expected);
  if (!expected.ok()) return Failure(expected.status());
  std::vector<std::unique_ptr<LoadedTrace>> loaded;
  std::vector<sim::GridTask> tasks;
  for (const std::string& t : ReproTraces(a.traces)) {
    const bool is_path = t.find('/') != std::string::npos || t.ends_with(".csv");
    auto lt = LoadTrace(*catalog, *fleet, sim::CanonicalTraceName(t),
                        is_path ? t : openb + "openb_pod_list_" + t + ".csv");
    if (!lt.ok()) return Failure(lt.status());
    loaded.push_back(std::move(lt).value());
    std::vector<std::string> with_bound = *policies;
    if (std::find(with_bound.begin(), with_bound.end(), sim::kOfflineBoundPolicy) ==
        with_bound.end()) {
      with_bound.emplace_back(sim::kOfflineBoundPolicy);  // Every table shows the distance to it.
    }
    for (const std::string& p : with_bound) {
      for (const uint64_t s : *seeds)
        tasks.push_back({&loaded.back()->scenario, {p, s, a.inflate}});
    }
  }
  sim::ReproSetup setup;
  setup.jobs = DefaultJobs(a.jobs);
  const Time start = SystemClock::Get().Now();
  auto runs = RunWithProgress(tasks, setup.jobs);
  if (!runs.ok()) return Failure(runs.status());
  setup.wall_seconds = std::chrono::duration<double>(SystemClock::Get().Now() - start).count();
  setup.nodes = nodes.substr(nodes.rfind('/') + 1);
  setup.node_count = static_cast<int64_t>(fleet->size());
  setup.gpus = fleet->total_gpus();
  return WriteRepro(a, std::move(setup), *runs, *expected);
}

}  // namespace

void RegisterSimCommands(CLI::App& app, Context& ctx) {
  CLI::App* sim = app.add_subcommand(
      "sim",
      "Replay a trace through the scheduler (FGD protocol) and report allocation and "
      "fragmentation curves");
  auto sim_args = std::make_shared<SimArgs>();
  AddSimOptions(sim, *sim_args);

  CLI::App* repro =
      sim->add_subcommand("repro",
                          "Run the FGD paper's grid (17 traces x 6 policies x seeds) and write the "
                          "comparison with the authors' results");
  auto repro_args = std::make_shared<ReproArgs>();
  ReproArgs& r = *repro_args;
  repro->add_option("--datasets", r.datasets,
                    "The datasets folder (holding openb/ and fgd_expected_results/)");
  repro->add_option("--nodes", r.nodes, "Node list (default DATASETS/openb/..._gpu_node.csv)");
  repro->add_option("--expected", r.expected,
                    "Authors' results (default DATASETS/fgd_expected_results/"
                    "analysis_allo_discrete.csv)");
  repro->add_option("--traces", r.traces, "Comma list of traces (default: the paper's 17)");
  repro->add_option("--policy", r.policy, "Policies: a name, a comma list or all (default)");
  repro->add_option("--seeds", r.seeds, "Seeds (default 42-51)");
  repro->add_option("--inflate", r.inflate, "Target GPU demand / capacity (default 1.3)");
  repro->add_option("--tolerance", r.tolerance, "Flag cells off by more (pp, default 1.0)");
  repro->add_option("--jobs", r.jobs, "Runs in parallel (default: one per core)");
  repro->add_option("--out", r.out, "Markdown output (default docs/fgd-reproduction.md)");
  repro->add_option("--runs-csv", r.runs_csv, "Also write every run's figures to this CSV");

  sim->callback([&ctx, sim_args, repro] {
    if (repro->parsed()) return;
    ctx.exit_code = RunSim(*sim_args);
  });
  repro->callback([&ctx, repro_args] { ctx.exit_code = RunRepro(*repro_args); });
}

}  // namespace tessera::cli
