#include "fleet/fleet_file.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/csv.h"
#include "common/json.h"

namespace tessera::fleet {

namespace {

constexpr int64_t kMaxShapeCount = 100'000;
constexpr int64_t kMaxNodes = 1'000'000;
constexpr int64_t kMaxVcpus = 100'000;
constexpr int64_t kMaxMemoryGib = int64_t{1} << 24;
constexpr std::string_view kIdRule =
    "must be 1-63 characters of [a-z0-9._-], starting with a letter or digit";

struct Shape {
  std::string name;
  int64_t count = 0;
  NodeSpec spec;
};

// The islands of "nvlink": "all", "none" or explicit lists of GPU indices.
std::vector<std::vector<int>> ParseNvlink(JsonFields& f, int gpus) {
  std::vector<std::vector<int>> islands;
  const nlohmann::json* v = f.Get("nvlink", /*required=*/false);
  if (v == nullptr) return islands;
  if (gpus == 0) {
    f.Fail("nvlink", "given for a shape without GPUs");
    return islands;
  }
  if (v->is_string() && (*v == "all" || *v == "none")) {
    if (*v == "all" && gpus >= 2) {
      islands.emplace_back();
      for (int g = 0; g < gpus; ++g) islands.back().push_back(g);
    }
    return islands;
  }
  if (!v->is_array()) {
    f.Fail("nvlink", fmt::format("expected \"all\", \"none\" or a list of islands such as "
                                 "[[0, 1], [2, 3]], found {}",
                                 v->is_string() ? fmt::format("'{}'", v->get<std::string>())
                                                : std::string(JsonTypeName(*v))));
    return islands;
  }
  uint32_t seen = 0;
  for (size_t i = 0; i < v->size(); ++i) {
    const nlohmann::json& island = (*v)[i];
    if (!island.is_array() || island.size() < 2) {
      f.Fail("nvlink", fmt::format("island {}: expected a list of at least 2 GPU indices", i));
      continue;
    }
    islands.emplace_back();
    for (const nlohmann::json& g : island) {
      const int64_t x = g.is_number_integer() ? g.get<int64_t>() : -1;
      if (x < 0 || x >= gpus) {
        const std::string text =
            g.is_number_integer() ? fmt::format("{}", x) : std::string(JsonTypeName(g));
        f.Fail("nvlink",
               fmt::format("island {}: {} is not a GPU index in [0, {}]", i, text, gpus - 1));
        continue;
      }
      if (seen & (uint32_t{1} << x)) {
        f.Fail("nvlink", fmt::format("island {}: gpu {} is in two islands", i, x));
      }
      seen |= uint32_t{1} << x;
      islands.back().push_back(static_cast<int>(x));
    }
  }
  return islands;
}

std::optional<SharingMode> ParseMode(JsonFields& f, std::string_view key, const std::string& s,
                                     std::string_view item) {
  std::optional<SharingMode> m = catalog::ParseSharingMode(s);
  if (!m) f.Fail(key, fmt::format("{}'{}' is not one of exclusive, mig, shared", item, s));
  return m;
}

// Fills spec.default_mode and spec.gpu_modes from "gpu_mode" or "gpu_modes".
void ParseModes(JsonFields& f, const catalog::GpuModel* model, int gpus, NodeSpec& spec) {
  const bool has_mode = f.Get("gpu_mode", false) != nullptr;
  const bool has_modes = f.Get("gpu_modes", false) != nullptr;
  if (gpus == 0) {
    if (has_mode) f.Fail("gpu_mode", "given for a shape without GPUs");
    if (has_modes) f.Fail("gpu_modes", "given for a shape without GPUs");
    return;
  }
  if (has_mode && has_modes) {
    f.Fail("gpu_modes", "give either gpu_mode or gpu_modes, not both");
    return;
  }
  bool mig = false;
  if (has_mode) {
    const size_t errors_before = f.errors().size();
    const std::string s = f.String("gpu_mode");
    if (f.errors().size() == errors_before) {
      if (auto m = ParseMode(f, "gpu_mode", s, "")) spec.default_mode = *m;
    }
    mig = spec.default_mode == SharingMode::kMig;
  }
  if (has_modes) {
    const std::vector<std::string> modes = f.Strings("gpu_modes");
    if (modes.size() != static_cast<size_t>(gpus)) {
      f.Fail("gpu_modes", fmt::format("{} entries for {} GPUs", modes.size(), gpus));
    }
    for (size_t i = 0; i < modes.size(); ++i) {
      if (auto m = ParseMode(f, "gpu_modes", modes[i], fmt::format("item {}: ", i))) {
        spec.gpu_modes.push_back(*m);
        mig = mig || *m == SharingMode::kMig;
      }
    }
  }
  if (mig && model != nullptr && model->mig == nullptr) {
    f.Fail(has_mode ? "gpu_mode" : "gpu_modes",
           fmt::format("mig mode needs a model with MIG; {} has none", model->id));
  }
}

// One entry of "shapes"; adds its problems to `errors`.
std::optional<Shape> ParseShape(const catalog::Catalog& catalog, const nlohmann::json& j,
                                size_t index, std::string_view where, std::set<std::string>& names,
                                std::vector<std::string>& errors) {
  std::string label = fmt::format("{}: shape {}", where, index);
  if (j.is_object() && j.contains("name") && j["name"].is_string()) {
    label = fmt::format("{}: shape '{}'", where, j["name"].get<std::string>());
  }
  JsonFields f(j, label);
  f.RejectUnknown({"name", "count", "gpu_model", "gpus", "vcpus", "memory_gib", "nvlink",
                   "gpu_mode", "gpu_modes"});
  Shape s;
  s.name = f.String("name");
  if (!s.name.empty() && !IsValidIdBody(s.name)) {
    f.Fail("name", kIdRule);
  } else if (!s.name.empty() && !names.insert(s.name).second) {
    f.Fail("name", "is used by another shape");
  }
  s.count = f.Int("count", 1, kMaxShapeCount);
  const size_t errors_before_gpus = f.errors().size();
  const int gpus = static_cast<int>(f.Int("gpus", 0, kMaxGpusPerNode, /*required=*/false));
  const bool gpus_ok = f.errors().size() == errors_before_gpus;
  s.spec.gpus = gpus;
  s.spec.cpu_milli = f.Int("vcpus", 1, kMaxVcpus) * 1000;
  s.spec.memory_mib = f.Int("memory_gib", 1, kMaxMemoryGib) * 1024;
  const catalog::GpuModel* model = nullptr;
  if (gpus_ok) {
    s.spec.gpu_model = f.String("gpu_model", /*required=*/gpus > 0);
    if (gpus == 0 && !s.spec.gpu_model.empty()) {
      f.Fail("gpu_model", "given for a shape without GPUs");
    } else if (!s.spec.gpu_model.empty()) {
      model = catalog.FindGpu(s.spec.gpu_model);
      if (model == nullptr) {
        f.Fail("gpu_model", fmt::format("unknown GPU model '{}'", s.spec.gpu_model));
      }
    }
    ParseModes(f, model, gpus, s.spec);
    s.spec.nvlink_islands = ParseNvlink(f, gpus);
  }
  if (!f.ok()) {
    errors.insert(errors.end(), f.errors().begin(), f.errors().end());
    return std::nullopt;
  }
  return s;
}

// Adds `count` nodes named node-<shape>-01, -02, ... (wider when count needs it).
Status AddShape(Fleet& fleet, const Shape& shape, std::string_view where) {
  const int width = std::max<int>(2, static_cast<int>(fmt::format("{}", shape.count).size()));
  NodeSpec spec = shape.spec;
  for (int64_t i = 1; i <= shape.count; ++i) {
    spec.name = fmt::format("node-{}-{:0{}}", shape.name, i, width);
    Result<NodeIndex> added = fleet.AddNode(spec);
    if (!added.ok()) {
      return added.status().WithPrefix(fmt::format("{}: shape '{}'", where, shape.name));
    }
  }
  return Status::Ok();
}

// One row of an openb node list.
Status AddOpenbRow(const catalog::Catalog& catalog, const CsvReader& r, Fleet& fleet,
                   std::unordered_map<std::string, int>& first_line) {
  NodeSpec spec;
  spec.name = std::string(r.Field("sn"));
  if (spec.name.empty()) return r.Error("column 'sn': is empty");
  if (auto [it, fresh] = first_line.emplace(spec.name, r.line()); !fresh) {
    return r.Error(fmt::format("duplicate node '{}' (first on line {})", spec.name, it->second));
  }
  // The fleet JSON's limits: the scheduler sums free CPU over the fleet, which an unbounded
  // cpu_milli would overflow.
  TESSERA_ASSIGN_OR_RETURN(spec.cpu_milli, r.Int("cpu_milli", 0, kMaxVcpus * 1000));
  TESSERA_ASSIGN_OR_RETURN(spec.memory_mib, r.Int("memory_mib", 0, kMaxMemoryGib * 1024));
  TESSERA_ASSIGN_OR_RETURN(const int64_t gpus, r.Int("gpu", 0, kMaxGpusPerNode));
  spec.gpus = static_cast<int>(gpus);
  spec.gpu_model = std::string(r.Field("model"));
  if (spec.gpus > 0 && spec.gpu_model.empty()) {
    return r.Error(fmt::format("node '{}' has {} GPUs but no model", spec.name, spec.gpus));
  }
  if (spec.gpus == 0 && !spec.gpu_model.empty()) {
    return r.Error(
        fmt::format("node '{}' names model '{}' but has 0 GPUs", spec.name, spec.gpu_model));
  }
  if (!spec.gpu_model.empty() && catalog.FindGpu(spec.gpu_model) == nullptr) {
    return r.Error(fmt::format("unknown GPU model '{}'", spec.gpu_model));
  }
  // openb mixes GPU-sharing and whole-GPU pods on every GPU, so every GPU is shared.
  spec.default_mode = SharingMode::kShared;
  Result<NodeIndex> added = fleet.AddNode(spec);
  if (!added.ok()) return r.Error(added.status().message());
  return Status::Ok();
}

constexpr std::string_view kDemoFleetJson = R"json({
  "name": "demo",
  "description": "The server's default fleet: every sharing mode on a few common GPU models.",
  "shapes": [
    {"name": "h100", "count": 2, "gpu_model": "H100-80GB", "gpus": 8, "vcpus": 192,
     "memory_gib": 2048, "nvlink": "all", "gpu_mode": "exclusive"},
    {"name": "a100", "count": 2, "gpu_model": "A100-80GB", "gpus": 8, "vcpus": 96,
     "memory_gib": 1152, "nvlink": "all",
     "gpu_modes": ["mig", "mig", "mig", "mig", "exclusive", "exclusive", "exclusive", "exclusive"]},
    {"name": "l40s", "count": 4, "gpu_model": "L40S-48GB", "gpus": 4, "vcpus": 48,
     "memory_gib": 384, "nvlink": "none",
     "gpu_modes": ["shared", "shared", "exclusive", "exclusive"]},
    {"name": "t4", "count": 4, "gpu_model": "T4-16GB", "gpus": 2, "vcpus": 32,
     "memory_gib": 128, "gpu_modes": ["shared", "exclusive"]}
  ]
}
)json";

}  // namespace

