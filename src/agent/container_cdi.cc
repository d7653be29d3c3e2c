#include "agent/container_cdi.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "agent/container_exec.h"
#include "common/files.h"
#include "common/json.h"

namespace tessera::agent {
namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> SortedEntries(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// Compares dotted versions numerically ("0.10.0" > "0.5.0"); false when `v` is not one.
bool VersionAtMost(const std::string& v, const std::string& max) {
  auto parts = [](const std::string& s, std::vector<long>& out) {
    std::istringstream in(s);
    std::string p;
    while (std::getline(in, p, '.')) {
      if (p.empty() || p.find_first_not_of("0123456789") != std::string::npos) return false;
      out.push_back(std::stol(p));
    }
    return !out.empty();
  };
  std::vector<long> a;
  std::vector<long> b;
  if (!parts(v, a) || !parts(max, b)) return false;
  a.resize(std::max(a.size(), b.size()));
  b.resize(a.size());
  return a <= b;
}

struct ParsedSpec {
  std::string kind;
  std::string version;
  std::vector<std::string> names;
};

Result<ParsedSpec> ParseJsonSpec(const std::string& text, const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path));
  if (!j.is_object()) return Status::InvalidArgument(path + ": not a JSON object");
  ParsedSpec spec;
  if (j.contains("kind") && j["kind"].is_string()) spec.kind = j["kind"].get<std::string>();
  if (j.contains("cdiVersion") && j["cdiVersion"].is_string()) {
    spec.version = j["cdiVersion"].get<std::string>();
  }
  if (j.contains("devices") && j["devices"].is_array()) {
    for (const auto& d : j["devices"]) {
      if (d.is_object() && d.contains("name") && d["name"].is_string()) {
        spec.names.push_back(d["name"].get<std::string>());
      }
    }
  }
  return spec;
}

std::string Unquoted(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.pop_back();
  if (s.size() >= 2 && (s[0] == '"' || s[0] == '\'') && s.back() == s[0]) {
    s = s.substr(1, s.size() - 2);
  }
  return s;
}

// "key: value" -> value, without its quotes.
std::string ValueAfterColon(const std::string& line) {
  std::string v = line.substr(line.find(':') + 1);
  while (!v.empty() && v[0] == ' ') v.erase(0, 1);
  return Unquoted(v);
}

// The layout nvidia-ctk writes: top-level keys at column 0, and in `devices:` one list item per
// device whose `name:` sits at indent 0 ("- name: x") or 2 ("  name: x"); deeper keys belong to
// its containerEdits. Not a YAML parser, on purpose.
ParsedSpec ScanYamlSpec(const std::string& text) {
  ParsedSpec spec;
  std::istringstream in(text);
  std::string line;
  bool in_devices = false;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] != ' ' && line[0] != '-') {
      in_devices = line.rfind("devices:", 0) == 0;
      if (line.rfind("kind:", 0) == 0) spec.kind = ValueAfterColon(line);
      if (line.rfind("cdiVersion:", 0) == 0) spec.version = ValueAfterColon(line);
      continue;
    }
    if (!in_devices) continue;
    if (line.rfind("- name:", 0) == 0 || line.rfind("  name:", 0) == 0) {
      spec.names.push_back(ValueAfterColon(line));
    }
  }
  return spec;
}

// The path a host node gets inside the container: the same place under /dev.
std::string ContainerDevPath(const std::string& host_path, const std::string& dev_root) {
  const std::string prefix = dev_root + "/";
  if (host_path.rfind(prefix, 0) == 0) return "/dev/" + host_path.substr(prefix.size());
  return "/dev/" + host_path.substr(host_path.rfind('/') + 1);
}

nlohmann::json DeviceNode(const std::string& host_path, const std::string& dev_root) {
  nlohmann::json node = {{"path", ContainerDevPath(host_path, dev_root)}};
  if (node["path"] != host_path) node["hostPath"] = host_path;
  return node;
}

}  // namespace

