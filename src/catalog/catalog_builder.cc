// CatalogBuilder: parses the catalog's data files into a Catalog and checks every field and
// every cross-reference, collecting all problems rather than stopping at the first. When a whole
// file is unusable, the checks that depend on it are skipped, so one broken file does not bury
// the real error under a cascade of "unknown model" lines.
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "catalog/catalog.h"
#include "common/json.h"

namespace tessera::catalog {
namespace {

using FileMap = std::map<std::string, Result<std::string>, std::less<>>;
using nlohmann::json;

constexpr int64_t kMaxMemoryMib = int64_t{16} << 20;  // 16 TiB: a typo guard, not a real limit.
constexpr double kMaxFigure = 1e7;                    // Throughputs and bandwidths.
constexpr int64_t kMaxTdpWatts = 100'000;
constexpr int64_t kMaxGpusPerInstance = 64;
constexpr int64_t kMaxVcpus = 4096;
constexpr size_t kMaxIdLength = 63;

constexpr std::string_view kVendors[] = {"nvidia", "amd", "intel", "undisclosed"};
constexpr std::string_view kFamilies[] = {"general",   "compute", "rendering",
                                          "inference", "mig",     "shared"};

template <size_t N>
bool OneOf(std::string_view s, const std::string_view (&set)[N]) {
  return std::find(std::begin(set), std::end(set), s) != std::end(set);
}

bool IsAlnum(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
}

// GPU model names keep the vendor's capitals ("H100-80GB", "V100M16").
bool IsModelName(std::string_view s) {
  if (s.empty() || s.size() > kMaxIdLength || !IsAlnum(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char ch) { return IsAlnum(ch) || ch == '.' || ch == '-' || ch == '_'; });
}

// Instance type ids appear in URLs, labels and invoices, so they are lower case.
bool IsTypeId(std::string_view s) {
  auto ok = [](char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9'); };
  if (s.empty() || s.size() > kMaxIdLength || !ok(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [&](char ch) { return ok(ch) || ch == '.' || ch == '-'; });
}

// "file: entry 'ID'" when the entry has a usable `key`, else "file: list[i]".
std::string EntryWhere(std::string_view file, std::string_view list, const json& e,
                       std::string_view key, size_t i) {
  if (e.is_object()) {
    auto it = e.find(key);
    if (it != e.end() && it->is_string() && !it->get<std::string>().empty()) {
      return fmt::format("{}: entry '{}'", file, it->get<std::string>());
    }
  }
  return fmt::format("{}: {}[{}]", file, list, i);
}

// A required string that must also not be empty.
std::string Text(JsonFields& f, std::string_view key) {
  std::string s = f.String(key);
  const json* v = f.Get(key, /*required=*/false);
  if (v && v->is_string() && s.empty()) f.Fail(key, "must not be empty");
  return s;
}

// A price: a decimal string parsed exactly, above zero. nullopt after adding the error.
std::optional<Money> MoneyField(JsonFields& f, std::string_view key) {
  const json* v = f.Get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    f.Fail(key,
           fmt::format("expected a decimal string such as \"3.06\", found {}", JsonTypeName(*v)));
    return std::nullopt;
  }
  Result<Money> m = Money::Parse(v->get<std::string>());
  if (!m.ok()) {
    f.Fail(key, m.status().message());
    return std::nullopt;
  }
  if (*m <= Money()) {
    f.Fail(key, fmt::format("{} must be above zero", m->ToString()));
    return std::nullopt;
  }
  return *m;
}

// Adds an error for `key` when the entry has it although its sharing mode does not use it.
void Forbid(JsonFields& f, const json& e, std::string_view key, std::string_view mode) {
  if (e.is_object() && e.contains(key)) {
    f.Fail(key, fmt::format("applies only to sharing '{}'", mode));
  }
}

}  // namespace

class CatalogBuilder {
 public:
  CatalogBuilder(Catalog& c, std::vector<std::string>& errors) : c_(c), errors_(errors) {}

