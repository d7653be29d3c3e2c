// A fake libnvidia-ml.so.1 for tests: it exports the NVML symbols the agent's NVML backend looks
// up, with the same C signatures (declared once, in agent/nvml_api.h), and answers from a JSON
// file named by $TESSERA_FAKE_NVML_CONFIG, read at every first nvmlInit_v2. The tests load it
// through the backend's real dlopen path. Schema (every field optional):
//   {"driver_version": "550.90.07",
//    "fail_init": false,          nvmlInit_v2 answers NVML_ERROR_DRIVER_NOT_LOADED
//    "lost_gpu": -1,              this GPU answers NVML_ERROR_GPU_IS_LOST to all but its handle
//    "mig_no_permission": false,  nvmlDeviceGetGpuInstanceById answers NVML_ERROR_NO_PERMISSION
//    "xids": [{"gpu": 0, "code": 79}],   queued at init, delivered to a set registered for XIDs
//    "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "pci_bus_id": "...",
//              "memory_mib": 81559, "memory_used_mib": 0, "minor": 0 (default: its index),
//              "mig": true, "mig_devices": [{"uuid": "MIG-...", "profile_id": 19, "start": 0,
//                                            "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
//                                            "compute_instance": 0}],
//              "nvlink_peers": [1], "nvswitches": ["00000000:A0:00.0"],
//              "util": 37, "mem_util": 20, "temperature": 55, "power_mw": 300000,
//              "sm_clock": 1980, "mem_clock": 2619, "pcie_tx": 1000, "pcie_rx": 2000,
//              "ecc_sbe": 0, "ecc_dbe": 0,
//              "errors": {"ecc": 3}}]}   a telemetry group (memory, util, temperature, power,
//                                        clocks, pcie, ecc) answering that NVML code
// A GPU without "mig" answers NOT_SUPPORTED to nvmlDeviceGetMigMode (a pre-Ampere board), one
// without links NOT_SUPPORTED to nvmlDeviceGetNvLinkState (a PCIe board), and a MIG-enabled GPU
// NOT_SUPPORTED to nvmlDeviceGetUtilizationRates, as the real driver does.
// It also exports a few state-changing NVML functions, which only record that they were called,
// and tesseraFakeNvmlCalls(), the names of every function called since the library loaded, so
// a test can check the backend stayed read-only.
// Thread-safety: one mutex guards the fake's state; every exported function takes it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent/nvml_api.h"

namespace nv = tessera::agent::nvml;

// The handles the fake gives out point at these.
struct tessera::agent::nvml::nvmlDevice_st {
  int gpu = 0;
  int mig = -1;  // The MIG device's index on its GPU, or -1 for the GPU itself.
};
struct tessera::agent::nvml::nvmlGpuInstance_st {
  int gpu = 0;
  int mig = 0;
};
struct tessera::agent::nvml::nvmlEventSet_st {
  std::set<int> xid_gpus;  // GPUs registered for XID events.
};

