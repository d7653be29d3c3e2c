// The NVML backend: reads the real GPUs of this host through the NVIDIA driver's library,
// loaded at run time with dlopen, so the agent builds and runs on machines without a driver
// (where it says so and points at --backend sim). Reading the inventory and sampling only call
// NVML's read-only queries. With `manage_mig` it also looks up the MIG calls that change a GPU
// (reference section 8.4) and makes and destroys MIG devices, and switches MIG mode, when the
// agent's MIG manager asks (mig_manager.h); without it those functions are not even looked up.
// It never changes clocks, power limits or ECC, and never resets a GPU. What it reads is listed
// in docs/agent-backends.md.
// Thread-safety: as GpuBackend, one thread. NVML itself is thread-safe.
#pragma once

#include <memory>
#include <string>

#include "agent/gpu_backend.h"
#include "catalog/catalog.h"
#include "common/result.h"

namespace tessera::agent {

// Loads `library` (dlopen RTLD_NOW | RTLD_LOCAL), looks up the NVML functions it uses, calls
// nvmlInit_v2 and registers for XID events. FailedPrecondition when the library cannot be
// loaded ("the NVML backend needs the NVIDIA driver: dlopen ...: <why>; use --backend sim on a
// machine without a GPU"), when a function the backend needs is missing (naming it), or when
// nvmlInit fails (with NVML's error string). `catalog` must outlive the backend: inventory
// resolves each GPU's model and MIG profiles against it. The backend calls nvmlShutdown and
// unloads the library when destroyed.
Result<std::unique_ptr<GpuBackend>> OpenNvmlBackend(
    const catalog::Catalog& catalog, const std::string& library = "libnvidia-ml.so.1",
    bool manage_mig = false);

}  // namespace tessera::agent
