// Plan: exhaustive search over the starts of the instances to add. A GPU has at most 8 memory
// slices and each profile a handful of starts, so every arrangement can be tried (a few thousand
// at worst) and the best one chosen by an explicit rule rather than by a greedy heuristic that
// depends on the order in which profiles are asked for.
//
// The rule. Among the valid layouts that keep `existing` unmoved, choose the one that
// lexicographically maximises:
//   (a) the largest compute size of any single profile that could still be added, so a GPU with
//       room for a 4g is preferred to one with room only for 3g (4g starts only at 0; a small
//       instance at 0..3 would block it);
//   (b) the number of distinct (profile, start) placements that could still be added, a measure of
//       how many kinds of future request can still be served;
//   (c) the starts of the new instances, taken from the smallest profile to the largest and
//       compared from the first: small instances go late in memory, where they block fewer of the
//       low starts that large profiles need (the last tie-breaker also makes the result unique).
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mig/mig.h"

namespace tessera::mig {
namespace {

// A layout as the search sees it: bit i of `used` set when memory slice i is taken.
struct State {
  uint64_t used = 0;
  int compute = 0;
  int media = 0;            // Instances with media extensions.
  std::vector<int> counts;  // Per profile index in the table.
};

// The slices a placement covers. ParseTable keeps start + size within 64; a hand-built table that
// does not gets a placement covering everything rather than an undefined shift.
uint64_t Mask(const Profile& p, int start) {
  if (start < 0 || start >= 64 || p.memory_slices <= 0) return ~uint64_t{0};
  const uint64_t width =
      p.memory_slices >= 64 ? ~uint64_t{0} : (uint64_t{1} << p.memory_slices) - 1;
  return width << start;
}

bool Fits(const Table& t, const State& s, size_t index, int start) {
  const Profile& p = t.profiles[index];
  return (s.used & Mask(p, start)) == 0 && s.compute + p.compute_slices <= t.compute_slices &&
         (!p.media_extensions || s.media == 0) && s.counts[index] < p.max_count;
}

void Apply(const Table& t, State& s, size_t index, int start, int sign) {
  const Profile& p = t.profiles[index];
  s.used ^= Mask(p, start);
  s.compute += sign * p.compute_slices;
  s.media += p.media_extensions ? sign : 0;
  s.counts[index] += sign;
}

struct Score {
  int largest = -1;         // (a)
  int placements = 0;       // (b)
  std::vector<int> starts;  // (c), new starts ordered from the smallest profile.
  auto operator<=>(const Score&) const = default;
};

class Search {
 public:
  Search(const Table& t, const std::vector<size_t>& add) : t_(t), add_(add) {
    // (c) reads the new starts from the smallest profile (memory, then compute) to the largest;
    // a stable order keeps requests of equal size in the order given.
    for (size_t i = 0; i < add.size(); ++i) order_.push_back(i);
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
      const Profile& pa = t.profiles[add[a]];
      const Profile& pb = t.profiles[add[b]];
      return std::pair(pa.memory_slices, pa.compute_slices) <
             std::pair(pb.memory_slices, pb.compute_slices);
    });
  }

  // The best starts for `add` (in request order), or nullopt when none fit.
  std::optional<std::vector<int>> Run(State state) {
    starts_.assign(add_.size(), -1);
    best_.reset();
    best_starts_.reset();
    Recurse(state, 0);
    return best_starts_;
  }

 private:
  void Recurse(State& s, size_t i) {
    if (i == add_.size()) {
      Consider(s);
      return;
    }
    const size_t index = add_[i];
    // Identical requests are interchangeable, so they take increasing starts; this skips
    // permutations of the same layout.
    int floor = -1;
    for (size_t k = 0; k < i; ++k) {
      if (add_[k] == index) floor = starts_[k];
    }
    for (int start : t_.profiles[index].starts) {
      if (start <= floor || !Fits(t_, s, index, start)) continue;
      Apply(t_, s, index, start, +1);
      starts_[i] = start;
      Recurse(s, i + 1);
      Apply(t_, s, index, start, -1);
    }
  }

  void Consider(const State& s) {
    Score score;
    for (size_t index = 0; index < t_.profiles.size(); ++index) {
      for (int start : t_.profiles[index].starts) {
        if (!Fits(t_, s, index, start)) continue;
        score.largest = std::max(score.largest, t_.profiles[index].compute_slices);
        ++score.placements;
      }
    }
    for (size_t i : order_) score.starts.push_back(starts_[i]);
    if (!best_ || *best_ < score) {
      best_ = std::move(score);
      best_starts_ = starts_;
    }
  }

  const Table& t_;
  const std::vector<size_t>& add_;
  std::vector<size_t> order_;
  std::vector<int> starts_;
  std::optional<Score> best_;
  std::optional<std::vector<int>> best_starts_;
};