namespace {

using nlohmann::json;
using nv::nvmlReturn_t;

constexpr int kMaxMigDevices = 7;
constexpr unsigned int kLinksPerGpu = 18;

struct FakeMig {
  std::string uuid, name;
  unsigned int profile_id = 0, start = 0, compute_instance = 0;
  nv::nvmlDevice_st handle;
  nv::nvmlGpuInstance_st instance;
};

// One GPU's configuration, read out of the JSON at init so that no exception can reach an
// exported function.
struct FakeGpu {
  std::string name, uuid, bus_id;
  unsigned long long memory_mib = 0, memory_used_mib = 0;
  unsigned int minor = 0;
  std::optional<bool> mig;  // Absent: nvmlDeviceGetMigMode is not supported.
  std::vector<std::unique_ptr<FakeMig>> migs;
  std::vector<int> nvlink_peers;
  std::vector<std::string> links;                    // Remote bus id of each active link.
  std::map<std::string, unsigned long long> values;  // "util", "temperature", ...
  std::map<std::string, int> errors;                 // Telemetry group -> NVML code.
  nv::nvmlDevice_st handle;
};

struct Fake {
  std::mutex mu;
  int inits = 0;
  std::string driver_version;
  bool fail_init = false, mig_no_permission = false;
  int lost_gpu = -1;
  std::vector<std::unique_ptr<FakeGpu>> gpus;
  std::deque<std::pair<int, unsigned long long>> xids;  // (gpu, code) not yet delivered.
  std::set<std::string> calls;
};

Fake& State() {
  static Fake* fake = new Fake;
  return *fake;
}

std::string DefaultBusId(size_t i) {
  char out[32];
  std::snprintf(out, sizeof(out), "00000000:%02X:00.0", static_cast<unsigned>(0x10 + 8 * i));
  return out;
}

void FillPci(const std::string& bus_id, nv::nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", bus_id.c_str());
  std::sscanf(bus_id.c_str(), "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0",
                pci->domain & 0xFFFF, pci->bus, pci->device);
  pci->pciDeviceId = 0x233010DE;
}

std::unique_ptr<FakeGpu> ParseGpu(const json& j, size_t i) {
  auto g = std::make_unique<FakeGpu>();
  g->name = j.value("name", "NVIDIA H100 80GB HBM3");
  g->uuid = j.value("uuid", "");
  g->bus_id = j.value("pci_bus_id", DefaultBusId(i));
  g->memory_mib = j.value("memory_mib", 81559ULL);
  g->memory_used_mib = j.value("memory_used_mib", 0ULL);
  g->minor = j.value("minor", static_cast<unsigned int>(i));
  if (j.contains("mig")) g->mig = j.at("mig").get<bool>();
  g->handle.gpu = static_cast<int>(i);
  const json& migs = j.value("mig_devices", json::array());
  for (size_t m = 0; m < migs.size(); ++m) {
    auto fm = std::make_unique<FakeMig>();
    fm->uuid = migs[m].value("uuid", "");
    fm->name = migs[m].value("name", "");
    fm->profile_id = migs[m].value("profile_id", 0u);
    fm->start = migs[m].value("start", 0u);
    fm->compute_instance = migs[m].value("compute_instance", 0u);
    fm->handle = {g->handle.gpu, static_cast<int>(m)};
    fm->instance = {g->handle.gpu, static_cast<int>(m)};
    g->migs.push_back(std::move(fm));
  }
  g->nvlink_peers = j.value("nvlink_peers", std::vector<int>{});
  g->links = j.value("nvswitches", std::vector<std::string>{});
  for (const char* key : {"util", "mem_util", "temperature", "power_mw", "sm_clock", "mem_clock",
                          "pcie_tx", "pcie_rx", "ecc_sbe", "ecc_dbe"}) {
    g->values[key] = j.value(key, 0ULL);
  }
  g->errors = j.value("errors", std::map<std::string, int>{});
  return g;
}

// Reads $TESSERA_FAKE_NVML_CONFIG into `f`. False, after saying why on stderr, when it cannot.
bool LoadConfig(Fake& f) {
  f.driver_version.clear();
  f.fail_init = f.mig_no_permission = false;
  f.lost_gpu = -1;
  f.gpus.clear();
  f.xids.clear();
  const char* path = std::getenv("TESSERA_FAKE_NVML_CONFIG");
  if (path == nullptr) return true;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const json config = json::parse(text.str(), nullptr, false);
  if (!in || config.is_discarded() || !config.is_object()) {
    std::fprintf(stderr, "fake NVML: cannot read a JSON object from %s\n", path);
    return false;
  }
  try {
    f.driver_version = config.value("driver_version", "550.90.07");
    f.fail_init = config.value("fail_init", false);
    f.mig_no_permission = config.value("mig_no_permission", false);
    f.lost_gpu = config.value("lost_gpu", -1);
    const json& gpus = config.value("gpus", json::array());
    for (size_t i = 0; i < gpus.size(); ++i) f.gpus.push_back(ParseGpu(gpus[i], i));
    for (auto& g : f.gpus) {
      std::vector<std::string> links;
      for (int peer : g->nvlink_peers)
        links.push_back(f.gpus.at(static_cast<size_t>(peer))->bus_id);
      links.insert(links.end(), g->links.begin(), g->links.end());
      g->links = std::move(links);
    }
    for (const json& x : config.value("xids", json::array())) {
      f.xids.emplace_back(x.value("gpu", 0), x.value("code", 0ULL));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake NVML: %s: %s\n", path, e.what());
    return false;
  }
  return true;
}

// The GPU behind a handle, or nullptr when the handle is not one of ours.
FakeGpu* GpuOf(Fake& f, nv::nvmlDevice_t dev) {
  if (dev == nullptr || dev->gpu < 0 || static_cast<size_t>(dev->gpu) >= f.gpus.size()) {
    return nullptr;
  }
  return f.gpus[static_cast<size_t>(dev->gpu)].get();
}

// What a device query answers before looking at the field: not initialized, a bad handle, a lost
// GPU, or the code configured for `group` in the GPU's "errors".
nvmlReturn_t Check(Fake& f, nv::nvmlDevice_t dev, const char* group) {
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  FakeGpu* g = GpuOf(f, dev);
  if (g == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (f.lost_gpu == dev->gpu) return nv::NVML_ERROR_GPU_IS_LOST;
  if (group != nullptr) {
    auto it = g->errors.find(group);
    if (it != g->errors.end()) return it->second;
  }
  return nv::NVML_SUCCESS;
}

unsigned int Uint(const FakeGpu& g, const char* key) {
  return static_cast<unsigned int>(g.values.at(key));
}

#define FAKE_ENTER()          \
  Fake& f = State();          \
  std::lock_guard lock(f.mu); \
  f.calls.insert(__func__)
#define FAKE_CHECK(dev, group) \
  if (nvmlReturn_t r_ = Check(f, dev, group); r_ != 0) return r_

nvmlReturn_t CopyString(const std::string& s, char* out, unsigned int length) {
  if (s.size() + 1 > length) return nv::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return nv::NVML_SUCCESS;
}

}  // namespace

extern "C" {

// Library.
nvmlReturn_t nvmlInit_v2() {
  FAKE_ENTER();
  if (f.inits == 0) {
    if (!LoadConfig(f)) return nv::NVML_ERROR_UNKNOWN;
    if (f.fail_init) return nv::NVML_ERROR_DRIVER_NOT_LOADED;
  }
  ++f.inits;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() {
  FAKE_ENTER();
  if (f.inits > 0) --f.inits;
  return nv::NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case nv::NVML_SUCCESS:
      return "Success";
    case nv::NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case nv::NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case nv::NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case nv::NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case nv::NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case nv::NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case nv::NVML_ERROR_TIMEOUT:
      return "Timeout";
    case nv::NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  FAKE_ENTER();
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  return CopyString(f.driver_version, version, length);
}

// Enumeration and identity.
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  FAKE_ENTER();
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  *count = static_cast<unsigned int>(f.gpus.size());
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nv::nvmlDevice_t* device) {
  FAKE_ENTER();
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  if (index >= f.gpus.size()) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *device = &f.gpus[index]->handle;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nv::nvmlDevice_t dev, char* name, unsigned int length) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  FakeGpu& g = *GpuOf(f, dev);
  if (dev->mig >= 0) return CopyString(g.migs[static_cast<size_t>(dev->mig)]->name, name, length);
  return CopyString(g.name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nv::nvmlDevice_t dev, char* uuid, unsigned int length) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  FakeGpu& g = *GpuOf(f, dev);
  if (dev->mig >= 0) return CopyString(g.migs[static_cast<size_t>(dev->mig)]->uuid, uuid, length);
  return CopyString(g.uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nv::nvmlDevice_t dev, unsigned int* minor) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  if (dev->mig >= 0)
    return nv::NVML_ERROR_INVALID_ARGUMENT;  // A MIG device has no node of its own.
  *minor = GpuOf(f, dev)->minor;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nv::nvmlDevice_t dev, nv::nvmlPciInfo_t* pci) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  FillPci(GpuOf(f, dev)->bus_id, pci);
  return nv::NVML_SUCCESS;
}

// Memory and telemetry.
nvmlReturn_t nvmlDeviceGetMemoryInfo(nv::nvmlDevice_t dev, nv::nvmlMemory_t* memory) {
  FAKE_ENTER();
  FAKE_CHECK(dev, "memory");
  const FakeGpu& g = *GpuOf(f, dev);
  constexpr unsigned long long kMib = 1024ULL * 1024;
  memory->total = g.memory_mib * kMib;
  memory->used = g.memory_used_mib * kMib;
  memory->free = memory->total - memory->used;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nv::nvmlDevice_t dev, nv::nvmlUtilization_t* util) {
  FAKE_ENTER();
  FAKE_CHECK(dev, "util");
  const FakeGpu& g = *GpuOf(f, dev);
  if (g.mig.value_or(false)) return nv::NVML_ERROR_NOT_SUPPORTED;
  util->gpu = Uint(g, "util");
  util->memory = Uint(g, "mem_util");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nv::nvmlDevice_t dev, nv::nvmlTemperatureSensors_t sensor,
                                      unsigned int* temp) {
  FAKE_ENTER();
  FAKE_CHECK(dev, "temperature");
  if (sensor != nv::NVML_TEMPERATURE_GPU) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *temp = Uint(*GpuOf(f, dev), "temperature");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nv::nvmlDevice_t dev, unsigned int* power) {
  FAKE_ENTER();
  FAKE_CHECK(dev, "power");
  *power = Uint(*GpuOf(f, dev), "power_mw");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nv::nvmlDevice_t dev, nv::nvmlClockType_t type,
                                    unsigned int* clock) {
  FAKE_ENTER();
  FAKE_CHECK(dev, "clocks");
  if (type == nv::NVML_CLOCK_SM) {
    *clock = Uint(*GpuOf(f, dev), "sm_clock");
  } else if (type == nv::NVML_CLOCK_MEM) {
    *clock = Uint(*GpuOf(f, dev), "mem_clock");
  } else {
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  }
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nv::nvmlDevice_t dev, nv::nvmlPcieUtilCounter_t counter,
                                         unsigned int* value) {
  FAKE_ENTER();
  FAKE_CHECK(dev, "pcie");
  *value = Uint(*GpuOf(f, dev), counter == nv::NVML_PCIE_UTIL_TX_BYTES ? "pcie_tx" : "pcie_rx");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nv::nvmlDevice_t dev, nv::nvmlMemoryErrorType_t type,
                                         nv::nvmlEccCounterType_t counter,
                                         unsigned long long* count) {
  FAKE_ENTER();
  FAKE_CHECK(dev, "ecc");
  if (counter != nv::NVML_VOLATILE_ECC) return nv::NVML_ERROR_INVALID_ARGUMENT;
  const char* key = type == nv::NVML_MEMORY_ERROR_TYPE_CORRECTED ? "ecc_sbe" : "ecc_dbe";
  *count = GpuOf(f, dev)->values.at(key);
  return nv::NVML_SUCCESS;
}

// NVLink.
nvmlReturn_t nvmlDeviceGetNvLinkState(nv::nvmlDevice_t dev, unsigned int link,
                                      nv::nvmlEnableState_t* active) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  const FakeGpu& g = *GpuOf(f, dev);
  if (g.links.empty()) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (link >= kLinksPerGpu) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *active = link < g.links.size() ? nv::NVML_FEATURE_ENABLED : nv::NVML_FEATURE_DISABLED;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nv::nvmlDevice_t dev, unsigned int link,
                                                 nv::nvmlPciInfo_t* pci) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  const FakeGpu& g = *GpuOf(f, dev);
  if (link >= g.links.size()) return nv::NVML_ERROR_INVALID_ARGUMENT;
  FillPci(g.links[link], pci);
  return nv::NVML_SUCCESS;
}

