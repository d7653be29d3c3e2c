// The core's round budget on a large fleet (docs/core.md). A round's cost is bounded whatever
// the requests: one budgeted queue pass per change in capacity, a bounded number of preemption
// searches. These benchmarks build the worst case the bounds allow and time it:
//   BM_Round/create          a round that creates one instance (no queue), 10,000 nodes;
//   BM_Round/freed_worst     a round that frees capacity while 2,000 distinct on-demand requests
//                            for 4 NVLinked GPUs wait. Every node has two islands of four GPUs,
//                            each holding two on-demand GPUs and two spot ones: four GPUs could
//                            be freed on every node, so every node is worth a search, but never
//                            four on one island, so every trial fails. The pass spends its whole
//                            attempt budget and the round its whole search budget;
//   BM_Round/eight_creates/window:K  a round of eight creates (1, 2, 4 and 8 GPUs, twice) on the
//                            empty fleet, each placed as it comes (K = 1) or all held and placed
//                            together, the largest first, as the eighth fills the window (K = 8);
//   BM_Round/repack_worst    a round of eight distinct creates of a 950-milli share with
//                            repacking on (docs/core.md, "Repacking"), on 10,000 nodes of 8
//                            shared L40S GPUs, each GPU holding two running migratable shares of
//                            450 milli: every GPU is a candidate and every trial fails (the moved
//                            shares fit nowhere), so the round spends its whole search budget;
//   BM_Round/restore         recovery of 80,000 running instances (start-up);
//   BM_Gangs                 1,000 gangs of 2-64 NVLinked GPUs placed whole, one round each;
//   BM_Rotate/*/N            one token rotation of a tenant that rotated N times before, each
//                            predecessor still in its grace, beside 1,000 other tenants
//                            (docs/api.md): its cost must not grow with N;
//   BM_Envelope/seal, /open  one 64-byte value sealed under a data key of its own, and opened
//                            again (docs/secrets.md): what each sealed env value or secret costs.
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <filesystem>

#include "catalog/catalog.h"
#include "common/envelope.h"
#include "common/json.h"
#include "core/core.h"
#include "core/state.h"
#include "fleet/fleet_file.h"

