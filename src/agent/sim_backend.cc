// The simulated backend: catalog GPUs with telemetry computed from their load. The model is
// deliberately simple and documented in docs/agent-backends.md; what matters is that it moves
// the way a real GPU's readings move, and repeats exactly for a seed.
// Thread-safety: every public method locks mu_.
#include "agent/sim_backend.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tessera::agent {
namespace {

// Readings of an idle and a fully loaded GPU. Clocks are generic (the catalog has none):
// Hopper-like idle and boost SM clocks and a fixed HBM clock.
constexpr double kIdleTempC = 30;
constexpr double kFullLoadTempC = 75;
constexpr double kIdlePowerShare = 0.10;  // Of TDP.
constexpr double kNoisePercent = 2;       // Utilization noise of a loaded GPU, +/- percent.
constexpr double kMemCopyShare = 0.6;     // Memory-copy utilization per utilization percent.
constexpr double kMemoryUsedAtFullLoad = 0.9;
constexpr double kTensorShare = 0.6;  // Tensor pipe activity per unit of engine activity.
constexpr int64_t kIdleSmClockMhz = 345;
constexpr int64_t kBoostSmClockMhz = 1980;
constexpr int64_t kMemClockMhz = 1593;
constexpr int64_t kPcieTxKibPerPercent = 1024;
constexpr int64_t kPcieRxKibPerPercent = 2048;
constexpr int64_t kXidFallenOffBus = 79;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ULL;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ULL;
  }
  return h;
}

std::string CatalogIds(const catalog::Catalog& catalog) {
  std::string ids;
  for (const catalog::GpuModel& m : catalog.gpus()) ids += (ids.empty() ? "" : ", ") + m.id;
  return ids;
}

std::string SimBusId(int index) {
  char out[32];
  std::snprintf(out, sizeof(out), "00000000:%02X:00.0", 0x10 + 8 * index);
  return out;
}

}  // namespace

std::string SimGpuUuid(std::string_view node_name, int index) {
  uint64_t state = Fnv1a(node_name) ^ (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
  const uint64_t hi = SplitMix64(state), lo = SplitMix64(state);
  char out[48];
  std::snprintf(out, sizeof(out), "GPU-%08x-%04x-%04x-%04x-%012llx",
                static_cast<unsigned>(hi >> 32), static_cast<unsigned>((hi >> 16) & 0xFFFF),
                static_cast<unsigned>(hi & 0xFFFF), static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFULL));
  return out;
}

