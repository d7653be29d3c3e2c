#include "sched/node_table.h"

#include <algorithm>
#include <bit>

namespace tessera::sched {

using catalog::SharingMode;

int TagOf(int gpu_count, int gpu_milli, bool mig) {
  if (mig) return kMigTag;
  if (gpu_count <= 0) return kNoTag;
  if (gpu_count == 1 && gpu_milli < fleet::kMilliPerGpu) return kShareTag;
  return std::min(gpu_count, fleet::kMaxGpusPerNode);
}

NodeTable::NodeTable(const fleet::Fleet* fleet, const FragModel* frag)
    : fleet_(fleet), frag_model_(frag) {
  Grow();
  changes_ = fleet_->changes();
}

void NodeTable::Grow() {
  const size_t old = fit_.size(), now = fleet_->size();
  fit_.resize(now);
  gpus_.resize(now);
  tags_.resize(now);
  frag_.resize(now, 0.0);
  epochs_.resize(now, 0);
  versions_.resize(now, 0);
  ranks_.resize(now);
  group_of_.resize(now, kUnindexed);
  used_pos_.resize(now);
  share_pos_.resize(now);
  whole_pos_.resize(now);
  share_of_.resize(now);
  whole_of_.resize(now);
  busy_of_.resize(now);
  group_id_.resize(now);
  for (size_t n = old; n < now; ++n) {
    ranks_[n] = static_cast<uint32_t>(n);
    Refresh(static_cast<uint32_t>(n));
  }
}

void NodeTable::SetRanks(std::vector<uint32_t> ranks) {
  ranks_ = std::move(ranks);
  const auto by_rank = [&](uint32_t a, uint32_t b) { return ranks_[a] > ranks_[b]; };
  for (IdleGroup& g : groups_) std::sort(g.members.begin(), g.members.end(), by_rank);
  for (uint32_t i = 0; i < busy_.size(); ++i) {
    if (busy_[i].members.empty()) continue;
    std::sort(busy_[i].members.begin(), busy_[i].members.end(), by_rank);
    ListBusy(i, 0);
  }
}

bool NodeTable::Sync() {
  const bool grew = fleet_->size() != fit_.size();
  if (grew) {
    Grow();
  } else if (fleet_->changes() == changes_) {
    return false;  // No node changed since the last look.
  }
  // Compare versions a block at a time with a branch-free reduction; changes are rare.
  constexpr uint32_t kBlock = 64;
  const auto n_nodes = static_cast<uint32_t>(fit_.size());
  for (uint32_t start = 0; start < n_nodes; start += kBlock) {
    const uint32_t end = std::min(n_nodes, start + kBlock);
    uint64_t diff = 0;
    for (uint32_t n = start; n < end; ++n)
      diff |= fleet_->version(fleet::NodeIndex(n)) ^ versions_[n];
    if (diff == 0) continue;
    for (uint32_t n = start; n < end; ++n) {
      if (fleet_->version(fleet::NodeIndex(n)) != versions_[n]) Refresh(n);
    }
  }
  changes_ = fleet_->changes();
  return grew;
}

void NodeTable::Refresh(uint32_t n) {
  // The scheduler refreshes the node it has just booked: when that booking is the fleet's only
  // change since the last look, the table is in step again without a scan.
  const bool only_change =
      fleet_->changes() == changes_ + 1 && fleet_->version(fleet::NodeIndex(n)) == versions_[n] + 1;
  Unindex(n);
  Read(n);
  Index(n);
  if (only_change) changes_ = fleet_->changes();
}

void NodeTable::Count(const NodeFit& f, int gpus, int sign) {
  total_cpu_free_ += sign * std::max<int64_t>(0, f.cpu_free);
  total_gpu_free_ += sign * f.gpu_free;
  if (f.model_bit == 0) return;
  const auto m = static_cast<size_t>(std::countr_zero(f.model_bit));
  model_gpus_[m] += sign * gpus;
  model_gpu_free_[m] += sign * f.gpu_free;
}

void NodeTable::Read(uint32_t n) {
  const fleet::Node& node = fleet_->node(fleet::NodeIndex(n));
  NodeFit f;
  NodeGpus g;
  f.cpu_free = node.cpu_milli_free;
  f.mem_free = node.memory_mib_free;
  f.model_bit = ModelBit(node.model);
  if (node.state == fleet::NodeState::kReady) f.flags |= NodeFit::kReady;
  g.count = static_cast<int>(std::min(node.gpus.size(), g.free.size()));
  int whole = 0;
  for (int i = 0; i < g.count; ++i) {
    const fleet::Gpu& gpu = node.gpus[static_cast<size_t>(i)];
    const auto k = static_cast<size_t>(i);
    // An unhealthy GPU, or one changing its mode, reads as full: nothing is placed on it, and
    // fragmentation counts it out.
    const int free_milli = gpu.grantable() ? gpu.free_milli : 0;
    g.free[k] = static_cast<int16_t>(free_milli);
    g.free_memory[k] = gpu.grantable() ? gpu.free_memory_mib : 0;
    g.mode[k] = gpu.mode;
    g.island[k] = static_cast<int8_t>(gpu.island);
    f.gpu_free += free_milli;
    if (gpu.island >= 0) f.flags |= NodeFit::kIslands;
    if (gpu.mode == SharingMode::kMig) {
      f.flags |= NodeFit::kHasMig;
    } else if (free_milli == fleet::kMilliPerGpu) {
      ++whole;
    }
    if (gpu.mode == SharingMode::kShared) {
      f.share_cap = std::max(f.share_cap, static_cast<int16_t>(free_milli));
    }
  }
  f.whole_cap = static_cast<uint8_t>(whole);
  Count(fit_[n], gpus_[n].count, -1);
  Count(f, g.count, +1);
  fit_[n] = f;
  gpus_[n] = g;
  const double frag =
      frag_model_->NodeFrag(f.model_bit, f.cpu_free,
                            std::span<const int16_t>(g.free.data(), static_cast<size_t>(g.count)));
  total_frag_ += frag - frag_[n];
  frag_[n] = frag;
  versions_[n] = fleet_->version(fleet::NodeIndex(n));
  if (++epochs_[n] == 0) epochs_[n] = 1;  // 0 marks "never cached".
}

void NodeTable::Unindex(uint32_t n) {
  const int32_t where = group_of_[n];
  if (where == kInUse) {
    used_.Erase(n, used_pos_);
    share_[share_of_[n]].Erase(n, share_pos_);
    whole_[whole_of_[n]].Erase(n, whole_pos_);
    LeaveBusy(n);
  } else if (where >= 0) {
    std::vector<uint32_t>& m = groups_[static_cast<size_t>(where)].members;
    // Members are sorted by rank, highest first; ranks are unique.
    auto it = std::lower_bound(m.begin(), m.end(), n,
                               [&](uint32_t a, uint32_t b) { return ranks_[a] > ranks_[b]; });
    if (it != m.end() && *it == n) m.erase(it);
  }
  group_of_[n] = kUnindexed;
}

void NodeTable::Index(uint32_t n) {
  const bool idle = fleet_->node(fleet::NodeIndex(n)).workloads == 0 && tags_[n].kinds == 0;
  if (!idle) {
    group_of_[n] = kInUse;
    used_.Insert(n, used_pos_);
    share_of_[n] = static_cast<uint8_t>(std::max<int>(0, fit_[n].share_cap) / kShareBucketWidth);
    share_[share_of_[n]].Insert(n, share_pos_);
    whole_of_[n] = std::min<uint8_t>(fit_[n].whole_cap, fleet::kMaxGpusPerNode);
    whole_[whole_of_[n]].Insert(n, whole_pos_);
    JoinBusy(n);
    return;
  }
  for (size_t i = 0; i < groups_.size(); ++i) {
    if (groups_[i].fit == fit_[n] && groups_[i].gpus == gpus_[n]) {
      group_of_[n] = static_cast<int32_t>(i);
      group_id_[n] = groups_[i].id;
      InsertIdle(n, groups_[i]);
      return;
    }
  }
  group_of_[n] = static_cast<int32_t>(groups_.size());
  group_id_[n] = TakeId();  // An idle group keeps its id: idle groups are never dropped.
  groups_.push_back(IdleGroup{fit_[n], gpus_[n], {}, group_id_[n]});
  InsertIdle(n, groups_.back());
}

void NodeTable::InsertIdle(uint32_t n, IdleGroup& g) {
  auto it = std::lower_bound(g.members.begin(), g.members.end(), n,
                             [&](uint32_t a, uint32_t b) { return ranks_[a] > ranks_[b]; });
  g.members.insert(it, n);
}

uint64_t NodeTable::StateHash(uint32_t n) const {
  uint64_t h = 0;
  const auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdULL;
  };
  const NodeFit& f = fit_[n];
  mix(static_cast<uint64_t>(f.cpu_free));
  mix(static_cast<uint64_t>(f.mem_free));
  mix(f.model_bit);
  mix(static_cast<uint64_t>(f.flags));
  const NodeGpus& g = gpus_[n];
  for (size_t i = 0; i < static_cast<size_t>(g.count) && i < g.free.size(); ++i) {
    mix(static_cast<uint64_t>(static_cast<uint16_t>(g.free[i])) |
        static_cast<uint64_t>(g.mode[i]) << 16 |
        static_cast<uint64_t>(static_cast<uint8_t>(g.island[i])) << 24);
    mix(static_cast<uint64_t>(g.free_memory[i]));
  }
  const NodeTags& t = tags_[n];
  for (size_t i = 0; i < t.count.size(); ++i) {
    if (t.count[i] != 0) mix(i << 32 | t.count[i]);
  }
  return h ^ (h >> 31);
}