namespace tessera::core {
namespace {

const catalog::Catalog& TheCatalog() {
  static const catalog::Catalog* c =
      new catalog::Catalog(std::move(catalog::Catalog::LoadEmbedded()).value());
  return *c;
}

constexpr int kNodes = 10000;

std::string FleetJson() {
  return fmt::format(R"({{"name": "big", "shapes": [
    {{"name": "h100", "count": {}, "gpu_model": "H100-80GB", "gpus": 8, "vcpus": 192,
     "memory_gib": 2048, "nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]], "gpu_mode": "exclusive"}}]}})",
                     kNodes);
}

std::unique_ptr<fleet::Fleet> NewFleet() {
  return std::make_unique<fleet::Fleet>(
      std::move(fleet::ParseFleetJson(TheCatalog(), FleetJson(), "big")).value());
}

std::unique_ptr<State> NewState(FakeClock* clock, int batch_window = 1) {
  auto fleet = NewFleet();
  auto sched = sched::Scheduler::Create(fleet.get(), {"guarded-fgd", 42, {}}).value();
  StateOptions options;
  options.batch_window = batch_window;
  options.sim_agents = false;  // Deletes free capacity at once, in the same round.
  // The worst round is one tenant's 2,000 distinct requests waiting, past the server's default.
  options.max_pending_per_tenant = 1'000'000;
  return std::make_unique<State>(&TheCatalog(), clock, std::move(fleet), std::move(sched), options);
}

CreateInstanceRequest H100(int gpus, Billing billing, int64_t vcpus, int64_t memory_mib) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.shape.gpu_model = "H100-80GB";
  r.shape.gpus = gpus;
  r.shape.vcpus = vcpus;
  r.shape.memory_mib = memory_mib;
  return r;
}

// The stored record of a running instance holding exactly `gpus` of node `node`.
store::InstanceRecord Running(const fleet::Fleet& fleet, int64_t seq, const TenantId& tenant,
                              Billing billing, uint32_t node, std::vector<int> gpus, Time now) {
  Instance i;
  i.id = InstanceId::FromNumber(seq);
  i.seq = seq;
  i.tenant = tenant;
  i.name = i.id.str();
  i.state = InstanceState::kRunning;
  i.billing = billing;
  i.shape.gpu_model = "H100-80GB";
  i.shape.gpus = static_cast<int>(gpus.size());
  i.shape.vcpus = 8;
  i.shape.memory_mib = 1024;
  i.created_at = i.updated_at = now;
  fleet::Assignment a;
  a.node = fleet::NodeIndex(node);
  a.cpu_milli = 8000;
  a.memory_mib = 1024;
  for (int g : gpus)
    a.gpus[static_cast<size_t>(a.gpu_count++)] = {g, fleet::kMilliPerGpu, 0, nullptr, 0};
  i.assignment = a;
  return {i.id.str(), tenant.str(), "running", DumpJson(ToStoredJson(i, fleet)), ""};
}

// Every node: on-demand work on GPUs 0-1 and 4-5, spot work on each of GPUs 2, 3, 6 and 7.
struct Loaded {
  FakeClock clock;
  std::unique_ptr<State> state;
  Tenant tenant;
  std::vector<std::string> spot;
};

Loaded& World() {
  static Loaded* w = [] {
    auto* l = new Loaded;
    l->state = NewState(&l->clock);
    store::Batch tenants;
    Tenants maker(&l->clock);
    l->tenant = *maker.Create("load", int64_t{1} << 40, "h", tenants);
    const auto fleet = NewFleet();
    std::vector<store::InstanceRecord> records;
    int64_t seq = 1;
    for (uint32_t n = 0; n < kNodes; ++n) {
      for (const std::vector<int>& gpus : {std::vector<int>{0, 1}, std::vector<int>{4, 5}}) {
        records.push_back(
            Running(*fleet, seq++, l->tenant.id, Billing::kOnDemand, n, gpus, l->clock.Now()));
      }
      for (int g : {2, 3, 6, 7}) {
        l->spot.push_back(InstanceId::FromNumber(seq).str());
        records.push_back(
            Running(*fleet, seq++, l->tenant.id, Billing::kSpot, n, {g}, l->clock.Now()));
      }
    }
    store::Batch reconciled;
    auto report = l->state->Restore(tenants.tenants, records, {}, reconciled);
    if (!report.ok() || !report->failed.empty()) std::abort();
    const Tenant& t = *l->state->tenants().Find(l->tenant.id.str());
    for (int g = 0; g < 2000; ++g) {
      store::Batch batch;
      l->state->BeginRound();
      CreateInstanceRequest r = H100(4, Billing::kOnDemand, 1 + g % 100, 1024 + g);
      r.shape.nvlink = true;
      (void)l->state->instances().Create(t, r, batch);
      l->state->EndRound(batch);
    }
    return l;
  }();
  return *w;
}

void BM_RoundCreate(benchmark::State& bs) {
  Loaded& w = World();
  const Tenant& t = *w.state->tenants().Find(w.tenant.id.str());
  for (auto _ : bs) {
    store::Batch batch;
    w.state->BeginRound();
    auto i = w.state->instances().Create(t, H100(1, Billing::kSpot, 1, 64), batch);
    w.state->EndRound(batch);
    bs.PauseTiming();
    store::Batch undo;
    w.state->BeginRound();
    (void)w.state->instances().Delete(t, i->id.str(), undo);
    bs.ResumeTiming();
  }
}

// Eight creates of 1, 2, 4 and 8 GPUs in one round on the empty fleet: placed as they come
// (window 1), or held and placed together, the largest first, when the eighth fills the window.
void BM_RoundEight(benchmark::State& bs) {
  FakeClock clock;
  auto state = NewState(&clock, static_cast<int>(bs.range(0)));
  store::Batch setup;
  const Tenant made = *state->tenants().Create("eight", int64_t{1} << 40, "h8", setup);
  const Tenant& t = *state->tenants().Find(made.id.str());
  std::vector<std::string> ids;
  for (auto _ : bs) {
    store::Batch batch;
    state->BeginRound();
    for (int i = 0; i < 8; ++i) {
      ids.push_back(state->instances()
                        .Create(t, H100(1 << (i % 4), Billing::kOnDemand, 1, 64), batch)
                        ->id.str());
    }
    state->EndRound(batch);
    bs.PauseTiming();
    for (const std::string& id : ids) {
      if (state->views().Get(t, id)->node.empty()) std::abort();  // Every one must be placed.
    }
    store::Batch undo;
    state->BeginRound();
    for (const std::string& id : ids) (void)state->instances().Delete(t, id, undo);
    state->EndRound(undo);
    ids.clear();
    bs.ResumeTiming();
  }
  bs.SetItemsProcessed(bs.iterations() * 8);
}

void BM_RoundFreedWorst(benchmark::State& bs) {
  Loaded& w = World();
  const Tenant& t = *w.state->tenants().Find(w.tenant.id.str());
  int64_t searches = 0, rounds = 0;
  for (auto _ : bs) {
    // A spot instance ends: capacity frees, and every waiting group is worth a try again.
    const std::string victim = w.spot.back();
    w.spot.pop_back();
    const int64_t before = w.state->counters().preemption_searches;
    store::Batch batch;
    w.state->BeginRound();
    (void)w.state->instances().Delete(t, victim, batch);
    w.state->EndRound(batch);
    searches += w.state->counters().preemption_searches - before;
    ++rounds;
    bs.PauseTiming();
    store::Batch refill;
    w.state->BeginRound();
    auto i = w.state->instances().Create(t, H100(1, Billing::kSpot, 8, 1024), refill);
    w.spot.push_back(i->id.str());
    bs.ResumeTiming();
  }
  bs.counters["searches/round"] = static_cast<double>(searches) / static_cast<double>(rounds);
  bs.counters["queued"] = static_cast<double>(w.state->instances().queue().size());
}

void BM_RoundRepackWorst(benchmark::State& bs) {
  FakeClock clock;
  const std::string json = fmt::format(R"({{"name": "shared", "shapes": [
    {{"name": "l40s", "count": {}, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 192,
     "memory_gib": 1024, "gpu_mode": "shared"}}]}})",
                                       kNodes);
  const auto parse = [&json] {
    return std::make_unique<fleet::Fleet>(
        std::move(fleet::ParseFleetJson(TheCatalog(), json, "shared")).value());
  };
  auto fleet = parse();
  const auto layout = parse();
  auto sched = sched::Scheduler::Create(fleet.get(), {"guarded-fgd", 42, {}}).value();
  StateOptions options;
  options.repack = true;
  State state(&TheCatalog(), &clock, std::move(fleet), std::move(sched), options);
  store::Batch tenants;
  Tenants maker(&clock);
  const Tenant made = *maker.Create("load", int64_t{1} << 40, "h", tenants);
  std::vector<store::InstanceRecord> records;
  int64_t seq = 1;
  for (uint32_t n = 0; n < kNodes; ++n) {
    for (int g = 0; g < 8; ++g) {
      for (int k = 0; k < 2; ++k) {
        Instance i;
        i.id = InstanceId::FromNumber(seq);
        i.seq = seq++;
        i.tenant = made.id;
        i.name = i.id.str();
        i.state = InstanceState::kRunning;
        i.shape.gpu_model = "L40S-48GB";
        i.shape.mode = catalog::SharingMode::kShared;
        i.shape.milli_gpu = 450;
        i.shape.vcpus = 1;
        i.shape.memory_mib = 1024;
        i.migratable = true;
        i.created_at = i.updated_at = clock.Now();
        i.started_at = clock.Now();
        fleet::Assignment a;
        a.node = fleet::NodeIndex(n);
        a.cpu_milli = 1000;
        a.memory_mib = 1024;
        a.gpus[0] = {g, 450, 0, nullptr, 0};
        a.gpu_count = 1;
        i.assignment = a;
        records.push_back(
            {i.id.str(), made.id.str(), "running", DumpJson(ToStoredJson(i, *layout)), ""});
      }
    }
  }
  store::Batch reconciled;
  auto report = state.Restore(tenants.tenants, records, {}, reconciled);
  if (!report.ok() || !report->failed.empty()) std::abort();
  const Tenant& t = *state.tenants().Find(made.id.str());
  std::vector<std::string> ids;
  for (auto _ : bs) {
    store::Batch batch;
    state.BeginRound();
    for (int k = 0; k < 8; ++k) {
      CreateInstanceRequest r;
      r.shape.gpu_model = "L40S-48GB";
      r.shape.mode = catalog::SharingMode::kShared;
      r.shape.milli_gpu = 950;
      r.shape.vcpus = 1 + k;  // Distinct: none waits behind another.
      r.shape.memory_mib = 1024;
      ids.push_back(state.instances().Create(t, r, batch)->id.str());
    }
    state.EndRound(batch);
    bs.PauseTiming();
    if (state.counters().repack_moves != 0) std::abort();  // Every trial must fail.
    store::Batch undo;
    state.BeginRound();
    for (const std::string& id : ids) (void)state.instances().Delete(t, id, undo);
    state.EndRound(undo);
    ids.clear();
    bs.ResumeTiming();
  }
}