  void Build(const FileMap& files) {
    json doc;
    if (const json* list = OpenList(files, "gpus.json", "gpus", true, doc)) {
      gpus_ok_ = true;
      for (size_t i = 0; i < list->size(); ++i) AddGpu((*list)[i], i);
    }
    if (const json* list = OpenList(files, "mig.json", "tables", true, doc)) {
      mig_ok_ = true;
      for (size_t i = 0; i < list->size(); ++i) AddMigTable((*list)[i], i);
    }
    CheckMigCoverage();
    if (const json* list = OpenList(files, "instance_types.json", "instance_types", false, doc)) {
      types_ok_ = true;
      for (size_t i = 0; i < list->size(); ++i) AddInstanceType((*list)[i], i);
    }
    if (const json* list = OpenList(files, "prices.json", "prices", true, doc)) {
      for (size_t i = 0; i < list->size(); ++i) AddPrice((*list)[i], i);
      CheckEveryTypePriced();
    }
  }

 private:
  // Reads and parses `file`, checks its top level ({"source": ..., "<list_key>": [...]}) and
  // returns the list, or nullptr after reporting why the file is unusable.
  const json* OpenList(const FileMap& files, const std::string& file, std::string_view list_key,
                       bool has_source, json& doc) {
    auto it = files.find(file);
    if (it == files.end()) {
      errors_.push_back(fmt::format("{}: missing", file));
      return nullptr;
    }
    if (!it->second.ok()) {
      errors_.push_back(it->second.status().message());
      return nullptr;
    }
    Result<json> parsed = ParseJson(*it->second, file);
    if (!parsed.ok()) {
      errors_.push_back(parsed.status().message());
      return nullptr;
    }
    doc = std::move(*parsed);
    JsonFields top(doc, file);
    if (has_source) {
      top.RejectUnknown({"source", list_key});
      (void)Text(top, "source");
    } else {
      top.RejectUnknown({list_key});
    }
    const json* list = top.Get(list_key);
    if (list && !list->is_array()) {
      top.Fail(list_key, fmt::format("expected an array, found {}", JsonTypeName(*list)));
      list = nullptr;
    }
    Take(top);
    return list;
  }

  void AddGpu(const json& e, size_t i) {
    JsonFields f(e, EntryWhere("gpus.json", "gpus", e, "id", i));
    f.RejectUnknown({"id", "aliases", "vendor", "architecture", "memory_mib",
                     "memory_bandwidth_gbps", "fp32_tflops", "tf32_tflops", "fp16_tflops",
                     "fp8_tflops", "int8_tops", "tdp_watts", "nvlink_gbps", "mig", "source"});
    GpuModel g;
    g.id = Text(f, "id");
    g.aliases = f.Strings("aliases", /*required=*/false);
    g.vendor = Text(f, "vendor");
    if (!g.vendor.empty() && !OneOf(g.vendor, kVendors)) {
      f.Fail("vendor", fmt::format("'{}' is not one of {}", g.vendor, fmt::join(kVendors, ", ")));
    }
    g.architecture = Text(f, "architecture");
    g.memory_mib = f.Int("memory_mib", 0, kMaxMemoryMib);
    g.memory_bandwidth_gbps = f.Number("memory_bandwidth_gbps", 0, kMaxFigure);
    g.fp32_tflops = f.Number("fp32_tflops", 0, kMaxFigure);
    g.tf32_tflops = f.Number("tf32_tflops", 0, kMaxFigure);
    g.fp16_tflops = f.Number("fp16_tflops", 0, kMaxFigure);
    g.fp8_tflops = f.Number("fp8_tflops", 0, kMaxFigure);
    g.int8_tops = f.Number("int8_tops", 0, kMaxFigure);
    g.tdp_watts = static_cast<int>(f.Int("tdp_watts", 0, kMaxTdpWatts));
    g.nvlink_gbps = f.Number("nvlink_gbps", 0, kMaxFigure);
    const bool mig = f.Bool("mig");
    g.source = Text(f, "source");
    // The model is kept even when other fields are wrong, so references to it still resolve
    // and only the real error is reported.
    if (RegisterGpuNames(f, g)) {
      c_.gpus_.push_back(std::move(g));
      mig_capable_.push_back(mig);
    }
    Take(f);
  }

