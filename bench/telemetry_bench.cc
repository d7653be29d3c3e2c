// Telemetry and alert budgets at 10,000 GPUs (docs/telemetry.md, docs/alerts.md):
//   BM_Render         "/metrics for 10,000 GPUs rendered in under 100 ms": RenderExposition of
//                     the targets NodeTargets builds for 1,250 nodes x 8 A100s, every GPU with a
//                     full sample. Per node: GPUs 0-6 held by instances (exclusive, about 7% idle;
//                     on every 8th node shared by 2-4 holders of 250/500 milli), GPU 7 in MIG
//                     mode with 2-3 MIG holders and their MIG samples. Arg 0 renders into a fresh
//                     string (the handler's case), arg 1 into a buffer already mapped;
//   BM_ServerMetrics  the same budget on the server's whole path: State::Targets() then
//                     RenderExposition, on a core::State whose 1,250 nodes joined through agents
//                     (AgentHub: CreateNode, Register, Sync with telemetry) and hold about
//                     12,000 instances the scheduler placed (exclusive, shared and MIG);
//   BM_Evaluate       "1,000 rules over 10,000 GPUs evaluated in under 50 ms per cycle": one
//                     Evaluator::Evaluate over BM_Render's targets per iteration, time advancing
//                     5 s each, in the steady state (pending alerts already turned firing).
//                     Rules: the 5 built-ins, 300 operator rules matching a Hostname or a gpu,
//                     300 unmatched operator rules and 400 tenant rules (10 for each of 40
//                     tenants). Readings are drawn so each rule holds on about 0-3% of its series
//                     (arg 1); arg 0 puts the 995 non-built-in thresholds out of reach: the scan.
// Counters: targets, series (sample lines), bytes rendered; alerts, firing, and held_pct (the
// share of (rule, visible series) conditions that hold).
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cmath>
#include <map>
#include <random>

#include "alerts/evaluator.h"
#include "catalog/catalog.h"
#include "common/memory.h"
#include "core/state.h"
#include "telemetry/series.h"

