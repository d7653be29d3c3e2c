// The batch window, a labelled variant of the FGD protocol: "POLICY-batchK" runs POLICY, but
// holds each K consecutive arrivals and then places them together, largest GPU demand first
// (whole multi-GPU pods, then whole GPUs, then shares from the largest down, CPU-only pods last;
// equal demands keep their arrival order). The small shares of a window are then placed after the
// large ones whose holes they can fill. A pod waits at most K - 1 arrivals; the last, partial
// window is placed when the trace ends.
// In a batched run the curve's x axis is the demand *decided* so far (placed or failed), in the
// order of decision: the same protocol with the arrival order permuted within each window. It is
// never mixed into POLICY's own column; `tessera sim --policy guarded-fgd-batch8` names it.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "sim/trace.h"

namespace tessera::sim {

// The largest window a policy name may ask for.
inline constexpr int kMaxBatchWindow = 64;
// The window of a bare "POLICY-batch": the server's default (docs/scheduler.md).
inline constexpr int kDefaultBatchWindow = 8;

struct BatchedPolicy {
  std::string base;  // The registry's policy, e.g. "guarded-fgd".
  int window = 1;    // 1 = no batching: the plain protocol.
};

// Splits "guarded-fgd-batch8" into {"guarded-fgd", 8}; a bare "guarded-fgd-batch" has the default
// window, and a name without the suffix has window 1. InvalidArgument when K is not a whole number
// in [1, kMaxBatchWindow]. Whether `base` is a known policy is the registry's to say.
Result<BatchedPolicy> SplitBatchedPolicy(std::string_view policy);

// Reorders order[begin, end) (one window) into the order of decision, in place.
void OrderWindow(const std::vector<Pod>& pods, std::vector<uint32_t>& order, size_t begin,
                 size_t end);

}  // namespace tessera::sim
