#include "core/usage.h"

#include <fmt/format.h>

#include "fleet/fleet.h"

namespace tessera::core {

std::string Gpus(int64_t milli) {
  return fmt::format("{:g}", static_cast<double>(milli) / fleet::kMilliPerGpu);
}

int64_t MigSliceMilli(int64_t slices, int total) { return total > 0 ? slices * 1000 / total : 0; }

std::pair<const catalog::GpuModel*, int64_t> Usage::MigOf(const Shape& shape) const {
  if (shape.mode != catalog::SharingMode::kMig) return {nullptr, 0};
  const catalog::GpuModel* m = catalog_->FindGpu(shape.gpu_model);
  const mig::Profile* p = m && m->mig ? m->mig->Find(shape.mig_profile) : nullptr;
  if (!p) return {nullptr, 0};
  return {m, p->compute_slices};
}

int64_t Usage::MilliOf(const Held& h, const catalog::Catalog& catalog) {
  int64_t milli = h.milli;
  for (const auto& [model, slices] : h.mig_slices) {
    const catalog::GpuModel* m = catalog.FindGpu(model);
    milli += MigSliceMilli(slices, m && m->mig ? m->mig->compute_slices : 1);
  }
  return milli;
}

void Usage::Add(const std::string& tenant, const Shape& shape) {
  Held& h = by_tenant_[tenant];
  if (auto [model, slices] = MigOf(shape); model) {
    h.mig_slices[model->id] += slices;
  } else {
    h.milli += shape.GpuMilli(*catalog_);
  }
}

void Usage::Remove(const std::string& tenant, const Shape& shape) {
  auto it = by_tenant_.find(tenant);
  if (it == by_tenant_.end()) return;
  Held& h = it->second;
  if (auto [model, slices] = MigOf(shape); model) {
    if ((h.mig_slices[model->id] -= slices) <= 0) h.mig_slices.erase(model->id);
  } else {
    h.milli -= shape.GpuMilli(*catalog_);
  }
  if (h.milli == 0 && h.mig_slices.empty()) by_tenant_.erase(it);
}

int64_t Usage::Milli(const std::string& tenant) const {
  auto it = by_tenant_.find(tenant);
  return it == by_tenant_.end() ? 0 : MilliOf(it->second, *catalog_);
}

int64_t Usage::Marginal(const std::string& tenant, const Shape& shape) const {
  auto [model, slices] = MigOf(shape);
  if (!model) return shape.GpuMilli(*catalog_);
  auto it = by_tenant_.find(tenant);
  int64_t before = 0;
  if (it != by_tenant_.end()) {
    if (auto s = it->second.mig_slices.find(model->id); s != it->second.mig_slices.end()) {
      before = s->second;
    }
  }
  const int total = model->mig->compute_slices;
  return MigSliceMilli(before + slices, total) - MigSliceMilli(before, total);
}

}  // namespace tessera::core
