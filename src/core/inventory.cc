#include "core/inventory.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/json.h"
#include "common/text.h"

namespace tessera::core {

Result<fleet::NodeSpec> NodeSpecOf(const catalog::Catalog& catalog, const AgentNode& node,
                                   const nlohmann::json& inventory) {
  JsonFields f(inventory, "inventory");
  f.RejectUnknown({"backend", "driver_version", "cpu_milli", "memory_mib", "gpus", "nvlink_islands",
                   "hostname"});
  // Words of the inventory become series' labels and API fields: short and printable.
  auto text = [](JsonFields& on, const char* key, size_t max) {
    const std::string v = on.String(key, false);
    if (on.ok() && (v.size() > max || !IsPrintableText(v))) {
      on.Fail(key, fmt::format("must be at most {} printable ASCII characters", max));
    }
  };
  text(f, "backend", 32);
  text(f, "driver_version", 64);
  text(f, "hostname", 253);
  fleet::NodeSpec spec;
  spec.name = node.name;
  spec.cpu_milli = f.Int("cpu_milli", 1000, int64_t{100'000} * 1000);
  spec.memory_mib = f.Int("memory_mib", 1, int64_t{1} << 34);
  const nlohmann::json* gpus = f.Get("gpus");
  if (gpus && !gpus->is_array()) f.Fail("gpus", "expected a list");
  if (gpus && gpus->is_array()) {
    if (gpus->size() > fleet::kMaxGpusPerNode) {
      f.Fail("gpus",
             fmt::format("{} GPUs; a node holds at most {}", gpus->size(), fleet::kMaxGpusPerNode));
    }
    std::string model_of_first;
    for (size_t i = 0; i < gpus->size() && i < fleet::kMaxGpusPerNode; ++i) {
      JsonFields g((*gpus)[i], fmt::format("inventory: gpus[{}]", i));
      g.RejectUnknown({"index", "uuid", "name", "model", "memory_mib", "mig_enabled", "mig_devices",
                       "nvlink_peers", "pci_bus_id"});
      const int64_t index = g.Int("index", 0, fleet::kMaxGpusPerNode - 1);
      const std::string uuid = g.String("uuid");
      const std::string name = g.String("name", false);
      if (g.ok() && (name.size() > 256 || !IsPrintableText(name))) {
        g.Fail("name", "must be at most 256 printable ASCII characters");
      }
      const std::string model = g.String("model");
      g.Int("memory_mib", 0, int64_t{1} << 24, false);
      const bool mig = g.Bool("mig_enabled", false);
      if (const nlohmann::json* devices = g.Get("mig_devices", false)) {
        if (!devices->is_array() || devices->size() > 64) {
          g.Fail("mig_devices", "expected a list of at most 64 MIG devices");
        }
        for (size_t d = 0; devices->is_array() && d < devices->size() && d < 64; ++d) {
          JsonFields m((*devices)[d], fmt::format("inventory: gpus[{}].mig_devices[{}]", i, d));
          m.RejectUnknown({"uuid", "profile", "start"});
          const std::string mig_uuid = m.String("uuid");
          m.String("profile");
          m.Int("start", -1, 7);
          if (m.ok() &&
              (mig_uuid.empty() || mig_uuid.size() > kMaxUuid || !IsPrintableAscii(mig_uuid))) {
            m.Fail("uuid", "must be 1-96 printable ASCII characters");
          }
          if (!m.ok()) return m.first_error();
        }
      }
      g.Get("nvlink_peers", false);
      text(g, "pci_bus_id", 32);
      if (!g.ok()) return g.first_error();
      if (index != static_cast<int64_t>(i)) g.Fail("index", fmt::format("is {}, not {}", index, i));
      if (uuid.empty() || uuid.size() > kMaxUuid || !IsPrintableAscii(uuid)) {
        g.Fail("uuid", "must be 1-96 printable ASCII characters");
      } else if (std::find(spec.gpu_uuids.begin(), spec.gpu_uuids.end(), uuid) !=
                 spec.gpu_uuids.end()) {
        g.Fail("uuid", fmt::format("'{}' is given twice", Quote(uuid)));
      }
      const catalog::GpuModel* known = catalog.FindGpu(model);
      if (!known) {
        g.Fail("model",
               fmt::format("unknown GPU model '{}'{} (not in the catalog; tessera "
                           "catalog list shows the models)",
                           Quote(model), name.empty() ? "" : fmt::format(" ('{}')", Quote(name))));
      } else if (model_of_first.empty()) {
        model_of_first = known->id;
      } else if (known->id != model_of_first) {
        g.Fail("model", fmt::format("'{}' differs from gpus[0]'s '{}': a node has one GPU model",
                                    known->id, model_of_first));
      }
      if (!g.ok()) return g.first_error();
      spec.gpu_model = model_of_first;
      spec.gpu_uuids.push_back(uuid);
      spec.gpu_modes.push_back(mig ? catalog::SharingMode::kMig
                                   : node.SharingOf(static_cast<int>(i)));
    }
  }
  if (const nlohmann::json* islands = f.Get("nvlink_islands", false)) {
    bool ok = islands->is_array();
    for (size_t i = 0; ok && i < islands->size(); ++i) {
      const nlohmann::json& island = (*islands)[i];
      ok = island.is_array();
      std::vector<int> members;
      for (size_t k = 0; ok && k < island.size(); ++k) {
        ok = island[k].is_number_integer() && island[k].get<int64_t>() >= 0 &&
             island[k].get<int64_t>() < fleet::kMaxGpusPerNode;
        if (ok) members.push_back(island[k].get<int>());
      }
      if (ok) spec.nvlink_islands.push_back(std::move(members));
    }
    if (!ok) f.Fail("nvlink_islands", "expected lists of GPU indices");
  }
  TESSERA_RETURN_IF_ERROR(f.first_error());
  spec.gpus = static_cast<int>(spec.gpu_uuids.size());
  if (spec.gpus == 0) {
    spec.gpu_modes.clear();
    spec.gpu_uuids.clear();
  }
  return spec;
}

bool SameHardware(const fleet::NodeSpec& spec, const fleet::Node& n,
                  const catalog::Catalog& catalog) {
  if (n.cpu_milli != spec.cpu_milli || n.memory_mib != spec.memory_mib ||
      n.gpus.size() != static_cast<size_t>(spec.gpus)) {
    return false;
  }
  const std::string model = n.model.valid() ? catalog.gpu(n.model).id : "";
  if (model != spec.gpu_model) return false;
  for (size_t g = 0; g < n.gpus.size(); ++g) {
    if (n.gpus[g].uuid != spec.gpu_uuids[g]) return false;
  }
  return true;
}

std::string DescribeNode(const fleet::NodeSpec& spec) {
  return fmt::format("{} x {}, {} vCPUs, {} MiB", spec.gpus,
                     spec.gpu_model.empty() ? "no GPU" : spec.gpu_model, spec.cpu_milli / 1000,
                     spec.memory_mib);
}

}  // namespace tessera::core