namespace tessera {
namespace {

using catalog::SharingMode;
using telemetry::Field;
using telemetry::GpuSample;
using telemetry::Holder;
using telemetry::NodeInfo;
using telemetry::Target;

constexpr int kNodes = 1250;
constexpr int kGpus = 8;
constexpr int kMigGpu = 7;
constexpr int kTenants = 40;
constexpr int64_t kFbMib = 81920;

std::string Hostname(int n) { return fmt::format("node-a100-{:04d}", n + 1); }
std::string TenantOf(int k) { return TenantId::FromNumber(k + 1).str(); }
bool SharedNode(int n) { return n % 8 == 0; }

struct Rng {
  std::mt19937_64 g;
  double U(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(g); }
  bool P(double p) { return U(0, 1) < p; }
  int I(int n) { return static_cast<int>(g() % static_cast<uint64_t>(n)); }
};

NodeInfo InfoOf(int n) {
  static constexpr int kBus[kGpus] = {0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD};
  NodeInfo info{Hostname(n), "550.54.15", {}};
  Rng r{std::mt19937_64(static_cast<uint64_t>(n) + 1)};
  for (int g = 0; g < kGpus; ++g) {
    info.gpus.push_back({g,
                         fmt::format("GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", r.g() >> 32,
                                     r.g() >> 48, r.g() >> 48, r.g() >> 48, r.g() >> 16),
                         "NVIDIA A100-SXM4-80GB", fmt::format("00000000:{:02X}:00.0", kBus[g]),
                         g == kMigGpu});
  }
  return info;
}

int64_t MigMib(const std::string& profile) {
  return profile == "1g.10gb" ? 9856 : profile == "2g.20gb" ? 19968 : 40192;
}

// One node's report: a full sample per GPU (idle GPUs read idle), MIG samples for `mig`, and
// now and then an XID.
telemetry::Telemetry Report(int n, const std::vector<bool>& held, const std::vector<Holder>& mig) {
  Rng r{std::mt19937_64(static_cast<uint64_t>(n) * 7919 + 17)};
  telemetry::Telemetry t;
  for (int g = 0; g < kGpus; ++g) {
    const bool busy = held[static_cast<size_t>(g)];
    GpuSample s;
    s.index = g;
    s.gpu_util = busy ? r.U(40, 100) : r.U(0, 3);
    s.mem_copy_util = busy ? r.U(10, 60) : 0;
    s.memory_total_mib = kFbMib;
    const double used = r.P(0.03) ? r.U(0.92, 0.99) : busy ? r.U(0.2, 0.88) : r.U(0, 0.01);
    s.memory_used_mib = static_cast<int64_t>(used * kFbMib);
    s.temperature_c = r.P(0.015) ? r.U(86, 92) : r.U(38, 82);
    s.power_w = busy ? r.U(150, 400) : r.U(55, 80);
    s.sm_clock_mhz = r.P(0.02) ? static_cast<int64_t>(r.U(900, 1300)) : 1410;
    s.mem_clock_mhz = 1593;
    s.pcie_tx_kib_s = static_cast<int64_t>(r.U(1e3, 2.4e7));
    s.pcie_rx_kib_s = static_cast<int64_t>(r.U(1e3, 2.4e7));
    s.ecc_sbe_total = r.P(0.05) ? static_cast<int64_t>(r.U(1, 40)) : 0;
    s.ecc_dbe_total = r.P(0.001) ? 1 : 0;
    s.gr_engine_active = busy ? r.U(0.3, 1) : r.U(0, 0.02);
    s.tensor_active = busy ? r.U(0, 1) : 0.0;
    for (const Holder& h : mig) {
      if (h.gpu != g) continue;
      const int64_t total = MigMib(h.mig_profile);
      s.mig.push_back({h.mig_start, h.mig_profile, h.gi_id,
                       static_cast<int64_t>(r.U(0.1, 0.95) * static_cast<double>(total)), total,
                       r.U(0.2, 1), r.U(0, 1)});
    }
    if (r.P(0.003))
      t.xids.push_back({g, std::array<int64_t, 4>{79, 48, 13, 31}[static_cast<size_t>(r.I(4))]});
    t.gpus.push_back(std::move(s));
  }
  return t;
}

// 1,250 nodes' targets, as an agent's or the server's NodeTargets builds them.
const std::vector<Target>& FleetTargets() {
  static const std::vector<Target>* targets = [] {
    auto* out = new std::vector<Target>;
    auto m = [](const char* profile, int start, int gi) {
      return Holder{kMigGpu, "", "", 1000, profile, start, gi};
    };
    const std::vector<Holder> layouts[] = {
        {m("3g.40gb", 0, 1), m("3g.40gb", 4, 2)},
        {m("2g.20gb", 0, 3), m("2g.20gb", 2, 5), m("3g.40gb", 4, 2)},
        {m("1g.10gb", 0, 7), m("1g.10gb", 1, 8), m("3g.40gb", 4, 2)}};
    int64_t seq = 0;
    Rng r{std::mt19937_64(42)};
    auto instance = [&] { return InstanceId::FromNumber(++seq).str(); };
    for (int n = 0; n < kNodes; ++n) {
      std::vector<Holder> holders;
      std::vector<bool> held(kGpus, false);
      const std::string quad = n % 5 == 1 ? instance() : "";  // A 4-GPU instance on GPUs 0-3.
      const std::string quad_tenant = TenantOf(r.I(kTenants));
      for (int g = 0; g < kMigGpu; ++g) {
        if (!quad.empty() && g < 4) {
          holders.push_back({g, quad, quad_tenant, 1000, "", 0, -1});
        } else if (SharedNode(n)) {
          const int k = 2 + r.I(3);
          for (int i = 0; i < k; ++i) {
            holders.push_back({g, instance(), TenantOf(r.I(kTenants)),
                               k == 2 || (k == 3 && i == 0) ? 500 : 250, "", 0, -1});
          }
        } else if (!r.P(0.07)) {
          holders.push_back({g, instance(), TenantOf(r.I(kTenants)), 1000, "", 0, -1});
        }
        held[static_cast<size_t>(g)] = !holders.empty() && holders.back().gpu == g;
      }
      std::vector<Holder> mig = layouts[static_cast<size_t>(n % 3)];
      for (Holder& h : mig) {
        h.instance = instance();
        h.tenant = TenantOf(r.I(kTenants));
        holders.push_back(h);
      }
      held[kMigGpu] = true;
      const telemetry::Telemetry t = Report(n, held, mig);
      telemetry::NodeTargets(InfoOf(n), &t, holders, true, *out);
    }
    return out;
  }();
  return *targets;
}

void Render(benchmark::State& bs, const std::vector<Target>& targets, size_t bytes) {
  size_t series = 0;
  for (const Target& t : targets) {
    for (double v : t.values) series += std::isnan(v) ? 0 : 1;
  }
  bs.counters["targets"] = static_cast<double>(targets.size());
  bs.counters["series"] = static_cast<double>(series);
  bs.counters["bytes"] = static_cast<double>(bytes);
  bs.SetBytesProcessed(static_cast<int64_t>(bs.iterations() * bytes));
}

// Arg 0: a fresh string per render, as a handler makes; arg 1: one buffer, rendered into once
// before timing, so its pages are mapped: the render without first-touch page faults, which
// dominate arg 0 on VMs where a fault is costly (there, compare with
// GLIBC_TUNABLES=glibc.malloc.mmap_max=0, which keeps freed memory mapped).
void BM_Render(benchmark::State& bs) {
  const std::vector<Target>& targets = FleetTargets();
  std::string kept;
  telemetry::RenderExposition(targets, kept);
  const size_t bytes = kept.size();
  for (auto _ : bs) {
    std::string fresh;
    std::string& out = bs.range(0) ? kept : fresh;
    out.clear();
    telemetry::RenderExposition(targets, out);
    benchmark::DoNotOptimize(out.data());
  }
  Render(bs, targets, bytes);
}

// A core::State whose nodes joined through agents, with instances placed and telemetry reported.
// The instances stay scheduled (no agent reports them running): Targets() lists them all the same.
const core::State& ServerState() {
  static const core::State* state = [] {
    spdlog::set_level(spdlog::level::warn);  // No line per joining node.
    static const catalog::Catalog catalog = std::move(catalog::Catalog::LoadEmbedded()).value();
    static FakeClock clock;
    auto fleet = std::make_unique<fleet::Fleet>(&catalog);
    auto sched = sched::Scheduler::Create(fleet.get(), {"guarded-fgd", 42, {}}).value();
    auto* st = new core::State(&catalog, &clock, std::move(fleet), std::move(sched), {});
    store::Batch batch;
    for (int n = 0; n < kNodes; ++n) {
      const NodeInfo info = InfoOf(n);
      nlohmann::json gpus = nlohmann::json::array();
      for (const NodeInfo::Gpu& g : info.gpus) {
        gpus.push_back({{"index", g.index},
                        {"uuid", g.uuid},
                        {"name", g.name},
                        {"model", "A100-80GB"},
                        {"memory_mib", kFbMib},
                        {"mig_enabled", g.mig_enabled},
                        {"pci_bus_id", g.pci_bus_id}});
      }
      const nlohmann::json inventory = {
          {"backend", "nvml"},       {"driver_version", info.driver_version},
          {"cpu_milli", 256000},     {"memory_mib", 2097152},
          {"gpus", std::move(gpus)}, {"nvlink_islands", {{0, 1, 2, 3}, {4, 5, 6, 7}}}};
      const auto mode = SharedNode(n) ? SharingMode::kShared : SharingMode::kExclusive;
      if (!st->agent_hub().CreateNode(info.hostname, {}, mode, "t-" + info.hostname, batch).ok() ||
          !st->agent_hub().Register(info.hostname, {"agent-1", inventory}, batch).ok()) {
        std::abort();
      }
    }
    std::vector<std::string> tenants;
    for (int k = 0; k < kTenants; ++k) {
      const std::string name = fmt::format("t{}", k);
      tenants.push_back(st->tenants().Create(name, int64_t{1} << 40, name, batch)->id.str());
    }
    // About 91% of the exclusive GPUs, 2,000 shares and 3,000 MIG slices, 100 a round.
    int created = 0;
    auto create = [&](int count, SharingMode mode, int gpus, const std::string& mig, int milli) {
      for (int i = 0; i < count; ++i, ++created) {
        if (created % 100 == 0) st->BeginRound();
        core::CreateInstanceRequest req;
        req.command = "python train.py";
        req.shape = {"", "A100-80GB", mode, gpus, mig, milli, milli * 80, 4, 16384, false};
        const core::Tenant& t =
            *st->tenants().Find(tenants[static_cast<size_t>(created % kTenants)]);
        (void)st->instances().Create(t, req, batch);
        if (created % 100 == 99) st->EndRound(batch);
      }
    };
    create(6800, SharingMode::kExclusive, 1, "", 0);
    create(50, SharingMode::kExclusive, 4, "", 0);
    create(1000, SharingMode::kShared, 0, "", 500);
    create(1000, SharingMode::kShared, 0, "", 250);
    for (const char* p : {"3g.40gb", "2g.20gb", "1g.10gb"})
      create(1000, SharingMode::kMig, 0, p, 0);
    st->EndRound(batch);
    // Each node's agent reports a sample that matches what the node holds.
    std::map<std::string, std::vector<Holder>> mig;
    std::map<std::string, std::vector<bool>> held;
    st->instances().table().ForEach([&](const core::Instance& inst) {
      auto& h = held.try_emplace(inst.node, kGpus, false).first->second;
      for (const core::GpuRef& g : inst.gpus) {
        h[static_cast<size_t>(g.index)] = true;
        if (!g.mig_profile.empty()) {
          mig[inst.node].push_back({g.index, "", "", 1000, g.mig_profile, g.mig_start, -1});
        }
      }
    });
    for (int n = 0; n < kNodes; ++n) {
      const std::string name = Hostname(n);
      core::AgentSync sync;
      sync.agent_id = "agent-1";
      sync.seq = 1;
      held.try_emplace(name, kGpus, false);
      sync.telemetry = std::make_shared<telemetry::Telemetry>(Report(n, held[name], mig[name]));
      if (!st->agent_hub().Sync(name, sync, batch).ok()) std::abort();
    }
    st->BeginRound();
    st->EndRound(batch);
    return st;
  }();
  return *state;
}

void BM_ServerMetrics(benchmark::State& bs) {
  const core::State& st = ServerState();
  size_t bytes = 0;
  for (auto _ : bs) {
    std::string out;
    telemetry::RenderExposition(st.Targets(), out);
    bytes = out.size();
    benchmark::DoNotOptimize(out.data());
  }
  Render(bs, st.Targets(), bytes);
  bs.counters["instances"] = static_cast<double>(st.instances().table().size());
}

// 1,000 rules: thresholds drawn per rule from a range in which each holds on about 0-3% of
// the series that have its metric; when `quiet`, out of reach (only the built-ins may hold).
std::vector<alerts::Rule> Rules(Time now, bool quiet) {
  struct Kind {
    Field metric;
    alerts::Op op;
    double lo, hi;
  };
  static constexpr Kind kKinds[] = {
      {Field::kGpuTemp, alerts::Op::kGt, 80, 90},
      {Field::kPowerUsage, alerts::Op::kGt, 385, 420},
      {Field::kFbUsedPercent, alerts::Op::kGt, 90, 99},
      {Field::kGpuUtil, alerts::Op::kLt, 0.2, 1},
      {Field::kSmClock, alerts::Op::kLt, 1000, 1350},
      {Field::kEccSbeVolTotal, alerts::Op::kGt, 5, 50},
      {Field::kPipeTensorActive, alerts::Op::kGt, 0.97, 0.999},
      {Field::kPcieTxBytes, alerts::Op::kGt, 2.4e10, 2.5e10},
      {Field::kXidErrors, alerts::Op::kNe, 0, 0},
  };
  std::vector<alerts::Rule> rules = alerts::BuiltinRules(now);
  Rng r{std::mt19937_64(7)};
  for (int i = 0; rules.size() < 1000; ++i) {
    const Kind& k = kKinds[static_cast<size_t>(r.I(static_cast<int>(std::size(kKinds))))];
    alerts::Rule rule;
    rule.id = fmt::format("rule-{:06d}", i + 1);
    rule.name = fmt::format("Rule{}", i + 1);
    rule.metric = k.metric;
    rule.op = k.op;
    rule.threshold = k.lo + (k.hi - k.lo) * r.U(0, 1);
    if (quiet) {
      rule.op = k.op == alerts::Op::kLt ? alerts::Op::kLt : alerts::Op::kGt;
      rule.threshold = k.op == alerts::Op::kLt ? -1e30 : 1e30;
    }
    rule.for_seconds = std::array<int64_t, 5>{0, 30, 60, 120, 300}[static_cast<size_t>(i % 5)];
    rule.severity = i % 3 == 0 ? "critical" : "warning";
    rule.annotations = {{"summary", "{{ $labels.Hostname }} GPU {{ $labels.gpu }}: {{ $value }}"}};
    rule.created_at = now;
    if (i < 200) {
      rule.matchers = {{"Hostname", Hostname(r.I(kNodes))}};
    } else if (i < 300) {
      rule.matchers = {{"gpu", std::to_string(r.I(kGpus))}};
    } else if (i >= 600) {
      rule.owner = TenantOf((i - 600) % kTenants);
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

// Arg 1: the mix above; arg 0: the same rules out of reach, the cost of the scan alone.
void BM_Evaluate(benchmark::State& bs) {
  const std::vector<Target>& targets = FleetTargets();
  struct Loop {
    alerts::Evaluator evaluator;
    Time now = FakeClock().Now();
  };
  static std::map<int64_t, Loop> loops;
  auto [it, fresh] = loops.try_emplace(bs.range(0));
  Loop& l = it->second;
  if (fresh) {
    for (alerts::Rule& rule : Rules(l.now, bs.range(0) == 0)) l.evaluator.Put(std::move(rule));
    for (int i = 0; i < 62; ++i) {  // Past the longest for_seconds: the steady state.
      l.now += std::chrono::seconds(5);
      (void)l.evaluator.Evaluate(l.now, targets);
    }
  }
  for (auto _ : bs) {
    l.now += std::chrono::seconds(5);
    alerts::Evaluation out = l.evaluator.Evaluate(l.now, targets);
    benchmark::DoNotOptimize(out.changed.data());
  }
  size_t firing = 0, checked = 0;
  for (const auto& [key, a] : l.evaluator.alerts())
    firing += a.state == alerts::AlertState::kFiring;
  for (const auto& [id, rule] : l.evaluator.rules()) {
    for (const Target& t : targets) {
      bool visible = t.has(rule.metric) && (rule.operator_owned() || t.tenant == rule.owner);
      for (const auto& [name, value] : rule.matchers) {
        visible = visible && t.label(name) && *t.label(name) == value;
      }
      checked += visible;
    }
  }
  bs.counters["rules"] = static_cast<double>(l.evaluator.rules().size());
  bs.counters["alerts"] = static_cast<double>(l.evaluator.alerts().size());
  bs.counters["firing"] = static_cast<double>(firing);
  bs.counters["held_pct"] = 100.0 * static_cast<double>(l.evaluator.alerts().size()) /
                            static_cast<double>(std::max<size_t>(checked, 1));
}

// Medians of 5 runs: the machine is shared, single runs are noisy.
void Config(benchmark::internal::Benchmark* b) {
  b->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
}
BENCHMARK(BM_Render)->Apply(Config)->Arg(0)->Arg(1);
BENCHMARK(BM_ServerMetrics)->Apply(Config);
BENCHMARK(BM_Evaluate)->Apply(Config)->Arg(1)->Arg(0);

}  // namespace
}  // namespace tessera

// As `tessera server` runs: large buffers stay mapped between scrapes (common/memory.h).
int main(int argc, char** argv) {
  tessera::KeepLargeBuffersMapped();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
