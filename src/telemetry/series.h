// GPU series in dcgm-exporter's shape: one Target per GPU (or MIG instance, or share holder),
// with dcgm-exporter's labels (gpu, UUID, pci_bus_id, device, modelName, GPU_I_PROFILE,
// GPU_I_ID, Hostname, DCGM_FI_DRIVER_VERSION) and Tessera's (tessera_instance, tenant,
// fraction), and one value per Field. The server's /metrics, an agent's --metrics-listen and the
// alert evaluator all read the same targets, built by NodeTargets.
// Field names, types and help texts are dcgm-exporter's (docs/telemetry.md lists them).
// Thread-safety: values and pure functions.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "telemetry/sample.h"

namespace tessera::telemetry {

enum class Field : uint8_t {
  kSmClock,
  kMemClock,
  kGpuTemp,
  kPowerUsage,
  kGpuUtil,
  kMemCopyUtil,
  kXidErrors,
  kFbFree,
  kFbUsed,
  kPcieTxBytes,  // DCGM_FI_PROF_PCIE_TX_BYTES: dcgm-exporter's default name.
  kPcieRxBytes,
  kDevPcieTxBytes,  // DCGM_FI_DEV_PCIE_TX_BYTES: the same rate under DCGM's device-field name.
  kDevPcieRxBytes,
  kEccSbeVolTotal,
  kEccDbeVolTotal,
  kGrEngineActive,
  kPipeTensorActive,
  kFbUsedPercent,      // Tessera's: FB used / (used + free) in percent, for threshold rules.
  kNodeReady,          // Tessera's: 1 while a node's agent holds its lease, else 0 (node targets).
  kGpuHealthy,         // Tessera's: 0 while the server holds the GPU out of service, else 1
                       // (on GPU targets, once the node reported since the server started).
  kBudgetUsedPercent,  // Tessera's: a tenant's spend this month over its budget (tenant targets).
  kInstanceInterrupted,  // Tessera's: 1 for a while after a fault moved an instance (its targets).
};
inline constexpr size_t kFieldCount = static_cast<size_t>(Field::kInstanceInterrupted) + 1;

struct FieldInfo {
  std::string_view name;  // e.g. "DCGM_FI_DEV_GPU_UTIL".
  std::string_view type;  // "gauge" or "counter".
  std::string_view help;
};
const FieldInfo& Info(Field f);
// The field named `name`, or nullopt.
std::optional<Field> FindField(std::string_view name);
// Every field's name, comma-separated, for error messages.
std::string FieldNames();

struct Label {
  std::string name;
  std::string value;
};

struct Target {
  std::vector<Label> labels;  // In exposition order.
  std::string tenant;         // The holder's tenant; empty when no instance uses it.
  std::array<double, kFieldCount> values;

  Target() { values.fill(std::numeric_limits<double>::quiet_NaN()); }
  bool has(Field f) const { return !std::isnan(values[static_cast<size_t>(f)]); }
  double get(Field f) const { return values[static_cast<size_t>(f)]; }
  void set(Field f, double v) { values[static_cast<size_t>(f)] = v; }
  // The label's value, or nullptr.
  const std::string* label(std::string_view name) const;
};

// What a node is, for its targets' labels.
struct NodeInfo {
  std::string hostname;
  std::string driver_version;
  struct Gpu {
    int index = 0;
    std::string uuid;
    std::string name;  // modelName: as the driver names it, e.g. "NVIDIA H100 80GB HBM3".
    std::string pci_bus_id;
    bool mig_enabled = false;
    bool healthy = true;  // False while the server holds it out of service (a fatal fault).
  };
  std::vector<Gpu> gpus;
};

// An instance using (part of) a GPU.
struct Holder {
  int gpu = 0;
  std::string instance;
  std::string tenant;
  int milli = 1000;         // Below 1000: a share, labelled with its fraction.
  std::string mig_profile;  // Non-empty: a MIG instance.
  int mig_start = 0;
  int gi_id = -1;  // The driver's GPU instance id when known; else mig_start is shown.
};

// Appends the node's targets to `out`: per GPU not in MIG mode, one target per holder (one,
// unlabelled, when idle); per GPU in MIG mode, one for the GPU's own readings and one per MIG
// instance held. `telemetry` is the last report's, or null (the targets then carry no values
// but node readiness is still set on the node target). `xid_window` holds the XIDs of that
// report: DCGM_FI_DEV_XID_ERRORS is the last code seen in it, else 0. A node target (Hostname
// only) carries kNodeReady = `ready`.
void NodeTargets(const NodeInfo& node, const Telemetry* telemetry,
                 const std::vector<Holder>& holders, bool ready, std::vector<Target>& out);

// Prometheus text format 0.0.4 of `targets`: per field in Field order, HELP and TYPE then one
// line per target that has a value. Content type: kExpositionContentType.
void RenderExposition(const std::vector<Target>& targets, std::string& out);
inline constexpr std::string_view kExpositionContentType =
    "text/plain; version=0.0.4; charset=utf-8";

// Escapes a label value (backslash, double quote, newline).
void AppendEscaped(std::string& out, std::string_view v);

}  // namespace tessera::telemetry
