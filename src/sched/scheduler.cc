#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "sched/frag.h"
#include "sched/node_table.h"
#include "sched/plugin.h"

namespace tessera::sched {

namespace {

Status ValidateTarget(const Workload& target) {
  for (size_t i = 0; i < target.size(); ++i) {
    const WorkloadClass& c = target[i];
    if (!std::isfinite(c.weight) || c.weight < 0) {
      return Status::InvalidArgument(
          fmt::format("target workload class {}: weight {} must be finite and >= 0", i, c.weight));
    }
    if (c.cpu_milli < 0 || c.gpu_count < 0 || c.gpu_milli < 0 ||
        c.gpu_milli > fleet::kMilliPerGpu) {
      return Status::InvalidArgument(fmt::format(
          "target workload class {}: cpu_milli {}, gpu_count {}, gpu_milli {} out of range", i,
          c.cpu_milli, c.gpu_count, c.gpu_milli));
    }
  }
  return Status::Ok();
}

// rand.Perm's shape (inside-out Fisher-Yates): node i in name order gets rank perm[i].
std::vector<uint32_t> SeededRanks(const fleet::Fleet& fleet, Rng& rng) {
  const size_t n = fleet.size();
  std::vector<uint32_t> by_name(n);
  std::iota(by_name.begin(), by_name.end(), 0u);
  std::sort(by_name.begin(), by_name.end(), [&](uint32_t a, uint32_t b) {
    return fleet.node(fleet::NodeIndex(a)).name < fleet.node(fleet::NodeIndex(b)).name;
  });
  std::vector<uint32_t> perm(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t j = static_cast<size_t>(rng.Uniform(i + 1));
    perm[i] = perm[j];
    perm[j] = static_cast<uint32_t>(i);
  }
  std::vector<uint32_t> ranks(n);
  for (size_t i = 0; i < n; ++i) ranks[by_name[i]] = perm[i];
  return ranks;
}

int TagOfAssignment(const fleet::Assignment& a) {
  if (a.gpu_count <= 0) return kNoTag;
  return TagOf(a.gpu_count, a.gpus[0].milli, a.gpus[0].mig_profile != nullptr);
}

}  // namespace

struct Scheduler::State {
  State(const fleet::Fleet* fleet, const Options& options)
      : frag(options.target), table(fleet, &frag), rng(options.seed) {}

  // Sizes the scratch space to the fleet; allocates only when the fleet grew.
  void Resize() {
    const size_t n = table.size();
    feasible.resize(n);
    scores.resize(n);
  }

  // The feasible node with the highest score, the lowest rank among equal scores.
  uint32_t Select(std::span<const uint32_t> nodes, std::span<const int32_t> node_scores) const {
    int64_t best_key = INT64_MIN;
    uint32_t best = nodes[0];
    for (size_t i = 0; i < nodes.size(); ++i) {
      const int64_t key = (int64_t{node_scores[i]} << 32) + (UINT32_MAX - table.rank(nodes[i]));
      if (key > best_key) {
        best_key = key;
        best = nodes[i];
      }
    }
    return best;
  }

  FragModel frag;
  NodeTable table;
  Rng rng;
  // Keeps the nodes of `in` (written to `out`, which may be in.data()) that every filter keeps.
  size_t Filter(const Need& need, std::span<const uint32_t> in, uint32_t* out) const {
    size_t count = filter->Filter(need, table, in, out);
    for (const auto& f : extra_filters) {
      if (count == 0) break;
      count = f->Filter(need, table, std::span<const uint32_t>(out, count), out);
    }
    return count;
  }

  // Whether the candidates must be every node, not a lead per group of identical nodes.
  bool NeedsEveryNode(const Need& need) const {
    if (policy->NeedsEveryNode()) return true;
    return std::any_of(extra_filters.begin(), extra_filters.end(),
                       [&](const auto& f) { return f->NeedsEveryNode(need); });
  }

