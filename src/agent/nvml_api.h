// The part of the NVML C API the node agent uses, declared here from the NVML 13.3 reference
// (/work/shared/reference/nvml.md) so that no vendor header is needed: the agent finds every
// function at run time with dlsym. The spellings are NVML's own (nvmlReturn_t, NVML_SUCCESS,
// nvmlPciInfo_t), in our namespace, so each line can be checked against the reference; the
// static_asserts hold the struct layouts to the reference's sizes and offsets (LP64).
// Most calls only read. The few that change a GPU (section 8.4: MIG instances and MIG mode) are
// grouped at the end and called only by the agent's MIG manager (mig_manager.h), never while
// reading the inventory or sampling. The fake library the tests load (src/testing/fake_nvml.cc)
// defines its symbols from these same declarations.
// Thread-safety: declarations only.
#pragma once

#include <cstddef>

namespace tessera::agent::nvml {

// Every NVML enum is a plain C enum: 4 bytes, passed as int (reference section 2).
using nvmlReturn_t = int;
using nvmlTemperatureSensors_t = int;
using nvmlClockType_t = int;
using nvmlPcieUtilCounter_t = int;
using nvmlMemoryErrorType_t = int;
using nvmlEccCounterType_t = int;
using nvmlEnableState_t = int;

inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
inline constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

inline constexpr nvmlTemperatureSensors_t NVML_TEMPERATURE_GPU = 0;
inline constexpr nvmlClockType_t NVML_CLOCK_SM = 1;
inline constexpr nvmlClockType_t NVML_CLOCK_MEM = 2;
inline constexpr nvmlPcieUtilCounter_t NVML_PCIE_UTIL_TX_BYTES = 0;
inline constexpr nvmlPcieUtilCounter_t NVML_PCIE_UTIL_RX_BYTES = 1;
inline constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
inline constexpr nvmlMemoryErrorType_t NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
inline constexpr nvmlEccCounterType_t NVML_VOLATILE_ECC = 0;
inline constexpr nvmlEnableState_t NVML_FEATURE_DISABLED = 0;
inline constexpr nvmlEnableState_t NVML_FEATURE_ENABLED = 1;
inline constexpr unsigned int NVML_DEVICE_MIG_DISABLE = 0;
inline constexpr unsigned int NVML_DEVICE_MIG_ENABLE = 1;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
// nvmlGpuInstanceGetComputeInstanceProfileInfo's engine profile: engines shared within the GI.
inline constexpr unsigned int NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0;
// gpuInstanceId / computeInstanceId of an event that is not a MIG instance's.
inline constexpr unsigned int kNvmlNoInstance = 0xFFFFFFFFu;

// Buffer sizes, including the NUL. The reference says to use 96 for names and UUIDs.
inline constexpr unsigned int NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE = 80;
inline constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;
inline constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;

// Opaque handles; MIG device handles have the device type too.
struct nvmlDevice_st;
struct nvmlGpuInstance_st;
struct nvmlComputeInstance_st;
struct nvmlEventSet_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;
using nvmlEventSet_t = nvmlEventSet_st*;

struct nvmlPciInfo_t {
  char busIdLegacy[16];  // "%04X:%02X:%02X.0"
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];  // "%08X:%02X:%02X.0", e.g. "00000000:17:00.0"
};
static_assert(sizeof(nvmlPciInfo_t) == 68 && alignof(nvmlPciInfo_t) == 4);
static_assert(offsetof(nvmlPciInfo_t, domain) == 16 && offsetof(nvmlPciInfo_t, busId) == 36);

struct nvmlMemory_t {  // Bytes.
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
static_assert(sizeof(nvmlMemory_t) == 24 && offsetof(nvmlMemory_t, used) == 16);

struct nvmlUtilization_t {  // Percent of the last sample period.
  unsigned int gpu;
  unsigned int memory;
};
static_assert(sizeof(nvmlUtilization_t) == 8);

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // The XID for nvmlEventTypeXidCriticalError.
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlEventData_t) == 32 && offsetof(nvmlEventData_t, eventData) == 16 &&
              offsetof(nvmlEventData_t, computeInstanceId) == 28);

struct nvmlGpuInstancePlacement_t {  // In memory slices.
  unsigned int start;
  unsigned int size;
};
static_assert(sizeof(nvmlGpuInstancePlacement_t) == 8);

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;  // The parent GPU.
  unsigned int id;      // GPU instance id, unique per GPU.
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};
static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24 &&
              offsetof(nvmlGpuInstanceInfo_t, profileId) == 12 &&
              offsetof(nvmlGpuInstanceInfo_t, placement) == 16);

struct nvmlGpuInstanceProfileInfo_t {  // v1: no version field.
  unsigned int id;                     // The profile ID the create calls take.
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};
static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48 &&
              offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB) == 40);

