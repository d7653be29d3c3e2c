// The simulated backend: GPUs of a catalog model that do not exist, for running an agent (and a
// whole cluster of them) on machines without a GPU. Inventory comes from the catalog; telemetry
// follows the load the agent reports with SetLoad (utilization, then temperature, power, memory
// and clocks from it), with a little noise drawn from a seeded generator so a run repeats
// exactly. Faults can be injected (an XID, an overheating GPU, a lost GPU) to exercise the
// health paths of the agent and the server. The formulas are in docs/agent-backends.md.
// Thread-safety: every method may be called from any thread; one mutex guards the state, so an
// admin route may inject faults while the agent loop samples.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "agent/gpu_backend.h"
#include "catalog/catalog.h"
#include "common/result.h"

namespace tessera::agent {

// The host a simulated node claims to be; 0 takes the default, proportional to the GPU count.
struct SimHost {
  int64_t cpu_milli = 0;   // Default: 24 vCPUs per GPU.
  int64_t memory_mib = 0;  // Default: 256 GiB per GPU.
  int mig_gpus = 0;        // The first this many GPUs are in MIG mode (a model with MIG).
  // The GPUs' UUIDs by index; empty: SimGpuUuid's. The server's own agents for a fleet file's
  // nodes report the UUIDs the server gives those GPUs, so a workload sees what its series say.
  std::vector<std::string> gpu_uuids = {};
};

class SimBackend final : public GpuBackend {
 public:
  static constexpr int kMaxGpus = 16;
  static constexpr int64_t kDefaultCpuMilliPerGpu = 24'000;
  static constexpr int64_t kDefaultMemoryMibPerGpu = 256 * 1024;
  static constexpr int64_t kOverheatFloorC = 92;  // An overheating GPU reads at least this.

  // A node of `gpus` = "MODEL:K" (the model a catalog id or alias, 1 <= K <= kMaxGpus), e.g.
  // "H100-80GB:8". The GPUs' UUIDs derive from `node_name` and their index, so a node keeps them
  // across restarts; `seed` drives the telemetry noise. InvalidArgument naming `gpus` when it is
  // malformed or `host` is negative, NotFound naming the model when the catalog lacks it.
  static Result<std::unique_ptr<SimBackend>> Create(const catalog::Catalog& catalog,
                                                    std::string_view gpus,
                                                    std::string_view node_name, uint64_t seed,
                                                    SimHost host = {});

  // The catalog's GPUs, all in one NVLink island when the model has NVLink, MIG disabled.
  Result<Inventory> ReadInventory() override;
  // Telemetry from each GPU's load and faults; the XIDs injected since the previous Sample.
  Result<Telemetry> Sample() override;
  // Load in milli-GPU, clamped to 0..1000; an unknown `gpu` is ignored.
  bool SimulatesLoad() const override { return true; }
  void SetLoad(int gpu, int milli) override;
  // MIG instances of a profile the model lacks, or on a GPU not in MIG mode, are ignored.
  void SetMigLoads(std::vector<MigLoad> loads) override;
  Status InjectFault(const std::string& kind, int gpu, int64_t code) override;

  // Fault injection. Each returns InvalidArgument naming `gpu` when there is no such GPU.
  // Queues XID `code` on `gpu` for the next Sample.
  Status InjectXid(int gpu, int64_t code);
  // While on, the GPU's temperature reads above 90 C (kOverheatFloorC and up, with load).
  Status Overheat(int gpu, bool on);
  // The GPU falls off the bus: from now on its samples are marked lost with zero readings, and
  // XID 79 ("GPU has fallen off the bus") is queued, as the driver would report it. With `lost`
  // false it answers again (as after a reset: the "found" fault).
  Status LoseGpu(int gpu, bool lost = true);

 private:
  struct SimGpu {
    GpuInfo info;
    int load_milli = 0;
    bool overheat = false;
    bool lost = false;
  };

  SimBackend(int tdp_watts, const mig::Table* mig, std::vector<SimGpu> gpus, SimHost host,
             uint64_t seed);
  Status CheckGpu(int gpu) const;  // Caller holds mu_.
  // Uniform in [-1, 1) from the seeded generator. Caller holds mu_.
  double Noise();

  const int tdp_watts_;
  const mig::Table* mig_;  // The model's MIG profiles; null without MIG.
  const SimHost host_;
  std::vector<std::vector<int>> islands_;
  mutable std::mutex mu_;
  std::vector<SimGpu> gpus_;        // Guarded by mu_.
  std::vector<XidEvent> xids_;      // Guarded by mu_: queued for the next Sample.
  std::vector<MigLoad> mig_loads_;  // Guarded by mu_.
  uint64_t rng_;                    // Guarded by mu_.
};

// "GPU-" and 32 hex digits grouped 8-4-4-4-12, as NVML writes UUIDs, derived from `node_name`
// and `index` alone: the same on every run.
std::string SimGpuUuid(std::string_view node_name, int index);

}  // namespace tessera::agent