  // Claims the model's id and aliases in the name index. False when the id is unusable.
  bool RegisterGpuNames(JsonFields& f, const GpuModel& g) {
    if (g.id.empty()) return false;
    if (!IsModelName(g.id)) {
      f.Fail("id", fmt::format("'{}' is not a valid model name (1 to {} letters, digits, '.', "
                               "'-' or '_', starting with a letter or digit)",
                               g.id, kMaxIdLength));
      return false;
    }
    if (auto owner = c_.FindGpu(g.id)) {
      f.Fail("id", fmt::format("'{}' is already a name of '{}'", g.id, owner->id));
      return false;
    }
    const GpuModelIndex index(static_cast<uint32_t>(c_.gpus_.size()));
    c_.gpu_index_.emplace(g.id, index);
    for (const std::string& alias : g.aliases) {
      if (!IsModelName(alias)) {
        f.Fail("aliases", fmt::format("'{}' is not a valid model name", alias));
      } else if (auto prior = c_.FindGpuIndex(alias)) {
        f.Fail("aliases", *prior == index
                              ? fmt::format("'{}' is listed twice or repeats the id", alias)
                              : fmt::format("'{}' is already a name of '{}'", alias,
                                            c_.gpus_[prior->value].id));
      } else {
        c_.gpu_index_.emplace(alias, index);
      }
    }
    return true;
  }

  void AddMigTable(const json& e, size_t i) {
    const std::string where = EntryWhere("mig.json", "tables", e, "model", i);
    if (e.is_object() && e.contains("model") && e["model"].is_string()) {
      mig_models_seen_.insert(e["model"].get<std::string>());
    }
    Result<mig::Table> t = mig::ParseTable(e, where);
    if (!t.ok()) {
      AppendLines(t.status().message());
      return;
    }
    if (!gpus_ok_) return;
    const auto index = c_.FindGpuIndex(t->model);
    if (!index) {
      errors_.push_back(fmt::format("{}: field 'model': unknown GPU model '{}' (not in gpus.json)",
                                    where, t->model));
      return;
    }
    GpuModel& g = c_.gpus_[index->value];
    std::string problem;
    if (g.id != t->model) {
      problem = fmt::format("'{}' is an alias; name the model by its id '{}'", t->model, g.id);
    } else if (!mig_capable_[index->value]) {
      problem = fmt::format("GPU model '{}' is not MIG-capable in gpus.json (its \"mig\" is false)",
                            g.id);
    } else if (g.mig != nullptr) {
      problem = fmt::format("a second table for '{}'", g.id);
    }
    if (!problem.empty()) {
      errors_.push_back(fmt::format("{}: field 'model': {}", where, problem));
      return;
    }
    c_.mig_tables_.push_back(std::make_unique<mig::Table>(std::move(*t)));
    g.mig = c_.mig_tables_.back().get();
  }

  // Every MIG-capable model needs a table. A table that exists but failed to parse has been
  // reported already, so it is not reported again as missing.
  void CheckMigCoverage() {
    if (!mig_ok_) return;
    for (size_t i = 0; i < c_.gpus_.size(); ++i) {
      const GpuModel& g = c_.gpus_[i];
      if (mig_capable_[i] && g.mig == nullptr && !mig_models_seen_.contains(g.id)) {
        errors_.push_back(fmt::format(
            "gpus.json: entry '{}': field 'mig': is true but mig.json has no table for it", g.id));
      }
    }
  }

