// The NVML backend's class and the function table it calls through, shared by nvml_backend.cc
// (loading, inventory, telemetry) and nvml_mig.cc (MIG devices, MIG mode, processes). Internal to
// src/agent/; the rest of the agent opens it through OpenNvmlBackend (nvml_backend.h).
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

#include "agent/gpu_backend.h"
#include "agent/nvml_api.h"
#include "catalog/catalog.h"
#include "mig/mig.h"

namespace tessera::agent::nvml_impl {

namespace nv = nvml;

// The functions looked up, all read-only (reference section 10). A null optional one reads as
// NVML_ERROR_FUNCTION_NOT_FOUND: that feature is not supported on this driver.
struct Api {
  // Required.
  nv::nvmlInit_fn init = nullptr;
  nv::nvmlShutdown_fn shutdown = nullptr;
  nv::nvmlErrorString_fn error_string = nullptr;
  nv::nvmlDeviceGetCount_fn get_count = nullptr;
  nv::nvmlDeviceGetHandleByIndex_fn get_handle = nullptr;
  nv::nvmlDeviceGetString_fn get_name = nullptr;
  nv::nvmlDeviceGetString_fn get_uuid = nullptr;
  nv::nvmlDeviceGetPciInfo_fn get_pci = nullptr;
  nv::nvmlDeviceGetMemoryInfo_fn get_memory = nullptr;
  // Optional.
  nv::nvmlSystemGetDriverVersion_fn driver_version = nullptr;
  nv::nvmlDeviceGetUtilizationRates_fn utilization = nullptr;
  nv::nvmlDeviceGetTemperature_fn temperature = nullptr;
  nv::nvmlDeviceGetUint_fn power = nullptr;
  nv::nvmlDeviceGetClockInfo_fn clock = nullptr;
  nv::nvmlDeviceGetPcieThroughput_fn pcie = nullptr;
  nv::nvmlDeviceGetTotalEccErrors_fn ecc = nullptr;
  nv::nvmlDeviceGetNvLinkState_fn nvlink_state = nullptr;
  nv::nvmlDeviceGetNvLinkRemotePciInfo_fn nvlink_remote = nullptr;
  nv::nvmlDeviceGetMigMode_fn mig_mode = nullptr;
  nv::nvmlDeviceGetUint_fn max_mig = nullptr;
  nv::nvmlDeviceGetMigDeviceHandleByIndex_fn mig_handle = nullptr;
  nv::nvmlDeviceGetUint_fn gpu_instance_id = nullptr;
  nv::nvmlDeviceGetUint_fn compute_instance_id = nullptr;
  nv::nvmlDeviceGetUint_fn minor = nullptr;
  nv::nvmlDeviceGetGpuInstanceById_fn gpu_instance = nullptr;
  nv::nvmlGpuInstanceGetInfo_fn gpu_instance_info = nullptr;
  nv::nvmlEventSetCreate_fn event_create = nullptr;
  nv::nvmlDeviceGetSupportedEventTypes_fn event_types = nullptr;
  nv::nvmlDeviceRegisterEvents_fn event_register = nullptr;
  nv::nvmlEventSetWait_fn event_wait = nullptr;
  nv::nvmlEventSetFree_fn event_free = nullptr;
  // Looked up only when the backend manages MIG (NvmlOptions::manage_mig).
  nv::nvmlDeviceGetGpuInstanceProfileInfo_fn gi_profile = nullptr;
  nv::nvmlGpuInstanceGetComputeInstanceProfileInfo_fn ci_profile = nullptr;
  nv::nvmlGpuInstanceGetComputeInstanceById_fn compute_instance = nullptr;
  nv::nvmlDeviceGetComputeRunningProcesses_fn processes = nullptr;
  nv::nvmlDeviceCreateGpuInstanceWithPlacement_fn create_gi = nullptr;
  nv::nvmlGpuInstanceDestroy_fn destroy_gi = nullptr;
  nv::nvmlGpuInstanceCreateComputeInstance_fn create_ci = nullptr;
  nv::nvmlComputeInstanceDestroy_fn destroy_ci = nullptr;
  nv::nvmlDeviceSetMigMode_fn set_mig_mode = nullptr;
  nv::nvmlDeviceGetGpuInstances_fn gpu_instances = nullptr;
};

class FieldReader;  // nvml_backend.cc

class NvmlBackend final : public GpuBackend {
 public:
  NvmlBackend(const catalog::Catalog& catalog, void* lib, bool manage_mig)
      : catalog_(catalog), lib_(lib), manage_mig_(manage_mig) {}
  ~NvmlBackend() override {
    if (events_ != nullptr && api_.event_free != nullptr) api_.event_free(events_);
    if (initialized_) api_.shutdown();
    dlclose(lib_);
  }
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  // Looks up the functions, initializes NVML, takes every GPU's handle and registers for XIDs.
  Status Start(const std::string& library);

