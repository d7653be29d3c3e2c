// Usage: what each tenant's active instances hold or wait for, in the one unit quotas use,
// milli-GPU. A whole GPU is 1000 and a share its milli. A MIG slice is counted in compute slices
// per GPU model and turned into milli-GPU once, on the sum, rounding down: seven 1g slices of a
// 7-slice GPU are exactly 1000, as the fleet and /metrics count them (never 7 x 143 = 1001).
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "catalog/catalog.h"
#include "core/instance.h"

namespace tessera::core {

// Milli-GPUs as GPUs for messages: 2500 -> "2.5".
std::string Gpus(int64_t milli);

// floor(1000 * slices / total): milli-GPU of `slices` compute slices of a `total`-slice GPU.
int64_t MigSliceMilli(int64_t slices, int total);

class Usage {
 public:
  explicit Usage(const catalog::Catalog* catalog) : catalog_(catalog) {}

  // Counts (or stops counting) `shape` for `tenant`. REQUIRES for Remove: the same shape was
  // added for the tenant and not removed since.
  void Add(const std::string& tenant, const Shape& shape);
  void Remove(const std::string& tenant, const Shape& shape);

  // The tenant's usage in milli-GPU.
  int64_t Milli(const std::string& tenant) const;
  // What adding `shape` would add to the tenant's usage.
  int64_t Marginal(const std::string& tenant, const Shape& shape) const;

 private:
  struct Held {
    int64_t milli = 0;                          // Whole GPUs and shares.
    std::map<std::string, int64_t> mig_slices;  // By GPU model id.
  };
  // The MIG model and slices a shape holds; slices 0 when it is not a MIG slice.
  std::pair<const catalog::GpuModel*, int64_t> MigOf(const Shape& shape) const;
  static int64_t MilliOf(const Held& h, const catalog::Catalog& catalog);

  const catalog::Catalog* catalog_;
  std::map<std::string, Held> by_tenant_;
};

}  // namespace tessera::core
