// Scheduler benchmarks. Budgets (DESIGN.md): FGD >= 20,000 placements/s on the openb fleet;
// bestfit >= 50,000 placements/s on 10,000 nodes / 80,000 GPUs; one FGD-protocol run < 1 s.
//   BM_Place/<policy>/openb    decisions/s (items_per_second) while filling the openb fleet from
//                              empty until 64 requests in a row find no node; one fill an
//                              iteration (the real node list and default pod list when the traces
//                              are present, else synthetic ones).
//   BM_Place/<policy>/10k      the same on 10,000 8-GPU nodes (80,000 GPUs), synthetic requests;
//                              guarded-fgd-batchK decides each K requests of the stream together
//                              (sim/variant.h); the stream is reordered before the clock runs;
//                              guarded-fgd-repack lets a request that finds no room move shares
//                              (sched/repack.h).
//   BM_OpenbRun/<policy>/<trace>  one whole run of a trace: shuffled, inflated to 1.3x
//                              the fleet's GPUs, every pod tried once, fragmentation read after
//                              each (loading excluded; the simulator times that separately).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "common/csv.h"
#include "fleet/fleet.h"
#include "fleet/fleet_file.h"
#include "sched/repack.h"
#include "sched/rng.h"
#include "sched/scheduler.h"
#include "sched/synthetic.h"
#include "sched/target_workload.h"

