// What a node's GPUs read: the samples a GPU backend takes (agent/gpu_backend.h), sent by the
// agent with its reports (docs/agent.md, "telemetry") and kept by the server. Fields follow
// DCGM's (DCGM_FI_DEV_*, DCGM_FI_PROF_*), read through NVML or made up by the sim backend.
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera::telemetry {

// One MIG device's readings: what is per instance (its memory, its engines); the rest (clocks,
// temperature, power) is its GPU's.
struct MigSample {
  int start = 0;        // Placement start memory slice: which instance this is on its GPU.
  std::string profile;  // e.g. "1g.10gb".
  int gi_id = -1;       // The driver's GPU instance id; -1 when unknown.
  int64_t fb_used_mib = 0;
  int64_t fb_total_mib = 0;
  std::optional<double> gr_engine_active;  // Ratio 0..1 (DCGM_FI_PROF_GR_ENGINE_ACTIVE).
  std::optional<double> tensor_active;     // Ratio 0..1 (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE).
};

// One GPU's telemetry. A field the GPU does not support reads 0, except the profiling ratios,
// which are absent when the backend cannot measure them (NVML has no DCP counters).
struct GpuSample {
  int index = 0;
  double gpu_util = 0;       // Percent of time a kernel ran (DCGM_FI_DEV_GPU_UTIL).
  double mem_copy_util = 0;  // Percent of time memory was read or written.
  int64_t memory_used_mib = 0;
  int64_t memory_total_mib = 0;
  double temperature_c = 0;
  double power_w = 0;
  int64_t sm_clock_mhz = 0;
  int64_t mem_clock_mhz = 0;
  int64_t pcie_tx_kib_s = 0;
  int64_t pcie_rx_kib_s = 0;
  int64_t ecc_sbe_total = 0;  // Corrected (single-bit) errors since the driver loaded.
  int64_t ecc_dbe_total = 0;  // Uncorrected (double-bit) errors since the driver loaded.
  std::optional<double> gr_engine_active;  // Ratio 0..1.
  std::optional<double> tensor_active;     // Ratio 0..1.
  std::vector<MigSample> mig;              // MIG devices with readings of their own.
  bool lost = false;                       // The GPU stopped answering (NVML_ERROR_GPU_IS_LOST).
};

// An XID error the driver reported for a GPU (e.g. 79: the GPU fell off the bus).
struct XidEvent {
  int gpu = 0;  // -1 when the driver names a device that is none of the node's GPUs.
  int64_t code = 0;
};

struct Telemetry {
  std::vector<GpuSample> gpus;
  std::vector<XidEvent> xids;  // Events since the previous sample.
};

// What the holder of GPU `index`, or of its MIG slice `mig_profile` starting at `mig_start`, reads
// in a report: the GPU's readings, or the slice's own memory and engine activity (the GPU's
// utilization where the slice's is not measured) beside the GPU's power and temperature.
struct HolderReading {
  bool lost = false;    // The GPU stopped answering: nothing else is read.
  double gpu_util = 0;  // Percent.
  int64_t fb_used_mib = 0;
  int64_t fb_total_mib = 0;
  double power_w = 0;
  double temperature_c = 0;
};
// nullopt when the report has no such GPU, or no such slice of it.
std::optional<HolderReading> ReadHolder(const Telemetry& t, int index, std::string_view mig_profile,
                                        int mig_start);

// The wire form (docs/agent.md): {"gpus": [...], "xids": [...]}.
nlohmann::json ToJson(const Telemetry& t);
// InvalidArgument naming the field ("telemetry: gpus[2].power_w: ...") when malformed: a GPU
// index outside 0..63 or given twice, a negative or non-finite reading, more than 64 GPUs, 64
// MIG devices a GPU or 256 XIDs.
Result<Telemetry> FromJson(const nlohmann::json& j);

}  // namespace tessera::telemetry