  std::unique_ptr<FilterPlugin> filter;
  std::vector<std::unique_ptr<FilterPlugin>> extra_filters;  // Scheduler::AddFilter's.
  std::unique_ptr<Policy> policy;
  std::vector<uint32_t> feasible;
  std::vector<int32_t> scores;
  Status last_error;
};

Result<std::unique_ptr<Scheduler>> Scheduler::Create(fleet::Fleet* fleet, Options options) {
  if (fleet == nullptr) return Status::InvalidArgument("scheduler: no fleet given");
  TESSERA_RETURN_IF_ERROR(ValidateTarget(options.target));
  auto state = std::make_unique<State>(fleet, options);
  TESSERA_ASSIGN_OR_RETURN(state->policy,
                           NewPolicy(options.policy, PolicyEnv{&state->rng, &state->frag}));
  return Assemble(fleet, std::move(options), std::move(state));
}

Result<std::unique_ptr<Scheduler>> Scheduler::Create(fleet::Fleet* fleet, Options options,
                                                     std::unique_ptr<Policy> policy) {
  if (fleet == nullptr) return Status::InvalidArgument("scheduler: no fleet given");
  if (policy == nullptr) return Status::InvalidArgument("scheduler: no policy given");
  TESSERA_RETURN_IF_ERROR(ValidateTarget(options.target));
  auto state = std::make_unique<State>(fleet, options);
  state->policy = std::move(policy);
  return Assemble(fleet, std::move(options), std::move(state));
}

std::unique_ptr<Scheduler> Scheduler::Assemble(fleet::Fleet* fleet, Options options,
                                               std::unique_ptr<State> state) {
  state->filter = NewFitFilter();
  state->table.SetRanks(SeededRanks(*fleet, state->rng));
  state->Resize();
  return std::unique_ptr<Scheduler>(new Scheduler(fleet, std::move(options), std::move(state)));
}

Scheduler::Scheduler(fleet::Fleet* fleet, Options options, std::unique_ptr<State> state)
    : fleet_(fleet), options_(std::move(options)), state_(std::move(state)) {}

Scheduler::~Scheduler() = default;

FilterPlugin* Scheduler::AddFilter(std::unique_ptr<FilterPlugin> filter) {
  state_->extra_filters.push_back(std::move(filter));
  return state_->extra_filters.back().get();
}

std::optional<fleet::Assignment> Scheduler::Schedule(const Request& r) {
  if (!ValidateRequest(r).ok()) return std::nullopt;
  State& s = *state_;
  if (s.table.Sync()) s.Resize();
  const Need need = Prepare(r);
  if (r.observe) s.policy->Observe(need, r.source);
  const size_t candidates = Candidates(need, s.table, s.NeedsEveryNode(need), s.feasible.data());
  const size_t count =
      s.Filter(need, std::span<const uint32_t>(s.feasible.data(), candidates), s.feasible.data());
  if (count == 0) return std::nullopt;
  uint32_t winner = s.feasible[0];
  if (count > 1) {  // A single feasible node is taken without scoring, as in kube-scheduler.
    const std::span<const uint32_t> nodes(s.feasible.data(), count);
    const std::span<int32_t> scores(s.scores.data(), count);
    s.policy->Score(need, s.table, nodes, scores);
    winner = s.Select(nodes, scores);
  }
  return Grant(need, winner);
}

std::optional<fleet::Assignment> Scheduler::ScheduleOn(const Request& r, fleet::NodeIndex n) {
  if (!ValidateRequest(r).ok()) return std::nullopt;
  State& s = *state_;
  if (s.table.Sync()) s.Resize();
  if (!n.valid() || n.value >= s.table.size()) return std::nullopt;
  const Need need = Prepare(r);
  uint32_t node = n.value;
  if (s.Filter(need, std::span<const uint32_t>(&node, 1), &node) == 0) {
    return std::nullopt;
  }
  return Grant(need, node);
}

std::optional<fleet::Assignment> Scheduler::Grant(const Need& need, uint32_t node) {
  State& s = *state_;
  fleet::Assignment a = BaseAssignment(need, node);
  if (!s.policy->SelectGpus(need, s.table, node, &a)) {
    s.last_error =
        Status::Internal(fmt::format("policy '{}' found no GPUs on feasible node '{}'",
                                     s.policy->Name(), fleet_->node(fleet::NodeIndex(node)).name));
    return std::nullopt;
  }
  Status booked = Book(a);
  if (!booked.ok()) {
    s.last_error = std::move(booked);
    return std::nullopt;
  }
  return a;
}

Status Scheduler::Book(const fleet::Assignment& a) {
  TESSERA_RETURN_IF_ERROR(fleet_->Allocate(a));
  state_->table.Refresh(a.node.value);
  state_->table.AddTag(a.node.value, TagOfAssignment(a), +1);
  return Status::Ok();
}

Status Scheduler::Reserve(const fleet::Assignment& a) {
  if (state_->table.Sync()) state_->Resize();
  return Book(a);
}

Status Scheduler::Release(const fleet::Assignment& a) {
  TESSERA_RETURN_IF_ERROR(fleet_->Release(a));
  State& s = *state_;
  if (s.table.Sync()) s.Resize();
  s.table.AddTag(a.node.value, TagOfAssignment(a), -1);
  return Status::Ok();
}

double Scheduler::FragmentationMilli() const {
  State& s = *state_;
  if (s.table.Sync()) s.Resize();
  return s.table.total_frag();
}

uint32_t Scheduler::NodeRank(fleet::NodeIndex n) const {
  return n.valid() && n.value < state_->table.size() ? state_->table.rank(n.value) : UINT32_MAX;
}

const Status& Scheduler::last_error() const { return state_->last_error; }

}  // namespace tessera::sched
