// Which device nodes a container gets for each GPU or MIG slice the server granted: the agent's
// inventory turned into CDI devices (container_cdi.h), and a workload's grant turned into the
// names podman asks for.
//
// A whole GPU is keyed by its index ("0"); a MIG slice by its GPU, profile and start slice
// ("0/1g.10gb@3"), the terms the server grants it in. A MIG device is named "<gpu>:<n>" (its
// NVML handle index), as nvidia-ctk names it, and by its MIG uuid.
//
// Thread-safety: pure functions; any thread may call them.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/container_cdi.h"
#include "agent/gpu_backend.h"
#include "common/result.h"

namespace tessera::agent {

std::string GpuDeviceKey(int index, const std::string& mig_profile = "", int mig_start = 0);

struct GpuDeviceList {
  std::vector<GpuDeviceNodes> devices;
  std::vector<std::string> keys;   // devices[i]'s GpuDeviceKey.
  std::vector<std::string> notes;  // MIG devices left out, each with why.
};

// Every GPU of `inventory` (its /dev/nvidiaN under dev_root when it has a minor) and every MIG
// device whose profile, start and instance ids the driver told, with its capability nodes from
// `minors`.
GpuDeviceList ListGpuDevices(const Inventory& inventory, const MigMinors& minors,
                             const std::string& dev_root = "/dev");

// The CDI devices ("<kind>=<name>") for a workload's `gpu_load` entries ({"index", and for a MIG
// slice "mig_profile" and "mig_start"}), from `by_key` (GpuDeviceKey -> CDI device). A grant
// without a device is an error naming it when `required` (a node with real GPUs), and is passed
// over otherwise (simulated GPUs, which have no nodes).
Result<std::vector<std::string>> CdiDevicesForLoad(const nlohmann::json& gpu_load,
                                                   const std::map<std::string, std::string>& by_key,
                                                   bool required);

}  // namespace tessera::agent
