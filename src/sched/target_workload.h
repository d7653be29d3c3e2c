// The target workload ("typical pods") that fragmentation and the FGD policy measure against,
// built from a trace as the FGD simulator does (utils/frag.go GetTypicalPods with CPU-only pods
// included and a step of one class): group pods by (cpu_milli, gpu_milli, gpu_count, gpu_spec),
// order the groups by count, then by key, both descending, keep groups while the running count is
// below the threshold (the group that crosses it is kept), and renormalise their weights to sum
// to 1. Also parses a gpu_spec ("V100M16|V100M32") into a ModelMask through the catalog.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "catalog/catalog.h"
#include "common/result.h"
#include "sched/scheduler.h"

namespace tessera::sched {

// One pod of the trace, as the typical-pod builder sees it.
struct PodShape {
  int64_t cpu_milli = 0;
  int gpu_milli = 0;             // Per GPU; 0 for CPU-only.
  int gpu_count = 0;             // 0 for CPU-only.
  std::string_view gpu_spec{};   // As in the trace; part of the class key. Caller owns the text.
  ModelMask allowed_models = 0;  // What gpu_spec means (ParseGpuSpec); copied into the class.
};

struct TypicalWorkload {
  Workload workload;    // In FGD's order: most frequent first.
  double coverage = 0;  // Share of the pods that the kept classes hold, 0..1.
  size_t distinct = 0;  // Number of distinct classes before the cut.
};

// Builds the typical-pod workload. Empty pieces of gpu_spec ("a||b") are dropped from the key;
// repeated pieces are kept, as FGD does. `threshold_percent` is FGD's podPopularityThreshold.
TypicalWorkload BuildTypicalWorkload(std::span<const PodShape> pods, double threshold_percent = 95);

// The models a gpu_spec allows: each non-empty '|' piece resolved through the catalog (ids and
// aliases). 0 (any model) for a spec without pieces. NotFound names the piece the catalog lacks;
// InvalidArgument when a model's index does not fit in a ModelMask.
Result<ModelMask> ParseGpuSpec(const catalog::Catalog& catalog, std::string_view spec);

}  // namespace tessera::sched
