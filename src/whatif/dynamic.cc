#include "whatif/dynamic.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <queue>
#include <random>
#include <thread>
#include <unordered_map>

#include "common/clock.h"
#include "common/text.h"
#include "core/core.h"
#include "core/state.h"
#include "sched/scheduler.h"
#include "sim/svg_chart.h"
#include "sim/variant.h"
#include "store/store.h"

namespace tessera::whatif {

namespace {

using core::InstanceState;

// The simulated clock's zero: the first submission happens at 2026-01-01T00:00:00Z.
constexpr int64_t kEpochS = 1'767'225'600;

double Percentile(std::vector<double>& xs, double p) {
  if (xs.empty()) return 0;
  const size_t k = std::min(xs.size() - 1,
                            static_cast<size_t>(std::ceil(p * static_cast<double>(xs.size()))) - 1);
  std::nth_element(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(k), xs.end());
  return xs[k];
}

// A job's progress through the run.
struct Track {
  bool spot = false;
  int64_t first_start = -1;
  int64_t start = -1;  // Of the current run; -1 while not running.
  int64_t finished = -1;
  int attempt = 0;     // Bumped when a run is lost, so its pending completion is stale.
  int64_t done_s = 0;  // Work kept from lost runs (checkpointing jobs only).
  std::vector<std::string> members;  // A gang's running members; a single job's instance.
  int size = 1;                      // Members that must run at once.
  int succeeded = 0;
  bool moving = false;  // The current run was given notice to move ("POLICY-repack").
};

// What happens to a job's run at a time.
struct Completion {
  enum Kind { kEnd, kReclaim, kNoticeOver };
  int64_t at;
  size_t job;
  int attempt;
  Kind kind = kEnd;  // It ends; the provider takes the spot run back; a victim's notice is over.
  std::string instance{};  // kNoticeOver: the member that stops...
  int restarts = 0;        // ...in its attempt of that number.
  bool operator>(const Completion& o) const { return at > o.at; }
};

// The fleet's most common GPU model, and the node size and 1-GPU instance type jobs are cut to.
struct Cut {
  std::string model;
  int node_gpus = 8;
  int64_t vcpus_per_gpu = 4;
  int64_t memory_mib_per_gpu = 16384;
  // Its 1-GPU type, whose vCPUs and memory a GPU gets.
  const catalog::InstanceType* unit = nullptr;
};

Result<Cut> CutFor(const catalog::Catalog& catalog, const fleet::Fleet& fleet) {
  std::map<std::string, int64_t> gpus;
  for (const fleet::Node& n : fleet.nodes()) {
    if (n.model.valid() && !n.gpus.empty())
      gpus[catalog.gpu(n.model).id] += static_cast<int64_t>(n.gpus.size());
  }
  if (gpus.empty()) return Status::InvalidArgument("the fleet has no GPU node");
  Cut cut;
  cut.model = std::max_element(gpus.begin(), gpus.end(), [](auto& a, auto& b) {
                return a.second < b.second;
              })->first;
  int64_t cpu = INT64_MAX, mem = INT64_MAX;
  cut.node_gpus = 0;
  for (const fleet::Node& n : fleet.nodes()) {
    if (!n.model.valid() || catalog.gpu(n.model).id != cut.model || n.gpus.empty()) continue;
    const auto g = static_cast<int64_t>(n.gpus.size());
    cut.node_gpus = std::max(cut.node_gpus, static_cast<int>(g));
    cpu = std::min(cpu, n.cpu_milli / 1000 / g);
    mem = std::min(mem, n.memory_mib / g);
  }
  for (const catalog::InstanceType& t : catalog.instance_types()) {
    if (t.gpu_model == cut.model && t.sharing == catalog::SharingMode::kExclusive && t.gpus == 1)
      cut.unit = &t;
  }
  // A job's share of a node: what its 1-GPU type gives, when the nodes hold that much.
  cut.vcpus_per_gpu = std::max<int64_t>(1, std::min(cut.unit ? cut.unit->vcpus : 4, cpu));
  cut.memory_mib_per_gpu =
      std::max<int64_t>(1024, std::min(cut.unit ? cut.unit->memory_mib : 16384, mem));
  return cut;
}

// The GPUs a job holds: a share counts its thousandths.
double GpusOf(const Job& job) {
  return static_cast<double>(job.gpus) * job.gpu_milli / fleet::kMilliPerGpu;
}

// The largest member size, at most a node's GPUs, that divides `gpus`.
int MemberGpus(int gpus, int node_gpus) {
  for (int m = std::min(gpus, node_gpus); m > 1; --m) {
    if (gpus % m == 0) return m;
  }
  return 1;
}

// A job as the control plane is asked for it: the shape of one member, and how many run at once
// (more than one for a job wider than a node, a gang of equal members).
struct Member {
  core::Shape shape;
  int count = 1;
};

Member MemberOf(const Job& job, const Cut& cut) {
  Member m;
  const int gpus = job.gpus > cut.node_gpus ? MemberGpus(job.gpus, cut.node_gpus) : job.gpus;
  m.count = gpus > 0 ? job.gpus / gpus : 1;
  m.shape.gpu_model = cut.model;
  if (job.gpu_milli > 0 && job.gpu_milli < fleet::kMilliPerGpu) {
    m.shape.mode = catalog::SharingMode::kShared;
    m.shape.milli_gpu = job.gpu_milli;
  } else {
    m.shape.gpus = gpus;
  }
  // An openb pod asks for its own; a Philly job gets the fleet's cut per GPU.
  m.shape.vcpus = job.vcpus > 0 ? job.vcpus : cut.vcpus_per_gpu * gpus;
  m.shape.memory_mib = job.vcpus > 0 ? job.memory_mib : cut.memory_mib_per_gpu * gpus;
  return m;
}

// The reservations a mix buys: `gpus` of the model's GPUs in units of its exclusive instance
// types that the fleet can host (`state` says), split as the trace's GPU-seconds by the tightest
// type that covers each job's members (as a claim picks it); what a type's share leaves short of a
// whole unit goes to the next narrower type, and when no job fits any type, all of it to the
// narrowest.
std::vector<std::pair<const catalog::InstanceType*, int64_t>> PlanReservations(
    const catalog::Catalog& catalog, core::State& state, const Cut& cut,
    const std::vector<Job>& jobs, int64_t gpus) {
  std::vector<const catalog::InstanceType*> types;
  for (const catalog::InstanceType& t : catalog.instance_types()) {
    if (t.gpu_model == cut.model && t.sharing == catalog::SharingMode::kExclusive && t.gpus >= 1 &&
        state.PlaceableNow(t, 1)) {
      types.push_back(&t);
    }
  }
  std::sort(types.begin(), types.end(), [](auto* a, auto* b) {
    return std::tie(a->gpus, a->vcpus, a->memory_mib) < std::tie(b->gpus, b->vcpus, b->memory_mib);
  });
  std::vector<double> demand(types.size());
  double total = 0;
  for (const Job& job : jobs) {
    const Member m = MemberOf(job, cut);
    for (size_t i = 0; i < types.size(); ++i) {
      if (!core::UnitCovers(*types[i], m.shape)) continue;
      const double d = GpusOf(job) * static_cast<double>(job.duration_s);
      demand[i] += d;
      total += d;
      break;
    }
  }
  std::vector<std::pair<const catalog::InstanceType*, int64_t>> plan;
  double carry = 0;
  for (size_t i = types.size(); i-- > 0;) {
    const double share = total > 0 ? static_cast<double>(gpus) * demand[i] / total
                         : i == 0  ? static_cast<double>(gpus)
                                   : 0;
    const double have = share + carry;
    const auto units = static_cast<int64_t>(std::floor(have / types[i]->gpus + 1e-9));
    carry = have - static_cast<double>(units * types[i]->gpus);
    if (units > 0) plan.emplace_back(types[i], units);
  }
  return plan;
}

}  // namespace

Result<Mix> ParseMix(std::string_view text) {
  Mix mix;
  mix.label = std::string(text);
  if (text.empty() || text == "on_demand") return mix;
  for (std::string_view part : Split(text, ',')) {
    const size_t eq = part.find('=');
    const std::string_view key = part.substr(0, eq),
                           value = eq == std::string_view::npos ? "" : part.substr(eq + 1);
    if (key == "reserved") {
      std::string v(value);
      if (!v.empty() && v.back() == '%') v.pop_back();
      char* end = nullptr;
      const double pct = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size() || !(pct >= 0 && pct <= 100)) {
        return Status::InvalidArgument(
            fmt::format("--mix: '{}': reserved takes a percent, 0 to 100", part));
      }
      mix.reserved = pct / 100;
    } else if (key == "spot") {
      if (value == "BE" || value == "be") {
        mix.spot = Mix::Spot::kBestEffort;
      } else if (value == "all") {
        mix.spot = Mix::Spot::kAll;
      } else if (value == "none") {
        mix.spot = Mix::Spot::kNone;
      } else {
        return Status::InvalidArgument(fmt::format("--mix: '{}': spot is BE, all or none", part));
      }
    } else {
      return Status::InvalidArgument(fmt::format(
          "--mix: '{}' is not reserved=P% or spot=BE|all|none (e.g. reserved=40%,spot=BE)", part));
    }
  }
  return mix;
}

