// What the node agent knows about the GPUs of its host, and the interface it reads them through.
// A GpuBackend answers two questions: what is on this node (ReadInventory, once at start and
// after a change) and how is it doing (Sample, every agent tick). Two backends implement it:
// NVML, which reads the real driver through dlopen (nvml_backend.h), and a simulator that makes
// up plausible GPUs from the catalog for machines without one (sim_backend.h). The plain types
// here are what the agent reports to the server; their fields follow NVML's and DCGM's.
// Thread-safety: the types are values. A backend is used by one thread (the agent loop) unless
// the backend says otherwise; the free functions are pure except ReadHostResources, which reads
// /proc and may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog.h"
#include "common/result.h"
#include "telemetry/sample.h"

namespace tessera::agent {

// One MIG device (a compute instance in its GPU instance) that exists on a GPU.
struct MigDevice {
  std::string uuid;     // "MIG-xxxxxxxx-xxxx-...", as the driver names it.
  std::string profile;  // Catalog MIG profile name, e.g. "1g.10gb"; empty when unknown.
  int start = 0;        // Placement start memory slice; -1 when the driver would not tell.
  // Its GPU instance's and compute instance's ids on the GPU; -1 when the driver would not tell.
  // With the GPU's minor they name its /dev/nvidia-caps nodes (container_cdi.h).
  int gpu_instance = -1;
  int compute_instance = -1;
  // A GPU instance without a compute instance: it holds its slices, yet is no device CUDA could
  // use. Its `uuid` is "gpu-instance-<id>", a name of Tessera's. Listed only by a backend that
  // manages MIG (the listing needs the driver's privileges).
  bool bare = false;
};

struct GpuInfo {
  int index = 0;           // The driver's index on this node.
  std::string uuid;        // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
  std::string name;        // As the driver names it, e.g. "NVIDIA H100 80GB HBM3".
  std::string model;       // Catalog id, e.g. "H100-80GB".
  int64_t memory_mib = 0;  // Total memory as the driver reports it (ECC lowers it).
  bool mig_enabled = false;
  std::vector<MigDevice> mig_devices;
  std::vector<int> nvlink_peers;  // Indices of GPUs on this node it has an active NVLink to.
  std::string pci_bus_id;         // "00000000:17:00.0".
  int minor = -1;                 // The N of /dev/nvidiaN; -1 where there is no device node.
};

struct Inventory {
  std::string backend;         // "nvml" or "sim".
  std::string driver_version;  // e.g. "550.90.07"; "sim" for the simulator.
  std::vector<GpuInfo> gpus;
  // Connected components of the GPUs' nvlink_peers, each sorted, only those of size >= 2.
  std::vector<std::vector<int>> nvlink_islands;
  int64_t cpu_milli = 0;   // The host's vCPUs in thousandths.
  int64_t memory_mib = 0;  // The host's RAM.
};

// The readings a backend takes are telemetry's types (telemetry/sample.h).
using telemetry::GpuSample;
using telemetry::MigSample;
using telemetry::Telemetry;
using telemetry::XidEvent;

// What the workloads on one MIG instance use, in milli-GPU of that instance (0..1000).
struct MigLoad {
  int gpu = 0;
  int start = 0;
  std::string profile;
  int milli = 0;
};

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;