struct nvmlComputeInstanceProfileInfo_t {  // v1: no version field.
  unsigned int id;  // The profile ID nvmlGpuInstanceCreateComputeInstance takes.
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};
static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36);

// A process with a context on a GPU (nvmlDeviceGetComputeRunningProcesses_v3).
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;  // Bytes.
  unsigned int gpuInstanceId;        // kNvmlNoInstance unless MIG is on.
  unsigned int computeInstanceId;
};
static_assert(sizeof(nvmlProcessInfo_t) == 24 && offsetof(nvmlProcessInfo_t, gpuInstanceId) == 16);

// Function types, one per symbol looked up; the symbol names are in nvml_backend.cc.
using nvmlInit_fn = nvmlReturn_t (*)();
using nvmlShutdown_fn = nvmlReturn_t (*)();
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t);
using nvmlSystemGetDriverVersion_fn = nvmlReturn_t (*)(char*, unsigned int);
using nvmlDeviceGetCount_fn = nvmlReturn_t (*)(unsigned int*);
using nvmlDeviceGetHandleByIndex_fn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using nvmlDeviceGetString_fn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);  // Name, UUID
using nvmlDeviceGetPciInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*);
using nvmlDeviceGetMemoryInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using nvmlDeviceGetUtilizationRates_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using nvmlDeviceGetTemperature_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlTemperatureSensors_t,
                                                     unsigned int*);
using nvmlDeviceGetUint_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);  // PowerUsage, ...
using nvmlDeviceGetClockInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlClockType_t, unsigned int*);
using nvmlDeviceGetPcieThroughput_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlPcieUtilCounter_t,
                                                        unsigned int*);
using nvmlDeviceGetTotalEccErrors_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemoryErrorType_t,
                                                        nvmlEccCounterType_t, unsigned long long*);
using nvmlDeviceGetNvLinkState_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                     nvmlEnableState_t*);
using nvmlDeviceGetNvLinkRemotePciInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                             nvmlPciInfo_t*);
using nvmlDeviceGetMigMode_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*);
using nvmlDeviceGetMigDeviceHandleByIndex_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                                nvmlDevice_t*);
using nvmlDeviceGetGpuInstanceById_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                         nvmlGpuInstance_t*);
using nvmlGpuInstanceGetInfo_fn = nvmlReturn_t (*)(nvmlGpuInstance_t, nvmlGpuInstanceInfo_t*);
using nvmlEventSetCreate_fn = nvmlReturn_t (*)(nvmlEventSet_t*);
using nvmlDeviceGetSupportedEventTypes_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using nvmlDeviceRegisterEvents_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long,
                                                     nvmlEventSet_t);
using nvmlEventSetWait_fn = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*, unsigned int);
using nvmlEventSetFree_fn = nvmlReturn_t (*)(nvmlEventSet_t);
using nvmlDeviceGetGpuInstanceProfileInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                                nvmlGpuInstanceProfileInfo_t*);
using nvmlGpuInstanceGetComputeInstanceProfileInfo_fn = nvmlReturn_t (*)(
    nvmlGpuInstance_t, unsigned int, unsigned int, nvmlComputeInstanceProfileInfo_t*);
using nvmlGpuInstanceGetComputeInstanceById_fn = nvmlReturn_t (*)(nvmlGpuInstance_t, unsigned int,
                                                                  nvmlComputeInstance_t*);
using nvmlDeviceGetComputeRunningProcesses_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*,
                                                                 nvmlProcessInfo_t*);
// With `placements` NULL, `*count` returns how many placements the profile has; else fills them.
using nvmlDeviceGetGpuInstancePossiblePlacements_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                                       nvmlGpuInstancePlacement_t*,
                                                                       unsigned int*);
// Size `gpuInstances` from the profile's instanceCount; `*count` returns how many were found.
using nvmlDeviceGetGpuInstances_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                      nvmlGpuInstance_t*, unsigned int*);

// The calls that change a GPU (reference section 8.4); they need root or the mig/config
// capability.
using nvmlDeviceCreateGpuInstanceWithPlacement_fn = nvmlReturn_t (*)(
    nvmlDevice_t, unsigned int, const nvmlGpuInstancePlacement_t*, nvmlGpuInstance_t*);
using nvmlGpuInstanceDestroy_fn = nvmlReturn_t (*)(nvmlGpuInstance_t);
using nvmlGpuInstanceCreateComputeInstance_fn = nvmlReturn_t (*)(nvmlGpuInstance_t, unsigned int,
                                                                 nvmlComputeInstance_t*);
using nvmlComputeInstanceDestroy_fn = nvmlReturn_t (*)(nvmlComputeInstance_t);
using nvmlDeviceSetMigMode_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, nvmlReturn_t*);

}  // namespace tessera::agent::nvml
