#include "agent/gpu_devices.h"

#include <fmt/format.h>

#include <set>

namespace tessera::agent {

std::string GpuDeviceKey(int index, const std::string& mig_profile, int mig_start) {
  if (mig_profile.empty()) return std::to_string(index);
  return fmt::format("{}/{}@{}", index, mig_profile, mig_start);
}

GpuDeviceList ListGpuDevices(const Inventory& inventory, const MigMinors& minors,
                             const std::string& dev_root) {
  GpuDeviceList out;
  for (const GpuInfo& g : inventory.gpus) {
    GpuDeviceNodes gpu{std::to_string(g.index), g.uuid, g.minor, {}};
    if (g.minor >= 0) gpu.dev_paths.push_back(fmt::format("{}/nvidia{}", dev_root, g.minor));
    out.devices.push_back(std::move(gpu));
    out.keys.push_back(GpuDeviceKey(g.index));
    for (size_t n = 0; n < g.mig_devices.size(); ++n) {
      const MigDevice& m = g.mig_devices[n];
      const std::string name = fmt::format("{}:{}", g.index, n);
      if (m.profile.empty() || m.start < 0 || m.gpu_instance < 0 || m.compute_instance < 0 ||
          g.minor < 0) {
        out.notes.push_back(fmt::format(
            "MIG device {} ({}): the driver did not tell its profile, start, instance ids or "
            "its GPU's minor, so no container can be given it",
            name, m.uuid));
        continue;
      }
      auto paths = MigDevicePaths(minors, g.minor, m.gpu_instance, m.compute_instance, dev_root);
      if (!paths.ok()) {
        out.notes.push_back(
            fmt::format("MIG device {} ({}): {}", name, m.uuid, paths.status().message()));
        continue;
      }
      out.devices.push_back({name, m.uuid, g.minor, std::move(*paths)});
      out.keys.push_back(GpuDeviceKey(g.index, m.profile, m.start));
    }
  }
  return out;
}

Result<std::vector<std::string>> CdiDevicesForLoad(const nlohmann::json& gpu_load,
                                                   const std::map<std::string, std::string>& by_key,
                                                   bool required) {
  std::vector<std::string> out;
  if (!gpu_load.is_array()) return out;
  std::set<std::string> seen;
  for (const nlohmann::json& g : gpu_load) {
    if (!g.is_object() || !g.contains("index") || !g["index"].is_number_integer()) continue;
    const int index = g["index"].get<int>();
    const std::string profile = g.value("mig_profile", "");
    const int start = g.value("mig_start", 0);
    const std::string key = GpuDeviceKey(index, profile, start);
    if (!seen.insert(key).second) continue;  // A GPU shared by two of its ranks' loads.
    auto it = by_key.find(key);
    if (it != by_key.end()) {
      out.push_back(it->second);
    } else if (required) {
      return Status::NotFound(
          profile.empty()
              ? fmt::format("GPU {} has no CDI device on this node, so its container could not "
                            "reach it",
                            index)
              : fmt::format("GPU {} has no MIG device {} at start slice {} with a CDI device on "
                            "this node, so its container could not reach it",
                            index, profile, start));
    }
  }
  return out;
}

}  // namespace tessera::agent