bool NodeTable::SameState(uint32_t a, uint32_t b) const {
  return fit_[a] == fit_[b] && gpus_[a] == gpus_[b] && tags_[a] == tags_[b];
}

void NodeTable::JoinBusy(uint32_t n) {
  const uint64_t hash = StateHash(n);
  uint32_t g = UINT32_MAX;
  auto [first, last] = busy_by_hash_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    if (SameState(busy_[it->second].members.back(), n)) {
      g = it->second;
      break;
    }
  }
  if (g == UINT32_MAX) {
    if (busy_free_.empty()) {
      g = static_cast<uint32_t>(busy_.size());
      busy_.emplace_back();
    } else {
      g = busy_free_.back();
      busy_free_.pop_back();
    }
    busy_[g].hash = hash;
    busy_[g].id = TakeId();
    busy_by_hash_.emplace(hash, g);
  }
  BusyGroup& group = busy_[g];
  std::vector<uint32_t>& m = group.members;
  auto it = std::lower_bound(m.begin(), m.end(), n,
                             [&](uint32_t a, uint32_t b) { return ranks_[a] > ranks_[b]; });
  const bool leads = it == m.end();
  m.insert(it, n);
  busy_of_[n] = g;
  group_id_[n] = group.id;
  if (m.size() == 1) {
    group.share = share_of_[n];
    group.whole = whole_of_[n];
    ListBusy(g, +1);
  } else if (leads) {
    ListBusy(g, 0);
  }
}

