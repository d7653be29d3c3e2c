#include "core/recovery.h"

#include <fmt/format.h>

namespace tessera::core {

std::string RecoveryReport::Summary() const {
  std::string s = fmt::format(
      "restored {} tenant(s) and {} instance(s): {} holding capacity, {} queued, {} failed",
      tenants, instances, rebooked, queued, failed.size());
  return s;
}

std::string WhyNotRestorable(const StoredInstance& stored, const catalog::Catalog& catalog) {
  const Shape& s = stored.instance.shape;
  const bool gpu = !(s.mode == catalog::SharingMode::kExclusive && s.gpus == 0);
  if (gpu) {
    const catalog::GpuModel* model = catalog.FindGpu(s.gpu_model);
    if (!model)
      return fmt::format("its GPU model '{}' is not in the catalog any more", s.gpu_model);
    if (s.mode == catalog::SharingMode::kMig && (!model->mig || !model->mig->Find(s.mig_profile))) {
      return fmt::format("MIG profile '{}' is not in the {} table any more", s.mig_profile,
                         model->id);
    }
  }
  if (!stored.binding.ok()) return stored.binding.message();
  return "";
}

}  // namespace tessera::core