  void AddInstanceType(const json& e, size_t i) {
    JsonFields f(e, EntryWhere("instance_types.json", "instance_types", e, "id", i));
    f.RejectUnknown({"id", "family", "description", "vcpus", "memory_mib", "gpu_model", "sharing",
                     "gpus", "mig_profile", "milli_gpu", "gpu_memory_mib", "nvlink"});
    InstanceType t;
    t.id = Text(f, "id");
    t.family = Text(f, "family");
    if (!t.family.empty() && !OneOf(t.family, kFamilies)) {
      f.Fail("family", fmt::format("'{}' is not one of {}", t.family, fmt::join(kFamilies, ", ")));
    }
    t.description = Text(f, "description");
    t.vcpus = f.Int("vcpus", 1, kMaxVcpus);
    t.memory_mib = f.Int("memory_mib", 1, kMaxMemoryMib);
    t.gpu_model = Text(f, "gpu_model");
    const GpuModel* model = ResolveModel(f, t.gpu_model);
    const std::string sharing = Text(f, "sharing");
    const auto mode = ParseSharingMode(sharing);
    if (!sharing.empty() && !mode) {
      f.Fail("sharing", fmt::format("'{}' is not one of exclusive, mig, shared", sharing));
    }
    if (mode) {
      t.sharing = *mode;
      switch (*mode) {
        case SharingMode::kExclusive:
          ReadExclusive(f, e, model, t);
          break;
        case SharingMode::kMig:
          ReadMig(f, e, model, t);
          break;
        case SharingMode::kShared:
          ReadShared(f, e, model, t);
          break;
      }
    }
    if (!t.id.empty()) {
      if (!IsTypeId(t.id)) {
        f.Fail("id", fmt::format("'{}' is not a valid instance type id (1 to {} lower-case "
                                 "letters, digits, '.' or '-', starting with a letter or digit)",
                                 t.id, kMaxIdLength));
      } else if (c_.FindInstanceType(t.id)) {
        f.Fail("id", "is listed twice");
      } else {
        c_.instance_type_index_.emplace(t.id, c_.instance_types_.size());
        c_.instance_types_.push_back(std::move(t));
      }
    }
    Take(f);
  }

  // The model an instance type names, or nullptr (with an error when gpus.json was usable).
  const GpuModel* ResolveModel(JsonFields& f, const std::string& name) {
    if (name.empty() || !gpus_ok_) return nullptr;
    const GpuModel* model = c_.FindGpu(name);
    if (!model) {
      f.Fail("gpu_model", fmt::format("unknown GPU model '{}' (not in gpus.json)", name));
    } else if (model->id != name) {
      f.Fail("gpu_model",
             fmt::format("'{}' is an alias; name the model by its id '{}'", name, model->id));
      return nullptr;
    }
    return model;
  }

  void ReadExclusive(JsonFields& f, const json& e, const GpuModel* model, InstanceType& t) {
    t.gpus = static_cast<int>(f.Int("gpus", 1, kMaxGpusPerInstance));
    t.nvlink = f.Bool("nvlink", /*required=*/false, false);
    if (t.nvlink && t.gpus == 1) f.Fail("nvlink", "needs more than one GPU");
    if (t.nvlink && model && model->nvlink_gbps <= 0) {
      f.Fail("nvlink", fmt::format("GPU model '{}' has no NVLink", model->id));
    }
    for (std::string_view key : {"mig_profile", "milli_gpu", "gpu_memory_mib"}) {
      Forbid(f, e, key, key == "mig_profile" ? "mig" : "shared");
    }
  }

  void ReadMig(JsonFields& f, const json& e, const GpuModel* model, InstanceType& t) {
    t.mig_profile = Text(f, "mig_profile");
    // Without a usable mig.json, or when this model's table was itself broken, the profile
    // cannot be checked; that error has been reported already.
    if (model && !t.mig_profile.empty() && mig_ok_) {
      if (model->mig == nullptr && !mig_models_seen_.contains(model->id)) {
        f.Fail("mig_profile", fmt::format("GPU model '{}' has no MIG table", model->id));
      } else if (model->mig != nullptr && model->mig->Find(t.mig_profile) == nullptr) {
        std::vector<std::string_view> names;
        for (const mig::Profile& p : model->mig->profiles) names.push_back(p.name);
        f.Fail("mig_profile", fmt::format("'{}' is not a MIG profile of {} (it has {})",
                                          t.mig_profile, model->id, fmt::join(names, ", ")));
      }
    }
    Forbid(f, e, "gpus", "exclusive");
    Forbid(f, e, "nvlink", "exclusive");
    Forbid(f, e, "milli_gpu", "shared");
    Forbid(f, e, "gpu_memory_mib", "shared");
  }