int64_t Outcome::total_micros() const {
  int64_t sum = 0;
  for (const auto& [billing, micros] : bill_micros) sum += micros;
  return sum;
}

Result<Outcome> RunDynamic(const catalog::Catalog& catalog, const fleet::Fleet& fleet_in,
                           const std::vector<Job>& jobs, const DynamicOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(Cut cut, CutFor(catalog, fleet_in));
  // "POLICY-batchK" runs POLICY with the server's batch window of K (docs/core.md).
  TESSERA_ASSIGN_OR_RETURN(const sim::PolicyVariant variant,
                           sim::ParsePolicyVariant(options.policy));
  FakeClock clock{Time(std::chrono::seconds(kEpochS))};
  auto fleet = std::make_unique<fleet::Fleet>(fleet_in);
  sched::Options sched_options{variant.base, options.seed, core::CatalogWorkload(catalog)};
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<sched::Scheduler> scheduler,
                           sched::Scheduler::Create(fleet.get(), sched_options));
  core::StateOptions state_options;
  state_options.sim_agents = true;
  state_options.instance_documents = false;
  state_options.retention = std::chrono::seconds(1);
  state_options.whole_gpus_on_shared = options.whole_gpus_on_shared;
  state_options.spot_notice = std::chrono::seconds(options.spot_notice_s);
  state_options.simulated_notice = options.spot_notice_s > 0;
  // A trace's jobs wait as long as they wait: the cap on pending work guards a shared server.
  state_options.max_pending_per_tenant = INT64_MAX;
  state_options.batch_window = variant.window;
  // "POLICY-repack": every one-GPU share job is migratable, and the core moves them as the
  // server's --repack does (docs/core.md, "Repacking").
  state_options.repack = variant.repack;
  core::State state(&catalog, &clock, std::move(fleet), std::move(scheduler), state_options);
  store::Batch batch;
  TESSERA_ASSIGN_OR_RETURN(core::Tenant tenant,
                           state.tenants().Create("whatif", INT64_MAX / 4, "whatif", batch));

  Outcome out;
  out.policy = options.policy;
  out.mix = options.mix.label;
  out.jobs = static_cast<int64_t>(jobs.size());
  out.fleet_gpus = state.fleet().total_gpus();
  int64_t reserved_per_hour = 0;  // Micro-USD, every reservation's units together.
  if (options.mix.reserved > 0) {
    int64_t model_gpus = 0;
    for (const fleet::Node& n : state.fleet().nodes()) {
      if (n.model.valid() && catalog.gpu(n.model).id == cut.model)
        model_gpus += static_cast<int64_t>(n.gpus.size());
    }
    const auto budget =
        static_cast<int64_t>(std::floor(options.mix.reserved * static_cast<double>(model_gpus)));
    const auto plan = PlanReservations(catalog, state, cut, jobs, budget);
    if (budget > 0 && plan.empty()) {
      return Status::InvalidArgument(
          fmt::format("--mix: no exclusive instance type of {} to reserve", cut.model));
    }
    for (const auto& [type, units] : plan) {
      billing::ReservationRequest r;
      r.instance_type = type->id;
      r.count = static_cast<int>(units);
      r.term = "1y";
      TESSERA_RETURN_IF_ERROR(state.accounts().CreateReservation(tenant, r, batch).status());
      out.reserved_units += units;
      out.reserved_gpus += units * type->gpus;
      out.reservations[type->id] = units;
      const catalog::Price* price = catalog.FindPrice(type->id);
      reserved_per_hour += price ? price->reserved_1y_per_hour.micros() * units : 0;
    }
  }
  const core::Tenant* caller = state.tenants().Find(tenant.id.str());

  std::vector<Track> track(jobs.size());
  // Spot reclaims: exponential times at the rate that cuts the given share of a month's runs.
  const double month_s = 30.0 * 24 * 3600;
  const double reclaim_rate =
      options.spot_reclaims_per_month > 0 && options.spot_reclaims_per_month < 1
          ? -std::log1p(-options.spot_reclaims_per_month) / month_s
          : 0;
  std::mt19937_64 rng(options.seed);
  std::exponential_distribution<double> interruption(reclaim_rate > 0 ? reclaim_rate : 1);
  std::unordered_map<std::string, size_t> job_of;  // Instance or group id -> job.
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> completions;
  std::vector<double> waits, jcts;
  size_t next = 0;
  int64_t now = 0, last = 0, started = 0;
  double allocated = 0;  // GPUs allocated since `last`.
  const int64_t horizon = jobs.empty() ? 1 : std::max<int64_t>(1, jobs.back().submit_s);
  const int64_t step = std::max<int64_t>(1, horizon / std::max(1, options.samples));
  int64_t next_sample = 0;

  auto submit = [&](size_t j) {
    const Job& job = jobs[j];
    core::CreateInstanceRequest req;
    req.name = job.name;
    req.restart = true;
    const Member member = MemberOf(job, cut);
    req.shape = member.shape;
    const bool spot = options.mix.spot == Mix::Spot::kAll ||
                      (options.mix.spot == Mix::Spot::kBestEffort && job.best_effort);
    req.billing = spot ? core::Billing::kSpot : core::Billing::kOnDemand;
    // A job of any class whose members free units cover claims them (the tightest, as the
    // server picks): the reservations are paid for whether used or not, so the rest is overflow.
    if (out.reserved_units > 0 && state.HasFreeReservation(*caller, req.shape, member.count)) {
      req.billing = core::Billing::kReserved;
    }
    track[j].spot = req.billing == core::Billing::kSpot;
    req.migratable =
        variant.repack && member.count == 1 && req.shape.mode == catalog::SharingMode::kShared;
    Status refused;
    if (member.count == 1) {
      auto made = state.instances().Create(*caller, req, batch);
      if (made.ok()) {
        job_of[made->id.str()] = j;
        return;
      }
      refused = made.status();
    } else {
      core::GroupRequest g;
      g.name = job.name;
      g.member = req;
      g.size = member.count;
      g.min_available = g.size;
      g.topology = core::Topology::kNode;
      g.placement = core::Placement::kPack;
      g.restart = true;
      auto made = state.groups().Create(*caller, g, batch);
      if (made.ok()) {
        job_of[made->group.id] = j;
        track[j].size = g.size;
        return;
      }
      refused = made.status();
    }
    ++out.refused;
    track[j].finished = -2;
    if (out.first_refusal.empty())
      out.first_refusal = fmt::format("{}: {}", job.name, refused.message());
  };

  // What the round did to the jobs, from the instances it changed.
  auto observe = [&]() {
    for (const store::InstanceRecord& rec : batch.instances) {
      auto it = job_of.find(rec.id);
      if (it == job_of.end()) {
        const core::Instance* inst = state.instances().table().Find(rec.id);
        if (!inst || inst->group.empty()) continue;
        auto g = job_of.find(inst->group);
        if (g == job_of.end()) continue;
        it = job_of.emplace(rec.id, g->second).first;
      }
      const size_t j = it->second;
      Track& t = track[j];
      auto held = std::find(t.members.begin(), t.members.end(), rec.id);
      if (rec.state == "running") {
        if (held == t.members.end() && t.start < 0) t.members.push_back(rec.id);
        if (t.start < 0 && static_cast<int>(t.members.size()) == t.size) {
          t.start = now;
          if (t.first_start < 0) {
            t.first_start = now;
            ++started;
            waits.push_back(static_cast<double>(now - jobs[j].submit_s));
          }
          const int64_t end = now + jobs[j].duration_s - t.done_s;
          completions.push({end, j, t.attempt});
          if (t.spot && reclaim_rate > 0) {
            const auto lasts = static_cast<int64_t>(std::ceil(interruption(rng)));
            if (now + lasts < end) {
              completions.push({now + lasts, j, t.attempt, Completion::kReclaim});
            }
          }
        }
        continue;
      }
      if (rec.state == "preempting") {
        // Given notice: it runs on until the notice is over, then its agent stops it.
        const core::Instance* inst = state.instances().table().Find(rec.id);
        t.moving = t.moving || (inst && inst->moving);
        completions.push({now + options.spot_notice_s, j, t.attempt, Completion::kNoticeOver,
                          rec.id, inst ? inst->restarts : 0});
        continue;
      }
      if (rec.state == "succeeded") {
        if (++t.succeeded == t.size && t.finished < 0) {
          t.finished = now;
          jcts.push_back(static_cast<double>(now - jobs[j].submit_s));
          out.job_gpu_s += GpusOf(jobs[j]) * static_cast<double>(now - t.start);
          ++out.finished;
        }
        continue;
      }
      if (held == t.members.end()) continue;  // A member that never ran in this attempt.
      t.members.erase(held);
      if (t.start >= 0) {
        // A run lost before its end: preempted, moved to make room, or its gang broken; its work
        // starts over. Moved: after a notice to move (a moving instance is never a victim of
        // anything else), or without notice in this very round.
        const core::Instance* inst = state.instances().table().Find(rec.id);
        const bool moved = t.moving || (inst && inst->moved_at && *inst->moved_at == clock.Now());
        t.moving = false;
        ++(moved ? out.moves : out.preemptions);
        const double ran = GpusOf(jobs[j]) * static_cast<double>(now - t.start);
        out.job_gpu_s += ran;
        if (jobs[j].checkpoints) {
          t.done_s += now - t.start;
        } else {
          out.wasted_gpu_hours += ran / 3600;
          if (moved) out.moved_gpu_hours_lost += ran / 3600;
        }
        t.start = -1;
        ++t.attempt;
        t.members.clear();
      }
    }
    batch.instances.clear();
    for (const store::LedgerRecord& l : batch.ledger) out.bill_micros[l.billing] += l.amount_micros;
    batch.ledger.clear();
    batch.settings.clear();
    batch.audit.clear();
    batch.tenants.clear();
  };

  // Creates held in the batch window: the trace's clock moves in whole seconds, so the window
  // (200 ms) closes at the next second.
  const auto held = [&] { return state.batch_due_in() != Duration::max(); };
  while (next < jobs.size() || !completions.empty() || held()) {
    const int64_t arrival = next < jobs.size() ? jobs[next].submit_s : INT64_MAX;
    const int64_t done = completions.empty() ? INT64_MAX : completions.top().at;
    const int64_t t = std::min({arrival, done, held() ? now + 1 : INT64_MAX});
    allocated = static_cast<double>(state.fleet().used_gpu_milli()) / 1000;
    out.allocated_gpu_s += allocated * static_cast<double>(t - last);
    while (next_sample <= t) {
      out.series.push_back(
          {next_sample, allocated, static_cast<int64_t>(next) - started - out.refused});
      next_sample += step;
    }
    last = now = t;
    clock.Set(Time(std::chrono::seconds(kEpochS + t)));
    state.BeginRound();
    while (next < jobs.size() && jobs[next].submit_s == t) submit(next++);
    while (!completions.empty() && completions.top().at == t) {
      const Completion c = completions.top();
      completions.pop();
      const Track& tr = track[c.job];
      if (c.kind == Completion::kNoticeOver) {
        // Its agent stops it (SIGTERM's exit code), unless it already ended in the notice.
        const core::Instance* inst = state.instances().table().Find(c.instance);
        if (inst && inst->state == InstanceState::kPreempting && inst->restarts == c.restarts) {
          state.instances().WorkloadExited(c.instance, 143);
        }
        continue;
      }
      if (c.attempt != tr.attempt || tr.start < 0) continue;  // A run already lost.
      if (c.kind == Completion::kReclaim) {
        // Members already given notice by higher-priority work are left to it.
        bool reclaimed = false;
        for (const std::string& id : tr.members) {
          const core::Instance* inst = state.instances().table().Find(id);
          reclaimed = reclaimed || (inst && inst->state == InstanceState::kRunning);
          state.instances().ReclaimSpot(id, batch);
        }
        if (reclaimed) ++out.reclaims;
      } else {
        for (const std::string& id : tr.members) state.instances().WorkloadExited(id, 0);
      }
    }
    state.EndRound(batch);
    observe();
  }
  out.span_s = now;
  out.first_start_s.reserve(track.size());
  for (const Track& t : track) out.first_start_s.push_back(t.first_start);
  for (const Track& t : track) {
    if (t.finished == -2) continue;
    if (t.first_start < 0) {
      ++out.waiting;
    } else if (t.finished < 0) {
      ++out.running;
    }
  }
  if (reserved_per_hour > 0) {
    // A reservation is paid for every hour of its term, used or not: over the span here.
    out.bill_micros["reserved"] += reserved_per_hour * out.span_s / 3600;
  }
  out.wait_mean_s = waits.empty() ? 0
                                  : std::accumulate(waits.begin(), waits.end(), 0.0) /
                                        static_cast<double>(waits.size());
  out.wait_p50_s = Percentile(waits, 0.50);
  out.wait_p95_s = Percentile(waits, 0.95);
  out.wait_p99_s = Percentile(waits, 0.99);
  out.jct_p50_s = Percentile(jcts, 0.50);
  out.jct_p95_s = Percentile(jcts, 0.95);
  out.jct_p99_s = Percentile(jcts, 0.99);
  return out;
}