// Why `p` cannot join `layout`, whose state is `s`. Only called when no start fits.
std::string WhyNot(const Table& t, const State& s, size_t index,
                   const std::vector<Placement>& layout) {
  const Profile& p = t.profiles[index];
  if (p.media_extensions && s.media > 0) {
    for (const Placement& q : layout) {
      if (q.profile->media_extensions) {
        return fmt::format("only one +me instance fits on a GPU, and {} is one", q.ToString());
      }
    }
  }
  if (s.counts[index] >= p.max_count) {
    return fmt::format("at most {} {} fit on one GPU", p.max_count, p.name);
  }
  // The blocking instance for each start; nullptr where the start is free of overlaps.
  std::vector<std::pair<int, const Placement*>> blocked;
  for (int start : p.starts) {
    const Placement* by = nullptr;
    for (const Placement& q : layout) {
      if ((Mask(p, start) & Mask(*q.profile, q.start)) != 0) {
        by = &q;
        break;
      }
    }
    blocked.emplace_back(start, by);
  }
  const bool all_blocked = std::all_of(blocked.begin(), blocked.end(),
                                       [](const auto& b) { return b.second != nullptr; });
  if (!all_blocked) {
    // A start is free, yet nothing fits, so the compute slices are what run out.
    return fmt::format("compute slices would sum to {}, more than {}", s.compute + p.compute_slices,
                       t.compute_slices);
  }
  if (blocked.size() > 1 && std::all_of(blocked.begin(), blocked.end(), [&](const auto& b) {
        return b.second == blocked.front().second;
      })) {
    return fmt::format("every start of {} overlaps {}", p.name, blocked.front().second->ToString());
  }
  std::vector<std::string> reasons;
  for (const auto& [start, by] : blocked) {
    reasons.push_back(
        fmt::format("{} overlaps {}", Placement{&p, start}.ToString(), by->ToString()));
  }
  return fmt::format("{}", fmt::join(reasons, "; "));
}

size_t IndexOf(const Table& t, const Profile* p) {
  for (size_t i = 0; i < t.profiles.size(); ++i) {
    if (&t.profiles[i] == p) return i;
  }
  return t.profiles.size();
}

std::vector<Placement> Compose(const Table& t, const std::vector<Placement>& existing,
                               const std::vector<size_t>& add, const std::vector<int>& starts) {
  std::vector<Placement> out = existing;
  for (size_t i = 0; i < add.size(); ++i) out.push_back({&t.profiles[add[i]], starts[i]});
  return out;
}

// Finds the first request that cannot be added after the ones before it and says why.
Status Explain(const Table& t, const State& base, const std::vector<Placement>& existing,
               const std::vector<size_t>& add) {
  std::vector<size_t> prefix;
  std::vector<int> prefix_starts;
  for (size_t k = 0; k < add.size(); ++k) {
    std::vector<size_t> next = prefix;
    next.push_back(add[k]);
    std::optional<std::vector<int>> found = Search(t, next).Run(base);
    if (found) {
      prefix = std::move(next);
      prefix_starts = std::move(*found);
      continue;
    }
    std::vector<Placement> layout = Compose(t, existing, prefix, prefix_starts);
    State s = base;
    for (size_t i = 0; i < prefix.size(); ++i) Apply(t, s, prefix[i], prefix_starts[i], +1);
    const std::string why = WhyNot(t, s, add[k], layout);
    const std::string& name = t.profiles[add[k]].name;
    if (prefix.empty())
      return Status::ResourceExhausted(fmt::format("no room for {}: {}", name, why));
    std::vector<Placement> added(layout.begin() + static_cast<std::ptrdiff_t>(existing.size()),
                                 layout.end());
    return Status::ResourceExhausted(
        fmt::format("no room for {} beside the other new instances in any arrangement; with the "
                    "best one ({}): {}",
                    name, FormatLayout(added), why));
  }
  return Status::Internal("the planner found no layout but every request fits on its own");
}

}  // namespace

Result<std::vector<Placement>> Plan(const Table& table, const std::vector<Placement>& existing,
                                    const std::vector<const Profile*>& add) {
  Status valid = CheckLayout(table, existing);
  if (!valid.ok()) return Status(valid.code(), "existing instances: " + valid.message());
  State base;
  base.counts.assign(table.profiles.size(), 0);
  for (const Placement& p : existing) Apply(table, base, IndexOf(table, p.profile), p.start, +1);
  std::vector<size_t> indexes;
  for (const Profile* p : add) {
    const size_t index = IndexOf(table, p);
    if (index == table.profiles.size()) {
      return Status::InvalidArgument(
          fmt::format("profile {} is not one of {}'s", p ? p->name : "(null)", table.model));
    }
    indexes.push_back(index);
  }
  std::optional<std::vector<int>> starts = Search(table, indexes).Run(base);
  if (!starts) return Explain(table, base, existing, indexes);
  return Compose(table, existing, indexes, *starts);
}

}  // namespace tessera::mig
