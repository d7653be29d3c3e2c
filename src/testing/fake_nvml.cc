// A fake libnvidia-ml.so.1 for tests: it exports the NVML symbols the agent looks up, with the
// same C signatures (declared once, in agent/nvml_api.h), and answers from a JSON file named by
// $TESSERA_FAKE_NVML_CONFIG, read at every first nvmlInit_v2. The tests load it through the
// backend's real dlopen path. Schema (every field optional):
//   {"driver_version": "550.90.07",
//    "fail_init": false,          nvmlInit_v2 answers NVML_ERROR_DRIVER_NOT_LOADED
//    "lost_gpu": -1,              this GPU answers NVML_ERROR_GPU_IS_LOST to all but its handle
//    "mig_no_permission": false,  nvmlDeviceGetGpuInstanceById answers NVML_ERROR_NO_PERMISSION
//    "fail_calls": {"nvmlGpuInstanceCreateComputeInstance": 23},   that exported function
//                                 answers that code on every call, right after the init check
//                                 (so nvmlInit_v2 itself cannot be failed this way)
//    "xids": [{"gpu": 0, "code": 79}],   queued at init, delivered to a set registered for XIDs
//    "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-...", "pci_bus_id": "...",
//              "memory_mib": 81559, "memory_used_mib": 0, "minor": 0 (default: its index),
//              "mig": true,                  the MIG mode at first init (absent: no MIG)
//              "mig_model": "H100-80GB",     the catalog model whose MIG table the GPU follows
//              "mig_mode_needs_reset": false,   nvmlDeviceSetMigMode changes only the pending
//                                               mode, until a reset (below)
//              "mig_devices": [{"uuid": "MIG-...", "profile_id": 19, "start": 0,
//                               "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
//                               "compute_instance": 0}],   GPU instances 1, 2, ..., one compute
//                                                          instance each, made at first init;
//                                                          "bare": true makes the GPU instance
//                                                          alone (as a crash between the two
//                                                          create calls leaves it)
//              "nvlink_peers": [1], "nvswitches": ["00000000:A0:00.0"],
//              "util": 37, "mem_util": 20, "temperature": 55, "power_mw": 300000,
//              "sm_clock": 1980, "mem_clock": 2619, "pcie_tx": 1000, "pcie_rx": 2000,
//              "ecc_sbe": 0, "ecc_dbe": 0,
//              "errors": {"ecc": 3}}]}   a telemetry group (memory, util, temperature, power,
//                                        clocks, pcie, ecc) answering that NVML code
// A GPU without "mig" answers NOT_SUPPORTED to the MIG mode, profile and create calls (a
// pre-Ampere board), one without links NOT_SUPPORTED to nvmlDeviceGetNvLinkState (a PCIe board),
// and a GPU in MIG mode NOT_SUPPORTED to nvmlDeviceGetUtilizationRates, as the real driver does.
//
// MIG follows the driver's rules, with the profile table of "mig_model" from the catalog compiled
// into the library (catalog/mig.json); a GPU with "mig" but no "mig_model" answers NOT_SUPPORTED
// to the profile and create calls. Profile indices map to the table as NVML's constants say
// (reference section 8.1), profile ids are the table's. A GPU instance is created only while MIG
// is on (else NOT_SUPPORTED), at one of its profile's starts with its size (else
// INVALID_ARGUMENT), and only when mig::CheckLayout accepts the new layout (else
// INSUFFICIENT_RESOURCES); it gets the smallest free id from 1, compute instances the smallest
// from 0 within it. Compute-instance profiles 0..4 (1, 2, 3, 4, 7 slices) fit a GPU instance with
// at least that many compute slices, and its compute instances share its slices (else
// INSUFFICIENT_RESOURCES); 5, 6 and 7 (8 and 6 slices, 1_SLICE_REV1) are NOT_SUPPORTED, 8 and up
// INVALID_ARGUMENT, as is any engine profile but the shared one.
// nvmlDeviceGetGpuInstancePossiblePlacements_v2 lists a profile's starts from the table, used or
// not; nvmlDeviceGetGpuInstances lists the GPU instances of a profile, those without a compute
// instance too (the only call that shows them), INSUFFICIENT_SIZE when the array is too small.
// A new compute instance's MIG device gets a fresh UUID (from the GPU's UUID, the GPU-instance id
// and a counter kept in the state) and the name "<GPU name> MIG <profile>", or
// "<GPU name> MIG <N>c.<profile>" when it has N of the instance's compute slices, as nvidia-smi
// names it. Destroying a GPU instance that holds compute instances, or a compute instance a
// process uses, answers IN_USE; so does nvmlDeviceSetMigMode while a process uses the GPU or, to
// disable MIG, while GPU instances exist.
// Processes: a process uses a device when it is alive (not a zombie) and its environment
// (/proc/PID/environ: other users' need root, as tests run) has CUDA_VISIBLE_DEVICES or
// NVIDIA_VISIBLE_DEVICES listing the device's UUID as one of its comma-separated entries; a GPU
// is used when its own UUID or one of its MIG devices' is listed. Indices and "all" never match.
// nvmlDeviceGetComputeRunningProcesses_v3 lists those processes, with 0 bytes of memory.
// State: when $TESSERA_FAKE_NVML_STATE names a file, the MIG state (each MIG GPU's current and
// pending mode, its GPU and compute instances, the UUID counter) is written there after every
// change, as a temporary file renamed over it; it is read back over the config at every first
// nvmlInit_v2, and again by any call that finds its text changed by another process, as the
// driver keeps one state for every process. A state file that does not parse, or does not match
// the config's GPUs, fails nvmlInit_v2 with NVML_ERROR_UNKNOWN after a message on stderr. Its form:
//   {"uuid_counter": 3, "gpus": [{"index": 0, "uuid": "GPU-...", "mig_current": true,
//     "mig_pending": true, "gpu_instances": [{"id": 1, "profile_id": 19, "start": 0, "size": 1,
//     "compute_instances": [{"id": 0, "profile_id": 0, "uuid": "MIG-...", "name": "..."}]}]}]}
// Not NVML: tesseraFakeNvmlResetGpu(index) resets a GPU as `nvidia-smi -r` does: IN_USE while a
// process uses it; otherwise the pending MIG mode becomes current and every GPU and compute
// instance is gone (the driver keeps the mode across a reset, not the instances). The fake
// nvidia-smi built beside the library (fake_nvidia_smi.cc) calls it. tesseraFakeNvmlCalls() names
// the functions called since NVML was last initialized from zero, so a test can check the backend
// stayed read-only (the library may stay loaded after dlclose, so the record starts with NVML).
// Handles stay valid until their object is destroyed or NVML shuts down; a stale or foreign one
// answers INVALID_ARGUMENT, as it is looked up by address and never dereferenced.
// Thread-safety: one mutex guards the fake's state; every exported function takes it.
// One file, over 800 lines: it is one shared library whose state (one struct, under that mutex)
// is private to it, and the doc above is its contract with the tests.
#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "agent/nvml_api.h"
#include "catalog/embedded.h"
#include "mig/mig.h"

namespace nv = tessera::agent::nvml;
namespace mig = tessera::mig;

// The handles the fake gives out point at these; each is known by its address alone.
struct tessera::agent::nvml::nvmlDevice_st {};
struct tessera::agent::nvml::nvmlGpuInstance_st {};
struct tessera::agent::nvml::nvmlComputeInstance_st {};
struct tessera::agent::nvml::nvmlEventSet_st {
  std::set<int> xid_gpus;  // GPUs registered for XID events.
};

