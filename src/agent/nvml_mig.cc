// The NVML backend's MIG work (nvml_backend_impl.h): reading MIG devices, making and destroying
// them, switching a GPU's MIG mode, and counting the processes on a GPU (docs/agent-backends.md).
#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "agent/nvml_backend_impl.h"

namespace tessera::agent::nvml_impl {

std::vector<MigDevice> NvmlBackend::ReadMigDevices(nv::nvmlDevice_t dev, const std::string& model) {
  std::vector<MigDevice> out;
  unsigned int max = 0;
  if (api_.max_mig == nullptr || api_.mig_handle == nullptr ||
      api_.max_mig(dev, &max) != nv::NVML_SUCCESS) {
    return out;
  }
  const mig::Table* table = catalog_.FindGpu(model)->mig;
  for (unsigned int i = 0; i < max; ++i) {
    nv::nvmlDevice_t mig_dev = nullptr;
    if (api_.mig_handle(dev, i, &mig_dev) != nv::NVML_SUCCESS) continue;  // An empty slot.
    MigDevice m;
    m.start = -1;
    char uuid[nv::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (api_.get_uuid(mig_dev, uuid, sizeof(uuid)) == nv::NVML_SUCCESS) m.uuid = uuid;
    // The GPU instance's profile id and placement: exact, but needs the mig/monitor capability.
    unsigned int gi_id = 0;
    nv::nvmlGpuInstance_t gi = nullptr;
    nv::nvmlGpuInstanceInfo_t info{};
    if (api_.gpu_instance_id != nullptr &&
        api_.gpu_instance_id(mig_dev, &gi_id) == nv::NVML_SUCCESS) {
      m.gpu_instance = static_cast<int>(gi_id);
    }
    unsigned int ci_id = 0;
    if (api_.compute_instance_id != nullptr &&
        api_.compute_instance_id(mig_dev, &ci_id) == nv::NVML_SUCCESS) {
      m.compute_instance = static_cast<int>(ci_id);
    }
    if (m.gpu_instance >= 0 && api_.gpu_instance != nullptr && api_.gpu_instance_info != nullptr &&
        api_.gpu_instance(dev, gi_id, &gi) == nv::NVML_SUCCESS &&
        api_.gpu_instance_info(gi, &info) == nv::NVML_SUCCESS) {
      m.start = static_cast<int>(info.placement.start);
      const mig::Profile* p =
          table != nullptr ? table->FindById(static_cast<int>(info.profileId)) : nullptr;
      if (p != nullptr) m.profile = p->name;
    }
    // Otherwise the MIG device's name ends with its profile.
    char name[nv::NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (m.profile.empty() && table != nullptr &&
        api_.get_name(mig_dev, name, sizeof(name)) == nv::NVML_SUCCESS) {
      m.profile = ProfileFromName(*table, name);
    }
    out.push_back(std::move(m));
  }
  AddBareGpuInstances(dev, table, out);
  return out;
}

void NvmlBackend::AddBareGpuInstances(nv::nvmlDevice_t dev, const mig::Table* table,
                                      std::vector<MigDevice>& out) {
  if (table == nullptr || api_.gpu_instances == nullptr || api_.gi_profile == nullptr ||
      api_.gpu_instance_info == nullptr) {
    return;
  }
  std::set<int> with_device;
  for (const MigDevice& m : out) with_device.insert(m.gpu_instance);
  // Every GPU instance profile in turn (reference section 8.1: INVALID_ARGUMENT past the last,
  // NOT_SUPPORTED skips one).
  for (unsigned int index = 0; index < 64; ++index) {
    nv::nvmlGpuInstanceProfileInfo_t profile{};
    const nv::nvmlReturn_t r = api_.gi_profile(dev, index, &profile);
    if (r == nv::NVML_ERROR_NOT_SUPPORTED) continue;
    if (r != nv::NVML_SUCCESS) break;
    std::vector<nv::nvmlGpuInstance_t> gis(std::max(1u, profile.instanceCount));
    auto count = static_cast<unsigned int>(gis.size());
    if (api_.gpu_instances(dev, profile.id, gis.data(), &count) != nv::NVML_SUCCESS) continue;
    for (unsigned int i = 0; i < count && i < gis.size(); ++i) {
      nv::nvmlGpuInstanceInfo_t info{};
      if (api_.gpu_instance_info(gis[i], &info) != nv::NVML_SUCCESS) continue;
      if (with_device.contains(static_cast<int>(info.id))) continue;
      MigDevice m;
      m.uuid = fmt::format("gpu-instance-{}", info.id);
      m.start = static_cast<int>(info.placement.start);
      m.gpu_instance = static_cast<int>(info.id);
      m.bare = true;
      if (const mig::Profile* p = table->FindById(static_cast<int>(info.profileId))) {
        m.profile = p->name;
      }
      out.push_back(std::move(m));
    }
  }
}

Status NvmlBackend::MigCall(int gpu, bool has_fn, const char* fn, nv::nvmlDevice_t* dev) {
  if (!manage_mig_) {
    return Status::FailedPrecondition("the agent does not manage MIG devices (--manage-mig false)");
  }
  if (!has_fn) {
    return Status::FailedPrecondition(
        fmt::format("the NVIDIA driver's library does not export {}: MIG devices cannot be "
                    "changed on this node",
                    fn));
  }
  if (gpu < 0 || static_cast<size_t>(gpu) >= devices_.size()) {
    return Status::InvalidArgument(fmt::format("GPU {}: this node has {}", gpu, devices_.size()));
  }
  nv::nvmlReturn_t r = Device(static_cast<unsigned int>(gpu), dev);
  if (r != nv::NVML_SUCCESS) return CallError(gpu, "nvmlDeviceGetHandleByIndex_v2", r);
  if (models_.size() != devices_.size()) {
    TESSERA_RETURN_IF_ERROR(ReadInventory().status());
  }
  return Status::Ok();
}

Result<std::vector<MigDevice>> NvmlBackend::ReadMigDevices(int gpu) {
  nv::nvmlDevice_t dev = nullptr;
  TESSERA_RETURN_IF_ERROR(MigCall(gpu, true, "", &dev));
  unsigned int current = nv::NVML_DEVICE_MIG_DISABLE, pending = nv::NVML_DEVICE_MIG_DISABLE;
  if (api_.mig_mode == nullptr || api_.mig_mode(dev, &current, &pending) != nv::NVML_SUCCESS ||
      current != nv::NVML_DEVICE_MIG_ENABLE) {
    return std::vector<MigDevice>{};
  }
  return ReadMigDevices(dev, models_[static_cast<size_t>(gpu)]);
}

Result<unsigned int> NvmlBackend::FullComputeProfile(int gpu, nv::nvmlGpuInstance_t gi,
                                                     unsigned int slices) {
  // Walk the profile indices until INVALID_ARGUMENT; NOT_SUPPORTED only skips one (reference
  // section 8.1).
  for (unsigned int index = 0; index < 64; ++index) {
    nv::nvmlComputeInstanceProfileInfo_t info{};
    nv::nvmlReturn_t r =
        api_.ci_profile(gi, index, nv::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info);
    if (r == nv::NVML_ERROR_INVALID_ARGUMENT) break;
    if (r == nv::NVML_ERROR_NOT_SUPPORTED) continue;
    if (r != nv::NVML_SUCCESS) {
      return CallError(gpu, "nvmlGpuInstanceGetComputeInstanceProfileInfo", r);
    }
    if (info.sliceCount == slices) return info.id;
  }
  return Status::FailedPrecondition(fmt::format(
      "GPU {}: the driver offers no compute-instance profile of {} slices", gpu, slices));
}

Result<MigDevice> NvmlBackend::CreateMigDevice(int gpu, const std::string& profile, int start) {
  nv::nvmlDevice_t dev = nullptr;
  TESSERA_RETURN_IF_ERROR(MigCall(gpu,
                                  api_.gi_profile && api_.ci_profile && api_.create_gi &&
                                      api_.destroy_gi && api_.create_ci && api_.destroy_ci &&
                                      api_.compute_instance && api_.gpu_instance,
                                  "the MIG create and destroy calls", &dev));
  const std::string& model = models_[static_cast<size_t>(gpu)];
  const mig::Table* table = catalog_.FindGpu(model)->mig;
  const mig::Profile* p = table != nullptr ? table->Find(profile) : nullptr;
  if (p == nullptr) {
    return Status::NotFound(
        fmt::format("GPU {}: MIG profile '{}' is not one of the {}'s", gpu, profile, model));
  }
  const std::string where = fmt::format("GPU {}: MIG {}@{}", gpu, profile, start);
  unsigned int current = nv::NVML_DEVICE_MIG_DISABLE, pending = nv::NVML_DEVICE_MIG_DISABLE;
  if (api_.mig_mode == nullptr || api_.mig_mode(dev, &current, &pending) != nv::NVML_SUCCESS ||
      current != nv::NVML_DEVICE_MIG_ENABLE) {
    return Status::FailedPrecondition(where + ": the GPU is not in MIG mode");
  }
  // The catalog's id must be one the driver offers on this GPU.
  unsigned int slices = 0;
  for (unsigned int index = 0; index < 64 && slices == 0; ++index) {
    nv::nvmlGpuInstanceProfileInfo_t info{};
    nv::nvmlReturn_t r = api_.gi_profile(dev, index, &info);
    if (r == nv::NVML_ERROR_INVALID_ARGUMENT) break;
    if (r == nv::NVML_ERROR_NOT_SUPPORTED) continue;
    if (r != nv::NVML_SUCCESS) return CallError(gpu, "nvmlDeviceGetGpuInstanceProfileInfo", r);
    if (info.id == static_cast<unsigned int>(p->id)) slices = info.sliceCount;
  }
  if (slices == 0) {
    return Status::FailedPrecondition(fmt::format(
        "{}: the driver does not support the profile here (profile id {})", where, p->id));
  }
  const nv::nvmlGpuInstancePlacement_t placement{static_cast<unsigned int>(start),
                                                 static_cast<unsigned int>(p->memory_slices)};
  nv::nvmlGpuInstance_t gi = nullptr;
  nv::nvmlReturn_t r = api_.create_gi(dev, static_cast<unsigned int>(p->id), &placement, &gi);
  if (r == nv::NVML_ERROR_INSUFFICIENT_RESOURCES) {
    return Status::ResourceExhausted(
        fmt::format("{}: the placement is taken (nvmlDeviceCreateGpuInstanceWithPlacement: {})",
                    where, Describe(r)));
  }
  if (r != nv::NVML_SUCCESS) {
    return CallError(gpu, "nvmlDeviceCreateGpuInstanceWithPlacement", r).WithPrefix(where);
  }
  // From here on, a failure destroys the GPU instance again: nothing is left half-made.
  auto undo = [&](Status why) {
    const nv::nvmlReturn_t d = api_.destroy_gi(gi);
    return Status(why.code(), why.message() + (d == nv::NVML_SUCCESS
                                                   ? "; its GPU instance was destroyed again"
                                                   : "; destroying its GPU instance failed too: " +
                                                         Describe(d)));
  };
  nv::nvmlGpuInstanceInfo_t gi_info{};
  r = api_.gpu_instance_info(gi, &gi_info);
  if (r != nv::NVML_SUCCESS) return undo(CallError(gpu, "nvmlGpuInstanceGetInfo", r));
  Result<unsigned int> ci_profile = FullComputeProfile(gpu, gi, slices);
  if (!ci_profile.ok()) return undo(ci_profile.status().WithPrefix(where));
  nv::nvmlComputeInstance_t ci = nullptr;
  r = api_.create_ci(gi, *ci_profile, &ci);
  if (r != nv::NVML_SUCCESS) {
    return undo(CallError(gpu, "nvmlGpuInstanceCreateComputeInstance", r).WithPrefix(where));
  }
  for (MigDevice& m : ReadMigDevices(dev, model)) {
    if (!m.bare && m.gpu_instance == static_cast<int>(gi_info.id)) {
      m.profile = profile;
      m.start = start;
      return m;
    }
  }
  if (api_.destroy_ci(ci) == nv::NVML_SUCCESS) {
    return undo(Status::Internal(where + ": the new MIG device is not among the GPU's"));
  }
  return Status::Internal(where +
                          ": the new MIG device is not among the GPU's, and could not be "
                          "destroyed");
}

Status NvmlBackend::DestroyMigDevice(int gpu, const MigDevice& device) {
  nv::nvmlDevice_t dev = nullptr;
  TESSERA_RETURN_IF_ERROR(
      MigCall(gpu, api_.destroy_gi && api_.destroy_ci && api_.compute_instance && api_.gpu_instance,
              "the MIG destroy calls", &dev));
  const std::string where = fmt::format("GPU {}: MIG device {}", gpu, device.uuid);
  nv::nvmlGpuInstance_t gi = nullptr;
  nv::nvmlReturn_t r = api_.gpu_instance(dev, static_cast<unsigned int>(device.gpu_instance), &gi);
  if (r == nv::NVML_ERROR_NOT_FOUND) return Status::NotFound(where + ": gone already");
  if (r != nv::NVML_SUCCESS) {
    return CallError(gpu, "nvmlDeviceGetGpuInstanceById", r).WithPrefix(where);
  }
  nv::nvmlComputeInstance_t ci = nullptr;
  r = api_.compute_instance(gi, static_cast<unsigned int>(device.compute_instance), &ci);
  if (r == nv::NVML_SUCCESS) {
    r = api_.destroy_ci(ci);
    if (r == nv::NVML_ERROR_IN_USE) {
      return Status::FailedPrecondition(where + ": in use by a process");
    }
    if (r != nv::NVML_SUCCESS) {
      return CallError(gpu, "nvmlComputeInstanceDestroy", r).WithPrefix(where);
    }
  } else if (r != nv::NVML_ERROR_NOT_FOUND) {
    return CallError(gpu, "nvmlGpuInstanceGetComputeInstanceById", r).WithPrefix(where);
  }
  r = api_.destroy_gi(gi);
  if (r == nv::NVML_ERROR_IN_USE) {
    return Status::FailedPrecondition(where + ": its GPU instance holds other compute instances");
  }
  if (r != nv::NVML_SUCCESS) return CallError(gpu, "nvmlGpuInstanceDestroy", r).WithPrefix(where);
  return Status::Ok();
}

Result<std::string> NvmlBackend::SetMigMode(int gpu, bool enabled) {
  nv::nvmlDevice_t dev = nullptr;
  TESSERA_RETURN_IF_ERROR(MigCall(gpu, api_.set_mig_mode != nullptr && api_.mig_mode != nullptr,
                                  "nvmlDeviceSetMigMode", &dev));
  const unsigned int mode = enabled ? nv::NVML_DEVICE_MIG_ENABLE : nv::NVML_DEVICE_MIG_DISABLE;
  nv::nvmlReturn_t activation = nv::NVML_SUCCESS;
  nv::nvmlReturn_t r = api_.set_mig_mode(dev, mode, &activation);
  if (r == nv::NVML_ERROR_IN_USE || activation == nv::NVML_ERROR_IN_USE) {
    return Status::FailedPrecondition(
        fmt::format("GPU {} is in use ({}): MIG mode changes only on an idle GPU", gpu,
                    enabled ? "processes run on it" : "processes or MIG devices are on it"));
  }
  if (r != nv::NVML_SUCCESS) return CallError(gpu, "nvmlDeviceSetMigMode", r);
  // The change may have unbound the GPU: take its handle afresh.
  devices_[static_cast<size_t>(gpu)] = nullptr;
  if (activation == nv::NVML_ERROR_RESET_REQUIRED) return std::string("pending_reset");
  if (activation != nv::NVML_SUCCESS) {
    return CallError(gpu, "nvmlDeviceSetMigMode (activation)", activation);
  }
  TESSERA_RETURN_IF_ERROR(MigCall(gpu, true, "", &dev));
  unsigned int current = 0, pending = 0;
  r = api_.mig_mode(dev, &current, &pending);
  if (r != nv::NVML_SUCCESS) return CallError(gpu, "nvmlDeviceGetMigMode", r);
  return std::string(current == mode ? "applied" : "pending_reset");
}

Result<int> NvmlBackend::CountProcesses(int gpu) {
  nv::nvmlDevice_t dev = nullptr;
  TESSERA_RETURN_IF_ERROR(
      MigCall(gpu, api_.processes != nullptr, "nvmlDeviceGetComputeRunningProcesses_v3", &dev));
  unsigned int count = 0;
  nv::nvmlReturn_t r = api_.processes(dev, &count, nullptr);
  if (r == nv::NVML_SUCCESS) return 0;
  if (r == nv::NVML_ERROR_INSUFFICIENT_SIZE) return static_cast<int>(count);
  return CallError(gpu, "nvmlDeviceGetComputeRunningProcesses_v3", r);
}

}  // namespace tessera::agent::nvml_impl