namespace tessera::sched {
namespace {

const catalog::Catalog& TheCatalog() {
  static const catalog::Catalog* c = [] {
    Result<catalog::Catalog> loaded = catalog::Catalog::LoadEmbedded();
    if (!loaded.ok()) std::abort();
    return new catalog::Catalog(std::move(*loaded));
  }();
  return *c;
}

std::optional<std::string> OpenbDir() {
  std::string dir;
  if (const char* env = std::getenv("TESSERA_DATASETS")) {
    dir = env;
  } else {
    dir = std::string(TESSERA_SOURCE_DIR) + "/../shared/datasets";
  }
  dir += "/openb";
  if (!std::filesystem::exists(dir + "/openb_node_list_gpu_node.csv")) return std::nullopt;
  return dir;
}

struct Trace {
  std::vector<Request> requests;
  std::vector<std::string> specs;  // Owns the gpu_spec text PodShape points at.
  std::vector<PodShape> shapes;
};

// An openb pod list, or nullopt when the traces are absent or unreadable.
std::optional<Trace> LoadPods(const std::string& trace) {
  const std::optional<std::string> dir = OpenbDir();
  if (!dir) return std::nullopt;
  Result<CsvReader> csv = CsvReader::Open(*dir + "/openb_pod_list_" + trace + ".csv");
  if (!csv.ok()) return std::nullopt;
  if (!csv->ReadHeader(
              {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
              {"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"})
           .ok()) {
    return std::nullopt;
  }
  Trace t;
  while (csv->Next()) {
    Request r;
    r.cpu_milli = *csv->Int("cpu_milli");
    r.memory_mib = *csv->Int("memory_mib");
    r.gpu_count = static_cast<int>(*csv->Int("num_gpu"));
    r.gpu_milli = static_cast<int>(*csv->Int("gpu_milli"));
    Result<ModelMask> mask = ParseGpuSpec(TheCatalog(), csv->Field("gpu_spec"));
    if (!mask.ok()) return std::nullopt;
    r.allowed_models = *mask;
    t.requests.push_back(r);
    t.specs.emplace_back(csv->Field("gpu_spec"));
  }
  for (size_t i = 0; i < t.requests.size(); ++i) {
    const Request& r = t.requests[i];
    t.shapes.push_back({r.cpu_milli, r.gpu_milli, r.gpu_count, t.specs[i], r.allowed_models});
  }
  return t;
}

const std::optional<Trace>& Pods(const std::string& trace) {
  static auto* loaded = new std::map<std::string, std::optional<Trace>>();
  auto it = loaded->find(trace);
  if (it == loaded->end()) it = loaded->emplace(trace, LoadPods(trace)).first;
  return it->second;
}

const std::optional<Trace>& DefaultPods() { return Pods("default"); }

std::unique_ptr<fleet::Fleet> MakeFleet(bool ten_k) {
  if (!ten_k) {
    if (const std::optional<std::string> dir = OpenbDir()) {
      Result<fleet::Fleet> f =
          fleet::LoadFleetFile(TheCatalog(), *dir + "/openb_node_list_gpu_node.csv");
      if (f.ok()) return std::make_unique<fleet::Fleet>(std::move(*f));
    }
  }
  auto f = std::make_unique<fleet::Fleet>(&TheCatalog());
  if (!AddNodes(*f, ten_k ? EightGpuNodes(10000) : OpenbLikeNodes()).ok()) std::abort();
  return f;
}

Workload Target(const std::string& trace = "default") {
  if (Pods(trace)) return BuildTypicalWorkload(Pods(trace)->shapes).workload;
  Rng rng(7);
  std::vector<Request> rs;
  for (int i = 0; i < 8000; ++i) rs.push_back(OpenbLikeRequest(rng));
  std::vector<PodShape> shapes;
  for (const Request& r : rs) shapes.push_back({r.cpu_milli, r.gpu_milli, r.gpu_count, "", 0});
  return BuildTypicalWorkload(shapes).workload;
}

// A stream of requests: the default trace shuffled (openb fleet), or synthetic ones.
std::vector<Request> Stream(bool ten_k) {
  Rng rng(42);
  std::vector<Request> out;
  if (!ten_k && DefaultPods()) {
    out = DefaultPods()->requests;
    for (size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[rng.Uniform(i)]);
    return out;
  }
  for (int i = 0; i < 200000; ++i) out.push_back(OpenbLikeRequest(rng));
  return out;
}

// `window` > 1: the batch window of `tessera sim --policy POLICY-batchK` (sim/variant.h): each
// `window` requests of the stream are decided together, the largest GPU demand first.
void BM_Place(benchmark::State& state, const std::string& policy, bool ten_k, int window = 1,
              bool repack = false) {
  std::vector<Request> stream = Stream(ten_k);
  const auto demand = [](const Request& r) { return int64_t{r.gpu_count} * r.gpu_milli; };
  for (size_t begin = 0; window > 1 && begin < stream.size(); begin += window) {
    const auto end = std::min(stream.size(), begin + static_cast<size_t>(window));
    std::stable_sort(
        stream.begin() + static_cast<std::ptrdiff_t>(begin),
        stream.begin() + static_cast<std::ptrdiff_t>(end),
        [&demand](const Request& a, const Request& b) { return demand(a) > demand(b); });
  }
  const Workload target = Target();
  uint64_t seed = 42;
  int64_t decisions = 0, placed = 0;
  size_t next = 0;
  for (auto _ : state) {
    // One iteration fills an empty fleet: requests from the stream (wrapping around) until 64 in
    // a row find no node.
    state.PauseTiming();
    auto fleet = MakeFleet(ten_k);
    auto s = Scheduler::Create(fleet.get(), {policy, seed++, target}).value();
    std::optional<Repacker> repacker;
    if (repack) repacker.emplace(*fleet, *s);
    state.ResumeTiming();
    for (int failed_in_row = 0; failed_in_row < 64; ++decisions) {
      std::optional<fleet::Assignment> a = s->Schedule(stream[next]);
      if (!a && repacker) {
        if (auto plan = repacker->MakeRoom(stream[next])) a = plan->placed;
      }
      if (a && repacker) repacker->Track(std::to_string(decisions), stream[next], *a);
      const bool ok = a.has_value();
      next = next + 1 == stream.size() ? 0 : next + 1;
      placed += ok ? 1 : 0;
      failed_in_row = ok ? 0 : failed_in_row + 1;
    }
    state.PauseTiming();
    state.counters["alloc%"] = 100.0 * static_cast<double>(fleet->used_gpu_milli()) /
                               (static_cast<double>(fleet->total_gpus()) * 1000);
    s.reset();
    fleet.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(decisions);
  state.counters["decisions"] =
      static_cast<double>(decisions) / static_cast<double>(state.iterations());
  state.counters["placed"] = static_cast<double>(placed) / static_cast<double>(state.iterations());
}

// One run as the FGD protocol does it: shuffle, then inflate with copies drawn at random until
// GPU demand would pass 1.3x capacity, then try every pod once, reading fragmentation after each.
void BM_OpenbRun(benchmark::State& state, const std::string& policy, const std::string& trace) {
  const std::optional<Trace>& originals = Pods(trace);
  if (!originals) {
    state.SkipWithError("the openb traces are absent (set TESSERA_DATASETS)");
    return;
  }
  const Workload target = Target(trace);
  uint64_t seed = 42;
  double frag_sum = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Rng rng(seed);
    std::vector<Request> pods = originals->requests;
    for (size_t i = pods.size(); i > 1; --i) std::swap(pods[i - 1], pods[rng.Uniform(i)]);
    auto fleet = MakeFleet(false);
    const double limit = 1.3 * static_cast<double>(fleet->total_gpus()) * 1000;
    double demand = 0;
    for (const Request& r : pods) demand += r.gpu_count * r.gpu_milli;
    for (;;) {
      const Request& r = originals->requests[rng.Uniform(originals->requests.size())];
      if (demand + r.gpu_milli > limit) break;
      demand += r.gpu_count * r.gpu_milli;
      pods.push_back(r);
    }
    state.ResumeTiming();
    auto s = Scheduler::Create(fleet.get(), {policy, seed++, target}).value();
    for (const Request& r : pods) {
      benchmark::DoNotOptimize(s->Schedule(r));
      frag_sum += s->FragmentationMilli();
    }
    state.counters["pods"] = static_cast<double>(pods.size());
    state.counters["alloc%"] = 100.0 * static_cast<double>(fleet->used_gpu_milli()) /
                               (static_cast<double>(fleet->total_gpus()) * 1000);
  }
  benchmark::DoNotOptimize(frag_sum);
}

void RegisterAll() {
  for (const std::string& p : PolicyNames()) {
    benchmark::RegisterBenchmark(("BM_Place/" + p + "/openb").c_str(), [p](benchmark::State& st) {
      BM_Place(st, p, false);
    })->Unit(benchmark::kMillisecond);
  }
  for (const std::string p : {"bestfit", "fgd", "guarded-fgd"}) {
    benchmark::RegisterBenchmark(("BM_Place/" + p + "/10k").c_str(),
                                 [p](benchmark::State& st) { BM_Place(st, p, true); })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(2);
  }
  for (const int k : {8, 16}) {
    const std::string name = "BM_Place/guarded-fgd-batch" + std::to_string(k) + "/10k";
    benchmark::RegisterBenchmark(
        name.c_str(), [k](benchmark::State& st) { BM_Place(st, "guarded-fgd", true, k); })
        ->Unit(benchmark::kMillisecond)
        ->Iterations(2);
  }
  benchmark::RegisterBenchmark(
      "BM_Place/guarded-fgd-repack/10k",
      [](benchmark::State& st) { BM_Place(st, "guarded-fgd", true, 1, true); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(2);
  for (const std::string& p : PolicyNames()) {
    benchmark::RegisterBenchmark(("BM_OpenbRun/" + p + "/default").c_str(),
                                 [p](benchmark::State& st) { BM_OpenbRun(st, p, "default"); })
        ->Unit(benchmark::kMillisecond);
  }
  for (const std::string p : {"fgd", "guarded-fgd"}) {
    for (const std::string trace : {"gpuspec33", "gpushare100", "multigpu50"}) {
      benchmark::RegisterBenchmark(("BM_OpenbRun/" + p + "/" + trace).c_str(),
                                   [p, trace](benchmark::State& st) { BM_OpenbRun(st, p, trace); })
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace
}  // namespace tessera::sched

int main(int argc, char** argv) {
  tessera::sched::RegisterAll();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