CdiScan ScanCdiSpecs(const std::vector<std::string>& dirs, const std::string& kind,
                     const std::string& ignore_path, const std::string& max_version) {
  CdiScan scan;
  for (const auto& dir : dirs) {
    for (const auto& name : SortedEntries(dir)) {
      const std::string path = dir + "/" + name;
      const bool json = EndsWith(name, ".json");
      const bool yaml = EndsWith(name, ".yaml") || EndsWith(name, ".yml");
      if ((!json && !yaml) || path == ignore_path) continue;
      const auto text = ReadSmallFile(path);
      if (!text) {
        scan.notes.push_back(fmt::format("{}: cannot be read", path));
        continue;
      }
      ParsedSpec spec;
      if (json) {
        auto parsed = ParseJsonSpec(*text, path);
        if (!parsed.ok()) {
          scan.notes.push_back(parsed.status().message());
          continue;
        }
        spec = std::move(*parsed);
      } else {
        spec = ScanYamlSpec(*text);
      }
      if (spec.kind != kind) continue;
      if (!VersionAtMost(spec.version, max_version)) {
        scan.notes.push_back(fmt::format("{}: cdiVersion {:?} is newer than {}, which podman reads",
                                         path, spec.version, max_version));
        continue;
      }
      if (spec.names.empty()) {
        scan.notes.push_back(fmt::format("{}: no devices found in it", path));
        continue;
      }
      scan.usable.push_back({path, spec.version, std::move(spec.names)});
    }
  }
  return scan;
}

MigMinors ParseMigMinors(std::string_view text) {
  MigMinors out;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string name;
    int minor = -1;
    std::string rest;
    if (!(words >> name >> minor) || (words >> rest) || minor < 0) continue;
    if (name.rfind("gpu", 0) == 0) out[name] = minor;
  }
  return out;
}

Result<std::vector<std::string>> MigDevicePaths(const MigMinors& minors, int gpu_minor,
                                                int gpu_instance, int compute_instance,
                                                const std::string& dev_root) {
  std::vector<std::string> out = {fmt::format("{}/nvidia{}", dev_root, gpu_minor)};
  const std::string gi = fmt::format("gpu{}/gi{}/access", gpu_minor, gpu_instance);
  const std::string ci =
      fmt::format("gpu{}/gi{}/ci{}/access", gpu_minor, gpu_instance, compute_instance);
  for (const std::string& cap : {gi, ci}) {
    auto it = minors.find(cap);
    if (it == minors.end()) {
      return Status::NotFound(fmt::format("{}: not in /proc/driver/nvidia-caps/mig-minors", cap));
    }
    out.push_back(fmt::format("{}/nvidia-caps/nvidia-cap{}", dev_root, it->second));
  }
  return out;
}

CdiSpecBuild BuildGpuCdiSpec(const std::string& kind, const std::vector<GpuDeviceNodes>& gpus,
                             const std::vector<std::string>& common_nodes,
                             const std::vector<std::string>& driver_files,
                             const std::string& dev_root) {
  CdiSpecBuild build;
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& gpu : gpus) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const auto& p : gpu.dev_paths) {
      if (Exists(p)) {
        nodes.push_back(DeviceNode(p, dev_root));
      } else {
        build.skipped.push_back(fmt::format("{}: absent on the host (GPU {})", p, gpu.index));
      }
    }
    if (nodes.empty()) {
      build.skipped.push_back(fmt::format("GPU {}: none of its device nodes exist", gpu.index));
      continue;
    }
    std::vector<std::string> names = {gpu.index};
    if (!gpu.uuid.empty()) names.push_back(gpu.uuid);
    for (const auto& name : names) {
      devices.push_back({{"name", name}, {"containerEdits", {{"deviceNodes", nodes}}}});
      build.device_names.push_back(name);
    }
  }
  nlohmann::json common_edits = nlohmann::json::object();
  nlohmann::json common = nlohmann::json::array();
  for (const auto& p : common_nodes) {
    if (Exists(p)) {
      common.push_back(DeviceNode(p, dev_root));
    } else {
      build.skipped.push_back(fmt::format("{}: absent on the host", p));
    }
  }
  if (!common.empty()) common_edits["deviceNodes"] = common;
  nlohmann::json mounts = nlohmann::json::array();
  for (const auto& f : driver_files) {
    if (Exists(f)) {
      mounts.push_back(
          {{"hostPath", f}, {"containerPath", f}, {"options", {"ro", "nosuid", "nodev", "bind"}}});
    } else {
      build.skipped.push_back(fmt::format("{}: absent on the host", f));
    }
  }
  if (!mounts.empty()) common_edits["mounts"] = mounts;
  nlohmann::json spec = {{"cdiVersion", "0.5.0"}, {"kind", kind}, {"devices", devices}};
  if (!common_edits.empty()) spec["containerEdits"] = common_edits;
  build.json = DumpJson(spec, 2) + "\n";
  return build;
}