  // What is on this node now. An error names the GPU and the call that failed.
  virtual Result<Inventory> ReadInventory() = 0;
  // Every GPU's telemetry, and the XID events since the previous call. A GPU that stopped
  // answering is a sample marked `lost`, not an error.
  virtual Result<Telemetry> Sample() = 0;
  // True when the readings follow SetLoad (a simulated GPU); false when the GPU reports its own.
  virtual bool SimulatesLoad() const { return false; }
  // What the workloads on `gpu` use, in milli-GPU (0..1000), so a simulated GPU's utilization
  // follows its load; the NVML backend ignores it, as the real GPU reports its own.
  virtual void SetLoad(int /*gpu*/, int /*milli*/) {}
  // Every MIG instance's load (replacing the previous set), so a simulated MIG instance reports
  // readings of its own; the NVML backend ignores it.
  virtual void SetMigLoads(std::vector<MigLoad> /*loads*/) {}
  // MIG devices made and destroyed on demand (mig_manager.h), and MIG mode. Only a backend that
  // may change the GPUs does (NVML with MIG management on); the others answer FailedPrecondition
  // and MIG slices use the devices that exist.
  virtual bool CanChangeMig() const { return false; }
  // The MIG devices on `gpu` now, as ReadInventory lists them.
  virtual Result<std::vector<MigDevice>> ReadMigDevices(int /*gpu*/) { return Unimplemented(); }
  // Creates a GPU instance of `profile` at memory slice `start` and one compute instance over all
  // of it, and returns the MIG device with its UUID. Named failures: the profile is not supported
  // here, the GPU is not in MIG mode, the placement is taken (the driver's
  // INSUFFICIENT_RESOURCES: ResourceExhausted). Nothing is left half-made: a GPU instance whose
  // compute instance could not be made is destroyed again.
  virtual Result<MigDevice> CreateMigDevice(int /*gpu*/, const std::string& /*profile*/,
                                            int /*start*/) {
    return Unimplemented();
  }
  // Destroys a MIG device's compute instance and its GPU instance. FailedPrecondition while a
  // process still uses it (the driver's IN_USE); NotFound when it is gone already.
  virtual Status DestroyMigDevice(int /*gpu*/, const MigDevice& /*device*/) {
    return Unimplemented();
  }
  // Turns MIG mode on or off. "applied" when it took effect, "pending_reset" when the driver
  // needs the GPU reset first; FailedPrecondition, with the reason, while processes use the GPU
  // or (turning MIG off) MIG devices exist.
  virtual Result<std::string> SetMigMode(int /*gpu*/, bool /*enabled*/) { return Unimplemented(); }
  // The processes with a context on `gpu` (any of its MIG devices included).
  virtual Result<int> CountProcesses(int /*gpu*/) { return Unimplemented(); }
  // Injects a fault for tests and demos: "xid" (with `code`), "overheat", "cool", "lost" or
  // "found" (a lost GPU answers again).
  // Only the sim backend does; a real GPU's faults are its own.
  virtual Status InjectFault(const std::string& kind, int /*gpu*/, int64_t /*code*/) {
    return Status::FailedPrecondition("this backend does not inject faults ('" + kind +
                                      "'): only --backend sim does");
  }

 private:
  static Status Unimplemented() {
    return Status::FailedPrecondition(
        "this backend does not change MIG devices or modes: only --backend nvml with MIG "
        "management does");
  }
};

// The catalog id for a GPU the driver names `name` with `memory_mib` of memory (0 when unknown).
// The catalog's ids and aliases are matched against NVML names such as "NVIDIA H100 80GB HBM3",
// "NVIDIA A100-SXM4-40GB" or "Tesla T4"; the memory tells variants of one family apart (A100
// 40GB from 80GB) and must be within -15%..+5% of the catalog's figure. NotFound naming the GPU
// and its memory when the catalog has no such model.
Result<std::string> ResolveCatalogModel(const catalog::Catalog& catalog, std::string_view name,
                                        int64_t memory_mib);

// The connected components of the peer graph of `gpus` (by GpuInfo::index; a link counts in
// both directions, peers not in `gpus` are ignored), each sorted, only those of size >= 2,
// ordered by their first index.
std::vector<std::vector<int>> NvlinkIslands(const std::vector<GpuInfo>& gpus);

// The vCPUs online (in milli) and the RAM (MemTotal of /proc/meminfo) of this host; 0 for what
// cannot be read.
void ReadHostResources(int64_t& cpu_milli, int64_t& memory_mib);

}  // namespace tessera::agent
