// Repacking, a labelled variant of the FGD protocol ("POLICY-repack", sim/variant.h names it):
// when a one-GPU pod (a share or a whole GPU) finds no room, the run may move up to two running
// shares off one GPU to other GPUs, then place the pod there, as a scheduler whose workloads can
// be restarted elsewhere would (the server's `migratable` instances; a move restarts the share).
// Only shares move, never whole GPUs; a pod of several GPUs is never helped. A move is kept only
// when the pod and every moved share are placed: otherwise everything is put back as it was.
// The candidate GPUs are those that need the least milli moved, at most four tried per pod.
// Moved shares and the helped pod go through the same Scheduler (ScheduleOn for the pod on the
// chosen node, Schedule for each moved share), not observed by the policy a second time.
// Thread-safety: one run's object, on that run's thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/result.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"

namespace tessera::sim {

class Repacker {
 public:
  // `fleet` is the one `scheduler` places on; both outlive the repacker.
  Repacker(const fleet::Fleet& fleet, sched::Scheduler& scheduler);

  // Records a placement, so that a share can be moved later.
  void Placed(const sched::Request& r, const fleet::Assignment& a);

  // After `r` found no room: moves shares to make room and places `r`. True when it did.
  bool MakeRoom(const sched::Request& r);

  // Not OK when putting a share back failed: the scheduler and these books disagree (a bug).
  const Status& error() const { return error_; }
  int64_t moves() const { return moves_; }              // Shares moved to another GPU.
  int64_t moved_milli() const { return moved_milli_; }  // Their GPU milli.

 private:
  struct Share {
    sched::Request request;
    fleet::Assignment assignment;
  };
  struct Candidate {
    uint32_t node = 0;
    int gpu = 0;
    int moved_milli = 0;
    std::vector<size_t> shares;  // Indices into shares_.
  };
  std::vector<size_t>& On(uint32_t node, int gpu);
  void Forget(size_t share);
  std::vector<Candidate> Candidates(const sched::Request& r) const;
  void PutBack(const fleet::Assignment& a);
  bool Try(const sched::Request& r, const Candidate& c);

  const fleet::Fleet& fleet_;
  sched::Scheduler& scheduler_;
  std::vector<Share> shares_;
  std::vector<std::vector<std::vector<size_t>>> on_gpu_;  // node -> GPU -> shares on it.
  int64_t moves_ = 0;
  int64_t moved_milli_ = 0;
  Status error_;
};

}  // namespace tessera::sim