void BM_Restore(benchmark::State& bs) {
  // The records of 10,000 nodes' worth of running work, as the store would hand them back.
  FakeClock clock;
  auto source = NewState(&clock);
  store::Batch records;
  const Tenant t = *source->tenants().Create("load", int64_t{1} << 40, "h", records);
  for (int n = 0; n < kNodes; ++n) {
    for (int s = 0; s < 8; ++s) {
      (void)source->instances().Create(*source->tenants().Find(t.id.str()),
                                       H100(1, Billing::kOnDemand, 8, 1024), records);
    }
  }
  for (auto _ : bs) {
    auto state = NewState(&clock);
    store::Batch reconciled;
    auto report = state->Restore(records.tenants, records.instances, {}, reconciled);
    if (!report.ok() || !report->failed.empty()) std::abort();
    benchmark::DoNotOptimize(report);
  }
  bs.counters["instances"] = static_cast<double>(records.instances.size());
}

// 1,000 gangs of 2 to 64 NVLinked GPUs (members of up to 4 GPUs, one island each, packed onto as
// few nodes as possible), each created and placed whole in its own round, on an empty
// 10,000-node fleet. Items: placement decisions (gangs).
void BM_Gangs(benchmark::State& bs) {
  for (auto _ : bs) {
    bs.PauseTiming();
    FakeClock clock;
    auto state = NewState(&clock);
    store::Batch setup;
    const Tenant t = *state->tenants().Create("gangs", int64_t{1} << 40, "h", setup);
    bs.ResumeTiming();
    int placed = 0;
    for (int i = 0; i < 1000; ++i) {
      const int gpus = 2 << (i % 6);  // 2, 4, 8, 16, 32, 64.
      GroupRequest g;
      g.member = H100(std::min(gpus, 4), Billing::kOnDemand, 8, 1024);
      g.member.shape.nvlink = true;
      g.size = gpus / g.member.shape.gpus;
      g.min_available = g.size;
      g.topology = Topology::kNvlink;
      store::Batch batch;
      state->BeginRound();
      auto made = state->groups().Create(*state->tenants().Find(t.id.str()), g, batch);
      state->EndRound(batch);
      placed += made.ok() && made->placed == g.size;
    }
    if (placed != 1000) bs.SkipWithError("a gang did not fit an empty fleet");
  }
  bs.SetItemsProcessed(bs.iterations() * 1000);
}