Result<std::unique_ptr<SimBackend>> SimBackend::Create(const catalog::Catalog& catalog,
                                                       std::string_view gpus,
                                                       std::string_view node_name, uint64_t seed,
                                                       SimHost host) {
  const std::string where = "sim GPUs '" + std::string(gpus) + "'";
  const size_t colon = gpus.rfind(':');
  if (colon == std::string_view::npos || colon == 0) {
    return Status::InvalidArgument(where + ": want MODEL:COUNT, e.g. H100-80GB:8");
  }
  const std::string_view model_name = gpus.substr(0, colon), count_text = gpus.substr(colon + 1);
  int count = 0;
  auto [end, ec] = std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
  if (ec != std::errc() || end != count_text.data() + count_text.size() || count < 1 ||
      count > kMaxGpus) {
    return Status::InvalidArgument(where + ": the count '" + std::string(count_text) +
                                   "' is not a whole number from 1 to " + std::to_string(kMaxGpus));
  }
  const catalog::GpuModel* model = catalog.FindGpu(model_name);
  if (model == nullptr) {
    return Status::NotFound(where + ": unknown GPU model '" + std::string(model_name) +
                            "'; the catalog has " + CatalogIds(catalog));
  }
  if (host.cpu_milli < 0 || host.memory_mib < 0) {
    return Status::InvalidArgument(where +
                                   ": the host's cpu_milli and memory_mib must not be "
                                   "negative");
  }
  if (host.mig_gpus < 0 || host.mig_gpus > count) {
    return Status::InvalidArgument(where + ": " + std::to_string(host.mig_gpus) +
                                   " GPUs in MIG mode, of " + std::to_string(count));
  }
  if (host.mig_gpus > 0 && !model->mig) {
    return Status::InvalidArgument(where + ": " + model->id + " has no MIG mode");
  }
  if (!host.gpu_uuids.empty() && host.gpu_uuids.size() != static_cast<size_t>(count)) {
    return Status::InvalidArgument(where + ": " + std::to_string(host.gpu_uuids.size()) +
                                   " GPU UUIDs given for " + std::to_string(count) + " GPUs");
  }
  if (host.cpu_milli == 0) host.cpu_milli = kDefaultCpuMilliPerGpu * count;
  if (host.memory_mib == 0) host.memory_mib = kDefaultMemoryMibPerGpu * count;
  std::vector<SimGpu> sim(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    GpuInfo& g = sim[static_cast<size_t>(i)].info;
    g.index = i;
    g.uuid =
        host.gpu_uuids.empty() ? SimGpuUuid(node_name, i) : host.gpu_uuids[static_cast<size_t>(i)];
    g.name = "Simulated " + model->id;
    g.model = model->id;
    g.memory_mib = model->memory_mib;
    g.pci_bus_id = SimBusId(i);
    g.mig_enabled = i < host.mig_gpus;
    for (int peer = 0; model->nvlink_gbps > 0 && peer < count; ++peer) {
      if (peer != i) g.nvlink_peers.push_back(peer);
    }
  }
  return std::unique_ptr<SimBackend>(
      new SimBackend(model->tdp_watts, model->mig, std::move(sim), host, seed ^ Fnv1a(node_name)));
}

Status SimBackend::InjectFault(const std::string& kind, int gpu, int64_t code) {
  if (kind == "xid") return InjectXid(gpu, code);
  if (kind == "overheat" || kind == "cool") return Overheat(gpu, kind == "overheat");
  if (kind == "lost" || kind == "found") return LoseGpu(gpu, kind == "lost");
  return Status::InvalidArgument("fault '" + kind + "' is not xid, overheat, cool, lost or found");
}

SimBackend::SimBackend(int tdp_watts, const mig::Table* mig, std::vector<SimGpu> gpus, SimHost host,
                       uint64_t seed)
    : tdp_watts_(tdp_watts), mig_(mig), host_(host), gpus_(std::move(gpus)), rng_(seed) {
  std::vector<GpuInfo> infos;
  for (const SimGpu& g : gpus_) infos.push_back(g.info);
  islands_ = NvlinkIslands(infos);
}

Result<Inventory> SimBackend::ReadInventory() {
  std::lock_guard lock(mu_);
  Inventory inv;
  inv.backend = "sim";
  inv.driver_version = "sim";
  for (const SimGpu& g : gpus_) inv.gpus.push_back(g.info);
  inv.nvlink_islands = islands_;
  inv.cpu_milli = host_.cpu_milli;
  inv.memory_mib = host_.memory_mib;
  return inv;
}

double SimBackend::Noise() { return static_cast<double>(SplitMix64(rng_) >> 11) * 0x1.0p-52 - 1.0; }