  void ReadShared(JsonFields& f, const json& e, const GpuModel* model, InstanceType& t) {
    t.milli_gpu = static_cast<int>(f.Int("milli_gpu", 1, 999));
    t.gpu_memory_mib = f.Int("gpu_memory_mib", 0, kMaxMemoryMib, /*required=*/false, 0);
    // A model with unknown memory (0, as openb's G2) cannot bound the cap.
    if (model && model->memory_mib > 0 && t.gpu_memory_mib > model->memory_mib) {
      f.Fail("gpu_memory_mib", fmt::format("{} MiB is more than the {} MiB of a {}",
                                           t.gpu_memory_mib, model->memory_mib, model->id));
    }
    Forbid(f, e, "gpus", "exclusive");
    Forbid(f, e, "nvlink", "exclusive");
    Forbid(f, e, "mig_profile", "mig");
  }

  void AddPrice(const json& e, size_t i) {
    JsonFields f(e, EntryWhere("prices.json", "prices", e, "instance_type", i));
    f.RejectUnknown({"instance_type", "on_demand_per_hour", "reserved_1y_per_hour",
                     "reserved_3y_per_hour", "spot_per_hour", "source"});
    Price p;
    p.instance_type = Text(f, "instance_type");
    const auto on_demand = MoneyField(f, "on_demand_per_hour");
    const auto reserved_1y = MoneyField(f, "reserved_1y_per_hour");
    const auto reserved_3y = MoneyField(f, "reserved_3y_per_hour");
    const auto spot = MoneyField(f, "spot_per_hour");
    p.source = Text(f, "source");
    // A commitment or an interruptible instance never costs more than on-demand.
    auto not_above = [&](const std::optional<Money>& lower, std::string_view lower_key,
                         const std::optional<Money>& upper, std::string_view upper_key) {
      if (lower && upper && *lower > *upper) {
        f.Fail(lower_key,
               fmt::format("{} is above {} {}", lower->ToString(), upper_key, upper->ToString()));
      }
    };
    not_above(reserved_1y, "reserved_1y_per_hour", on_demand, "on_demand_per_hour");
    not_above(reserved_3y, "reserved_3y_per_hour", reserved_1y, "reserved_1y_per_hour");
    not_above(spot, "spot_per_hour", on_demand, "on_demand_per_hour");
    p.on_demand_per_hour = on_demand.value_or(Money());
    p.reserved_1y_per_hour = reserved_1y.value_or(Money());
    p.reserved_3y_per_hour = reserved_3y.value_or(Money());
    p.spot_per_hour = spot.value_or(Money());
    if (!p.instance_type.empty()) {
      if (types_ok_ && !c_.FindInstanceType(p.instance_type)) {
        f.Fail("instance_type", fmt::format("unknown instance type '{}' (not in "
                                            "instance_types.json)",
                                            p.instance_type));
      } else if (c_.FindPrice(p.instance_type)) {
        f.Fail("instance_type", "is priced twice");
      } else {
        c_.price_index_.emplace(p.instance_type, c_.prices_.size());
        c_.prices_.push_back(std::move(p));
      }
    }
    Take(f);
  }

  void CheckEveryTypePriced() {
    if (!types_ok_) return;
    for (const InstanceType& t : c_.instance_types_) {
      if (!c_.FindPrice(t.id)) {
        errors_.push_back(fmt::format(
            "instance_types.json: entry '{}': field 'id': has no price in prices.json", t.id));
      }
    }
  }

  void Take(const JsonFields& f) {
    errors_.insert(errors_.end(), f.errors().begin(), f.errors().end());
  }

  // Splits a multi-line message (such as mig::ParseTable's) into one error per line.
  void AppendLines(const std::string& text) {
    size_t start = 0;
    while (start <= text.size()) {
      const size_t end = std::min(text.find('\n', start), text.size());
      if (end > start) errors_.push_back(text.substr(start, end - start));
      start = end + 1;
    }
  }

  Catalog& c_;
  std::vector<std::string>& errors_;
  std::vector<bool> mig_capable_;          // Parallel to c_.gpus_: its "mig" field.
  std::set<std::string> mig_models_seen_;  // Models that mig.json has a table for, valid or not.
  bool gpus_ok_ = false;
  bool mig_ok_ = false;
  bool types_ok_ = false;
};

Catalog Catalog::Parse(const std::map<std::string, Result<std::string>, std::less<>>& files,
                       std::vector<std::string>& errors) {
  Catalog c;
  CatalogBuilder(c, errors).Build(files);
  return c;
}

}  // namespace tessera::catalog
