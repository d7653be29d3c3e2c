// Repacking: when a one-GPU request (a share or a whole GPU) finds no room, move up to two running
// time-sliced shares off one GPU to other GPUs, then place the request there. The static
// protocol's labelled variant ("POLICY-repack", sim/variant.h) and the server's `migratable`
// instances (StateOptions::repack, docs/core.md "Repacking") both use it.
// Only shares move, never whole GPUs or MIG slices; a request of several GPUs is never helped. A
// plan is kept only when the request and every moved share are placed: otherwise everything is put
// back as it was. The candidate GPUs are those that need the least milli moved, at most four tried
// per request. The request goes through the same Scheduler (ScheduleOn on the chosen node) and so
// do the moved shares (Schedule), none observed by the policy a second time.
// Thread-safety: none; one owner's thread (a run's, or the core's).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"

namespace tessera::sched {

class Repacker {
 public:
  // `fleet` is the one `scheduler` places on; both outlive the repacker.
  Repacker(const fleet::Fleet& fleet, Scheduler& scheduler);

  // `id` holds `a` for `r`, so it may move later; a placement that is not one time-sliced share is
  // not kept. Replaces what `id` held before. `owner` is the caller's handle for it, handed back
  // to MakeRoom's `movable` (which must not outlive it).
  void Track(const std::string& id, const Request& r, const fleet::Assignment& a,
             const void* owner = nullptr);
  // `id` no longer holds capacity (or may no longer move). Unknown ids are ignored.
  void Untrack(const std::string& id);

  struct Move {
    std::string id;
    fleet::Assignment from;
    fleet::Assignment to;
  };
  struct Plan {
    fleet::Assignment placed;  // The request's.
    std::vector<Move> moves;   // The shares moved to another GPU.
  };
  // Whether a tracked share may move now, given its owner handle.
  using Movable = std::function<bool(const void* owner)>;
  // After `r` found no room: moves tracked shares for which `movable` is true (every one when it
  // is empty) to make room, and places `r`. On a plan, the scheduler holds `r`'s placement and
  // the moved shares' new ones, their old ones released, and the books follow the moves; nullopt
  // changed nothing. It costs one pass over the GPUs that hold tracked shares, `movable` asked of
  // the shares of at most 32 of them (those that need the least moved), then at most four trials.
  std::optional<Plan> MakeRoom(const Request& r, const Movable& movable = {});

  // Not OK when putting a share back failed: the scheduler and these books disagree (a bug).
  const Status& error() const { return error_; }
  int64_t moves() const { return moves_; }              // Shares moved to another GPU.
  int64_t moved_milli() const { return moved_milli_; }  // Their GPU milli.

 private:
  struct Share {
    std::string id;
    Request request;
    fleet::Assignment assignment;
    const void* owner = nullptr;
  };
  struct Candidate {
    uint32_t node = 0;
    int gpu = 0;
    int moved_milli = 0;
    int count = 0;                        // 0 (none), 1 or 2 shares to move...
    std::array<uint32_t, 2> shares = {};  // ...their slots in shares_.
  };
  std::vector<uint32_t>& On(const fleet::Assignment& a);
  Candidate Cheapest(const std::vector<uint32_t>& slots, int deficit, const Movable& movable) const;
  std::vector<Candidate> Candidates(const Request& r, const Movable& movable) const;
  void PutBack(const fleet::Assignment& a);
  std::optional<Plan> Try(const Request& r, const Candidate& c);

  const fleet::Fleet& fleet_;
  Scheduler& scheduler_;
  std::vector<Share> shares_;  // Slots of tracked shares; those in free_ hold none.
  // Each slot's GPU milli and source, apart: the first pass reads only these.
  std::vector<int> milli_;
  std::vector<uint32_t> source_;
  std::vector<uint32_t> free_;
  std::unordered_map<std::string, uint32_t> slot_of_;       // id -> its slot.
  std::vector<std::vector<std::vector<uint32_t>>> on_gpu_;  // node -> GPU -> slots on it.
  int64_t moves_ = 0;
  int64_t moved_milli_ = 0;
  Status error_;
};

}  // namespace tessera::sched