// A token hash as the API makes them: 64 hex digits.
std::string Hash(int64_t n) { return fmt::format("{:064x}", n); }

constexpr int kOtherTenants = 1000;

// Each iteration rotates once more and advances the clock a second; the grace is `prior` seconds,
// so the tenant keeps `prior` predecessors in their grace throughout (unless a cap retires them).
// The core thread's part: the rotation, its stored record and its answer.
void BM_RotateCoreThread(benchmark::State& bs) {
  const int prior = static_cast<int>(bs.range(0));
  const Duration grace = std::chrono::seconds(prior);
  FakeClock clock;
  Tenants tenants(&clock);
  store::Batch setup;
  for (int i = 0; i < kOtherTenants; ++i) {
    (void)tenants.Create(fmt::format("other-{}", i), 1000, Hash(i), setup);
  }
  const std::string id = tenants.Create("rotor", 1000, Hash(-1), setup)->id.str();
  int64_t next = kOtherTenants;
  for (int i = 0; i < prior; ++i, clock.Advance(std::chrono::seconds(1))) {
    (void)tenants.Rotate(id, Hash(next++), grace, setup);
  }
  for (auto _ : bs) {
    store::Batch batch;
    auto t = tenants.Rotate(id, Hash(next++), grace, batch);
    benchmark::DoNotOptimize(ToJson(*t).dump());
    clock.Advance(std::chrono::seconds(1));
  }
  bs.counters["live_tokens"] = static_cast<double>(tenants.Find(id)->tokens.size());
  bs.counters["index"] = static_cast<double>(tenants.index()->size());
}

