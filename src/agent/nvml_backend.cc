// The NVML backend: dlopen, an allow-list of read-only symbols, and the inventory and telemetry
// read through them (MIG changes: nvml_mig.cc). Which NVML call feeds which field is in
// docs/agent-backends.md.
// Thread-safety: one thread, as GpuBackend.
#include "agent/nvml_backend.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cinttypes>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "agent/nvml_api.h"
#include "agent/nvml_backend_impl.h"

namespace tessera::agent {
namespace nvml_impl {
namespace {

// Links are numbered from 0; the loop stops at the first INVALID_ARGUMENT, and this bounds it.
constexpr unsigned int kMaxNvLinks = 64;
// XID events read per Sample at most, so a storm cannot stall the agent loop.
constexpr int kMaxEventsPerSample = 256;

int64_t Mib(unsigned long long bytes) { return static_cast<int64_t>(bytes / (1024ULL * 1024ULL)); }

// Sets `fn` to the first of `names` the library exports (newest version first). A required
// function that is missing is an error naming every name tried.
template <typename Fn>
Status Find(void* lib, const std::string& library, Fn& fn, std::initializer_list<const char*> names,
            bool required) {
  for (const char* name : names) {
    if (void* sym = dlsym(lib, name)) {
      fn = reinterpret_cast<Fn>(sym);
      return Status::Ok();
    }
  }
  if (!required) return Status::Ok();
  std::string tried;
  for (const char* name : names) tried += (tried.empty() ? "" : " or ") + std::string(name);
  return Status::FailedPrecondition(library + " does not export " + tried +
                                    ", which the NVML backend needs: the NVIDIA driver is too old "
                                    "or the file is not NVML");
}

Status LoadApi(void* lib, const std::string& library, bool manage_mig, Api& a) {
  TESSERA_RETURN_IF_ERROR(Find(lib, library, a.init, {"nvmlInit_v2", "nvmlInit"}, true));
  TESSERA_RETURN_IF_ERROR(Find(lib, library, a.shutdown, {"nvmlShutdown"}, true));
  TESSERA_RETURN_IF_ERROR(Find(lib, library, a.error_string, {"nvmlErrorString"}, true));
  TESSERA_RETURN_IF_ERROR(
      Find(lib, library, a.get_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, true));
  TESSERA_RETURN_IF_ERROR(Find(lib, library, a.get_handle,
                               {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"},
                               true));
  TESSERA_RETURN_IF_ERROR(Find(lib, library, a.get_name, {"nvmlDeviceGetName"}, true));
  TESSERA_RETURN_IF_ERROR(Find(lib, library, a.get_uuid, {"nvmlDeviceGetUUID"}, true));
  TESSERA_RETURN_IF_ERROR(
      Find(lib, library, a.get_pci,
           {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"}, true));
  TESSERA_RETURN_IF_ERROR(Find(lib, library, a.get_memory, {"nvmlDeviceGetMemoryInfo"}, true));
  // Optional: each lookup below cannot fail.
  (void)Find(lib, library, a.driver_version, {"nvmlSystemGetDriverVersion"}, false);
  (void)Find(lib, library, a.utilization, {"nvmlDeviceGetUtilizationRates"}, false);
  (void)Find(lib, library, a.temperature, {"nvmlDeviceGetTemperature"}, false);
  (void)Find(lib, library, a.power, {"nvmlDeviceGetPowerUsage"}, false);
  (void)Find(lib, library, a.clock, {"nvmlDeviceGetClockInfo"}, false);
  (void)Find(lib, library, a.pcie, {"nvmlDeviceGetPcieThroughput"}, false);
  (void)Find(lib, library, a.ecc, {"nvmlDeviceGetTotalEccErrors"}, false);
  (void)Find(lib, library, a.nvlink_state, {"nvmlDeviceGetNvLinkState"}, false);
  (void)Find(lib, library, a.nvlink_remote,
             {"nvmlDeviceGetNvLinkRemotePciInfo_v2", "nvmlDeviceGetNvLinkRemotePciInfo"}, false);
  (void)Find(lib, library, a.mig_mode, {"nvmlDeviceGetMigMode"}, false);
  (void)Find(lib, library, a.max_mig, {"nvmlDeviceGetMaxMigDeviceCount"}, false);
  (void)Find(lib, library, a.mig_handle, {"nvmlDeviceGetMigDeviceHandleByIndex"}, false);
  (void)Find(lib, library, a.gpu_instance_id, {"nvmlDeviceGetGpuInstanceId"}, false);
  (void)Find(lib, library, a.compute_instance_id, {"nvmlDeviceGetComputeInstanceId"}, false);
  (void)Find(lib, library, a.minor, {"nvmlDeviceGetMinorNumber"}, false);
  (void)Find(lib, library, a.gpu_instance, {"nvmlDeviceGetGpuInstanceById"}, false);
  (void)Find(lib, library, a.gpu_instance_info, {"nvmlGpuInstanceGetInfo"}, false);
  (void)Find(lib, library, a.event_create, {"nvmlEventSetCreate"}, false);
  (void)Find(lib, library, a.event_types, {"nvmlDeviceGetSupportedEventTypes"}, false);
  (void)Find(lib, library, a.event_register, {"nvmlDeviceRegisterEvents"}, false);
  (void)Find(lib, library, a.event_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"}, false);
  (void)Find(lib, library, a.event_free, {"nvmlEventSetFree"}, false);
  if (!manage_mig) return Status::Ok();
  // The MIG calls that change a GPU, and the queries only they need; a driver without one of
  // them cannot make MIG devices, which each attempt then says.
  (void)Find(lib, library, a.gi_profile, {"nvmlDeviceGetGpuInstanceProfileInfo"}, false);
  (void)Find(lib, library, a.ci_profile, {"nvmlGpuInstanceGetComputeInstanceProfileInfo"}, false);
  (void)Find(lib, library, a.compute_instance, {"nvmlGpuInstanceGetComputeInstanceById"}, false);
  (void)Find(lib, library, a.processes, {"nvmlDeviceGetComputeRunningProcesses_v3"}, false);
  (void)Find(lib, library, a.create_gi, {"nvmlDeviceCreateGpuInstanceWithPlacement"}, false);
  (void)Find(lib, library, a.destroy_gi, {"nvmlGpuInstanceDestroy"}, false);
  (void)Find(lib, library, a.create_ci, {"nvmlGpuInstanceCreateComputeInstance"}, false);
  (void)Find(lib, library, a.destroy_ci, {"nvmlComputeInstanceDestroy"}, false);
  (void)Find(lib, library, a.set_mig_mode, {"nvmlDeviceSetMigMode"}, false);
  (void)Find(lib, library, a.gpu_instances, {"nvmlDeviceGetGpuInstances"}, false);
  return Status::Ok();
}

// Codes that mean "this GPU or driver cannot tell": the field is left 0.
bool Unsupported(nv::nvmlReturn_t r) {
  return r == nv::NVML_ERROR_NOT_SUPPORTED || r == nv::NVML_ERROR_FUNCTION_NOT_FOUND ||
         r == nv::NVML_ERROR_NO_PERMISSION;
}

// A PCI bus id in one spelling ("%08X:%02X:%02X.%X"), so the legacy 4-digit domain and case
// differences still match.
std::string NormalizeBusId(const char* bus_id) {
  unsigned int domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return bus_id;
  char out[32];
  std::snprintf(out, sizeof(out), "%08X:%02X:%02X.%X", domain, bus, device, function);
  return out;
}

}  // namespace

// Reads one field after another and remembers how the GPU answered: NOT_SUPPORTED and the like
// leave the field 0, GPU_IS_LOST marks the GPU lost (and stops further calls), and any other
// failure is kept, the first one, for the caller to report.
class FieldReader {
 public:
  // True when `call` (skipped when !available or the GPU is lost) returned NVML_SUCCESS.
  template <typename Call>
  bool Got(const char* function, bool available, Call call) {
    if (lost_ || !available) return false;
    nv::nvmlReturn_t r = call();
    if (r == nv::NVML_SUCCESS) return true;
    if (r == nv::NVML_ERROR_GPU_IS_LOST) {
      lost_ = true;
    } else if (!Unsupported(r) && failed_function_ == nullptr) {
      failed_function_ = function;
      failure_ = r;
    }
    return false;
  }
  bool lost() const { return lost_; }
  // The first unexpected failure: the function, or nullptr when none.
  const char* failed_function() const { return failed_function_; }
  nv::nvmlReturn_t failure() const { return failure_; }

 private:
  bool lost_ = false;
  const char* failed_function_ = nullptr;
  nv::nvmlReturn_t failure_ = nv::NVML_SUCCESS;
};

// The catalog profile of a MIG device named like "NVIDIA A100-SXM4-40GB MIG 1g.5gb": the word
// after "MIG ", when the model's table has it.
std::string ProfileFromName(const mig::Table& table, const std::string& name) {
  size_t at = name.rfind("MIG ");
  if (at == std::string::npos) return "";
  std::string word = name.substr(at + 4);
  return table.Find(word) != nullptr ? word : "";
}

std::string NvmlBackend::Describe(nv::nvmlReturn_t r) const {
  const char* s = api_.error_string != nullptr ? api_.error_string(r) : nullptr;
  return std::string(s != nullptr ? s : "unknown error") + " (NVML error " + std::to_string(r) +
         ")";
}

Status NvmlBackend::CallError(int gpu, const char* function, nv::nvmlReturn_t r) const {
  std::string what = "GPU " + std::to_string(gpu) + ": " + function + ": " + Describe(r);
  if (r == nv::NVML_ERROR_GPU_IS_LOST) {
    return Status::Unavailable(what + "; the GPU needs a reset, or the node a reboot");
  }
  return Status::Internal(what);
}

Status NvmlBackend::Start(const std::string& library) {
  TESSERA_RETURN_IF_ERROR(LoadApi(lib_, library, manage_mig_, api_));
  nv::nvmlReturn_t r = api_.init();
  if (r != nv::NVML_SUCCESS) {
    return Status::FailedPrecondition("nvmlInit_v2 failed: " + Describe(r) +
                                      "; check that the NVIDIA kernel module is loaded "
                                      "(nvidia-smi), or use --backend sim");
  }
  initialized_ = true;
  unsigned int count = 0;
  r = api_.get_count(&count);
  if (r != nv::NVML_SUCCESS) {
    return Status::FailedPrecondition("nvmlDeviceGetCount_v2 failed: " + Describe(r));
  }
  devices_.assign(count, nullptr);
  for (unsigned int i = 0; i < count; ++i) {
    if (api_.get_handle(i, &devices_[i]) != nv::NVML_SUCCESS) devices_[i] = nullptr;
  }
  RegisterXidEvents();
  return Status::Ok();
}

nv::nvmlReturn_t NvmlBackend::Device(unsigned int i, nv::nvmlDevice_t* out) {
  if (devices_[i] == nullptr) {
    nv::nvmlReturn_t r = api_.get_handle(i, &devices_[i]);
    if (r != nv::NVML_SUCCESS) {
      devices_[i] = nullptr;
      return r;
    }
  }
  *out = devices_[i];
  return nv::NVML_SUCCESS;
}

void NvmlBackend::RegisterXidEvents() {
  if (api_.event_create == nullptr || api_.event_register == nullptr ||
      api_.event_wait == nullptr || api_.event_free == nullptr) {
    return;
  }
  if (api_.event_create(&events_) != nv::NVML_SUCCESS) {
    events_ = nullptr;
    return;
  }
  for (nv::nvmlDevice_t dev : devices_) {
    if (dev == nullptr) continue;
    unsigned long long supported = nv::nvmlEventTypeXidCriticalError;
    if (api_.event_types != nullptr && api_.event_types(dev, &supported) == nv::NVML_SUCCESS &&
        (supported & nv::nvmlEventTypeXidCriticalError) == 0) {
      continue;
    }
    // XIDs alone: an unsupported bit in the mask would register none of them.
    if (api_.event_register(dev, nv::nvmlEventTypeXidCriticalError, events_) ==
        nv::NVML_ERROR_UNKNOWN) {
      // The reference: after UNKNOWN the set is in an undefined state; go without events.
      api_.event_free(events_);
      events_ = nullptr;
      return;
    }
  }
}

Result<Inventory> NvmlBackend::ReadInventory() {
  Inventory inv;
  inv.backend = "nvml";
  if (api_.driver_version != nullptr) {
    char version[nv::NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    if (api_.driver_version(version, sizeof(version)) == nv::NVML_SUCCESS) {
      inv.driver_version = version;
    }
  }
  std::vector<std::vector<std::string>> endpoints;
  for (unsigned int i = 0; i < devices_.size(); ++i) {
    const int index = static_cast<int>(i);
    nv::nvmlDevice_t dev = nullptr;
    nv::nvmlReturn_t r = Device(i, &dev);
    if (r != nv::NVML_SUCCESS) return CallError(index, "nvmlDeviceGetHandleByIndex_v2", r);
    TESSERA_ASSIGN_OR_RETURN(GpuInfo gpu, ReadGpu(index, dev));
    TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> ends, LinkEndpoints(index, dev));
    inv.gpus.push_back(std::move(gpu));
    endpoints.push_back(std::move(ends));
  }
  // A link ends at another GPU (direct NVLink) or at an NVSwitch, whose bus id is no GPU's;
  // GPUs that reach the same switch are peers through it (HGX boards).
  std::map<std::string, int> gpu_at;
  for (const GpuInfo& g : inv.gpus) gpu_at[NormalizeBusId(g.pci_bus_id.c_str())] = g.index;
  std::map<std::string, std::set<int>> switch_users;
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    for (const std::string& end : endpoints[i]) {
      if (!gpu_at.contains(end)) switch_users[end].insert(inv.gpus[i].index);
    }
  }
  for (size_t i = 0; i < inv.gpus.size(); ++i) {
    std::set<int> peers;
    for (const std::string& end : endpoints[i]) {
      auto it = gpu_at.find(end);
      if (it != gpu_at.end()) {
        peers.insert(it->second);
      } else {
        peers.insert(switch_users[end].begin(), switch_users[end].end());
      }
    }
    peers.erase(inv.gpus[i].index);
    inv.gpus[i].nvlink_peers.assign(peers.begin(), peers.end());
  }
  inv.nvlink_islands = NvlinkIslands(inv.gpus);
  models_.clear();
  for (const GpuInfo& g : inv.gpus) models_.push_back(g.model);
  ReadHostResources(inv.cpu_milli, inv.memory_mib);
  return inv;
}

Result<GpuInfo> NvmlBackend::ReadGpu(int index, nv::nvmlDevice_t dev) {
  GpuInfo g;
  g.index = index;
  char name[nv::NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  nv::nvmlReturn_t r = api_.get_name(dev, name, sizeof(name));
  if (r != nv::NVML_SUCCESS) return CallError(index, "nvmlDeviceGetName", r);
  g.name = name;
  char uuid[nv::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  r = api_.get_uuid(dev, uuid, sizeof(uuid));
  if (r != nv::NVML_SUCCESS) return CallError(index, "nvmlDeviceGetUUID", r);
  g.uuid = uuid;
  nv::nvmlPciInfo_t pci{};
  r = api_.get_pci(dev, &pci);
  if (r != nv::NVML_SUCCESS) return CallError(index, "nvmlDeviceGetPciInfo_v3", r);
  g.pci_bus_id = pci.busId;
  unsigned int minor = 0;
  if (api_.minor != nullptr && api_.minor(dev, &minor) == nv::NVML_SUCCESS) {
    g.minor = static_cast<int>(minor);
  }
  nv::nvmlMemory_t memory{};
  r = api_.get_memory(dev, &memory);
  if (r == nv::NVML_SUCCESS) {
    g.memory_mib = Mib(memory.total);
  } else if (!Unsupported(r)) {
    return CallError(index, "nvmlDeviceGetMemoryInfo", r);
  }
  Result<std::string> model = ResolveCatalogModel(catalog_, g.name, g.memory_mib);
  if (!model.ok()) return model.status().WithPrefix("GPU " + std::to_string(index) + " " + g.uuid);
  g.model = *model;
  // A MIG GPU may hide its memory from an unprivileged caller; the catalog knows it.
  if (g.memory_mib == 0) g.memory_mib = catalog_.FindGpu(g.model)->memory_mib;
  unsigned int current = nv::NVML_DEVICE_MIG_DISABLE, pending = nv::NVML_DEVICE_MIG_DISABLE;
  if (api_.mig_mode != nullptr && api_.mig_mode(dev, &current, &pending) == nv::NVML_SUCCESS) {
    g.mig_enabled = current == nv::NVML_DEVICE_MIG_ENABLE;
  }
  if (g.mig_enabled) g.mig_devices = ReadMigDevices(dev, g.model);
  return g;
}

Result<std::vector<std::string>> NvmlBackend::LinkEndpoints(int index, nv::nvmlDevice_t dev) {
  std::vector<std::string> out;
  if (api_.nvlink_state == nullptr || api_.nvlink_remote == nullptr) return out;
  for (unsigned int link = 0; link < kMaxNvLinks; ++link) {
    nv::nvmlEnableState_t active = nv::NVML_FEATURE_DISABLED;
    nv::nvmlReturn_t r = api_.nvlink_state(dev, link, &active);
    if (r == nv::NVML_ERROR_GPU_IS_LOST) return CallError(index, "nvmlDeviceGetNvLinkState", r);
    if (r != nv::NVML_SUCCESS) break;  // Past the last link, or no NVLink at all.
    if (active != nv::NVML_FEATURE_ENABLED) continue;
    nv::nvmlPciInfo_t remote{};
    if (api_.nvlink_remote(dev, link, &remote) == nv::NVML_SUCCESS) {
      out.push_back(NormalizeBusId(remote.busId));
    }
  }
  return out;
}

Result<GpuSample> NvmlBackend::SampleGpu(int index) {
  GpuSample s;
  s.index = index;
  FieldReader rd;
  nv::nvmlDevice_t dev = nullptr;
  if (rd.Got("nvmlDeviceGetHandleByIndex_v2", true,
             [&] { return Device(static_cast<unsigned int>(index), &dev); })) {
    ReadFields(rd, dev, s);
  }
  if (rd.lost()) {
    // What was read before the GPU fell off the bus is stale; report only that it is gone.
    GpuSample lost;
    lost.index = index;
    lost.memory_total_mib = s.memory_total_mib;
    lost.lost = true;
    return lost;
  }
  if (rd.failed_function() != nullptr) return CallError(index, rd.failed_function(), rd.failure());
  return s;
}

void NvmlBackend::ReadFields(FieldReader& rd, nv::nvmlDevice_t dev, GpuSample& s) {
  nv::nvmlMemory_t memory{};
  if (rd.Got("nvmlDeviceGetMemoryInfo", true, [&] { return api_.get_memory(dev, &memory); })) {
    s.memory_used_mib = Mib(memory.used);
    s.memory_total_mib = Mib(memory.total);
  }
  nv::nvmlUtilization_t util{};
  if (rd.Got("nvmlDeviceGetUtilizationRates", api_.utilization != nullptr,
             [&] { return api_.utilization(dev, &util); })) {
    s.gpu_util = util.gpu;
    s.mem_copy_util = util.memory;
  }
  unsigned int v = 0;
  if (rd.Got("nvmlDeviceGetTemperature", api_.temperature != nullptr,
             [&] { return api_.temperature(dev, nv::NVML_TEMPERATURE_GPU, &v); })) {
    s.temperature_c = v;
  }
  if (rd.Got("nvmlDeviceGetPowerUsage", api_.power != nullptr,
             [&] { return api_.power(dev, &v); })) {
    s.power_w = v / 1000.0;  // mW.
  }
  if (rd.Got("nvmlDeviceGetClockInfo", api_.clock != nullptr,
             [&] { return api_.clock(dev, nv::NVML_CLOCK_SM, &v); })) {
    s.sm_clock_mhz = v;
  }
  if (rd.Got("nvmlDeviceGetClockInfo", api_.clock != nullptr,
             [&] { return api_.clock(dev, nv::NVML_CLOCK_MEM, &v); })) {
    s.mem_clock_mhz = v;
  }
  // Each PCIe reading takes about 20 ms: NVML counts over a 20 ms window.
  if (rd.Got("nvmlDeviceGetPcieThroughput", api_.pcie != nullptr,
             [&] { return api_.pcie(dev, nv::NVML_PCIE_UTIL_TX_BYTES, &v); })) {
    s.pcie_tx_kib_s = v;
  }
  if (rd.Got("nvmlDeviceGetPcieThroughput", api_.pcie != nullptr,
             [&] { return api_.pcie(dev, nv::NVML_PCIE_UTIL_RX_BYTES, &v); })) {
    s.pcie_rx_kib_s = v;
  }
  unsigned long long count = 0;
  if (rd.Got("nvmlDeviceGetTotalEccErrors", api_.ecc != nullptr, [&] {
        return api_.ecc(dev, nv::NVML_MEMORY_ERROR_TYPE_CORRECTED, nv::NVML_VOLATILE_ECC, &count);
      })) {
    s.ecc_sbe_total = static_cast<int64_t>(count);
  }
  if (rd.Got("nvmlDeviceGetTotalEccErrors", api_.ecc != nullptr, [&] {
        return api_.ecc(dev, nv::NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv::NVML_VOLATILE_ECC, &count);
      })) {
    s.ecc_dbe_total = static_cast<int64_t>(count);
  }
}

void NvmlBackend::DrainXidEvents(std::vector<XidEvent>& out) {
  if (events_ == nullptr) return;
  for (int n = 0; n < kMaxEventsPerSample; ++n) {
    nv::nvmlEventData_t data{};
    // The plain v1 wait may leave these as they were.
    data.gpuInstanceId = data.computeInstanceId = nv::kNvmlNoInstance;
    if (api_.event_wait(events_, &data, 0) != nv::NVML_SUCCESS) return;  // TIMEOUT: none left.
    if ((data.eventType & nv::nvmlEventTypeXidCriticalError) == 0) continue;
    XidEvent e;
    e.gpu = -1;
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i] == data.device) e.gpu = static_cast<int>(i);
    }
    e.code = static_cast<int64_t>(data.eventData);
    out.push_back(e);
  }
}

Result<Telemetry> NvmlBackend::Sample() {
  Telemetry t;
  for (size_t i = 0; i < devices_.size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(GpuSample s, SampleGpu(static_cast<int>(i)));
    t.gpus.push_back(s);
  }
  DrainXidEvents(t.xids);
  return t;
}

}  // namespace nvml_impl

Result<std::unique_ptr<GpuBackend>> OpenNvmlBackend(const catalog::Catalog& catalog,
                                                    const std::string& library, bool manage_mig) {
  dlerror();
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return Status::FailedPrecondition("the NVML backend needs the NVIDIA driver: dlopen " +
                                      library + ": " + (why != nullptr ? why : "unknown error") +
                                      "; use --backend sim on a machine without a GPU");
  }
  auto backend =
      std::make_unique<nvml_impl::NvmlBackend>(catalog, lib, manage_mig);  // Owns `lib` now.
  TESSERA_RETURN_IF_ERROR(backend->Start(library));
  return std::unique_ptr<GpuBackend>(std::move(backend));
}

}  // namespace tessera::agent