Result<Fleet> ParseFleetJson(const catalog::Catalog& catalog, std::string_view text,
                             std::string_view where) {
  TESSERA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(text, where));
  JsonFields top(j, std::string(where));
  top.RejectUnknown({"name", "description", "shapes"});
  const std::string name = top.String("name");
  if (!name.empty() && !IsValidIdBody(name)) top.Fail("name", kIdRule);
  top.String("description", /*required=*/false);
  const nlohmann::json* shapes_json = top.Get("shapes");
  if (shapes_json != nullptr && (!shapes_json->is_array() || shapes_json->empty())) {
    top.Fail("shapes", "expected a non-empty list of node shapes");
    shapes_json = nullptr;
  }
  std::vector<std::string> errors = top.errors();
  std::vector<Shape> shapes;
  std::set<std::string> names;
  int64_t total = 0;
  for (size_t i = 0; shapes_json != nullptr && i < shapes_json->size(); ++i) {
    std::optional<Shape> s = ParseShape(catalog, (*shapes_json)[i], i, where, names, errors);
    if (!s) continue;
    total += s->count;
    shapes.push_back(std::move(*s));
  }
  if (total > kMaxNodes) {
    errors.push_back(fmt::format("{}: {} nodes in all, more than {}", where, total, kMaxNodes));
  }
  if (!errors.empty()) return Status::InvalidArgument(fmt::format("{}", fmt::join(errors, "\n")));
  Fleet fleet(&catalog);
  fleet.set_name(name);
  for (const Shape& s : shapes) TESSERA_RETURN_IF_ERROR(AddShape(fleet, s, where));
  return fleet;
}

