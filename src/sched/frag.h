// Fragmentation as the FGD paper defines it (its simulator's utils/frag.go): the idle GPU milli on
// a node that a pod drawn from the target workload could not use, in expectation. For each class
// of the target, in order, a node's idle milli counts as fragment:
//   all of it    for a CPU-only class, for a class whose GPU models exclude the node's, and for a
//                class that the node cannot host (too few GPUs with enough free milli, or too
//                little free CPU);
//   the part on GPUs with less free milli than the class asks, for a class the node can host.
// Weighted by the class weights and summed, this is F(node). The float sums follow the Go code's
// order exactly (per-category sums, then the categories in a fixed order), so a state whose
// classes all keep their outcome gets bitwise the same F: that is what makes FGD's integer score
// exactly 50 for "no change", and what tells 50 from 49 in ties.
// Thread-safety: FragModel is immutable after construction; all functions here are pure.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sched/scheduler.h"

namespace tessera::sched {

// F for one node, transcribed class by class from frag.go; the reference for FragModel and tests.
// `model_bit` is 1 << the node's GpuModelIndex (0 for a node without a model), `gpu_free` the free
// milli of each GPU.
double NodeFragmentationMilli(const Workload& target, ModelMask model_bit, int64_t cpu_free,
                              std::span<const int16_t> gpu_free);

// The target workload compiled for fast evaluation; NodeFrag returns bitwise the same value as
// NodeFragmentationMilli.
class FragModel {
 public:
  explicit FragModel(const Workload& target);

  // F(node) in milli-GPU; 0 when the node has no idle GPU milli.
  double NodeFrag(ModelMask model_bit, int64_t cpu_free, std::span<const int16_t> gpu_free) const;

  // False when no class's CPU test differs between `cpu_a` and `cpu_b` free CPU, so two states
  // that differ only there have bitwise the same F.
  bool CpuChangeMatters(int64_t cpu_a, int64_t cpu_b) const;

  bool empty() const { return classes_.empty(); }

 private:
  struct Class {
    int64_t cpu = 0;
    double weight = 0;
    ModelMask mask = 0;
    int milli = 0;
    int count = 0;
    int milli_index = -1;  // Into millis_; -1 for CPU-only classes.
  };
  std::vector<Class> classes_;
  std::vector<int> millis_;    // Distinct positive class milli, ascending.
  std::vector<int64_t> cpus_;  // Distinct class CPU, ascending.
};

}  // namespace tessera::sched
