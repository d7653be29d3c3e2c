#include "sim/repack.h"

#include <algorithm>
#include <optional>

namespace tessera::sim {

namespace {
constexpr size_t kMaxTries = 4;
}  // namespace

Repacker::Repacker(const fleet::Fleet& fleet, sched::Scheduler& scheduler)
    : fleet_(fleet), scheduler_(scheduler) {}

std::vector<size_t>& Repacker::On(uint32_t node, int gpu) {
  if (on_gpu_.size() <= node) on_gpu_.resize(fleet_.size());
  auto& gpus = on_gpu_[node];
  if (gpus.empty()) gpus.resize(fleet_.node(fleet::NodeIndex{node}).gpus.size());
  return gpus[static_cast<size_t>(gpu)];
}

void Repacker::Placed(const sched::Request& r, const fleet::Assignment& a) {
  if (r.gpu_count != 1 || r.gpu_milli >= fleet::kMilliPerGpu || !r.mig_profile.empty()) return;
  shares_.push_back({r, a});
  On(a.node.value, a.gpus[0].gpu).push_back(shares_.size() - 1);
}

void Repacker::Forget(size_t share) {
  const fleet::Assignment& a = shares_[share].assignment;
  auto& list = On(a.node.value, a.gpus[0].gpu);
  list.erase(std::find(list.begin(), list.end(), share));
}

void Repacker::PutBack(const fleet::Assignment& a) {
  if (Status s = scheduler_.Reserve(a); !s.ok() && error_.ok()) {
    error_ = s.WithPrefix("repacking: putting a share back");
  }
}

// The GPUs where moving one share or two frees room for `r`, on nodes of a model it
// allows, with its CPU and memory free once the moved shares are gone; the least milli moved
// first.
std::vector<Repacker::Candidate> Repacker::Candidates(const sched::Request& r) const {
  const int milli = r.gpu_milli;
  std::vector<Candidate> out;
  for (uint32_t n = 0; n < on_gpu_.size(); ++n) {
    const fleet::Node& node = fleet_.node(fleet::NodeIndex{n});
    if (!sched::AllowsModel(r.allowed_models, sched::ModelBit(node.model))) continue;
    for (size_t g = 0; g < on_gpu_[n].size(); ++g) {
      const std::vector<size_t>& here = on_gpu_[n][g];
      const int deficit = milli - node.gpus[g].free_milli;
      if (here.empty() || deficit <= 0 || !node.gpus[g].grantable()) continue;
      Candidate best{n, static_cast<int>(g), fleet::kMilliPerGpu + 1, {}};
      for (size_t i = 0; i < here.size(); ++i) {
        const int mi = shares_[here[i]].request.gpu_milli;
        if (mi >= deficit && mi < best.moved_milli) best = {n, static_cast<int>(g), mi, {here[i]}};
        for (size_t j = i + 1; j < here.size(); ++j) {
          const int mj = mi + shares_[here[j]].request.gpu_milli;
          if (mj >= deficit && mj < best.moved_milli) {
            best = {n, static_cast<int>(g), mj, {here[i], here[j]}};
          }
        }
      }
      int64_t cpu = node.cpu_milli_free, memory = node.memory_mib_free;
      for (size_t s : best.shares) {
        cpu += shares_[s].request.cpu_milli;
        memory += shares_[s].request.memory_mib;
      }
      if (!best.shares.empty() && cpu >= r.cpu_milli && memory >= r.memory_mib) {
        out.push_back(std::move(best));
      }
    }
  }
  const size_t keep = std::min(out.size(), kMaxTries);
  std::partial_sort(
      out.begin(), out.begin() + static_cast<std::ptrdiff_t>(keep), out.end(),
      [](const Candidate& a, const Candidate& b) { return a.moved_milli < b.moved_milli; });
  out.resize(keep);
  return out;
}

// Moves c's shares off their GPU, places `r` on c's node, then the shares anywhere; on any
// failure puts everything back as it was.
bool Repacker::Try(const sched::Request& r, const Candidate& c) {
  for (size_t i = 0; i < c.shares.size(); ++i) {
    if (!scheduler_.Release(shares_[c.shares[i]].assignment).ok()) {
      // Not held, which is a bookkeeping bug: put back what was released and give up.
      while (i-- > 0) PutBack(shares_[c.shares[i]].assignment);
      return false;
    }
  }
  std::vector<fleet::Assignment> booked;
  bool ok = false;
  if (auto placed = scheduler_.ScheduleOn(r, fleet::NodeIndex{c.node})) {
    booked.push_back(*placed);
    ok = true;
    for (size_t s : c.shares) {
      sched::Request again = shares_[s].request;
      again.observe = false;
      auto moved = scheduler_.Schedule(again);
      if (!moved) {
        ok = false;
        break;
      }
      booked.push_back(*moved);
    }
  }
  if (!ok) {
    for (auto it = booked.rbegin(); it != booked.rend(); ++it) {
      if (Status st = scheduler_.Release(*it); !st.ok() && error_.ok()) error_ = st;
    }
    for (size_t s : c.shares) PutBack(shares_[s].assignment);
    return false;
  }
  for (size_t i = 0; i < c.shares.size(); ++i) {
    const size_t s = c.shares[i];
    const fleet::Assignment& to = booked[i + 1];
    const fleet::Assignment& from = shares_[s].assignment;
    if (to.node.value != from.node.value || to.gpus[0].gpu != from.gpus[0].gpu) {
      ++moves_;
      moved_milli_ += shares_[s].request.gpu_milli;
    }
    Forget(s);
    shares_[s].assignment = to;
    On(to.node.value, to.gpus[0].gpu).push_back(s);
  }
  Placed(r, booked[0]);
  return true;
}

bool Repacker::MakeRoom(const sched::Request& r) {
  if (r.gpu_count != 1 || !r.mig_profile.empty()) return false;
  sched::Request quiet = r;
  quiet.observe = false;
  for (const Candidate& c : Candidates(r)) {
    if (Try(quiet, c)) return true;
  }
  return false;
}

}  // namespace tessera::sim