  Result<Inventory> ReadInventory() override;
  Result<Telemetry> Sample() override;
  bool CanChangeMig() const override { return manage_mig_; }
  Result<std::vector<MigDevice>> ReadMigDevices(int gpu) override;
  Result<MigDevice> CreateMigDevice(int gpu, const std::string& profile, int start) override;
  Status DestroyMigDevice(int gpu, const MigDevice& device) override;
  Result<std::string> SetMigMode(int gpu, bool enabled) override;
  Result<int> CountProcesses(int gpu) override;

 private:
  // "GPU is lost (NVML error 15)".
  std::string Describe(nv::nvmlReturn_t r) const;
  // "GPU 3: nvmlDeviceGetName: <what>": Unavailable for a lost GPU, else Internal (NVML or the
  // GPU misbehaved).
  Status CallError(int gpu, const char* function, nv::nvmlReturn_t r) const;
  // The handle of GPU `i`; taken again when the first try failed.
  nv::nvmlReturn_t Device(unsigned int i, nv::nvmlDevice_t* out);
  Result<GpuInfo> ReadGpu(int index, nv::nvmlDevice_t dev);
  std::vector<MigDevice> ReadMigDevices(nv::nvmlDevice_t dev, const std::string& model);
  // Appends the GPU instances of `dev` that hold no compute instance (none of `out`'s) as bare
  // devices; nothing when the driver would not list them.
  void AddBareGpuInstances(nv::nvmlDevice_t dev, const mig::Table* table,
                           std::vector<MigDevice>& out);
  // GPU `gpu`'s handle and catalog model, for the MIG calls; FailedPrecondition unless the
  // backend manages MIG and the driver has `fn`.
  Status MigCall(int gpu, bool has_fn, const char* fn, nv::nvmlDevice_t* dev);
  // The compute-instance profile id that spans all `slices` compute slices of `gi`.
  Result<unsigned int> FullComputeProfile(int gpu, nv::nvmlGpuInstance_t gi, unsigned int slices);
  // The normalized PCI bus ids at the far end of the GPU's active NVLinks.
  Result<std::vector<std::string>> LinkEndpoints(int index, nv::nvmlDevice_t dev);
  Result<GpuSample> SampleGpu(int index);
  // Every telemetry field of one GPU into `s`, as far as the GPU answers.
  void ReadFields(FieldReader& rd, nv::nvmlDevice_t dev, GpuSample& s);
  void RegisterXidEvents();
  void DrainXidEvents(std::vector<XidEvent>& out);

  const catalog::Catalog& catalog_;
  void* lib_;
  Api api_;
  bool initialized_ = false;
  const bool manage_mig_;
  std::vector<nv::nvmlDevice_t> devices_;  // By index; null where the handle was refused.
  std::vector<std::string> models_;        // Catalog model by index, once ReadInventory ran.
  nv::nvmlEventSet_t events_ = nullptr;
};

// The catalog profile of a MIG device named like "NVIDIA A100-SXM4-40GB MIG 1g.5gb": the word
// after "MIG ", when the model's table has it.
std::string ProfileFromName(const mig::Table& table, const std::string& name);

}  // namespace tessera::agent::nvml_impl