namespace {

using nlohmann::json;
using nv::nvmlReturn_t;

constexpr unsigned int kMaxMigDevices = 7;
constexpr unsigned int kLinksPerGpu = 18;
constexpr unsigned int kSmsPerSlice = 16;            // Plausible: H100 has 16 SMs a slice.
constexpr unsigned int kGpuInstanceProfiles = 0x12;  // NVML_GPU_INSTANCE_PROFILE_COUNT (13.3).
// Compute-instance profile index -> compute slices (NVML_COMPUTE_INSTANCE_PROFILE_*).
constexpr std::array<int, 8> kComputeSlices = {1, 2, 3, 4, 7, 8, 6, 1};
constexpr size_t kComputeProfilesSupported = 5;  // Indices 0..4; the rest these GPUs lack.

struct FakeCi {
  unsigned int id = 0, profile_id = 0;
  std::string uuid, name;
  nv::nvmlDevice_st device;  // Its MIG device.
  nv::nvmlComputeInstance_st handle;
};

struct FakeGi {
  unsigned int id = 0, profile_id = 0, start = 0, size = 1;
  const mig::Profile* profile = nullptr;     // From the GPU's table; null without "mig_model".
  std::vector<std::unique_ptr<FakeCi>> cis;  // Sorted by id.
  nv::nvmlGpuInstance_st handle;
};

// One GPU's configuration and MIG state, read out of the JSON at init so that no exception can
// reach an exported function.
struct FakeGpu {
  int index = 0;
  std::string name, uuid, bus_id;
  unsigned long long memory_mib = 0, memory_used_mib = 0;
  unsigned int minor = 0;
  std::optional<bool> mig;  // The current MIG mode; absent: MIG is not supported.
  bool mig_pending = false;
  bool mig_needs_reset = false;
  const mig::Table* table = nullptr;         // Of "mig_model".
  std::vector<std::unique_ptr<FakeGi>> gis;  // Sorted by id.
  std::vector<int> nvlink_peers;
  std::vector<std::string> links;                    // Remote bus id of each active link.
  std::map<std::string, unsigned long long> values;  // "util", "temperature", ...
  std::map<std::string, int> errors;                 // Telemetry group -> NVML code.
  nv::nvmlDevice_st handle;
};

struct Fake {
  std::mutex mu;
  int inits = 0;
  std::string driver_version;
  bool fail_init = false, mig_no_permission = false;
  int lost_gpu = -1;
  std::map<std::string, int> fail_calls;
  std::vector<std::unique_ptr<FakeGpu>> gpus;
  std::deque<std::pair<int, unsigned long long>> xids;  // (gpu, code) not yet delivered.
  std::set<std::string> calls;
  std::string state_path;  // $TESSERA_FAKE_NVML_STATE, or empty.
  std::string state_text;  // The state file's text as this process last read or wrote it.
  unsigned long long uuid_counter = 0;
  // What left the state, kept so that no new handle ever has a stale one's address.
  std::vector<std::unique_ptr<FakeGpu>> dead_gpus;
  std::vector<std::unique_ptr<FakeGi>> dead_gis;
  std::vector<std::unique_ptr<FakeCi>> dead_cis;
};

Fake& State() {
  static Fake* fake = new Fake;
  return *fake;
}

template <typename T>
void Bury(std::vector<std::unique_ptr<T>>& from, std::vector<std::unique_ptr<T>>& graveyard) {
  for (auto& p : from) graveyard.push_back(std::move(p));
  from.clear();
}

// The smallest id from `first` up that no element of `items` has.
template <typename T>
unsigned int SmallestFreeId(const std::vector<std::unique_ptr<T>>& items, unsigned int first) {
  for (unsigned int id = first;; ++id) {
    if (std::none_of(items.begin(), items.end(), [id](const auto& p) { return p->id == id; })) {
      return id;
    }
  }
}

template <typename T>
void InsertById(std::vector<std::unique_ptr<T>>& items, std::unique_ptr<T> item) {
  auto at =
      std::find_if(items.begin(), items.end(), [&](const auto& p) { return p->id > item->id; });
  items.insert(at, std::move(item));
}

// Takes the first element of `items` that `match` accepts out of it, or returns null.
template <typename T, typename Match>
std::unique_ptr<T> TakeMatching(std::vector<std::unique_ptr<T>>& items, Match match) {
  auto it = std::find_if(items.begin(), items.end(), [&](const auto& p) { return match(*p); });
  if (it == items.end()) return nullptr;
  std::unique_ptr<T> out = std::move(*it);
  items.erase(it);
  return out;
}

// The MIG tables.

// The catalog's MIG tables by model, parsed from the embedded mig.json. Null, with `error`, when
// they do not parse.
std::map<std::string, mig::Table>* ParseCatalogTables(std::string& error) {
  for (const tessera::catalog::EmbeddedFile& file : tessera::catalog::EmbeddedFiles()) {
    if (file.path != "mig.json") continue;
    const json doc = json::parse(file.content.begin(), file.content.end(), nullptr, false);
    if (doc.is_discarded() || !doc.is_object() || !doc.contains("tables") ||
        !doc["tables"].is_array()) {
      error = "the catalog's mig.json has no \"tables\" array";
      return nullptr;
    }
    auto tables = std::make_unique<std::map<std::string, mig::Table>>();
    for (size_t i = 0; i < doc["tables"].size(); ++i) {
      tessera::Result<mig::Table> t =
          mig::ParseTable(doc["tables"][i], fmt::format("mig.json: tables[{}]", i));
      if (!t.ok()) {
        error = t.status().message();
        return nullptr;
      }
      std::string model = t->model;
      tables->emplace(std::move(model), std::move(*t));
    }
    return tables.release();
  }
  error = "the catalog has no mig.json";
  return nullptr;
}

// The table of catalog model `model`, or null with `error`. The tables are parsed once and never
// freed, so the profile pointers the GPUs keep stay valid.
const mig::Table* FindTable(const std::string& model, std::string& error) {
  static std::string parse_error;
  static const std::map<std::string, mig::Table>* tables = ParseCatalogTables(parse_error);
  if (tables == nullptr) {
    error = parse_error;
    return nullptr;
  }
  auto it = tables->find(model);
  if (it != tables->end()) return &it->second;
  std::vector<std::string> known;
  for (const auto& entry : *tables) known.push_back(entry.first);
  error = fmt::format("mig_model '{}' is not a catalog model with a MIG table (known: {})", model,
                      fmt::join(known, ", "));
  return nullptr;
}

// The profile at NVML GPU-instance profile index `index` (reference section 8.1), or null with
// `code`: INVALID_ARGUMENT past NVML's last index, NOT_SUPPORTED for a profile the table lacks.
const mig::Profile* ProfileAtIndex(const mig::Table& table, unsigned int index,
                                   nvmlReturn_t& code) {
  struct Shape {
    int compute_slices;
    bool media_extensions;
    bool double_memory;  // 1_SLICE_REV2: the 1-slice profile with twice the memory.
  };
  static constexpr std::array<Shape, 10> kShapes = {{{1, false, false},
                                                     {2, false, false},
                                                     {3, false, false},
                                                     {4, false, false},
                                                     {7, false, false},
                                                     {8, false, false},
                                                     {6, false, false},
                                                     {1, true, false},
                                                     {2, true, false},
                                                     {1, false, true}}};
  code = index >= kGpuInstanceProfiles ? nv::NVML_ERROR_INVALID_ARGUMENT
                                       : nv::NVML_ERROR_NOT_SUPPORTED;
  if (index >= kShapes.size()) return nullptr;  // 0x0A..0x11: GFX, NO_ME, ALL_ME.
  const Shape& s = kShapes[index];
  const mig::Profile* least = nullptr;  // The one of this shape with the least memory.
  for (const mig::Profile& p : table.profiles) {
    if (p.compute_slices == s.compute_slices && p.media_extensions == s.media_extensions &&
        (least == nullptr || p.memory_slices < least->memory_slices)) {
      least = &p;
    }
  }
  const mig::Profile* found = least;
  if (least != nullptr && s.double_memory) {
    found = nullptr;
    for (const mig::Profile& p : table.profiles) {
      if (p.compute_slices == 1 && !p.media_extensions &&
          p.memory_slices == 2 * least->memory_slices) {
        found = &p;
      }
    }
  }
  if (found != nullptr) code = nv::NVML_SUCCESS;
  return found;
}

void FillGpuInstanceProfile(const mig::Table& table, const mig::Profile& p,
                            nv::nvmlGpuInstanceProfileInfo_t& info) {
  const auto slices = static_cast<unsigned int>(p.compute_slices);
  const auto memory = static_cast<unsigned int>(p.memory_slices);
  const bool whole = p.compute_slices == table.compute_slices;
  info = {};
  info.id = static_cast<unsigned int>(p.id);
  info.sliceCount = slices;
  info.instanceCount = static_cast<unsigned int>(p.max_count);
  info.multiprocessorCount = slices * kSmsPerSlice;
  info.copyEngineCount = memory;
  info.decoderCount = p.media_extensions ? 1 : memory / 2;
  info.jpegCount = info.ofaCount = p.media_extensions || whole ? 1 : 0;
  info.memorySizeMB = static_cast<unsigned long long>(p.memory_mib);
}

// The compute slices of compute-instance profile `index` in `gi`, or 0 when the instance cannot
// have it.
int ComputeSlices(const FakeGi& gi, unsigned int index) {
  if (gi.profile == nullptr || index >= kComputeProfilesSupported) return 0;
  const int slices = kComputeSlices[index];
  return slices <= gi.profile->compute_slices ? slices : 0;
}

// The compute-instance profile of a compute instance as large as its GPU instance.
unsigned int WholeComputeProfile(const mig::Profile& p) {
  for (unsigned int i = 0; i < kComputeProfilesSupported; ++i) {
    if (kComputeSlices[i] == p.compute_slices) return i;
  }
  return 0;
}

std::vector<mig::Placement> Layout(const FakeGpu& g) {
  std::vector<mig::Placement> out;
  for (const auto& gi : g.gis) {
    if (gi->profile != nullptr) out.push_back({gi->profile, static_cast<int>(gi->start)});
  }
  return out;
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// A MIG device UUID, the same for the same GPU, GPU instance and creation count.
std::string NewMigUuid(const FakeGpu& g, unsigned int gi, unsigned long long counter) {
  const std::string seed = fmt::format("{}/{}/{}", g.uuid, gi, counter);
  const uint64_t a = Fnv1a(seed), b = Fnv1a(seed + "/");
  return fmt::format("MIG-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xFFFF,
                     a & 0xFFFF, b >> 48, b & 0xFFFFFFFFFFFFULL);
}

std::string MigDeviceName(const FakeGpu& g, const FakeGi& gi, int compute_slices) {
  if (gi.profile == nullptr) return g.name + " MIG";
  if (compute_slices == gi.profile->compute_slices) return g.name + " MIG " + gi.profile->name;
  return fmt::format("{} MIG {}c.{}", g.name, compute_slices, gi.profile->name);
}

// Processes.

// A live process whose environment names devices.
struct GpuProcess {
  unsigned int pid = 0;
  std::vector<std::string> devices;  // CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES entries.
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void AddEntries(std::string_view list, std::vector<std::string>& out) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view entry = list.substr(0, comma);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (!entry.empty()) out.emplace_back(entry);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

std::vector<GpuProcess> ScanProcesses() {
  std::vector<GpuProcess> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (const dirent* e = readdir(proc)) {
    const std::string_view name = e->d_name;
    if (name.empty() || name.find_first_not_of("0123456789") != std::string_view::npos) continue;
    const std::string dir = "/proc/" + std::string(name);
    const std::string environ = ReadFile(dir + "/environ");
    if (environ.find("_VISIBLE_DEVICES=") == std::string::npos) continue;
    // A zombie's environment is gone with its memory, but say so rather than rely on it.
    const std::string stat = ReadFile(dir + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || (paren + 2 < stat.size() && stat[paren + 2] == 'Z')) {
      continue;
    }
    GpuProcess p;
    p.pid = static_cast<unsigned int>(std::stoul(std::string(name)));
    std::string_view vars = environ;
    while (!vars.empty()) {
      const size_t end = vars.find('\0');
      const std::string_view var = vars.substr(0, end);
      for (std::string_view key : {"CUDA_VISIBLE_DEVICES=", "NVIDIA_VISIBLE_DEVICES="}) {
        if (var.substr(0, key.size()) == key) AddEntries(var.substr(key.size()), p.devices);
      }
      if (end == std::string_view::npos) break;
      vars.remove_prefix(end + 1);
    }
    if (!p.devices.empty()) out.push_back(std::move(p));
  }
  closedir(proc);
  return out;
}

bool Lists(const GpuProcess& p, const std::string& uuid) {
  return !uuid.empty() && std::find(p.devices.begin(), p.devices.end(), uuid) != p.devices.end();
}

bool InUse(const std::vector<GpuProcess>& procs, const FakeCi& ci) {
  return std::any_of(procs.begin(), procs.end(), [&](const auto& p) { return Lists(p, ci.uuid); });
}

bool InUse(const std::vector<GpuProcess>& procs, const FakeGpu& g) {
  for (const GpuProcess& p : procs) {
    if (Lists(p, g.uuid)) return true;
  }
  for (const auto& gi : g.gis) {
    for (const auto& ci : gi->cis) {
      if (InUse(procs, *ci)) return true;
    }
  }
  return false;
}

// The state file.

json StateJson(const Fake& f) {
  json gpus = json::array();
  for (const auto& g : f.gpus) {
    if (!g->mig) continue;
    json gis = json::array();
    for (const auto& gi : g->gis) {
      json cis = json::array();
      for (const auto& ci : gi->cis) {
        cis.push_back({{"id", ci->id},
                       {"profile_id", ci->profile_id},
                       {"uuid", ci->uuid},
                       {"name", ci->name}});
      }
      gis.push_back({{"id", gi->id},
                     {"profile_id", gi->profile_id},
                     {"start", gi->start},
                     {"size", gi->size},
                     {"compute_instances", cis}});
    }
    gpus.push_back({{"index", g->index},
                    {"uuid", g->uuid},
                    {"mig_current", *g->mig},
                    {"mig_pending", g->mig_pending},
                    {"gpu_instances", gis}});
  }
  return {{"uuid_counter", f.uuid_counter}, {"gpus", gpus}};
}

// Writes the MIG state to the state file, when there is one: a temporary file renamed over it, so
// that no reader sees half of it. NVML_ERROR_UNKNOWN, after saying why on stderr, when it cannot.
nvmlReturn_t SaveState(Fake& f) {
  if (f.state_path.empty()) return nv::NVML_SUCCESS;
  const std::string text = StateJson(f).dump(2) + "\n";
  const std::string tmp = f.state_path + ".tmp." + std::to_string(getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out || std::rename(tmp.c_str(), f.state_path.c_str()) != 0) {
    std::fprintf(stderr, "fake NVML: cannot write the state file %s: %s\n", f.state_path.c_str(),
                 std::strerror(errno));
    std::remove(tmp.c_str());
    return nv::NVML_ERROR_UNKNOWN;
  }
  f.state_text = text;
  return nv::NVML_SUCCESS;
}

// The state file's contents, checked against the config's GPUs and their tables.
struct SavedCi {
  unsigned int id = 0, profile_id = 0;
  std::string uuid, name;
};
struct SavedGi {
  unsigned int id = 0, profile_id = 0, start = 0, size = 0;
  std::vector<SavedCi> cis;
};
struct SavedGpu {
  size_t index = 0;
  bool current = false, pending = false;
  std::vector<SavedGi> gis;
};
struct Saved {
  unsigned long long uuid_counter = 0;
  std::vector<SavedGpu> gpus;
};

// What is wrong with GPU instance `gi` of `g` as saved, or empty.
std::string CheckSavedGi(const FakeGpu& g, const SavedGi& gi) {
  std::set<unsigned int> ids;
  for (const SavedCi& ci : gi.cis) {
    if (!ids.insert(ci.id).second) return fmt::format("compute instance {} twice", ci.id);
  }
  if (g.table == nullptr) return "";
  const mig::Profile* p = g.table->FindById(static_cast<int>(gi.profile_id));
  if (p == nullptr || gi.size != static_cast<unsigned int>(p->memory_slices)) {
    return fmt::format("profile {} of size {} is not in the {} table", gi.profile_id, gi.size,
                       g.table->model);
  }
  int slices = 0;
  for (const SavedCi& ci : gi.cis) {
    if (ci.profile_id >= kComputeProfilesSupported) {
      return fmt::format("compute-instance profile {} is not supported", ci.profile_id);
    }
    slices += kComputeSlices[ci.profile_id];
  }
  if (slices > p->compute_slices) return fmt::format("compute instances take {} slices", slices);
  return "";
}

// Parses the state file's text; `error` says what is wrong, empty when nothing is.
Saved ParseState(const Fake& f, const std::string& text, std::string& error) {
  Saved out;
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    error = "not a JSON object";
    return out;
  }
  try {
    out.uuid_counter = j.at("uuid_counter").get<unsigned long long>();
    for (const json& jg : j.at("gpus")) {
      SavedGpu g;
      g.index = jg.at("index").get<size_t>();
      if (g.index >= f.gpus.size() || !f.gpus[g.index]->mig ||
          f.gpus[g.index]->uuid != jg.at("uuid").get<std::string>()) {
        error = fmt::format("GPU {} ({}) is not a MIG GPU of the config", g.index,
                            jg.at("uuid").get<std::string>());
        return out;
      }
      const FakeGpu& config = *f.gpus[g.index];
      g.current = jg.at("mig_current").get<bool>();
      g.pending = jg.at("mig_pending").get<bool>();
      std::vector<mig::Placement> layout;
      std::set<unsigned int> ids;
      for (const json& ji : jg.at("gpu_instances")) {
        SavedGi gi;
        gi.id = ji.at("id").get<unsigned int>();
        gi.profile_id = ji.at("profile_id").get<unsigned int>();
        gi.start = ji.at("start").get<unsigned int>();
        gi.size = ji.at("size").get<unsigned int>();
        for (const json& jc : ji.at("compute_instances")) {
          gi.cis.push_back({jc.at("id").get<unsigned int>(),
                            jc.at("profile_id").get<unsigned int>(),
                            jc.at("uuid").get<std::string>(), jc.at("name").get<std::string>()});
        }
        error = CheckSavedGi(config, gi);
        if (error.empty() && (gi.id == 0 || !ids.insert(gi.id).second)) error = "a bad id";
        if (!error.empty()) {
          error = fmt::format("GPU {}: GPU instance {}: {}", g.index, gi.id, error);
          return out;
        }
        if (config.table != nullptr) {
          layout.push_back({config.table->FindById(static_cast<int>(gi.profile_id)),
                            static_cast<int>(gi.start)});
        }
        g.gis.push_back(std::move(gi));
      }
      if (config.table != nullptr) {
        if (tessera::Status s = mig::CheckLayout(*config.table, layout); !s.ok()) {
          error = fmt::format("GPU {}: {}", g.index, s.message());
          return out;
        }
      }
      out.gpus.push_back(std::move(g));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  return out;
}

// Puts `saved` in place of the GPUs' MIG state. An instance that is the same as before keeps its
// object, so its handles stay valid.
void ApplyState(Fake& f, Saved saved) {
  f.uuid_counter = saved.uuid_counter;
  for (SavedGpu& s : saved.gpus) {
    FakeGpu& g = *f.gpus[s.index];
    g.mig = s.current;
    g.mig_pending = s.pending;
    std::vector<std::unique_ptr<FakeGi>> old = std::move(g.gis);
    g.gis.clear();
    for (SavedGi& sg : s.gis) {
      auto gi = TakeMatching(old, [&](const FakeGi& x) {
        return x.id == sg.id && x.profile_id == sg.profile_id && x.start == sg.start &&
               x.size == sg.size;
      });
      if (gi == nullptr) {
        gi = std::make_unique<FakeGi>();
        gi->id = sg.id;
        gi->profile_id = sg.profile_id;
        gi->start = sg.start;
        gi->size = sg.size;
        gi->profile =
            g.table != nullptr ? g.table->FindById(static_cast<int>(sg.profile_id)) : nullptr;
      }
      std::vector<std::unique_ptr<FakeCi>> old_cis = std::move(gi->cis);
      gi->cis.clear();
      for (SavedCi& sc : sg.cis) {
        auto ci = TakeMatching(old_cis, [&](const FakeCi& x) {
          return x.id == sc.id && x.profile_id == sc.profile_id && x.uuid == sc.uuid;
        });
        if (ci == nullptr) {
          ci = std::make_unique<FakeCi>();
          ci->id = sc.id;
          ci->profile_id = sc.profile_id;
          ci->uuid = sc.uuid;
        }
        ci->name = sc.name;
        InsertById(gi->cis, std::move(ci));
      }
      Bury(old_cis, f.dead_cis);
      InsertById(g.gis, std::move(gi));
    }
    Bury(old, f.dead_gis);
  }
}

// Reads the state file again when its text is not what this process last read or wrote: another
// process (an agent restarted, the fake nvidia-smi) changed the MIG state. A missing file changes
// nothing. NVML_ERROR_UNKNOWN, after saying why on stderr, when it does not parse.
nvmlReturn_t RefreshState(Fake& f) {
  if (f.state_path.empty()) return nv::NVML_SUCCESS;
  std::ifstream in(f.state_path, std::ios::binary);
  if (!in) return nv::NVML_SUCCESS;
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  if (text == f.state_text) return nv::NVML_SUCCESS;
  std::string error;
  Saved saved = ParseState(f, text, error);
  if (!error.empty()) {
    std::fprintf(stderr, "fake NVML: state file %s: %s\n", f.state_path.c_str(), error.c_str());
    return nv::NVML_ERROR_UNKNOWN;
  }
  ApplyState(f, std::move(saved));
  f.state_text = std::move(text);
  return nv::NVML_SUCCESS;
}

// The config.

std::string DefaultBusId(size_t i) {
  char out[32];
  std::snprintf(out, sizeof(out), "00000000:%02X:00.0", static_cast<unsigned>(0x10 + 8 * i));
  return out;
}

void FillPci(const std::string& bus_id, nv::nvmlPciInfo_t* pci) {
  std::memset(pci, 0, sizeof(*pci));
  std::snprintf(pci->busId, sizeof(pci->busId), "%s", bus_id.c_str());
  std::sscanf(bus_id.c_str(), "%x:%x:%x", &pci->domain, &pci->bus, &pci->device);
  std::snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0",
                pci->domain & 0xFFFF, pci->bus, pci->device);
  pci->pciDeviceId = 0x233010DE;
}

// Makes the config's "mig_devices" GPU instances 1, 2, ..., each with one compute instance unless
// "bare". Empty, or what is wrong with them.
std::string AddConfigInstances(FakeGpu& g, const json& migs, unsigned long long& uuid_counter) {
  for (size_t m = 0; m < migs.size(); ++m) {
    auto gi = std::make_unique<FakeGi>();
    gi->id = static_cast<unsigned int>(m) + 1;
    gi->profile_id = migs[m].value("profile_id", 0u);
    gi->start = migs[m].value("start", 0u);
    auto ci = std::make_unique<FakeCi>();
    ci->id = migs[m].value("compute_instance", 0u);
    ci->uuid = migs[m].value("uuid", "");
    ci->name = migs[m].value("name", "");
    if (g.table != nullptr) {
      gi->profile = g.table->FindById(static_cast<int>(gi->profile_id));
      if (gi->profile == nullptr) {
        return fmt::format("mig_devices[{}]: profile_id {} is not in the {} table", m,
                           gi->profile_id, g.table->model);
      }
      gi->size = static_cast<unsigned int>(gi->profile->memory_slices);
      ci->profile_id = WholeComputeProfile(*gi->profile);
      if (ci->name.empty()) ci->name = MigDeviceName(g, *gi, gi->profile->compute_slices);
    }
    if (ci->uuid.empty()) ci->uuid = NewMigUuid(g, gi->id, ++uuid_counter);
    if (!migs[m].value("bare", false)) gi->cis.push_back(std::move(ci));
    g.gis.push_back(std::move(gi));
  }
  if (g.table == nullptr) return "";
  tessera::Status s = mig::CheckLayout(*g.table, Layout(g));
  return s.ok() ? "" : "mig_devices: " + s.message();
}

// One GPU of the config, or null with `error`.
std::unique_ptr<FakeGpu> ParseGpu(const json& j, size_t i, unsigned long long& uuid_counter,
                                  std::string& error) {
  auto g = std::make_unique<FakeGpu>();
  g->index = static_cast<int>(i);
  g->name = j.value("name", "NVIDIA H100 80GB HBM3");
  g->uuid = j.value("uuid", "");
  g->bus_id = j.value("pci_bus_id", DefaultBusId(i));
  g->memory_mib = j.value("memory_mib", 81559ULL);
  g->memory_used_mib = j.value("memory_used_mib", 0ULL);
  g->minor = j.value("minor", static_cast<unsigned int>(i));
  if (j.contains("mig")) g->mig = j.at("mig").get<bool>();
  g->mig_pending = g->mig.value_or(false);
  g->mig_needs_reset = j.value("mig_mode_needs_reset", false);
  if (j.contains("mig_model")) {
    g->table = FindTable(j.at("mig_model").get<std::string>(), error);
    if (g->table == nullptr) return nullptr;
  }
  error = AddConfigInstances(*g, j.value("mig_devices", json::array()), uuid_counter);
  if (!error.empty()) return nullptr;
  g->nvlink_peers = j.value("nvlink_peers", std::vector<int>{});
  g->links = j.value("nvswitches", std::vector<std::string>{});
  for (const char* key : {"util", "mem_util", "temperature", "power_mw", "sm_clock", "mem_clock",
                          "pcie_tx", "pcie_rx", "ecc_sbe", "ecc_dbe"}) {
    g->values[key] = j.value(key, 0ULL);
  }
  g->errors = j.value("errors", std::map<std::string, int>{});
  return g;
}

// Reads $TESSERA_FAKE_NVML_CONFIG into `f`. False, after saying why on stderr, when it cannot.
bool LoadConfig(Fake& f) {
  f.driver_version.clear();
  f.fail_init = f.mig_no_permission = false;
  f.lost_gpu = -1;
  f.fail_calls.clear();
  Bury(f.gpus, f.dead_gpus);
  f.xids.clear();
  const char* state = std::getenv("TESSERA_FAKE_NVML_STATE");
  f.state_path = state != nullptr ? state : "";
  f.state_text.clear();
  f.uuid_counter = 0;
  const char* path = std::getenv("TESSERA_FAKE_NVML_CONFIG");
  if (path == nullptr) return true;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const json config = json::parse(text.str(), nullptr, false);
  if (!in || config.is_discarded() || !config.is_object()) {
    std::fprintf(stderr, "fake NVML: cannot read a JSON object from %s\n", path);
    return false;
  }
  try {
    f.driver_version = config.value("driver_version", "550.90.07");
    f.fail_init = config.value("fail_init", false);
    f.mig_no_permission = config.value("mig_no_permission", false);
    f.lost_gpu = config.value("lost_gpu", -1);
    f.fail_calls = config.value("fail_calls", std::map<std::string, int>{});
    const json& gpus = config.value("gpus", json::array());
    for (size_t i = 0; i < gpus.size(); ++i) {
      std::string error;
      std::unique_ptr<FakeGpu> g = ParseGpu(gpus[i], i, f.uuid_counter, error);
      if (g == nullptr) {
        std::fprintf(stderr, "fake NVML: %s: gpus[%zu]: %s\n", path, i, error.c_str());
        return false;
      }
      f.gpus.push_back(std::move(g));
    }
    for (auto& g : f.gpus) {
      std::vector<std::string> links;
      for (int peer : g->nvlink_peers)
        links.push_back(f.gpus.at(static_cast<size_t>(peer))->bus_id);
      links.insert(links.end(), g->links.begin(), g->links.end());
      g->links = std::move(links);
    }
    for (const json& x : config.value("xids", json::array())) {
      f.xids.emplace_back(x.value("gpu", 0), x.value("code", 0ULL));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake NVML: %s: %s\n", path, e.what());
    return false;
  }
  return true;
}

// Handles.

// What a handle stands for; `gpu` is null when it is stale or not one of ours.
struct Target {
  FakeGpu* gpu = nullptr;
  FakeGi* gi = nullptr;
  FakeCi* ci = nullptr;  // Set for a MIG device or compute instance.
};

Target FindDevice(Fake& f, nv::nvmlDevice_t dev) {
  for (auto& g : f.gpus) {
    if (dev == &g->handle) return {g.get()};
    for (auto& gi : g->gis) {
      for (auto& ci : gi->cis) {
        if (dev == &ci->device) return {g.get(), gi.get(), ci.get()};
      }
    }
  }
  return {};
}

Target FindGpuInstance(Fake& f, nv::nvmlGpuInstance_t handle) {
  for (auto& g : f.gpus) {
    for (auto& gi : g->gis) {
      if (handle == &gi->handle) return {g.get(), gi.get()};
    }
  }
  return {};
}

Target FindComputeInstance(Fake& f, nv::nvmlComputeInstance_t handle) {
  for (auto& g : f.gpus) {
    for (auto& gi : g->gis) {
      for (auto& ci : gi->cis) {
        if (handle == &ci->handle) return {g.get(), gi.get(), ci.get()};
      }
    }
  }
  return {};
}

// What every call answers before its own work: not initialized, the state file unreadable, or
// the code "fail_calls" gives `function`.
nvmlReturn_t Begin(Fake& f, const char* function) {
  if (f.inits == 0) return nv::NVML_ERROR_UNINITIALIZED;
  if (nvmlReturn_t r = RefreshState(f); r != nv::NVML_SUCCESS) return r;
  auto it = f.fail_calls.find(function);
  return it == f.fail_calls.end() ? nv::NVML_SUCCESS : it->second;
}

// A bad handle, a lost GPU, or the code configured for telemetry `group` in the GPU's "errors".
nvmlReturn_t CheckTarget(const Fake& f, const Target& t, const char* group) {
  if (t.gpu == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (f.lost_gpu == t.gpu->index) return nv::NVML_ERROR_GPU_IS_LOST;
  if (group != nullptr) {
    auto it = t.gpu->errors.find(group);
    if (it != t.gpu->errors.end()) return it->second;
  }
  return nv::NVML_SUCCESS;
}

unsigned int Uint(const FakeGpu& g, const char* key) {
  return static_cast<unsigned int>(g.values.at(key));
}

unsigned int Mode(bool on) { return on ? nv::NVML_DEVICE_MIG_ENABLE : nv::NVML_DEVICE_MIG_DISABLE; }

#define FAKE_ENTER()          \
  Fake& f = State();          \
  std::lock_guard lock(f.mu); \
  f.calls.insert(__func__)
#define FAKE_BEGIN() \
  FAKE_ENTER();      \
  if (nvmlReturn_t r_ = Begin(f, __func__); r_ != 0) return r_
// Declares `t`, what `handle` stands for, after the checks.
#define FAKE_TARGET(find, handle, group) \
  FAKE_BEGIN();                          \
  const Target t = find(f, handle);      \
  if (nvmlReturn_t r_ = CheckTarget(f, t, group); r_ != 0) return r_
#define FAKE_DEVICE(dev, group) FAKE_TARGET(FindDevice, dev, group)

nvmlReturn_t CopyString(const std::string& s, char* out, unsigned int length) {
  if (out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > length) return nv::NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return nv::NVML_SUCCESS;
}

// Adds a GPU instance of `p` at `start` to `g` if the layout stays valid.
nvmlReturn_t AddGpuInstance(Fake& f, FakeGpu& g, const mig::Profile& p, unsigned int start,
                            nv::nvmlGpuInstance_t* out) {
  std::vector<mig::Placement> layout = Layout(g);
  layout.push_back({&p, static_cast<int>(start)});
  if (!mig::CheckLayout(*g.table, layout).ok()) return nv::NVML_ERROR_INSUFFICIENT_RESOURCES;
  auto gi = std::make_unique<FakeGi>();
  gi->id = SmallestFreeId(g.gis, 1);
  gi->profile_id = static_cast<unsigned int>(p.id);
  gi->start = start;
  gi->size = static_cast<unsigned int>(p.memory_slices);
  gi->profile = &p;
  *out = &gi->handle;
  InsertById(g.gis, std::move(gi));
  return SaveState(f);
}

// The checks both create calls make; the profile, or null with `code`.
const mig::Profile* CreatableProfile(const Target& t, unsigned int profile_id, const void* out,
                                     nvmlReturn_t& code) {
  code = nv::NVML_ERROR_INVALID_ARGUMENT;
  if (t.ci != nullptr || out == nullptr) return nullptr;
  code = nv::NVML_ERROR_NOT_SUPPORTED;  // Not a MIG GPU, no table, or MIG is off now.
  if (!t.gpu->mig.value_or(false) || t.gpu->table == nullptr) return nullptr;
  code = nv::NVML_ERROR_INVALID_ARGUMENT;
  return t.gpu->table->FindById(static_cast<int>(profile_id));
}

}  // namespace

// Only these are exported; the library is built with hidden visibility.
#pragma GCC visibility push(default)
extern "C" {

// Library.
nvmlReturn_t nvmlInit_v2() {
  FAKE_ENTER();
  if (f.inits == 0) {
    f.calls = {__func__};
    if (!LoadConfig(f)) return nv::NVML_ERROR_UNKNOWN;
    if (f.fail_init) return nv::NVML_ERROR_DRIVER_NOT_LOADED;
    if (RefreshState(f) != nv::NVML_SUCCESS) return nv::NVML_ERROR_UNKNOWN;
  }
  ++f.inits;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown() {
  FAKE_ENTER();
  if (f.inits > 0) --f.inits;
  return nv::NVML_SUCCESS;
}

const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case nv::NVML_SUCCESS:
      return "Success";
    case nv::NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case nv::NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case nv::NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case nv::NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case nv::NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case nv::NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case nv::NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case nv::NVML_ERROR_TIMEOUT:
      return "Timeout";
    case nv::NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case nv::NVML_ERROR_GPU_IS_LOST:
      return "GPU is lost";
    case nv::NVML_ERROR_RESET_REQUIRED:
      return "GPU requires restart";
    case nv::NVML_ERROR_IN_USE:
      return "In use by another client";
    case nv::NVML_ERROR_INSUFFICIENT_RESOURCES:
      return "Insufficient Resources";
    default:
      return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  FAKE_BEGIN();
  return CopyString(f.driver_version, version, length);
}

// Enumeration and identity.
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  FAKE_BEGIN();
  *count = static_cast<unsigned int>(f.gpus.size());
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nv::nvmlDevice_t* device) {
  FAKE_BEGIN();
  if (index >= f.gpus.size()) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *device = &f.gpus[index]->handle;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nv::nvmlDevice_t dev, char* name, unsigned int length) {
  FAKE_DEVICE(dev, nullptr);
  return CopyString(t.ci != nullptr ? t.ci->name : t.gpu->name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nv::nvmlDevice_t dev, char* uuid, unsigned int length) {
  FAKE_DEVICE(dev, nullptr);
  return CopyString(t.ci != nullptr ? t.ci->uuid : t.gpu->uuid, uuid, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nv::nvmlDevice_t dev, unsigned int* minor) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci != nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;  // No node of its own.
  *minor = t.gpu->minor;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nv::nvmlDevice_t dev, nv::nvmlPciInfo_t* pci) {
  FAKE_DEVICE(dev, nullptr);
  FillPci(t.gpu->bus_id, pci);
  return nv::NVML_SUCCESS;
}

// Memory and telemetry.
nvmlReturn_t nvmlDeviceGetMemoryInfo(nv::nvmlDevice_t dev, nv::nvmlMemory_t* memory) {
  FAKE_DEVICE(dev, "memory");
  const FakeGpu& g = *t.gpu;
  constexpr unsigned long long kMib = 1024ULL * 1024;
  memory->total = g.memory_mib * kMib;
  memory->used = g.memory_used_mib * kMib;
  memory->free = memory->total - memory->used;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nv::nvmlDevice_t dev, nv::nvmlUtilization_t* util) {
  FAKE_DEVICE(dev, "util");
  const FakeGpu& g = *t.gpu;
  if (g.mig.value_or(false)) return nv::NVML_ERROR_NOT_SUPPORTED;
  util->gpu = Uint(g, "util");
  util->memory = Uint(g, "mem_util");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nv::nvmlDevice_t dev, nv::nvmlTemperatureSensors_t sensor,
                                      unsigned int* temp) {
  FAKE_DEVICE(dev, "temperature");
  if (sensor != nv::NVML_TEMPERATURE_GPU) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *temp = Uint(*t.gpu, "temperature");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nv::nvmlDevice_t dev, unsigned int* power) {
  FAKE_DEVICE(dev, "power");
  *power = Uint(*t.gpu, "power_mw");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nv::nvmlDevice_t dev, nv::nvmlClockType_t type,
                                    unsigned int* clock) {
  FAKE_DEVICE(dev, "clocks");
  if (type == nv::NVML_CLOCK_SM) {
    *clock = Uint(*t.gpu, "sm_clock");
  } else if (type == nv::NVML_CLOCK_MEM) {
    *clock = Uint(*t.gpu, "mem_clock");
  } else {
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  }
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nv::nvmlDevice_t dev, nv::nvmlPcieUtilCounter_t counter,
                                         unsigned int* value) {
  FAKE_DEVICE(dev, "pcie");
  *value = Uint(*t.gpu, counter == nv::NVML_PCIE_UTIL_TX_BYTES ? "pcie_tx" : "pcie_rx");
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nv::nvmlDevice_t dev, nv::nvmlMemoryErrorType_t type,
                                         nv::nvmlEccCounterType_t counter,
                                         unsigned long long* count) {
  FAKE_DEVICE(dev, "ecc");
  if (counter != nv::NVML_VOLATILE_ECC) return nv::NVML_ERROR_INVALID_ARGUMENT;
  const char* key = type == nv::NVML_MEMORY_ERROR_TYPE_CORRECTED ? "ecc_sbe" : "ecc_dbe";
  *count = t.gpu->values.at(key);
  return nv::NVML_SUCCESS;
}

// NVLink.
nvmlReturn_t nvmlDeviceGetNvLinkState(nv::nvmlDevice_t dev, unsigned int link,
                                      nv::nvmlEnableState_t* active) {
  FAKE_DEVICE(dev, nullptr);
  const FakeGpu& g = *t.gpu;
  if (g.links.empty()) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (link >= kLinksPerGpu) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *active = link < g.links.size() ? nv::NVML_FEATURE_ENABLED : nv::NVML_FEATURE_DISABLED;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nv::nvmlDevice_t dev, unsigned int link,
                                                 nv::nvmlPciInfo_t* pci) {
  FAKE_DEVICE(dev, nullptr);
  const FakeGpu& g = *t.gpu;
  if (link >= g.links.size()) return nv::NVML_ERROR_INVALID_ARGUMENT;
  FillPci(g.links[link], pci);
  return nv::NVML_SUCCESS;
}

// MIG mode.
nvmlReturn_t nvmlDeviceGetMigMode(nv::nvmlDevice_t dev, unsigned int* current,
                                  unsigned int* pending) {
  FAKE_DEVICE(dev, nullptr);
  const FakeGpu& g = *t.gpu;
  if (!g.mig) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (current == nullptr || pending == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *current = Mode(*g.mig);
  *pending = Mode(g.mig_pending);
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetMigMode(nv::nvmlDevice_t dev, unsigned int mode,
                                  nvmlReturn_t* activation) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci != nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  FakeGpu& g = *t.gpu;
  if (!g.mig) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (activation == nullptr ||
      (mode != nv::NVML_DEVICE_MIG_ENABLE && mode != nv::NVML_DEVICE_MIG_DISABLE)) {
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  }
  const bool enable = mode == nv::NVML_DEVICE_MIG_ENABLE;
  if (InUse(ScanProcesses(), g) || (!enable && !g.gis.empty())) {
    *activation = nv::NVML_ERROR_IN_USE;
    return nv::NVML_ERROR_IN_USE;
  }
  g.mig_pending = enable;
  if (g.mig_needs_reset && enable != *g.mig) {
    *activation = nv::NVML_ERROR_RESET_REQUIRED;
  } else {
    g.mig = enable;
    *activation = nv::NVML_SUCCESS;
  }
  return SaveState(f);
}

// MIG devices.
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nv::nvmlDevice_t dev, unsigned int* count) {
  FAKE_DEVICE(dev, nullptr);
  *count = t.gpu->mig.value_or(false) ? kMaxMigDevices : 0;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nv::nvmlDevice_t dev, unsigned int index,
                                                 nv::nvmlDevice_t* out) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci != nullptr || out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (index >= (t.gpu->mig.value_or(false) ? kMaxMigDevices : 0)) {
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  }
  unsigned int i = 0;
  for (auto& gi : t.gpu->gis) {
    for (auto& ci : gi->cis) {
      if (i++ == index) {
        *out = &ci->device;
        return nv::NVML_SUCCESS;
      }
    }
  }
  return nv::NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nv::nvmlDevice_t dev, unsigned int* id) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *id = t.gi->id;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nv::nvmlDevice_t dev, unsigned int* id) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  *id = t.ci->id;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nv::nvmlDevice_t dev, unsigned int* count,
                                                     nv::nvmlProcessInfo_t* infos) {
  FAKE_DEVICE(dev, nullptr);
  if (count == nullptr || (infos == nullptr && *count > 0)) return nv::NVML_ERROR_INVALID_ARGUMENT;
  std::vector<nv::nvmlProcessInfo_t> found;
  auto add = [&](unsigned int pid, unsigned int gi, unsigned int ci) {
    nv::nvmlProcessInfo_t info{};
    info.pid = pid;
    info.gpuInstanceId = gi;
    info.computeInstanceId = ci;
    found.push_back(info);
  };
  for (const GpuProcess& p : ScanProcesses()) {
    if (t.ci != nullptr) {
      if (Lists(p, t.ci->uuid)) add(p.pid, t.gi->id, t.ci->id);
      continue;
    }
    if (Lists(p, t.gpu->uuid)) add(p.pid, nv::kNvmlNoInstance, nv::kNvmlNoInstance);
    for (const auto& gi : t.gpu->gis) {
      for (const auto& ci : gi->cis) {
        if (Lists(p, ci->uuid)) add(p.pid, gi->id, ci->id);
      }
    }
  }
  const auto needed = static_cast<unsigned int>(found.size());
  if (needed > *count) {
    *count = needed;
    return nv::NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(found.begin(), found.end(), infos);
  *count = needed;
  return nv::NVML_SUCCESS;
}

// GPU instances.
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nv::nvmlDevice_t dev, unsigned int profile,
                                                 nv::nvmlGpuInstanceProfileInfo_t* info) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci != nullptr || info == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  const FakeGpu& g = *t.gpu;
  if (!g.mig || g.table == nullptr) return nv::NVML_ERROR_NOT_SUPPORTED;
  nvmlReturn_t code = nv::NVML_SUCCESS;
  const mig::Profile* p = ProfileAtIndex(*g.table, profile, code);
  if (p == nullptr) return code;
  FillGpuInstanceProfile(*g.table, *p, *info);
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nv::nvmlDevice_t dev, unsigned int profile_id, const nv::nvmlGpuInstancePlacement_t* placement,
    nv::nvmlGpuInstance_t* out) {
  FAKE_DEVICE(dev, nullptr);
  nvmlReturn_t code = nv::NVML_SUCCESS;
  const mig::Profile* p = CreatableProfile(t, profile_id, out, code);
  if (p == nullptr) return code;
  if (placement == nullptr || placement->size != static_cast<unsigned int>(p->memory_slices) ||
      std::find(p->starts.begin(), p->starts.end(), static_cast<int>(placement->start)) ==
          p->starts.end()) {
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  }
  return AddGpuInstance(f, *t.gpu, *p, placement->start, out);
}

// Without a placement the driver picks one; this fake takes the lowest start that fits.
nvmlReturn_t nvmlDeviceCreateGpuInstance(nv::nvmlDevice_t dev, unsigned int profile_id,
                                         nv::nvmlGpuInstance_t* out) {
  FAKE_DEVICE(dev, nullptr);
  nvmlReturn_t code = nv::NVML_SUCCESS;
  const mig::Profile* p = CreatableProfile(t, profile_id, out, code);
  if (p == nullptr) return code;
  for (int start : p->starts) {
    std::vector<mig::Placement> layout = Layout(*t.gpu);
    layout.push_back({p, start});
    if (mig::CheckLayout(*t.gpu->table, layout).ok()) {
      return AddGpuInstance(f, *t.gpu, *p, static_cast<unsigned int>(start), out);
    }
  }
  return nv::NVML_ERROR_INSUFFICIENT_RESOURCES;
}

// Every legal placement of profile `profile_id`, used or not, whether MIG is on or not; with
// `placements` NULL, only their count.
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nv::nvmlDevice_t dev, unsigned int profile_id, nv::nvmlGpuInstancePlacement_t* placements,
    unsigned int* count) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci != nullptr || count == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (!t.gpu->mig || t.gpu->table == nullptr) return nv::NVML_ERROR_NOT_SUPPORTED;
  const mig::Profile* p = t.gpu->table->FindById(static_cast<int>(profile_id));
  if (p == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  const auto needed = static_cast<unsigned int>(p->starts.size());
  if (placements == nullptr) {
    *count = needed;
    return nv::NVML_SUCCESS;
  }
  if (needed > *count) {
    *count = needed;
    return nv::NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < needed; ++i) {
    placements[i] = {static_cast<unsigned int>(p->starts[i]),
                     static_cast<unsigned int>(p->memory_slices)};
  }
  *count = needed;
  return nv::NVML_SUCCESS;
}

