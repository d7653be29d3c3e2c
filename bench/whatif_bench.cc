// The what-if simulator's speed (docs/cost-simulation.md): the whole Philly job summary (82,247
// jobs) through the control plane's state on a 2,000-GPU fleet, one mix and the whole mix sweep
// (12 runs in parallel across the cores); openb's default pod list with departures on openb's
// fleet. Needs the public traces ($TESSERA_DATASETS or
// ../shared/datasets); without them it says so and measures nothing.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "catalog/catalog.h"
#include "fleet/fleet_file.h"
#include "whatif/dynamic.h"
#include "whatif/jobs.h"
#include "whatif/openb.h"

namespace tessera::whatif {
namespace {

struct Setup {
  catalog::Catalog catalog = std::move(catalog::Catalog::LoadEmbedded()).value();
  fleet::Fleet fleet =
      std::move(fleet::ParseFleetJson(catalog, R"({"name": "philly-2000", "shapes": [
      {"name": "v100", "count": 250, "gpu_model": "V100-16GB", "gpus": 8, "vcpus": 96,
       "memory_gib": 768, "gpu_mode": "exclusive"}]})",
                                      "bench fleet"))
          .value();
  std::vector<Job> jobs;
  bool ok = false;
  // openb's default pod list with its times, on the stand-in of openb's whole GPU fleet.
  std::vector<Job> openb_jobs;
  std::unique_ptr<StandIn> openb;
};

Setup& Get() {
  static Setup* s = [] {
    auto* setup = new Setup();
    const char* env = std::getenv("TESSERA_DATASETS");
    const std::string dir =
        env && *env ? env : std::string(TESSERA_SOURCE_DIR) + "/../shared/datasets";
    auto pods = LoadJobs(setup->catalog, dir + "/openb/openb_pod_list_default.csv");
    auto nodes = fleet::LoadFleetFile(setup->catalog, dir + "/openb/openb_node_list_gpu_node.csv");
    if (pods.ok() && nodes.ok()) {
      auto standin = OpenbStandIn(*nodes, *pods);
      if (standin.ok()) {
        setup->openb_jobs = std::move(*pods);
        setup->openb = std::move(*standin);
      }
    }
    auto jobs = LoadPhillyJobs(dir + "/philly_sia/philly.csv");
    if (jobs.ok()) {
      setup->jobs = std::move(*jobs);
      setup->ok = true;
    } else {
      std::cerr << "whatif_bench: " << jobs.status().message()
                << " (set TESSERA_DATASETS to the public traces)\n";
    }
    return setup;
  }();
  return *s;
}

void BM_Philly(benchmark::State& state) {
  Setup& s = Get();
  if (!s.ok) return state.SkipWithError("the Philly trace is missing");
  DynamicOptions o;
  for (auto _ : state) {
    auto out = RunDynamic(s.catalog, s.fleet, s.jobs, o);
    if (!out.ok()) return state.SkipWithError(out.status().message().c_str());
    benchmark::DoNotOptimize(out->finished);
    state.counters["finished"] = static_cast<double>(out->finished);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(s.jobs.size()));
}
BENCHMARK(BM_Philly)
    ->Name("BM_Philly/82247_jobs_on_2000_gpus")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

void BM_Openb(benchmark::State& state) {
  Setup& s = Get();
  if (!s.openb) return state.SkipWithError("the openb traces are missing");
  DynamicOptions o;
  o.mix = std::move(ParseMix("spot=BE")).value();
  o.whole_gpus_on_shared = true;
  for (auto _ : state) {
    auto out = RunDynamic(s.openb->catalog, *s.openb->fleet, s.openb_jobs, o);
    if (!out.ok()) return state.SkipWithError(out.status().message().c_str());
    state.counters["finished"] = static_cast<double>(out->finished);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(s.openb_jobs.size()));
}
BENCHMARK(BM_Openb)
    ->Name("BM_Openb/default_8152_pods_with_departures_on_6212_gpus")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

void BM_Sweep(benchmark::State& state) {
  Setup& s = Get();
  if (!s.ok) return state.SkipWithError("the Philly trace is missing");
  DynamicOptions o;
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (auto _ : state) {
    auto out = RunSweep(s.catalog, s.fleet, s.jobs, o, 600, threads);
    if (!out.ok()) return state.SkipWithError(out.status().message().c_str());
    state.counters["runs"] = static_cast<double>(out->runs.size());
  }
  state.counters["threads"] = threads;
}
BENCHMARK(BM_Sweep)
    ->Name("BM_Sweep/12_mixes_of_philly_on_2000_gpus")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->UseRealTime();

}  // namespace
}  // namespace tessera::whatif

BENCHMARK_MAIN();
