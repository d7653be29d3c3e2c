// The catalog: GPU models, their MIG profile tables, instance types (the product matrix) and the
// price book. It is loaded from a directory of JSON data files (schema in docs/catalog.md), or
// from the copy embedded in the binary, and validated as a whole: every error names the file,
// the entry and the field.
// Thread-safety: a Catalog is immutable once loaded and may be shared freely across threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/money.h"
#include "common/result.h"
#include "mig/mig.h"

namespace tessera::catalog {

struct GpuModelTag {};
// Dense index of a GPU model in Catalog::gpus(); what hot paths (fleet, sched) carry.
using GpuModelIndex = Index<GpuModelTag>;

struct GpuModel {
  std::string id;                    // e.g. "H100-80GB".
  std::vector<std::string> aliases;  // Other names that resolve to it, e.g. openb's "V100M16".
  std::string vendor;                // "nvidia" or "amd".
  std::string architecture;          // e.g. "Hopper".
  int64_t memory_mib = 0;
  double memory_bandwidth_gbps = 0;
  // Dense throughput per GPU in TFLOP/s (TOP/s for INT8); 0 where the model has no such path.
  double fp32_tflops = 0, tf32_tflops = 0, fp16_tflops = 0, fp8_tflops = 0, int8_tops = 0;
  int tdp_watts = 0;
  double nvlink_gbps = 0;           // 0 for PCIe-only models.
  const mig::Table* mig = nullptr;  // The MIG table when the model supports MIG, else nullptr.
  std::string source;               // Where the figures came from.
};

enum class SharingMode { kExclusive, kMig, kShared };
std::string_view SharingModeName(SharingMode m);  // "exclusive", "mig", "shared".
std::optional<SharingMode> ParseSharingMode(std::string_view s);

struct InstanceType {
  std::string id;      // e.g. "gpu.8xh100".
  std::string family;  // "general", "compute", "rendering", "inference", "mig", "shared".
  std::string description;
  int64_t vcpus = 0;
  int64_t memory_mib = 0;
  std::string gpu_model;  // Catalog GPU model id.
  SharingMode sharing = SharingMode::kExclusive;
  int gpus = 0;                // kExclusive: whole GPUs (>= 1).
  std::string mig_profile;     // kMig: the profile name on gpu_model; one slice.
  int milli_gpu = 0;           // kShared: thousandths of one GPU (1..999).
  int64_t gpu_memory_mib = 0;  // kShared: the memory cap; 0 = proportional to milli_gpu.
  bool nvlink = false;         // kExclusive with gpus > 1: all on one NVLink island.
};

struct Price {
  std::string instance_type;
  Money on_demand_per_hour;
  Money reserved_1y_per_hour;  // Effective hourly rate of a 1-year commitment.
  Money reserved_3y_per_hour;
  Money spot_per_hour;
  std::string source;  // Provider, SKU and date the figures are based on.
};

class Catalog {
 public:
  // Loads and validates every data file in `dir`. On any error, returns InvalidArgument whose
  // message lists every problem found, one per line, each as "file: entry 'id': field: what".
  static Result<Catalog> LoadDir(const std::string& dir);
  // Loads the catalog embedded in the binary; it is validated by the tests, so this succeeds.
  static Result<Catalog> LoadEmbedded();

  // Every problem in `dir`, one "file: entry 'id': field: what" line each; empty when valid.
  static std::vector<std::string> ValidateDir(const std::string& dir);
  // Parses and validates data files already in memory, keyed by file name (see DataFiles()); a
  // data file absent from `texts` is reported as missing and other names are ignored. Errors as
  // LoadDir's.
  static Result<Catalog> ParseTexts(const std::map<std::string, std::string, std::less<>>& texts);

  const std::vector<GpuModel>& gpus() const { return gpus_; }
  const std::vector<InstanceType>& instance_types() const { return instance_types_; }
  const std::vector<Price>& prices() const { return prices_; }

  // Resolves a model id or alias, case-sensitively ("V100M32" -> V100-32GB). nullopt if unknown.
  std::optional<GpuModelIndex> FindGpuIndex(std::string_view id_or_alias) const;
  const GpuModel* FindGpu(std::string_view id_or_alias) const;
  const GpuModel& gpu(GpuModelIndex i) const { return gpus_[i.value]; }
  const InstanceType* FindInstanceType(std::string_view id) const;
  const Price* FindPrice(std::string_view instance_type) const;
  // How many GPU models carry a MIG table.
  size_t mig_table_count() const { return mig_tables_.size(); }

  // The data files a catalog directory holds, in the order they are read.
  static const std::vector<std::string>& DataFiles();

 private:
  friend class CatalogBuilder;  // catalog_builder.cc fills the members while parsing.

  // The one parsing path behind LoadDir, LoadEmbedded and ValidateDir. `files` maps each data
  // file's name to its text or to the error met reading it; every problem found is appended to
  // `errors`, and the returned catalog is meaningful only when none was.
  static Catalog Parse(const std::map<std::string, Result<std::string>, std::less<>>& files,
                       std::vector<std::string>& errors);

  std::vector<GpuModel> gpus_;
  std::vector<std::unique_ptr<mig::Table>> mig_tables_;  // Stable addresses for GpuModel::mig.
  std::vector<InstanceType> instance_types_;
  std::vector<Price> prices_;
  std::map<std::string, GpuModelIndex, std::less<>> gpu_index_;  // ids and aliases.
  std::map<std::string, size_t, std::less<>> instance_type_index_;
  std::map<std::string, size_t, std::less<>> price_index_;  // By instance type.
};

}  // namespace tessera::catalog
