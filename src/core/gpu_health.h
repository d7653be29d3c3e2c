// Which faults take a GPU out of service. The table of XID codes is NVIDIA's Xid Catalog's
// immediate action mapped as docs/gpu-health.md states (and ../shared/reference/xid.md derives):
//   ignore          nothing to do (or act on its companion XID);
//   workload        the application's own error: the workload sees it and ends or retries; the
//                   GPU stays in service;
//   gpu-unhealthy   the GPU needs a reset: out of service until an operator clears it;
//   node-unhealthy  the node needs a restart: the GPU is out of service and the node is drained.
// A code the table lacks is alerted on (the GpuXidError rule) and otherwise ignored.
// Thread-safety: pure functions and constant data.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/sample.h"

namespace tessera::core {

enum class XidAction { kIgnore, kWorkload, kGpuUnhealthy, kNodeUnhealthy };
std::string_view XidActionName(XidAction a);  // "ignore", "workload", ...

struct XidInfo {
  int64_t code = 0;
  std::string_view mnemonic;  // e.g. "GPU_HAS_FALLEN_OFF_THE_BUS".
  XidAction action = XidAction::kIgnore;
};

// The table, by code; nullptr for a code it lacks.
const XidInfo* FindXid(int64_t code);
// Every row, in code order (for the docs' table test).
const std::vector<XidInfo>& XidTable();

// A fault found in a telemetry report that takes GPU `gpu` out of service.
struct GpuFault {
  int gpu = 0;
  std::string reason;         // e.g. "XID 79 (GPU_HAS_FALLEN_OFF_THE_BUS)", "lost: NVML ...".
  bool node_restart = false;  // The node needs a restart (a node-unhealthy XID).
};

// The faults in `t`: a GPU the driver lost, a gpu- or node-unhealthy XID, double-bit ECC errors
// above the count an operator last cleared (`dbe_cleared`, by GPU index; 0 when absent). One
// per GPU at most: an XID's, else lost, else ECC.
std::vector<GpuFault> FindGpuFaults(const telemetry::Telemetry& t,
                                    const std::map<int, int64_t>& dbe_cleared);

}  // namespace tessera::core