namespace {

// Micro-USD to the cent, as a decimal string.
std::string Usd(int64_t micros) {
  return Money::FromCents((micros + (micros >= 0 ? 5000 : -5000)) / 10000).ToString(2);
}

}  // namespace

nlohmann::json ToJson(const Outcome& o) {
  nlohmann::json bill = nlohmann::json::object();
  for (const auto& [billing, micros] : o.bill_micros) bill[billing] = Usd(micros);
  nlohmann::json series = nlohmann::json::array();
  for (const SeriesPoint& p : o.series)
    series.push_back({p.t_s, std::round(p.allocated_gpus * 1000) / 1000, p.waiting});
  return {{"policy", o.policy},
          {"mix", o.mix},
          {"jobs", o.jobs},
          {"finished", o.finished},
          {"running_at_end", o.running},
          {"never_started", o.waiting},
          {"refused", o.refused},
          {"first_refusal", o.first_refusal},
          {"wait_seconds",
           {{"p50", o.wait_p50_s},
            {"p95", o.wait_p95_s},
            {"p99", o.wait_p99_s},
            {"mean", o.wait_mean_s}}},
          {"jct_seconds", {{"p50", o.jct_p50_s}, {"p95", o.jct_p95_s}, {"p99", o.jct_p99_s}}},
          {"preemptions", o.preemptions},
          {"spot_reclaims", o.reclaims},
          {"wasted_gpu_hours", o.wasted_gpu_hours},
          {"moves", o.moves},
          {"moved_gpu_hours_lost", o.moved_gpu_hours_lost},
          {"fleet_gpus", o.fleet_gpus},
          {"reserved_units", o.reserved_units},
          {"reserved_gpus", o.reserved_gpus},
          {"reservations", o.reservations},
          {"allocated_gpu_hours", o.allocated_gpu_s / 3600},
          {"job_gpu_hours", o.job_gpu_s / 3600},
          {"span_hours", static_cast<double>(o.span_s) / 3600},
          {"bill_usd", bill},
          {"total_usd", Usd(o.total_micros())},
          {"series", {{"columns", {"t_s", "allocated_gpus", "waiting"}}, {"points", series}}},
          {"first_start_seconds", o.first_start_s}};
}

