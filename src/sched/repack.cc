#include "sched/repack.h"

#include <algorithm>
#include <utility>

namespace tessera::sched {

namespace {
constexpr size_t kMaxTries = 4;   // Candidate GPUs tried per request.
constexpr size_t kMaxLooks = 32;  // GPUs whose shares `movable` is asked of, per request.

bool IsShare(const Request& r) {
  return r.gpu_count == 1 && r.gpu_milli < fleet::kMilliPerGpu && r.mig_profile.empty();
}
}  // namespace

Repacker::Repacker(const fleet::Fleet& fleet, Scheduler& scheduler)
    : fleet_(fleet), scheduler_(scheduler) {}

std::vector<uint32_t>& Repacker::On(const fleet::Assignment& a) {
  if (on_gpu_.size() <= a.node.value) on_gpu_.resize(fleet_.size());
  auto& gpus = on_gpu_[a.node.value];
  if (gpus.empty()) gpus.resize(fleet_.node(a.node).gpus.size());
  return gpus[static_cast<size_t>(a.gpus[0].gpu)];
}

void Repacker::Track(const std::string& id, const Request& r, const fleet::Assignment& a,
                     const void* owner) {
  Untrack(id);
  if (!IsShare(r) || a.gpu_count != 1) return;
  uint32_t slot = 0;
  if (free_.empty()) {
    slot = static_cast<uint32_t>(shares_.size());
    shares_.emplace_back();
  } else {
    slot = free_.back();
    free_.pop_back();
  }
  shares_[slot] = {id, r, a, owner};
  if (milli_.size() < shares_.size()) {
    milli_.resize(shares_.size());
    source_.resize(shares_.size());
  }
  milli_[slot] = r.gpu_milli;
  source_[slot] = r.source;
  slot_of_[id] = slot;
  On(a).push_back(slot);
}

void Repacker::Untrack(const std::string& id) {
  auto it = slot_of_.find(id);
  if (it == slot_of_.end()) return;
  const uint32_t slot = it->second;
  auto& list = On(shares_[slot].assignment);
  list.erase(std::find(list.begin(), list.end(), slot));
  shares_[slot] = {};
  free_.push_back(slot);
  slot_of_.erase(it);
}

void Repacker::PutBack(const fleet::Assignment& a) {
  if (Status s = scheduler_.Reserve(a); !s.ok() && error_.ok()) {
    error_ = s.WithPrefix("repacking: putting a share back");
  }
}

// The least milli that moving one share or two of `slots` (all of them, or those `movable` says)
// frees towards `deficit`, and which; moved_milli is above kMilliPerGpu when none does.
Repacker::Candidate Repacker::Cheapest(const std::vector<uint32_t>& slots, int deficit,
                                       const Movable& movable) const {
  Candidate best{0, 0, fleet::kMilliPerGpu + 1, 0, {}};
  for (size_t i = 0; i < slots.size(); ++i) {
    if (movable && !movable(shares_[slots[i]].owner)) continue;
    const int mi = milli_[slots[i]];
    if (mi >= deficit && mi < best.moved_milli) best = {0, 0, mi, 1, {slots[i], 0}};
    for (size_t j = i + 1; j < slots.size(); ++j) {
      // Two shares moved together are one source's: a filter that keeps sources apart sees where
      // the first went only once its caller books it.
      const int mj = mi + milli_[slots[j]];
      if (mj >= deficit && mj < best.moved_milli && source_[slots[i]] == source_[slots[j]] &&
          (!movable || movable(shares_[slots[j]].owner))) {
        best = {0, 0, mj, 2, {slots[i], slots[j]}};
      }
    }
  }
  return best;
}

// The GPUs where moving one movable share or two frees room for `r`, on nodes of a model it
// allows, with its CPU and memory free once the moved shares are gone; the least milli moved
// first. A first pass ranks every GPU by what it would need moved, whatever may move; `movable`
// is then asked of the best-ranked GPUs' shares only.
std::vector<Repacker::Candidate> Repacker::Candidates(const Request& r,
                                                      const Movable& movable) const {
  std::vector<Candidate> ranked;
  for (uint32_t n = 0; n < on_gpu_.size(); ++n) {
    const fleet::Node& node = fleet_.node(fleet::NodeIndex{n});
    if (on_gpu_[n].empty() || !AllowsModel(r.allowed_models, ModelBit(node.model))) continue;
    for (size_t g = 0; g < on_gpu_[n].size(); ++g) {
      const int deficit = r.gpu_milli - node.gpus[g].free_milli;
      if (on_gpu_[n][g].empty() || deficit <= 0 || !node.gpus[g].grantable()) continue;
      Candidate c = Cheapest(on_gpu_[n][g], deficit, {});
      if (c.count == 0) continue;
      c.node = n;
      c.gpu = static_cast<int>(g);
      ranked.push_back(c);
    }
  }
  const auto by_milli = [](const Candidate& a, const Candidate& b) {
    return a.moved_milli < b.moved_milli;
  };
  const size_t looks = std::min(ranked.size(), kMaxLooks);
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(looks),
                    ranked.end(), by_milli);
  std::vector<Candidate> out;
  for (size_t k = 0; k < looks && out.size() < kMaxTries; ++k) {
    const fleet::Node& node = fleet_.node(fleet::NodeIndex{ranked[k].node});
    const auto g = static_cast<size_t>(ranked[k].gpu);
    Candidate c = movable ? Cheapest(on_gpu_[ranked[k].node][g],
                                     r.gpu_milli - node.gpus[g].free_milli, movable)
                          : ranked[k];
    int64_t cpu = node.cpu_milli_free, memory = node.memory_mib_free;
    for (int i = 0; i < c.count; ++i) {
      cpu += shares_[c.shares[static_cast<size_t>(i)]].request.cpu_milli;
      memory += shares_[c.shares[static_cast<size_t>(i)]].request.memory_mib;
    }
    if (c.count == 0 || cpu < r.cpu_milli || memory < r.memory_mib) continue;
    c.node = ranked[k].node;
    c.gpu = ranked[k].gpu;
    out.push_back(c);
  }
  std::stable_sort(out.begin(), out.end(), by_milli);
  return out;
}