// The GPU instances of profile `profile_id`, in id order. As the driver's, it needs the caller to
// size the array from the profile's instanceCount: more found than `*count` is
// INSUFFICIENT_SIZE with the number needed in `*count`.
nvmlReturn_t nvmlDeviceGetGpuInstances(nv::nvmlDevice_t dev, unsigned int profile_id,
                                       nv::nvmlGpuInstance_t* out, unsigned int* count) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci != nullptr || out == nullptr || count == nullptr) {
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  }
  if (!t.gpu->mig || t.gpu->table == nullptr) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (f.mig_no_permission) return nv::NVML_ERROR_NO_PERMISSION;
  if (t.gpu->table->FindById(static_cast<int>(profile_id)) == nullptr)
    return nv::NVML_ERROR_INVALID_ARGUMENT;
  std::vector<nv::nvmlGpuInstance_t> found;
  for (auto& gi : t.gpu->gis) {
    if (gi->profile_id == profile_id) found.push_back(&gi->handle);
  }
  const auto needed = static_cast<unsigned int>(found.size());
  if (needed > *count) {
    *count = needed;
    return nv::NVML_ERROR_INSUFFICIENT_SIZE;
  }
  std::copy(found.begin(), found.end(), out);
  *count = needed;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nv::nvmlDevice_t dev, unsigned int id,
                                          nv::nvmlGpuInstance_t* out) {
  FAKE_DEVICE(dev, nullptr);
  if (t.ci != nullptr || out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (f.mig_no_permission) return nv::NVML_ERROR_NO_PERMISSION;
  for (auto& gi : t.gpu->gis) {
    if (gi->id == id) {
      *out = &gi->handle;
      return nv::NVML_SUCCESS;
    }
  }
  return nv::NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nv::nvmlGpuInstance_t instance,
                                    nv::nvmlGpuInstanceInfo_t* info) {
  FAKE_TARGET(FindGpuInstance, instance, nullptr);
  if (info == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  info->device = &t.gpu->handle;
  info->id = t.gi->id;
  info->profileId = t.gi->profile_id;
  info->placement = {t.gi->start, t.gi->size};
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nv::nvmlGpuInstance_t instance) {
  FAKE_TARGET(FindGpuInstance, instance, nullptr);
  // Processes use a GPU instance only through its compute instances.
  if (!t.gi->cis.empty()) return nv::NVML_ERROR_IN_USE;
  auto gone = TakeMatching(t.gpu->gis, [&](const FakeGi& gi) { return &gi == t.gi; });
  f.dead_gis.push_back(std::move(gone));
  return SaveState(f);
}

// Compute instances.
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nv::nvmlGpuInstance_t instance, unsigned int profile, unsigned int engine_profile,
    nv::nvmlComputeInstanceProfileInfo_t* info) {
  FAKE_TARGET(FindGpuInstance, instance, nullptr);
  if (t.gi->profile == nullptr) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (profile >= kComputeSlices.size() || info == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  if (engine_profile != nv::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED) {
    return nv::NVML_ERROR_NOT_SUPPORTED;
  }
  const int slices = ComputeSlices(*t.gi, profile);
  if (slices == 0) return nv::NVML_ERROR_NOT_SUPPORTED;
  const mig::Profile& gp = *t.gi->profile;
  *info = {};
  info->id = profile;
  info->sliceCount = static_cast<unsigned int>(slices);
  info->instanceCount = static_cast<unsigned int>(gp.compute_slices / slices);
  info->multiprocessorCount = static_cast<unsigned int>(slices) * kSmsPerSlice;
  info->sharedCopyEngineCount = static_cast<unsigned int>(gp.memory_slices);
  info->sharedDecoderCount =
      gp.media_extensions ? 1 : static_cast<unsigned int>(gp.memory_slices / 2);
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nv::nvmlGpuInstance_t instance,
                                                  unsigned int profile,
                                                  nv::nvmlComputeInstance_t* out) {
  FAKE_TARGET(FindGpuInstance, instance, nullptr);
  if (t.gi->profile == nullptr) return nv::NVML_ERROR_NOT_SUPPORTED;
  if (profile >= kComputeSlices.size() || out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  const int slices = ComputeSlices(*t.gi, profile);
  if (slices == 0) return nv::NVML_ERROR_NOT_SUPPORTED;
  int used = 0;
  for (const auto& ci : t.gi->cis) used += kComputeSlices[ci->profile_id];
  if (used + slices > t.gi->profile->compute_slices) {
    return nv::NVML_ERROR_INSUFFICIENT_RESOURCES;
  }
  auto ci = std::make_unique<FakeCi>();
  ci->id = SmallestFreeId(t.gi->cis, 0);
  ci->profile_id = profile;
  ci->uuid = NewMigUuid(*t.gpu, t.gi->id, ++f.uuid_counter);
  ci->name = MigDeviceName(*t.gpu, *t.gi, slices);
  *out = &ci->handle;
  InsertById(t.gi->cis, std::move(ci));
  return SaveState(f);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nv::nvmlGpuInstance_t instance, unsigned int id,
                                                   nv::nvmlComputeInstance_t* out) {
  FAKE_TARGET(FindGpuInstance, instance, nullptr);
  if (out == nullptr) return nv::NVML_ERROR_INVALID_ARGUMENT;
  for (auto& ci : t.gi->cis) {
    if (ci->id == id) {
      *out = &ci->handle;
      return nv::NVML_SUCCESS;
    }
  }
  return nv::NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nv::nvmlComputeInstance_t instance) {
  FAKE_TARGET(FindComputeInstance, instance, nullptr);
  if (InUse(ScanProcesses(), *t.ci)) return nv::NVML_ERROR_IN_USE;
  auto gone = TakeMatching(t.gi->cis, [&](const FakeCi& ci) { return &ci == t.ci; });
  f.dead_cis.push_back(std::move(gone));
  return SaveState(f);
}

// Events.
nvmlReturn_t nvmlEventSetCreate(nv::nvmlEventSet_t* set) {
  FAKE_BEGIN();
  *set = new nv::nvmlEventSet_st;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nv::nvmlDevice_t dev, unsigned long long* types) {
  FAKE_DEVICE(dev, nullptr);
  *types = 0x1 | 0x2 | 0x4 | nv::nvmlEventTypeXidCriticalError;
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nv::nvmlDevice_t dev, unsigned long long types,
                                      nv::nvmlEventSet_t set) {
  FAKE_DEVICE(dev, nullptr);
  if ((types & ~(0x1ULL | 0x2ULL | 0x4ULL | nv::nvmlEventTypeXidCriticalError)) != 0) {
    return nv::NVML_ERROR_NOT_SUPPORTED;
  }
  if ((types & nv::nvmlEventTypeXidCriticalError) != 0) set->xid_gpus.insert(t.gpu->index);
  return nv::NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetWait_v2(nv::nvmlEventSet_t set, nv::nvmlEventData_t* data,
                                 unsigned int /*timeout_ms*/) {
  FAKE_BEGIN();
  for (auto it = f.xids.begin(); it != f.xids.end(); ++it) {
    if (!set->xid_gpus.contains(it->first)) continue;
    data->device = &f.gpus.at(static_cast<size_t>(it->first))->handle;
    data->eventType = nv::nvmlEventTypeXidCriticalError;
    data->eventData = it->second;
    data->gpuInstanceId = data->computeInstanceId = nv::kNvmlNoInstance;
    f.xids.erase(it);
    return nv::NVML_SUCCESS;
  }
  return nv::NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nv::nvmlEventSet_t set) {
  FAKE_ENTER();
  delete set;
  return nv::NVML_SUCCESS;
}

// State-changing functions nothing here needs: they only record the call.
nvmlReturn_t nvmlDeviceClearEccErrorCounts(nv::nvmlDevice_t, nv::nvmlEccCounterType_t) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceSetGpuLockedClocks(nv::nvmlDevice_t, unsigned int, unsigned int) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceResetGpuLockedClocks(nv::nvmlDevice_t) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}
nvmlReturn_t nvmlDeviceSetPowerManagementLimit(nv::nvmlDevice_t, unsigned int) {
  FAKE_ENTER();
  return nv::NVML_ERROR_NO_PERMISSION;
}

// Not NVML: resets GPU `index` as `nvidia-smi -r -i INDEX` does (see the top of the file).
nvmlReturn_t tesseraFakeNvmlResetGpu(unsigned int index) {
  FAKE_BEGIN();
  if (index >= f.gpus.size()) return nv::NVML_ERROR_INVALID_ARGUMENT;
  FakeGpu& g = *f.gpus[index];
  if (f.lost_gpu == g.index) return nv::NVML_ERROR_GPU_IS_LOST;
  if (InUse(ScanProcesses(), g)) return nv::NVML_ERROR_IN_USE;
  if (g.mig) g.mig = g.mig_pending;
  Bury(g.gis, f.dead_gis);
  return SaveState(f);
}

// Not NVML: the names of the functions called since NVML was last initialized from zero, one a
// line, sorted.
const char* tesseraFakeNvmlCalls() {
  FAKE_ENTER();
  static std::string text;
  text.clear();
  for (const std::string& c : f.calls) text += c + "\n";
  return text.c_str();
}

}  // extern "C"
#pragma GCC visibility pop