std::vector<Mix> SweepGrid(bool has_best_effort) {
  std::vector<Mix> grid;
  std::vector<Mix::Spot> spots = {Mix::Spot::kNone, Mix::Spot::kAll};
  if (has_best_effort) spots.insert(spots.begin() + 1, Mix::Spot::kBestEffort);
  for (const Mix::Spot spot : spots) {
    for (int pct = 0; pct <= 50; pct += 10) {
      Mix m;
      m.reserved = pct / 100.0;
      m.spot = spot;
      m.label = pct == 0 && spot == Mix::Spot::kNone
                    ? "on_demand"
                    : fmt::format("reserved={}%,spot={}", pct,
                                  spot == Mix::Spot::kNone  ? "none"
                                  : spot == Mix::Spot::kAll ? "all"
                                                            : "BE");
      grid.push_back(std::move(m));
    }
  }
  return grid;
}

const Outcome* OnDemandRun(const std::vector<Outcome>& runs, const std::string& policy) {
  for (const Outcome& o : runs) {
    if (o.policy == policy && o.mix == "on_demand") return &o;
  }
  return nullptr;
}

double Sweep::saving_pct(int i) const {
  if (i < 0 || static_cast<size_t>(i) >= runs.size()) return 0;
  const Outcome& run = runs[static_cast<size_t>(i)];
  const Outcome* on_demand = OnDemandRun(runs, run.policy);
  if (!on_demand || on_demand->total_micros() == 0) return 0;
  return 100.0 * (1.0 - static_cast<double>(run.total_micros()) /
                            static_cast<double>(on_demand->total_micros()));
}