// MIG.
nvmlReturn_t nvmlDeviceGetMigMode(nv::nvmlDevice_t dev, unsigned int* current,
                                  unsigned int* pending) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  const FakeGpu& g = *GpuOf(f, dev);
  if (!g.mig) return nv::NVML_ERROR_NOT_SUPPORTED;
  *current = *pending = *g.mig ? nv::NVML_DEVICE_MIG_ENABLE : nv::NVML_DEVICE_MIG_DISABLE;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nv::nvmlDevice_t dev, unsigned int* count) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  *count = GpuOf(f, dev)->mig.value_or(false) ? kMaxMigDevices : 0;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nv::nvmlDevice_t dev, unsigned int index,
                                                 nv::nvmlDevice_t* mig) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  FakeGpu& g = *GpuOf(f, dev);
  if (index >= kMaxMigDevices) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (index >= g.migs.size()) return nv::NVML_ERROR_NOT_FOUND;
  *mig = &g.migs[index]->handle;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nv::nvmlDevice_t dev, unsigned int* id) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  if (dev->mig < 0) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *id = static_cast<unsigned int>(dev->mig) + 1;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nv::nvmlDevice_t dev, unsigned int* id) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  if (dev->mig < 0) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *id = GpuOf(f, dev)->migs[static_cast<size_t>(dev->mig)]->compute_instance;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nv::nvmlDevice_t dev, unsigned int id,
                                          nv::nvmlGpuInstance_t* instance) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  if (f.mig_no_permission) return nv::NVML_ERROR_NO_PERMISSION;
  FakeGpu& g = *GpuOf(f, dev);
  if (id == 0 || id > g.migs.size()) return nv::NVML_ERROR_NOT_FOUND;
  *instance = &g.migs[id - 1]->instance;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nv::nvmlGpuInstance_t instance,
                                    nv::nvmlGpuInstanceInfo_t* info) {
  FAKE_ENTER();
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  FakeGpu& g = *f.gpus.at(static_cast<size_t>(instance->gpu));
  const FakeMig& m = *g.migs.at(static_cast<size_t>(instance->mig));
  info->device = &g.handle;
  info->id = static_cast<unsigned int>(instance->mig) + 1;
  info->profileId = m.profile_id;
  info->placement = {m.start, 1};
  return nv::NVML_SUCCESS;
}