Result<Telemetry> SimBackend::Sample() {
  std::lock_guard lock(mu_);
  Telemetry t;
  for (const SimGpu& g : gpus_) {
    const double noise = Noise();  // Drawn for every GPU, so the sequence ignores the loads.
    GpuSample s;
    s.index = g.info.index;
    s.memory_total_mib = g.info.memory_mib;
    if (g.lost) {
      s.lost = true;
      t.gpus.push_back(s);
      continue;
    }
    const double load = g.load_milli / 1000.0;
    double util = 100 * load;
    if (g.load_milli > 0) util = std::clamp(util + kNoisePercent * noise, 0.0, 100.0);
    const double u = util / 100;
    s.gpu_util = util;
    s.mem_copy_util = kMemCopyShare * util;
    s.memory_used_mib =
        std::llround(kMemoryUsedAtFullLoad * load * static_cast<double>(g.info.memory_mib));
    s.temperature_c = kIdleTempC + (kFullLoadTempC - kIdleTempC) * u;
    if (g.overheat) {
      s.temperature_c = std::max(s.temperature_c, static_cast<double>(kOverheatFloorC) + 6 * u);
    }
    s.power_w = tdp_watts_ * (kIdlePowerShare + (1 - kIdlePowerShare) * u);
    s.sm_clock_mhz =
        kIdleSmClockMhz + std::llround(static_cast<double>(kBoostSmClockMhz - kIdleSmClockMhz) * u);
    s.mem_clock_mhz = kMemClockMhz;
    s.pcie_tx_kib_s = std::llround(static_cast<double>(kPcieTxKibPerPercent) * util);
    s.pcie_rx_kib_s = std::llround(static_cast<double>(kPcieRxKibPerPercent) * util);
    s.gr_engine_active = u;
    s.tensor_active = kTensorShare * u;
    for (const MigLoad& l : mig_loads_) {
      const mig::Profile* p = mig_ ? mig_->Find(l.profile) : nullptr;
      if (l.gpu != g.info.index || !g.info.mig_enabled || !p) continue;
      const double share = l.milli / 1000.0;
      MigSample m;
      m.start = l.start;
      m.profile = l.profile;
      m.fb_total_mib = p->memory_mib;
      m.fb_used_mib =
          std::llround(kMemoryUsedAtFullLoad * share * static_cast<double>(p->memory_mib));
      m.gr_engine_active = share;
      m.tensor_active = kTensorShare * share;
      s.mig.push_back(std::move(m));
    }
    t.gpus.push_back(s);
  }
  t.xids = std::move(xids_);
  xids_.clear();
  return t;
}

void SimBackend::SetLoad(int gpu, int milli) {
  std::lock_guard lock(mu_);
  if (!CheckGpu(gpu).ok()) return;
  gpus_[static_cast<size_t>(gpu)].load_milli = std::clamp(milli, 0, 1000);
}

void SimBackend::SetMigLoads(std::vector<MigLoad> loads) {
  std::lock_guard lock(mu_);
  for (MigLoad& l : loads) l.milli = std::clamp(l.milli, 0, 1000);
  mig_loads_ = std::move(loads);
}

Status SimBackend::CheckGpu(int gpu) const {
  if (gpu >= 0 && static_cast<size_t>(gpu) < gpus_.size()) return Status::Ok();
  return Status::InvalidArgument("no GPU " + std::to_string(gpu) +
                                 " on this simulated node: it has " + std::to_string(gpus_.size()) +
                                 " (0 to " + std::to_string(gpus_.size() - 1) + ")");
}

Status SimBackend::InjectXid(int gpu, int64_t code) {
  std::lock_guard lock(mu_);
  TESSERA_RETURN_IF_ERROR(CheckGpu(gpu));
  xids_.push_back(XidEvent{gpu, code});
  return Status::Ok();
}

Status SimBackend::Overheat(int gpu, bool on) {
  std::lock_guard lock(mu_);
  TESSERA_RETURN_IF_ERROR(CheckGpu(gpu));
  gpus_[static_cast<size_t>(gpu)].overheat = on;
  return Status::Ok();
}

Status SimBackend::LoseGpu(int gpu, bool lost) {
  std::lock_guard lock(mu_);
  TESSERA_RETURN_IF_ERROR(CheckGpu(gpu));
  SimGpu& g = gpus_[static_cast<size_t>(gpu)];
  if (lost && !g.lost) xids_.push_back(XidEvent{gpu, kXidFallenOffBus});
  g.lost = lost;
  return Status::Ok();
}

}  // namespace tessera::agent
