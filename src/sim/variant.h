// Labelled variants of the FGD protocol, named by suffixes on a registry policy:
// POLICY[-batchK][-repack], e.g. "guarded-fgd-batch8", "guarded-fgd-repack",
// "guarded-fgd-batch16-repack". A variant's column is never mixed into POLICY's own.
//
// -batchK, the batch window: each K consecutive arrivals are held and then placed together, the
// largest GPU demand first (whole multi-GPU pods, then whole GPUs, then shares from the largest
// down, CPU-only pods last; equal demands keep their arrival order), so the small shares of a
// window come after the large ones whose holes they can fill. A pod waits at most K - 1 arrivals;
// the last, partial window is placed when the trace ends. The curve's x axis is then the demand
// *decided* so far (placed or failed), in the order of decision: the same protocol with the
// arrival order permuted within each window.
//
// -repack: a one-GPU pod that finds no room may move up to two running shares off one GPU
// (sched/repack.h).
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
// The window of a bare "POLICY-batch".
inline constexpr int kDefaultBatchWindow = 8;

struct PolicyVariant {
  std::string base;     // The registry's policy, e.g. "guarded-fgd".
  int window = 1;       // 1 = no batching.
  bool repack = false;  // Whether shares may move to make room.

  bool plain() const { return window == 1 && !repack; }
};

// Splits "guarded-fgd-batch8-repack" into {"guarded-fgd", 8, true}; a bare "-batch" has the
// default window, and a name without suffixes is plain. InvalidArgument naming the policy when K
// is not a whole number in [1, kMaxBatchWindow]. Whether `base` is a known policy is the
// registry's to say. A window is written without leading zeros, so each variant has one name.
Result<PolicyVariant> ParsePolicyVariant(std::string_view policy);

// Reorders order[begin, end) (one window) into the order of decision, in place.
void OrderWindow(const std::vector<Pod>& pods, std::vector<uint32_t>& order, size_t begin,
                 size_t end);

}  // namespace tessera::sim