Result<Fleet> ParseOpenbNodeCsv(const catalog::Catalog& catalog, std::string text,
                                std::string where) {
  CsvReader r(where, std::move(text));
  TESSERA_RETURN_IF_ERROR(r.ReadHeader({"sn", "cpu_milli", "memory_mib", "gpu", "model"}));
  Fleet fleet(&catalog);
  std::unordered_map<std::string, int> first_line;
  while (r.Next()) TESSERA_RETURN_IF_ERROR(AddOpenbRow(catalog, r, fleet, first_line));
  TESSERA_RETURN_IF_ERROR(r.status());
  if (fleet.size() == 0) return Status::InvalidArgument(fmt::format("{}: lists no nodes", where));
  return fleet;
}

Result<Fleet> LoadFleetFile(const catalog::Catalog& catalog, const std::string& path,
                            bool* openb_csv) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const size_t first = text.find_first_not_of(" \t\r\n");
  const bool json = (first != std::string::npos && text[first] == '{') ||
                    (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0);
  if (openb_csv) *openb_csv = !json;
  if (json) return ParseFleetJson(catalog, text, path);
  return ParseOpenbNodeCsv(catalog, std::move(text), path);
}

std::string_view DemoFleetJson() { return kDemoFleetJson; }

Result<Fleet> DemoFleet(const catalog::Catalog& catalog) {
  return ParseFleetJson(catalog, kDemoFleetJson, "demo fleet");
}

}  // namespace tessera::fleet
