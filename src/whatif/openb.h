// openb's fleet as the what-if simulator runs it (docs/cost-simulation.md). No catalog can price
// openb's cluster: three quarters of its GPUs are models Alibaba keeps undisclosed (G2, G3) and
// no cloud rents P100s any more. And its GPUs take whole-GPU pods and shares alike, where a
// Tessera GPU has one mode. The stand-in keeps every node's vCPUs, memory, GPU count and NVLink
// islands, and makes its GPUs one model, "openb-gpu", priced at a catalog instance type's rates per
// GPU (gpu.1xt4 by default: T4s are the one openb model clouds still rent), all in shared mode,
// with whole-GPU work let onto any GPU that holds no share (StateOptions::whole_gpus_on_shared).
// Reservations are made of a 1-GPU type, "openb.1gpu", sized for one node shape of the fleet: as
// roomy as the largest whole 1-GPU pods that shape holds, the shape covering most of their
// GPU-hours.
// Thread-safety: a StandIn is a value; it may be shared read-only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "common/result.h"
#include "fleet/fleet.h"
#include "whatif/jobs.h"

namespace tessera::whatif {

inline constexpr std::string_view kOpenbModel = "openb-gpu";
inline constexpr std::string_view kOpenbUnit = "openb.1gpu";

struct StandIn {
  catalog::Catalog catalog;
  std::unique_ptr<fleet::Fleet> fleet;  // Refers to `catalog`: keep the StandIn where it is.
};

// The stand-in of `fleet` (loaded with the embedded catalog) for `jobs`, priced as `priced_as`,
// a 1-GPU instance type of the embedded catalog. InvalidArgument naming it when it is not one.
Result<std::unique_ptr<StandIn>> OpenbStandIn(const fleet::Fleet& fleet,
                                              const std::vector<Job>& jobs,
                                              std::string_view priced_as = "gpu.1xt4");

}  // namespace tessera::whatif