Result<std::vector<Outcome>> RunGrid(const catalog::Catalog& catalog, const fleet::Fleet& fleet,
                                     const std::vector<Job>& jobs, const DynamicOptions& options,
                                     const std::vector<std::string>& policies,
                                     const std::vector<Mix>& mixes, int threads) {
  const size_t total = policies.size() * mixes.size();
  std::vector<Result<Outcome>> results(total, Status::Internal("not run"));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < total;) {
      DynamicOptions o = options;
      o.policy = policies[i / mixes.size()];
      o.mix = mixes[i % mixes.size()];
      results[i] = RunDynamic(catalog, fleet, jobs, o);
    }
  };
  std::vector<std::thread> pool;
  const int n = std::max(1, std::min<int>(threads, static_cast<int>(total)));
  for (int t = 0; t < n; ++t) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  std::vector<Outcome> runs;
  runs.reserve(total);
  for (Result<Outcome>& r : results) {
    if (!r.ok()) return r.status();
    runs.push_back(std::move(*r));
  }
  return runs;
}

Result<Sweep> RunSweep(const catalog::Catalog& catalog, const fleet::Fleet& fleet,
                       const std::vector<Job>& jobs, const DynamicOptions& options,
                       double target_p95_wait_s, int threads,
                       const std::vector<std::string>& policies) {
  const bool best_effort =
      std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.best_effort; });
  Sweep sweep;
  sweep.target_p95_wait_s = target_p95_wait_s;
  TESSERA_ASSIGN_OR_RETURN(
      sweep.runs, RunGrid(catalog, fleet, jobs, options,
                          policies.empty() ? std::vector<std::string>{options.policy} : policies,
                          SweepGrid(best_effort), threads));
  auto cheaper = [&](size_t i, int than) {
    return than < 0 ||
           sweep.runs[i].total_micros() < sweep.runs[static_cast<size_t>(than)].total_micros();
  };
  for (size_t i = 0; i < sweep.runs.size(); ++i) {
    const Outcome& o = sweep.runs[i];
    if (o.wait_p95_s > target_p95_wait_s || o.waiting > 0) continue;
    auto [it, fresh] = sweep.best_of.try_emplace(o.policy, static_cast<int>(i));
    if (!fresh && cheaper(i, it->second)) it->second = static_cast<int>(i);
    if (cheaper(i, sweep.best)) sweep.best = static_cast<int>(i);
  }
  return sweep;
}