// Moves c's shares off their GPU, places `r` on c's node, then the shares anywhere else; on any
// failure puts everything back as it was.
std::optional<Repacker::Plan> Repacker::Try(const Request& r, const Candidate& c) {
  std::vector<Move> moves;
  for (int i = 0; i < c.count; ++i) {
    const Share& share = shares_[c.shares[static_cast<size_t>(i)]];
    moves.push_back({share.id, share.assignment, {}});
  }
  for (size_t i = 0; i < moves.size(); ++i) {
    if (!scheduler_.Release(moves[i].from).ok()) {
      // Not held, which is a bookkeeping bug: put back what was released and give up.
      while (i-- > 0) PutBack(moves[i].from);
      return std::nullopt;
    }
  }
  std::vector<fleet::Assignment> booked;
  bool ok = false;
  if (auto placed = scheduler_.ScheduleOn(r, fleet::NodeIndex{c.node})) {
    booked.push_back(*placed);
    ok = true;
    for (size_t i = 0; i < moves.size(); ++i) {
      Request again = shares_[c.shares[i]].request;
      again.observe = false;
      auto moved = scheduler_.Schedule(again);
      if (!moved) {
        ok = false;
        break;
      }
      booked.push_back(*moved);
      moves[i].to = *moved;
    }
  }
  if (!ok) {
    for (auto it = booked.rbegin(); it != booked.rend(); ++it) {
      if (Status st = scheduler_.Release(*it); !st.ok() && error_.ok()) error_ = st;
    }
    for (const Move& m : moves) PutBack(m.from);
    return std::nullopt;
  }
  Plan plan{booked[0], {}};
  for (size_t i = 0; i < moves.size(); ++i) {
    Move& m = moves[i];
    const Share share = shares_[c.shares[i]];
    Track(m.id, share.request, m.to, share.owner);
    // Placed again on the GPU it left (the request went to another of c's node): no move.
    if (m.to.node.value == m.from.node.value && m.to.gpus[0].gpu == m.from.gpus[0].gpu) continue;
    ++moves_;
    moved_milli_ += share.request.gpu_milli;
    plan.moves.push_back(std::move(m));
  }
  return plan;
}

std::optional<Repacker::Plan> Repacker::MakeRoom(const Request& r, const Movable& movable) {
  if (r.gpu_count != 1 || !r.mig_profile.empty()) return std::nullopt;
  Request quiet = r;
  quiet.observe = false;
  for (const Candidate& c : Candidates(r, movable)) {
    if (auto plan = Try(quiet, c)) return plan;
  }
  return std::nullopt;
}

}  // namespace tessera::sched
