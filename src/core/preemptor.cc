#include "core/preemptor.h"

#include <algorithm>
#include <cstdlib>

namespace tessera::core {

Preemptor::Preemptor(const catalog::Catalog* catalog, const fleet::Fleet* fleet,
                     sched::Scheduler* scheduler, Limits limits)
    : catalog_(catalog), fleet_(fleet), scheduler_(scheduler), limits_(limits) {}

void Preemptor::Track(Instance* inst) {
  auto& v = by_node_[inst->assignment->node.value];
  if (std::find(v.begin(), v.end(), inst) != v.end()) return;
  v.push_back(inst);
  ++tracked_;
}

void Preemptor::Untrack(const Instance* inst) {
  auto it = by_node_.find(inst->assignment->node.value);
  if (it == by_node_.end()) return;
  auto& v = it->second;
  auto at = std::find(v.begin(), v.end(), inst);
  if (at == v.end()) return;
  v.erase(at);
  --tracked_;
  if (v.empty()) by_node_.erase(it);
}

std::vector<uint32_t> Preemptor::Candidates(const sched::Request& req) const {
  struct Scored {
    size_t victims;
    uint32_t node;
  };
  std::vector<Scored> out;
  for (const auto& [node_value, victims] : by_node_) {
    const fleet::Node& n = fleet_->node(fleet::NodeIndex(node_value));
    if (n.state != fleet::NodeState::kReady) continue;
    if (req.allowed_models != 0 &&
        (!n.model.valid() || !(req.allowed_models & (uint64_t{1} << n.model.value)))) {
      continue;
    }
    // An upper bound on what the node could offer once every victim left.
    int64_t cpu = n.cpu_milli_free, memory = n.memory_mib_free;
    for (const Instance* v : victims) {
      cpu += v->assignment->cpu_milli;
      memory += v->assignment->memory_mib;
    }
    if (cpu < req.cpu_milli || memory < req.memory_mib) continue;
    if (static_cast<int>(n.gpus.size()) < req.gpu_count) continue;
    out.push_back({victims.size(), node_value});
  }
  std::sort(out.begin(), out.end(), [](const Scored& a, const Scored& b) {
    return a.victims != b.victims ? a.victims < b.victims : a.node < b.node;
  });
  if (out.size() > limits_.max_nodes) out.resize(limits_.max_nodes);
  std::vector<uint32_t> nodes;
  for (const Scored& s : out) nodes.push_back(s.node);
  return nodes;
}

bool Preemptor::FitsWithout(const sched::Request& req, fleet::NodeIndex node,
                            const std::vector<Instance*>& victims) {
  for (Instance* v : victims) (void)scheduler_->Release(*v->assignment);
  std::optional<fleet::Assignment> trial = scheduler_->ScheduleOn(req, node);
  if (trial) (void)scheduler_->Release(*trial);
  for (Instance* v : victims) {
    // Putting back exactly what was just released cannot fail; if it did, capacity would be
    // booked twice or lost, so stop rather than go on.
    if (!scheduler_->Reserve(*v->assignment).ok()) std::abort();
  }
  return trial.has_value();
}

std::optional<Preemptor::Plan> Preemptor::Find(const sched::Request& req) {
  if (budget_spent()) return std::nullopt;
  const std::vector<uint32_t> candidates = Candidates(req);
  if (candidates.empty()) return std::nullopt;  // Nothing to try: no search spent.
  ++searches_;
  ++searches_total_;
  struct Choice {
    Plan plan;
    int64_t freed = 0;
  };
  std::optional<Choice> best;
  size_t trials = 0;
  for (const uint32_t node_value : candidates) {
    if (trials >= limits_.max_trials) break;
    const fleet::NodeIndex node(node_value);
    std::vector<Instance*> victims = by_node_.at(node_value);
    std::sort(victims.begin(), victims.end(), [&](const Instance* a, const Instance* b) {
      return Milli(a) != Milli(b) ? Milli(a) > Milli(b) : a->seq < b->seq;
    });
    // Release the first k (largest first) and see whether the request fits: this bounds the
    // smallest victim count on this node. Then look for a cheaper set of that size.
    for (size_t k = 1; k <= victims.size() && trials < limits_.max_trials; ++k) {
      if (best && k > best->plan.victims.size()) break;
      std::vector<Instance*> prefix(victims.begin(), victims.begin() + static_cast<long>(k));
      ++trials;
      if (!FitsWithout(req, node, prefix)) continue;
      Choice choice{{node, prefix}, 0};
      for (Instance* v : prefix) choice.freed += Milli(v);
      std::vector<bool> mask(victims.size(), false);
      std::fill(mask.end() - static_cast<long>(k), mask.end(), true);
      do {
        if (++trials > limits_.max_trials) break;
        std::vector<Instance*> set;
        int64_t freed = 0;
        for (size_t i = 0; i < victims.size(); ++i) {
          if (!mask[i]) continue;
          set.push_back(victims[i]);
          freed += Milli(victims[i]);
        }
        if (freed < choice.freed && FitsWithout(req, node, set)) choice = {{node, set}, freed};
      } while (std::next_permutation(mask.begin(), mask.end()));
      if (!best || k < best->plan.victims.size() ||
          (k == best->plan.victims.size() && choice.freed < best->freed)) {
        best = std::move(choice);
      }
      break;
    }
  }
  if (!best) return std::nullopt;
  return std::move(best->plan);
}

size_t Preemptor::CountFor(const sched::Request& req) const {
  size_t count = 0;
  for (const auto& [node_value, victims] : by_node_) {
    const fleet::Node& n = fleet_->node(fleet::NodeIndex(node_value));
    if (req.allowed_models != 0 &&
        (!n.model.valid() || !(req.allowed_models & (uint64_t{1} << n.model.value)))) {
      continue;
    }
    count += victims.size();
  }
  return count;
}

}  // namespace tessera::core
