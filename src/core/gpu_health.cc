#include "core/gpu_health.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace tessera::core {
namespace {

using enum XidAction;

// NVIDIA's Xid Catalog (Ampere and newer), immediate action per code, as Tessera acts on it.
// 144-150 share a row in the catalog; 154 names its action in a message NVML does not carry,
// so it is taken as the GPU needing a reset.
const std::vector<XidInfo>& Table() {
  static const std::vector<XidInfo> table = {
      {8, "FIFO_ERROR_IDLE_TIMEOUT", kWorkload},
      {13, "GR_EXCEPTION", kWorkload},
      {31, "FIFO_ERROR_MMU_ERR_FLT", kWorkload},
      {32, "PBDMA_ERROR", kWorkload},
      {38, "FECS_ERR_WATCHDOG_TIMEOUT", kIgnore},
      {43, "RESETCHANNEL_VERIF_ERROR", kIgnore},
      {45, "PREEMPTIVE_REMOVAL", kIgnore},
      {46, "GPU_TIMEOUT_ERROR", kGpuUnhealthy},
      {48, "GPU_ECC_DBE", kGpuUnhealthy},
      {54, "PWR_REDUCED_CLOCKING", kNodeUnhealthy},
      {61, "PMU_BREAKPOINT", kGpuUnhealthy},
      {62, "PMU_HALT_ERROR", kGpuUnhealthy},
      {63, "DRAM_RETIREMENT_EVENT", kIgnore},
      {64, "DRAM_RETIREMENT_FAILURE", kGpuUnhealthy},
      {68, "NVDEC0_ERROR", kWorkload},
      {69, "GR_CLASS_ERROR", kWorkload},
      {74, "NVLINK_ERROR", kGpuUnhealthy},
      {79, "GPU_HAS_FALLEN_OFF_THE_BUS", kNodeUnhealthy},
      {92, "EXCESSIVE_SBE_INTERRUPTS", kIgnore},
      {94, "CONTAINED_ERROR", kWorkload},
      {95, "UNCONTAINED_ERROR", kGpuUnhealthy},
      {109, "CTXSW_TIMEOUT_ERROR", kGpuUnhealthy},
      {110, "SEC_FAULT_ERROR", kGpuUnhealthy},
      {119, "GSP_RPC_TIMEOUT", kGpuUnhealthy},
      {120, "GSP_ERROR", kGpuUnhealthy},
      {121, "C2C_ERROR", kIgnore},
      {136, "ALI_TRAINING_FAIL", kGpuUnhealthy},
      {140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", kGpuUnhealthy},
      {143, "GPU_INIT_ERROR", kGpuUnhealthy},
      {144, "NVLINK_SAW_ERROR", kGpuUnhealthy},
      {145, "NVLINK_RLW_ERROR", kGpuUnhealthy},
      {146, "NVLINK_TLW_ERROR", kGpuUnhealthy},
      {147, "NVLINK_TREX_ERROR", kGpuUnhealthy},
      {148, "NVLINK_NVLPW_CTRL_ERROR", kGpuUnhealthy},
      {149, "NVLINK_NETIR_ERROR", kGpuUnhealthy},
      {150, "NVLINK_MSE_ERROR", kGpuUnhealthy},
      {151, "KEY_ROTATION_ERROR", kWorkload},
      {154, "GPU_RECOVERY_ACTION_CHANGED", kGpuUnhealthy},
      {155, "NVLINK_SW_DEFINED_ERROR", kGpuUnhealthy},
      {156, "RESOURCE_RETIREMENT_EVENT", kGpuUnhealthy},
      {158, "GPU_FATAL_TIMEOUT", kGpuUnhealthy},
  };
  return table;
}

}  // namespace

std::string_view XidActionName(XidAction a) {
  switch (a) {
    case kIgnore:
      return "ignore";
    case kWorkload:
      return "workload";
    case kGpuUnhealthy:
      return "gpu-unhealthy";
    case kNodeUnhealthy:
      return "node-unhealthy";
  }
  return "ignore";
}

const XidInfo* FindXid(int64_t code) {
  const auto& t = Table();
  auto it = std::lower_bound(t.begin(), t.end(), code,
                             [](const XidInfo& x, int64_t c) { return x.code < c; });
  return it != t.end() && it->code == code ? &*it : nullptr;
}

const std::vector<XidInfo>& XidTable() { return Table(); }

std::vector<GpuFault> FindGpuFaults(const telemetry::Telemetry& t,
                                    const std::map<int, int64_t>& dbe_cleared) {
  std::vector<GpuFault> out;
  std::set<int> seen;
  const auto add = [&](GpuFault f) {
    if (seen.insert(f.gpu).second) out.push_back(std::move(f));
  };
  // XIDs first: XID 79 comes with a lost GPU and says more (the node needs a restart).
  for (const telemetry::XidEvent& x : t.xids) {
    const XidInfo* info = FindXid(x.code);
    if (x.gpu < 0 || !info) continue;
    if (info->action == kGpuUnhealthy || info->action == kNodeUnhealthy) {
      add({x.gpu,
           fmt::format("XID {} ({}){}", x.code, info->mnemonic,
                       info->action == kNodeUnhealthy ? ": the node needs a restart" : ""),
           info->action == kNodeUnhealthy});
    }
  }
  for (const telemetry::GpuSample& g : t.gpus) {
    if (g.lost) add({g.index, "lost: the driver no longer answers for it", false});
  }
  for (const telemetry::GpuSample& g : t.gpus) {
    auto it = dbe_cleared.find(g.index);
    const int64_t cleared = it == dbe_cleared.end() ? 0 : it->second;
    if (g.ecc_dbe_total > cleared) {
      add({g.index,
           fmt::format("{} uncorrectable (double-bit) ECC error(s) since the driver loaded",
                       g.ecc_dbe_total),
           false});
    }
  }
  return out;
}

}  // namespace tessera::core