// Events.
nvmlReturn_t nvmlEventSetCreate(nv::nvmlEventSet_t* set) {
  FAKE_ENTER();
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  *set = new nv::nvmlEventSet_st;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nv::nvmlDevice_t dev, unsigned long long* types) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  *types = 0x1 | 0x2 | 0x4 | nv::nvmlEventTypeXidCriticalError;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nv::nvmlDevice_t dev, unsigned long long types,
                                      nv::nvmlEventSet_t set) {
  FAKE_ENTER();
  FAKE_CHECK(dev, nullptr);
  if ((types & ~(0x1ULL | 0x2ULL | 0x4ULL | nv::nvmlEventTypeXidCriticalError)) != 0) {
    return nv::NVML_ERROR_NOT_SUPPORTED;
  }
  if ((types & nv::nvmlEventTypeXidCriticalError) != 0) set->xid_gpus.insert(dev->gpu);
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nv::nvmlEventSet_t set, nv::nvmlEventData_t* data,
                                 unsigned int /*timeout_ms*/) {
  FAKE_ENTER();
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  for (auto it = f.xids.begin(); it != f.xids.end(); ++it) {
    if (!set->xid_gpus.contains(it->first)) continue;
    data->device = &f.gpus.at(static_cast<size_t>(it->first))->handle;
    data->eventType = nv::nvmlEventTypeXidCriticalError;
    data->eventData = it->second;
    data->gpuInstanceId = data->computeInstanceId = nv::kNvmlNoInstance;
    f.xids.erase(it);
    return nv::NVML_SUCCESS;
  }
  return nv::NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nv::nvmlEventSet_t set) {
  FAKE_ENTER();
  delete set;
  return nv::NVML_SUCCESS;
}

// State-changing functions the agent must never call: they only record the call.
nvmlReturn_t nvmlDeviceSetMigMode(nv::nvmlDevice_t, unsigned int, nvmlReturn_t*) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceCreateGpuInstance(nv::nvmlDevice_t, unsigned int, nv::nvmlGpuInstance_t*) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlGpuInstanceDestroy(nv::nvmlGpuInstance_t) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceClearEccErrorCounts(nv::nvmlDevice_t, nv::nvmlEccCounterType_t) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nv::nvmlDevice_t, unsigned int, unsigned int) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nv::nvmlDevice_t) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nv::nvmlDevice_t, unsigned int) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}

// Not NVML: the names of the functions called since the library loaded, one a line, sorted.
const char* tesseraFakeNvmlCalls() {
  FAKE_ENTER();
  static std::string text;
  text.clear();
  for (const std::string& c : f.calls) text += c + "\n";
  return text.c_str();
}

}  // extern "C"
