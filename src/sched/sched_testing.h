// Helpers shared by the scheduler's tests: the embedded catalog, small fleets, model bits.
// Thread-safety: test-only; TheCatalog() is safe to call from any thread.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "catalog/catalog_testing.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"

namespace tessera::sched::testing {

inline const catalog::Catalog& TheCatalog() { return catalog::EmbeddedCatalogForTest(); }

// 1 << the model's index.
inline ModelMask Bit(const std::string& model) {
  return ModelMask{1} << TheCatalog().FindGpuIndex(model)->value;
}

// A node with every GPU in shared mode, as in the openb fleet.
inline fleet::NodeSpec SharedNode(std::string name, std::string model, int gpus, int vcpus,
                                  int memory_gib = 256) {
  return fleet::NodeSpec{.name = std::move(name),
                         .gpu_model = std::move(model),
                         .gpus = gpus,
                         .cpu_milli = int64_t{vcpus} * 1000,
                         .memory_mib = int64_t{memory_gib} * 1024,
                         .default_mode = catalog::SharingMode::kShared};
}

inline std::unique_ptr<fleet::Fleet> MakeFleet(const std::vector<fleet::NodeSpec>& specs) {
  auto f = std::make_unique<fleet::Fleet>(&TheCatalog());
  for (const fleet::NodeSpec& s : specs) {
    Result<fleet::NodeIndex> added = f->AddNode(s);
    EXPECT_TRUE(added.ok()) << added.status().ToString();
  }
  return f;
}

inline Request Cpu(int64_t cpu_milli, int64_t memory_mib = 1024) {
  return Request{.cpu_milli = cpu_milli, .memory_mib = memory_mib};
}
inline Request Share(int64_t cpu_milli, int milli, ModelMask models = 0) {
  return Request{.cpu_milli = cpu_milli,
                 .memory_mib = 1024,
                 .gpu_count = 1,
                 .gpu_milli = milli,
                 .allowed_models = models};
}
inline Request Whole(int64_t cpu_milli, int gpus, ModelMask models = 0) {
  return Request{.cpu_milli = cpu_milli,
                 .memory_mib = 1024,
                 .gpu_count = gpus,
                 .gpu_milli = 1000,
                 .allowed_models = models};
}

}  // namespace tessera::sched::testing
