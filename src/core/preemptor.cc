#include "core/preemptor.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "core/invariant.h"
#include "mig/mig.h"

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
    if (!sched::AllowsModel(req.allowed_models, sched::ModelBit(n.model))) continue;
    if (!MightFit(req, n, victims)) continue;
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

bool Preemptor::MightFit(const sched::Request& req, const fleet::Node& n,
                         const std::vector<Instance*>& victims) const {
  int64_t cpu = n.cpu_milli_free, memory = n.memory_mib_free;
  std::array<int, fleet::kMaxGpusPerNode> freed{};         // Milli of whole GPUs and shares.
  std::array<int, fleet::kMaxGpusPerNode> freed_slices{};  // MIG compute slices.
  for (const Instance* v : victims) {
    cpu += v->assignment->cpu_milli;
    memory += v->assignment->memory_mib;
    for (int g = 0; g < v->assignment->gpu_count; ++g) {
      const fleet::GpuGrant& grant = v->assignment->gpus[static_cast<size_t>(g)];
      if (grant.mig_profile) {
        freed_slices[static_cast<size_t>(grant.gpu)] += grant.mig_profile->compute_slices;
      } else {
        freed[static_cast<size_t>(grant.gpu)] += grant.milli;
      }
    }
  }
  if (cpu < req.cpu_milli || memory < req.memory_mib) return false;
  if (static_cast<int>(n.gpus.size()) < req.gpu_count) return false;
  if (req.gpu_count == 0) return true;
  if (!req.mig_profile.empty()) {
    // Some MIG GPU must have the profile's compute slices free once the victims leave (where
    // they sit is for the trial to find out).
    const catalog::GpuModel& model = catalog_of(n);
    const mig::Profile* p = model.mig ? model.mig->Find(req.mig_profile) : nullptr;
    if (!p) return false;
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      if (n.gpus[g].mode != catalog::SharingMode::kMig) continue;
      const int free =
          model.mig->compute_slices - fleet::UsedComputeSlices(n.gpus[g]) + freed_slices[g];
      if (free >= p->compute_slices) return true;
    }
    return false;
  }
  if (req.gpu_milli < fleet::kMilliPerGpu) {
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      if (n.gpus[g].mode == catalog::SharingMode::kShared &&
          n.gpus[g].free_milli + freed[g] >= req.gpu_milli) {
        return true;
      }
    }
    return false;
  }
  // Whole GPUs: enough fully free ones (in exclusive mode when asked), on one NVLink island when
  // the request asks for it.
  std::array<int, fleet::kMaxGpusPerNode + 1> per_island{};  // Index island + 1; 0 = none.
  int whole = 0;
  for (size_t g = 0; g < n.gpus.size(); ++g) {
    if (!sched::WholeGpuMode(n.gpus[g].mode, req.exclusive_mode)) continue;
    if (n.gpus[g].free_milli + freed[g] < fleet::kMilliPerGpu) continue;
    ++whole;
    if (n.gpus[g].island >= 0) ++per_island[static_cast<size_t>(n.gpus[g].island + 1)];
  }
  if (!(req.nvlink && req.gpu_count > 1)) return whole >= req.gpu_count;
  return *std::max_element(per_island.begin() + 1, per_island.end()) >= req.gpu_count;
}

bool Preemptor::FitsWithout(const sched::Request& req, fleet::NodeIndex node,
                            const std::vector<Instance*>& victims) {
  // The cheap bound first: a trial changes the fleet twice over and costs far more.
  if (!MightFit(req, fleet_->node(node), victims)) return false;
  for (Instance* v : victims) (void)scheduler_->Release(*v->assignment);
  std::optional<fleet::Assignment> trial = scheduler_->ScheduleOn(req, node);
  if (trial) (void)scheduler_->Release(*trial);
  for (Instance* v : victims) {
    // Putting back exactly what was just released cannot fail; if it did, capacity would be
    // booked twice or lost: the round fails and the core rebuilds from the store.
    CheckInvariant(scheduler_->Reserve(*v->assignment), "booking a spot victim back");
  }
  return trial.has_value();
}

std::optional<Preemptor::Plan> Preemptor::Find(const sched::Request& req,
                                               std::optional<fleet::NodeIndex> only) {
  if (budget_spent() || by_node_.empty()) return std::nullopt;
  // Looking for candidates scans every node with victims: that is a search, found or not.
  ++searches_;
  ++searches_total_;
  std::vector<uint32_t> candidates = Candidates(req);
  if (only) std::erase_if(candidates, [&](uint32_t n) { return n != only->value; });
  if (candidates.empty()) return std::nullopt;
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
      if (!MightFit(req, fleet_->node(node), prefix)) continue;  // Costs no trial.
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
    if (!sched::AllowsModel(req.allowed_models, sched::ModelBit(n.model))) continue;
    count += victims.size();
  }
  return count;
}

}  // namespace tessera::core