void NodeTable::LeaveBusy(uint32_t n) {
  const uint32_t g = busy_of_[n];
  std::vector<uint32_t>& m = busy_[g].members;
  const bool led = m.back() == n;
  auto it = std::lower_bound(m.begin(), m.end(), n,
                             [&](uint32_t a, uint32_t b) { return ranks_[a] > ranks_[b]; });
  m.erase(it);
  if (!m.empty()) {
    if (led) ListBusy(g, 0);
    return;
  }
  ListBusy(g, -1);
  auto [first, last] = busy_by_hash_.equal_range(busy_[g].hash);
  for (auto at = first; at != last; ++at) {
    if (at->second == g) {
      busy_by_hash_.erase(at);
      break;
    }
  }
  busy_free_.push_back(g);
  free_ids_.push_back(busy_[g].id);
}

uint32_t NodeTable::TakeId() {
  uint32_t id;
  if (free_ids_.empty()) {
    id = static_cast<uint32_t>(id_generation_.size());
    id_generation_.push_back(0);
  } else {
    id = free_ids_.back();
    free_ids_.pop_back();
  }
  if (++id_generation_[id] == 0) id_generation_[id] = 1;  // 0 marks "never cached".
  return id;
}

void NodeTable::ListBusy(uint32_t g, int sign) {
  BusyGroup& group = busy_[g];
  const auto change = [&](LeadList& list, uint32_t BusyGroup::*at) {
    if (sign == 0) {
      list.leads[group.*at] = group.members.back();
    } else if (sign > 0) {
      group.*at = static_cast<uint32_t>(list.leads.size());
      list.leads.push_back(group.members.back());
      list.groups.push_back(g);
    } else {
      const uint32_t i = group.*at, moved = list.groups.back();
      list.leads[i] = list.leads.back();
      list.groups[i] = moved;
      busy_[moved].*at = i;
      list.leads.pop_back();
      list.groups.pop_back();
    }
  };
  change(used_leads_, &BusyGroup::at_used);
  change(share_leads_[group.share], &BusyGroup::at_share);
  change(whole_leads_[group.whole], &BusyGroup::at_whole);
}

void NodeTable::AddTag(uint32_t n, int tag, int delta) {
  if (tag < 0 || tag >= kNumTags) return;
  Unindex(n);
  NodeTags& t = tags_[n];
  uint32_t& c = t.count[static_cast<size_t>(tag)];
  const bool had = c > 0;
  if (delta < 0 && c < static_cast<uint32_t>(-delta)) {
    c = 0;  // Never below zero, even for a workload the scheduler did not book.
  } else {
    c = static_cast<uint32_t>(static_cast<int64_t>(c) + delta);
  }
  t.kinds += static_cast<int>(c > 0) - static_cast<int>(had);
  if (++epochs_[n] == 0) epochs_[n] = 1;  // Tags are node state that policies read.
  Index(n);
}

}  // namespace tessera::sched
