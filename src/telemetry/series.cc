#include "telemetry/series.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace tessera::telemetry {
namespace {

constexpr std::array<FieldInfo, kFieldCount> kFields = {{
    {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."},
    {"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."},
    {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."},
    {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."},
    {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."},
    {"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."},
    {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."},
    {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."},
    {"DCGM_FI_PROF_PCIE_TX_BYTES", "gauge",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data "
     "payloads - in bytes per second."},
    {"DCGM_FI_PROF_PCIE_RX_BYTES", "gauge",
     "The rate of data received over the PCIe bus - including both protocol headers and data "
     "payloads - in bytes per second."},
    {"DCGM_FI_DEV_PCIE_TX_BYTES", "gauge",
     "The rate of data transmitted over the PCIe bus, in bytes per second."},
    {"DCGM_FI_DEV_PCIE_RX_BYTES", "gauge",
     "The rate of data received over the PCIe bus, in bytes per second."},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."},
    {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."},
    {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active."},
    {"tessera_gpu_fb_used_percent", "gauge",
     "Framebuffer memory used, in percent of used plus free (Tessera)."},
    {"tessera_node_ready", "gauge",
     "1 while the node's agent holds its lease, 0 once the node is not_ready (Tessera)."},
    {"tessera_gpu_healthy", "gauge",
     "1 while work may be placed on the GPU, 0 while the server holds it out of service after a "
     "fatal fault (Tessera)."},
    {"tessera_tenant_budget_used_percent", "gauge",
     "The tenant's spend this month, in percent of its monthly budget (Tessera)."},
    {"tessera_instance_interrupted", "gauge",
     "1 for 15 minutes after the platform moved the instance off a GPU that went out of service "
     "or a node that was lost (Tessera)."},
}};

constexpr int64_t kBytesPerKib = 1024;

void Add(Target& t, std::string name, std::string value) {
  t.labels.push_back({std::move(name), std::move(value)});
}

// dcgm-exporter's fixed labels for a GPU (and a MIG instance of it), then Hostname and the
// driver version.
Target GpuTarget(const NodeInfo& node, const NodeInfo::Gpu& gpu, const Holder* mig) {
  Target t;
  t.labels.reserve(12);
  Add(t, "gpu", std::to_string(gpu.index));
  Add(t, "UUID", gpu.uuid);
  Add(t, "pci_bus_id", gpu.pci_bus_id);
  Add(t, "device", "nvidia" + std::to_string(gpu.index));
  Add(t, "modelName", gpu.name);
  if (mig) {
    Add(t, "GPU_I_PROFILE", mig->mig_profile);
    Add(t, "GPU_I_ID", std::to_string(mig->gi_id >= 0 ? mig->gi_id : mig->mig_start));
  }
  Add(t, "Hostname", node.hostname);
  Add(t, "DCGM_FI_DRIVER_VERSION", node.driver_version);
  return t;
}

// Tessera's attributes, in sorted order after the fixed labels, as dcgm-exporter sorts its own.
void AddHolder(Target& t, const Holder& h, bool share) {
  if (share) Add(t, "fraction", fmt::format("{:g}", h.milli / 1000.0));
  Add(t, "tenant", h.tenant);
  Add(t, "tessera_instance", h.instance);
  t.tenant = h.tenant;
}

// What a GPU, or a MIG instance, has of its own: its memory and its engines' activity.
void SetOwn(Target& t, int64_t used_mib, int64_t total_mib, const std::optional<double>& engine,
            const std::optional<double>& tensor) {
  t.set(Field::kFbUsed, static_cast<double>(used_mib));
  t.set(Field::kFbFree, static_cast<double>(std::max<int64_t>(0, total_mib - used_mib)));
  if (total_mib > 0) {
    t.set(Field::kFbUsedPercent,
          100.0 * static_cast<double>(used_mib) / static_cast<double>(total_mib));
  }
  if (engine) t.set(Field::kGrEngineActive, *engine);
  if (tensor) t.set(Field::kPipeTensorActive, *tensor);
}

// The GPU-wide readings.
void SetDevice(Target& t, const GpuSample& s, int64_t xid, bool mig_mode) {
  if (s.lost) {
    t.set(Field::kXidErrors, static_cast<double>(xid));
    return;
  }
  t.set(Field::kSmClock, static_cast<double>(s.sm_clock_mhz));
  t.set(Field::kMemClock, static_cast<double>(s.mem_clock_mhz));
  t.set(Field::kGpuTemp, s.temperature_c);
  t.set(Field::kPowerUsage, s.power_w);
  t.set(Field::kXidErrors, static_cast<double>(xid));
  const double tx = static_cast<double>(s.pcie_tx_kib_s * kBytesPerKib);
  const double rx = static_cast<double>(s.pcie_rx_kib_s * kBytesPerKib);
  t.set(Field::kPcieTxBytes, tx);
  t.set(Field::kPcieRxBytes, rx);
  t.set(Field::kDevPcieTxBytes, tx);
  t.set(Field::kDevPcieRxBytes, rx);
  t.set(Field::kEccSbeVolTotal, static_cast<double>(s.ecc_sbe_total));
  t.set(Field::kEccDbeVolTotal, static_cast<double>(s.ecc_dbe_total));
  if (mig_mode) return;  // Utilization and memory are the MIG instances' (NVML has no GPU-wide).
  t.set(Field::kGpuUtil, s.gpu_util);
  t.set(Field::kMemCopyUtil, s.mem_copy_util);
  SetOwn(t, s.memory_used_mib, s.memory_total_mib, s.gr_engine_active, s.tensor_active);
}

}  // namespace

const FieldInfo& Info(Field f) { return kFields[static_cast<size_t>(f)]; }

std::optional<Field> FindField(std::string_view name) {
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (kFields[i].name == name) return static_cast<Field>(i);
  }
  return std::nullopt;
}

std::string FieldNames() {
  std::string out;
  for (const FieldInfo& f : kFields) out += (out.empty() ? "" : ", ") + std::string(f.name);
  return out;
}

const std::string* Target::label(std::string_view name) const {
  for (const Label& l : labels) {
    if (l.name == name) return &l.value;
  }
  return nullptr;
}

void NodeTargets(const NodeInfo& node, const Telemetry* telemetry,
                 const std::vector<Holder>& holders, bool ready, std::vector<Target>& out) {
  Target n;
  Add(n, "Hostname", node.hostname);
  n.set(Field::kNodeReady, ready ? 1 : 0);
  out.push_back(std::move(n));
  for (const NodeInfo::Gpu& gpu : node.gpus) {
    const GpuSample* sample = nullptr;
    int64_t xid = 0;
    if (telemetry) {
      for (const GpuSample& s : telemetry->gpus) {
        if (s.index == gpu.index) sample = &s;
      }
      for (const XidEvent& x : telemetry->xids) {
        if (x.gpu == gpu.index) xid = x.code;
      }
    }
    std::vector<const Holder*> mine;
    for (const Holder& h : holders) {
      if (h.gpu == gpu.index) mine.push_back(&h);
    }
    // In MIG mode as the driver says, or as the placements say (they are the server's).
    bool mig_mode = gpu.mig_enabled;
    for (const Holder* h : mine) mig_mode = mig_mode || !h->mig_profile.empty();
    if (mig_mode || mine.empty()) {
      Target t = GpuTarget(node, gpu, nullptr);
      if (sample) SetDevice(t, *sample, xid, mig_mode);
      if (telemetry) t.set(Field::kGpuHealthy, gpu.healthy ? 1 : 0);
      out.push_back(std::move(t));
    }
    for (const Holder* h : mine) {
      if (mig_mode != !h->mig_profile.empty()) continue;  // A stale placement: not this mode.
      Target t = GpuTarget(node, gpu, mig_mode ? h : nullptr);
      AddHolder(t, *h, !mig_mode && h->milli < 1000);
      if (sample && mig_mode) {
        for (const MigSample& m : sample->mig) {
          if (m.start != h->mig_start || m.profile != h->mig_profile) continue;
          SetOwn(t, m.fb_used_mib, m.fb_total_mib, m.gr_engine_active, m.tensor_active);
        }
      } else if (sample) {
        SetDevice(t, *sample, xid, false);
      }
      if (telemetry && !mig_mode) t.set(Field::kGpuHealthy, gpu.healthy ? 1 : 0);
      out.push_back(std::move(t));
    }
  }
}

void AppendEscaped(std::string& out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

void RenderExposition(const std::vector<Target>& targets, std::string& out) {
  // Each target's label set once, then one line per field it has.
  std::vector<std::string> label_sets;
  label_sets.reserve(targets.size());
  for (const Target& t : targets) {
    std::string s = "{";
    for (size_t i = 0; i < t.labels.size(); ++i) {
      if (i) s += ',';
      s += t.labels[i].name;
      s += "=\"";
      AppendEscaped(s, t.labels[i].value);
      s += '"';
    }
    s += "} ";
    label_sets.push_back(std::move(s));
  }
  // The exact size but for the values, so the text is written once, never moved as it grows.
  size_t total = out.size();
  for (size_t f = 0; f < kFieldCount; ++f) {
    const FieldInfo& info = kFields[f];
    total += 2 * info.name.size() + info.help.size() + info.type.size() + 16;
    for (size_t i = 0; i < targets.size(); ++i) {
      if (!std::isnan(targets[i].values[f])) total += info.name.size() + label_sets[i].size() + 25;
    }
  }
  out.reserve(total);
  auto sink = std::back_inserter(out);
  for (size_t f = 0; f < kFieldCount; ++f) {
    const FieldInfo& info = kFields[f];
    bool header = false;
    for (size_t i = 0; i < targets.size(); ++i) {
      const double v = targets[i].values[f];
      if (std::isnan(v)) continue;
      if (!header) {
        fmt::format_to(sink, "# HELP {} {}\n# TYPE {} {}\n", info.name, info.help, info.name,
                       info.type);
        header = true;
      }
      out += info.name;
      out += label_sets[i];
      fmt::format_to(sink, "{}\n", v);
    }
  }
}

}  // namespace tessera::telemetry
