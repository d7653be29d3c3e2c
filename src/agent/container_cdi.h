// GPUs for containers by CDI (the Container Device Interface): a container asks podman for
// `--device nvidia.com/gpu=NAME` and gets that GPU's device nodes, the shared control nodes and
// nothing else, so "sees exactly its GPUs" is enforced by what exists in its /dev (and by the
// device cgroup runc sets from the same list).
//
// The specs come from NVIDIA's toolkit (`nvidia-ctk cdi generate`) when the node has them in
// /etc/cdi or /var/run/cdi; else the agent writes one from its own GPU inventory. Podman 4.3.1
// reads those two directories only (its containers.conf has no cdi_spec_dirs; that came in 4.5),
// so the agent's spec goes to /var/run/cdi/tessera-nvidia-gpu.json, which a reboot clears with
// the device numbers it describes. Podman 4.3.1 understands cdiVersion up to 0.5.0, the first
// with hostPath; specs of a later version are reported and not used.
//
// In a user namespace (--userns=auto) runc may not mknod, so it bind-mounts each node from the
// host path equal to its container path (podman 4.3.1 hands runc the container path): a node
// whose hostPath differs from its path reaches only containers without one. The agent's spec for
// real GPUs (dev_root "/dev") keeps the two equal.
//
// Specs are read as JSON; YAML (nvidia-ctk's default) only for its top-level `kind` and
// `cdiVersion` and its device names, by a line scan of the layout nvidia-ctk writes.
//
// Thread-safety: functions of the filesystem's state; any thread may call them.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera::agent {

// One GPU, or one MIG device, from the agent's inventory.
struct GpuDeviceNodes {
  std::string index;  // "0"; a MIG device "0:1" (GPU 0, its MIG device 1), as nvidia-ctk names it.
  std::string uuid;   // "GPU-..." or "MIG-..."; "" = none.
  int minor = -1;     // The N of /dev/nvidiaN (the parent GPU's for a MIG device).
  // Its host device nodes: /dev/nvidiaN, and for a MIG device also its /dev/nvidia-caps entries.
  std::vector<std::string> dev_paths;
};

// The minors of the driver's MIG capability nodes, from /proc/driver/nvidia-caps/mig-minors:
// "gpu0/gi1/access 12" means /dev/nvidia-caps/nvidia-cap12 grants GPU instance 1 of the GPU
// whose minor is 0, and "gpu0/gi1/ci0/access 13" its compute instance 0. Other lines are skipped.
using MigMinors = std::map<std::string, int>;
MigMinors ParseMigMinors(std::string_view text);

// A MIG device's host nodes: its GPU's /dev/nvidiaN, and the access nodes of its GPU instance
// and its compute instance (under dev_root/nvidia-caps). NotFound names the entry `minors` lacks.
Result<std::vector<std::string>> MigDevicePaths(const MigMinors& minors, int gpu_minor,
                                                int gpu_instance, int compute_instance,
                                                const std::string& dev_root = "/dev");

// A spec file that provides the kind asked for, in a version podman reads.
struct CdiSpecFile {
  std::string path;
  std::string cdi_version;
  std::vector<std::string> device_names;
};

struct CdiScan {
  std::vector<CdiSpecFile> usable;
  std::vector<std::string> notes;  // Files passed over, each with its path and why.
};

// Reads the *.json, *.yaml and *.yml files of `dirs` (a missing dir is fine) and keeps those of
// `kind` with cdiVersion <= `max_version`; `ignore_path` (the agent's own spec) is skipped.
CdiScan ScanCdiSpecs(const std::vector<std::string>& dirs, const std::string& kind,
                     const std::string& ignore_path, const std::string& max_version = "0.5.0");

struct CdiSpecBuild {
  std::string json;                       // The spec, cdiVersion 0.5.0.
  std::vector<std::string> device_names;  // Each GPU by index, and by uuid when it has one.
  // What was left out because the host lacks it, e.g. "/dev/nvidia-uvm-tools: absent on the
  // host"; a GPU whose own nodes are all absent is left out whole.
  std::vector<std::string> skipped;
};

// Builds a spec of `kind` for `gpus`: each device gets its own nodes; `common_nodes` (nvidiactl,
// nvidia-uvm, nvidia-uvm-tools) and `driver_files` (libraries and tools bind-mounted read-only
// at the same path) go to every container that asks for any of them. A host path under
// `dev_root` appears at the same place under the container's /dev. Absent paths are skipped with
// the reason. Reads the filesystem only to see what exists.
CdiSpecBuild BuildGpuCdiSpec(const std::string& kind, const std::vector<GpuDeviceNodes>& gpus,
                             const std::vector<std::string>& common_nodes,
                             const std::vector<std::string>& driver_files,
                             const std::string& dev_root = "/dev");

struct GpuCdiOptions {
  std::vector<std::string> spec_dirs = {"/etc/cdi", "/var/run/cdi"};
  std::string write_path = "/var/run/cdi/tessera-nvidia-gpu.json";
  std::string kind = "nvidia.com/gpu";
  std::string dev_root = "/dev";
  std::vector<std::string> common_nodes = {"/dev/nvidiactl", "/dev/nvidia-uvm",
                                           "/dev/nvidia-uvm-tools"};
  // Host files for CUDA inside the container (libcuda, libnvidia-ml, nvidia-smi); the spec mounts
  // them but runs no ldconfig hook, so an image finds them only in its default library path.
  std::vector<std::string> driver_files;
};

struct GpuCdiSetup {
  std::string spec_path;  // The spec in use.
  bool written = false;   // True when the agent wrote it (no usable spec was on the node).
  std::vector<std::string> device_names;
  std::vector<std::string> notes;  // Specs passed over and nodes skipped, with reasons.
};

// Uses the node's own specs for `options.kind` when there are any; else writes the agent's spec
// for `gpus` (atomically, 0644, its directory made when missing) and uses it. Errors name the
// file that could not be written.
Result<GpuCdiSetup> EnsureGpuCdiSpec(const std::vector<GpuDeviceNodes>& gpus,
                                     const GpuCdiOptions& options = {});

// What a container asks podman for to get `gpu`: "<kind>=<uuid>" when the spec has that name,
// else "<kind>=<index>". NotFound names the GPU when the spec has neither.
Result<std::string> CdiDeviceFor(const GpuCdiSetup& setup, const std::string& kind,
                                 const GpuDeviceNodes& gpu);

// The NVIDIA driver's user-space files present on this host that containers need for CUDA and
// nvidia-smi (the libraries in the multiarch directory, nvidia-smi); empty on a node without
// the driver.
std::vector<std::string> FindNvidiaDriverFiles(
    const std::string& lib_dir = "/usr/lib/x86_64-linux-gnu");

}  // namespace tessera::agent