nlohmann::json ToJson(const Sweep& s) {
  nlohmann::json runs = nlohmann::json::array();
  for (const Outcome& o : s.runs) {
    nlohmann::json j = ToJson(o);
    j.erase("series");
    j.erase("first_start_seconds");
    runs.push_back(std::move(j));
  }
  nlohmann::json out = {{"target_p95_wait_seconds", s.target_p95_wait_s},
                        {"runs", std::move(runs)}};
  auto best = [&](int i) -> nlohmann::json {
    if (i < 0) return nullptr;
    const Outcome& o = s.runs[static_cast<size_t>(i)];
    const Outcome* on_demand = OnDemandRun(s.runs, o.policy);
    return {{"policy", o.policy},
            {"mix", o.mix},
            {"total_usd", Usd(o.total_micros())},
            {"on_demand_usd", Usd(on_demand ? on_demand->total_micros() : 0)},
            {"saving_pct", std::round(s.saving_pct(i) * 10) / 10}};
  };
  out["best"] = best(s.best);
  out["best_by_policy"] = nlohmann::json::object();
  for (const auto& [policy, i] : s.best_of) out["best_by_policy"][policy] = best(i);
  return out;
}

std::string ReportHtml(const std::string& title, const std::vector<Outcome>& runs, int best,
                       double target_p95_wait_s) {
  sim::ChartSpec alloc, waiting;
  alloc.id = "allocated";
  alloc.title = "GPUs allocated";
  alloc.x_label = waiting.x_label = "hours since the first submission";
  alloc.y_label = "GPUs";
  waiting.id = "waiting";
  waiting.title = "Jobs waiting to start";
  waiting.y_label = "jobs";
  const bool policies = std::any_of(
      runs.begin(), runs.end(), [&](const Outcome& o) { return o.policy != runs.front().policy; });
  auto label = [&](const Outcome& o) { return policies ? o.policy + " " + o.mix : o.mix; };
  // A chart of more than eight lines is no longer read at a glance: then it shows each policy's
  // all on-demand run and the cheapest within the target, and the table lists every run.
  constexpr size_t kMaxCharted = 8;
  const bool all_charted = runs.size() <= kMaxCharted;
  double x_max = 1;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!all_charted && runs[i].mix != "on_demand" && static_cast<int>(i) != best) continue;
    sim::ChartSeries a{label(runs[i]), sim::SeriesColor(i), {}},
        w{label(runs[i]), sim::SeriesColor(i), {}};
    for (const SeriesPoint& p : runs[i].series) {
      const double h = static_cast<double>(p.t_s) / 3600;
      a.points.emplace_back(h, p.allocated_gpus);
      w.points.emplace_back(h, static_cast<double>(p.waiting));
      x_max = std::max(x_max, h);
    }
    alloc.series.push_back(std::move(a));
    waiting.series.push_back(std::move(w));
  }
  alloc.x_max = waiting.x_max = x_max;
  alloc.y_min = waiting.y_min = 0;
  std::string rows;
  for (size_t i = 0; i < runs.size(); ++i) {
    const Outcome& o = runs[i];
    rows += fmt::format(
        "<tr{}><td>{}</td><td>{}</td><td>{:.0f}</td><td>{:.0f}</td><td>{:.0f}</td><td>{:.0f}</td>"
        "<td>{}</td><td>{}</td><td>{:.1f}</td><td>{}</td></tr>\n",
        static_cast<int>(i) == best ? " class=\"best\"" : "", sim::HtmlEscape(label(o)), o.finished,
        o.wait_p50_s, o.wait_p95_s, o.wait_p99_s, o.jct_p95_s, o.preemptions, o.moves,
        o.wasted_gpu_hours, Usd(o.total_micros()));
  }
  std::string verdict;
  if (best < 0) {
    verdict = fmt::format("No run holds a p95 wait of {:.0f} s.", target_p95_wait_s);
  } else {
    const Outcome& b = runs[static_cast<size_t>(best)];
    verdict = fmt::format("The cheapest mix with a p95 wait within {:.0f} s is <b>{}</b>: {} USD",
                          target_p95_wait_s, sim::HtmlEscape(label(b)), Usd(b.total_micros()));
    if (const Outcome* on_demand = OnDemandRun(runs, b.policy)) {
      verdict += fmt::format(" against {} USD all on-demand", Usd(on_demand->total_micros()));
    }
    verdict += ".";
  }
  return fmt::format(R"(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{0}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2rem;color:#1c2330}}table{{border-collapse:collapse}}
td,th{{padding:.3rem .7rem;border-bottom:1px solid #dde1e8;text-align:right}}td:first-child,th:first-child{{text-align:left}}
tr.best{{background:#e6f4ea;font-weight:600}}</style></head><body>
<h1>{0}</h1><p>{1}</p>{6}
<table><tr><th>{5}</th><th>finished</th><th>wait p50 s</th><th>wait p95 s</th><th>wait p99 s</th><th>JCT p95 s</th>
<th>preemptions</th><th>moves</th><th>GPU-hours lost</th><th>bill USD</th></tr>
{2}</table>
{3}
{4}
</body></html>
)",
                     sim::HtmlEscape(title), verdict, rows, sim::LineChartSvg(alloc),
                     sim::LineChartSvg(waiting), policies ? "policy and mix" : "mix",
                     all_charted
                         ? ""
                         : "<p>The charts show each policy's all on-demand run and the "
                           "cheapest run within the target; the table lists every run.</p>");
}

}  // namespace tessera::whatif