Result<GpuCdiSetup> EnsureGpuCdiSpec(const std::vector<GpuDeviceNodes>& gpus,
                                     const GpuCdiOptions& options) {
  GpuCdiSetup setup;
  CdiScan scan = ScanCdiSpecs(options.spec_dirs, options.kind, options.write_path);
  setup.notes = scan.notes;
  if (!scan.usable.empty()) {
    // NVIDIA's own specs know the driver's files and hooks; ours only knows the nodes. Two specs
    // naming the same devices would make podman refuse both, so ours goes.
    for (const auto& f : scan.usable) {
      setup.device_names.insert(setup.device_names.end(), f.device_names.begin(),
                                f.device_names.end());
    }
    setup.spec_path = scan.usable.front().path;
    if (unlink(options.write_path.c_str()) == 0) {
      setup.notes.push_back(
          fmt::format("{}: removed in favour of {}", options.write_path, setup.spec_path));
    }
    return setup;
  }
  CdiSpecBuild build = BuildGpuCdiSpec(options.kind, gpus, options.common_nodes,
                                       options.driver_files, options.dev_root);
  const std::string dir = options.write_path.substr(0, options.write_path.rfind('/'));
  if (!dir.empty() && mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal(fmt::format("{}: cannot create: {}", dir, strerror(errno)));
  }
  TESSERA_RETURN_IF_ERROR(WritePrivateFile(options.write_path, build.json, 0644));
  setup.spec_path = options.write_path;
  setup.written = true;
  setup.device_names = std::move(build.device_names);
  setup.notes.insert(setup.notes.end(), build.skipped.begin(), build.skipped.end());
  return setup;
}

Result<std::string> CdiDeviceFor(const GpuCdiSetup& setup, const std::string& kind,
                                 const GpuDeviceNodes& gpu) {
  const auto has = [&](const std::string& name) {
    return !name.empty() && std::find(setup.device_names.begin(), setup.device_names.end(), name) !=
                                setup.device_names.end();
  };
  if (has(gpu.uuid)) return kind + "=" + gpu.uuid;
  if (has(gpu.index)) return kind + "=" + gpu.index;
  return Status::NotFound(fmt::format("GPU {} ({}): no device of that name in the CDI spec {}",
                                      gpu.index, gpu.uuid.empty() ? "no uuid" : gpu.uuid,
                                      setup.spec_path));
}

std::vector<std::string> FindNvidiaDriverFiles(const std::string& lib_dir) {
  // The libraries CUDA, NVML and the PTX JIT load at run time; their versioned names end in the
  // driver's version, so they are matched by prefix.
  static const std::vector<std::string> kLibPrefixes = {
      "libcuda.so.",        "libnvidia-ml.so.",    "libnvidia-ptxjitcompiler.so.",
      "libnvidia-nvvm.so.", "libcudadebugger.so.", "libnvidia-opencl.so."};
  std::vector<std::string> out;
  for (const auto& name : SortedEntries(lib_dir)) {
    for (const auto& prefix : kLibPrefixes) {
      if (name.rfind(prefix, 0) == 0) out.push_back(lib_dir + "/" + name);
    }
  }
  for (const char* tool : {"/usr/bin/nvidia-smi", "/usr/bin/nvidia-debugdump"}) {
    if (Exists(tool)) out.push_back(tool);
  }
  return out;
}

}  // namespace tessera::agent