// The whole command through the core on SQLite: the rotation and its durable commit.
void BM_RotateDurable(benchmark::State& bs) {
  const int prior = static_cast<int>(bs.range(0));
  const Duration grace = std::chrono::seconds(prior);
  std::string dir = (std::filesystem::temp_directory_path() / "rotate-bench-XXXXXX").string();
  if (!mkdtemp(dir.data())) return bs.SkipWithError("mkdtemp failed");
  spdlog::set_level(spdlog::level::warn);  // Start-up's summary is not a figure.
  FakeClock clock;
  CoreOptions options;
  options.catalog = &TheCatalog();
  options.empty_fleet = true;
  options.data_dir = dir;
  options.clock = &clock;
  {
    auto core = Core::Start(options);
    if (!core.ok()) return bs.SkipWithError(core.status().message().c_str());
    int64_t next = kOtherTenants;
    auto id = (*core)->Run<std::string>([&](State& s, store::Batch& b) -> Result<std::string> {
      for (int i = 0; i < kOtherTenants; ++i) {
        (void)s.tenants().Create(fmt::format("other-{}", i), 1000, Hash(i), b);
      }
      const std::string rotor = s.tenants().Create("rotor", 1000, Hash(-1), b)->id.str();
      for (int i = 0; i < prior; ++i, clock.Advance(std::chrono::seconds(1))) {
        (void)s.tenants().Rotate(rotor, Hash(next++), grace, b);
      }
      return rotor;
    });
    if (!id.ok()) return bs.SkipWithError(id.status().message().c_str());
    for (auto _ : bs) {
      auto done = (*core)->Run<std::string>([&](State& s, store::Batch& b) -> Result<std::string> {
        TESSERA_ASSIGN_OR_RETURN(Tenant t, s.tenants().Rotate(*id, Hash(next++), grace, b));
        return ToJson(t).dump();
      });
      if (!done.ok()) return bs.SkipWithError(done.status().message().c_str());
      clock.Advance(std::chrono::seconds(1));
    }
  }
  std::filesystem::remove_all(dir);
}

// A Sealer on a one-key keyring, and a 64-byte value.
std::unique_ptr<Sealer> BenchSealer() {
  auto ring = KeyringFromText("bench-1 " + std::string(43, 'Q') + "=\n", "bench");
  if (!ring.ok()) return nullptr;
  return std::make_unique<Sealer>(std::shared_ptr<const Keyring>(std::move(*ring)));
}

void BM_EnvelopeSeal(benchmark::State& bs) {
  auto sealer = BenchSealer();
  if (sealer == nullptr) return bs.SkipWithError("keyring");
  const std::string value(64, 'v');
  for (auto _ : bs) {
    auto sealed = sealer->Seal(value, "instance/i-1/env/MODE");
    if (!sealed.ok()) return bs.SkipWithError(sealed.status().message().c_str());
    benchmark::DoNotOptimize(sealed);
  }
}

void BM_EnvelopeOpen(benchmark::State& bs) {
  auto sealer = BenchSealer();
  if (sealer == nullptr) return bs.SkipWithError("keyring");
  auto sealed = sealer->Seal(std::string(64, 'v'), "instance/i-1/env/MODE");
  if (!sealed.ok()) return bs.SkipWithError(sealed.status().message().c_str());
  for (auto _ : bs) {
    auto opened = sealer->Open(*sealed, "instance/i-1/env/MODE");
    if (!opened.ok()) return bs.SkipWithError(opened.status().message().c_str());
    benchmark::DoNotOptimize(opened);
  }
}

BENCHMARK(BM_RoundCreate)->Name("BM_Round/create")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RoundEight)
    ->Name("BM_Round/eight_creates")
    ->Arg(1)
    ->Arg(8)
    ->ArgName("window")
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RoundFreedWorst)->Name("BM_Round/freed_worst")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RoundRepackWorst)->Name("BM_Round/repack_worst")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Restore)->Name("BM_Round/restore")->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_Gangs)
    ->Name("BM_Gangs/1000_on_10000_nodes")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_RotateCoreThread)
    ->Name("BM_Rotate/core_thread")
    ->Arg(10)
    ->Arg(1000)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RotateDurable)
    ->Name("BM_Rotate/durable")
    ->Arg(10)
    ->Arg(1000)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EnvelopeSeal)->Name("BM_Envelope/seal")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_EnvelopeOpen)->Name("BM_Envelope/open")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera::core

BENCHMARK_MAIN();
