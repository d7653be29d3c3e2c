// The backend-neutral helpers: which catalog model a driver's GPU name is, NVLink islands from
// peer lists, and the host's CPUs and RAM. Thread-safety: pure functions, except
// ReadHostResources, which only reads /proc.
#include "agent/gpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

namespace tessera::agent {
namespace {

// How far the driver's memory may be from the catalog's: ECC on a GDDR board takes 1/16 and the
// driver keeps some for itself, so it reads lower, never much higher.
constexpr double kMinMemoryRatio = 0.85;
constexpr double kMaxMemoryRatio = 1.05;

// Upper-cased words of a name, split at spaces, hyphens and underscores.
std::vector<std::string> Tokens(std::string_view s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == '-' || c == '_') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

// "80GB", "141GB": a memory size, which the memory check decides rather than the name.
bool IsMemoryToken(const std::string& t) {
  size_t digits = 0;
  while (digits < t.size() && std::isdigit(static_cast<unsigned char>(t[digits]))) ++digits;
  return digits > 0 && t.substr(digits) == "GB";
}

// Form factors and memory kinds that catalog labels carry ("A100-40GB-SXM") and driver names
// may or may not ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3").
bool IsFormFactorToken(const std::string& t) {
  return t.starts_with("SXM") || t == "PCIE" || t.starts_with("HBM");
}

// The words of a catalog id or alias that name the family: "H100-NVL-94GB" -> H100 NVL.
std::vector<std::string> FamilyTokens(std::string_view label) {
  std::vector<std::string> out;
  for (std::string& t : Tokens(label)) {
    if (!IsMemoryToken(t) && !IsFormFactorToken(t)) out.push_back(std::move(t));
  }
  return out;
}

// True when `run` appears, in order and adjacent, in `tokens`.
bool ContainsRun(const std::vector<std::string>& tokens, const std::vector<std::string>& run) {
  if (run.empty() || run.size() > tokens.size()) return false;
  return std::search(tokens.begin(), tokens.end(), run.begin(), run.end()) != tokens.end();
}

std::string_view StripVendor(std::string_view name) {
  for (std::string_view prefix : {"NVIDIA ", "Tesla ", "Quadro "}) {
    if (name.starts_with(prefix)) return name.substr(prefix.size());
  }
  return name;
}

bool MemoryFits(const catalog::GpuModel& m, int64_t memory_mib) {
  if (memory_mib <= 0 || m.memory_mib <= 0) return true;
  double ratio = static_cast<double>(memory_mib) / static_cast<double>(m.memory_mib);
  return ratio >= kMinMemoryRatio && ratio <= kMaxMemoryRatio;
}

// The memory a name states ("NVIDIA A100-SXM4-40GB" -> 40 GiB), or 0.
int64_t MemoryFromName(const std::vector<std::string>& words) {
  for (const std::string& w : words) {
    int64_t gib = 0;
    if (IsMemoryToken(w) &&
        std::from_chars(w.data(), w.data() + w.size() - 2, gib).ec == std::errc() &&
        gib < (int64_t{1} << 30)) {
      return gib * 1024;
    }
  }
  return 0;
}

std::string Describe(std::string_view name, int64_t memory_mib) {
  std::ostringstream os;
  os << "GPU '" << name << "'";
  if (memory_mib > 0) os << " with " << memory_mib << " MiB";
  return os.str();
}

}  // namespace

Result<std::string> ResolveCatalogModel(const catalog::Catalog& catalog, std::string_view name,
                                        int64_t memory_mib) {
  // An id or alias spelled as the driver spells it ("Tesla T4" -> "T4") wins outright.
  for (std::string_view label : {name, StripVendor(name)}) {
    const catalog::GpuModel* m = catalog.FindGpu(label);
    if (m != nullptr && MemoryFits(*m, memory_mib)) return m->id;
  }
  // Otherwise the models whose family words appear in the name; the longest family wins, so
  // "NVIDIA H100 NVL" is the H100 NVL rather than any H100.
  const std::vector<std::string> words = Tokens(StripVendor(name));
  std::vector<const catalog::GpuModel*> family;
  size_t best = 0;
  for (const catalog::GpuModel& m : catalog.gpus()) {
    std::vector<std::string_view> labels{m.id};
    labels.insert(labels.end(), m.aliases.begin(), m.aliases.end());
    for (std::string_view label : labels) {
      std::vector<std::string> run = FamilyTokens(label);
      if (!ContainsRun(words, run) || run.size() < best) continue;
      if (run.size() > best) family.clear();
      best = run.size();
      if (std::find(family.begin(), family.end(), &m) == family.end()) family.push_back(&m);
    }
  }
  if (family.empty()) {
    return Status::NotFound("no catalog GPU model for " + Describe(name, memory_mib) +
                            ": no catalog id or alias matches the name; add an alias to "
                            "catalog/gpus.json");
  }
  // The memory picks the variant: the closest figure within the allowed ratio. Without the
  // driver's figure, the name's ("40GB") stands in.
  const int64_t memory = memory_mib > 0 ? memory_mib : MemoryFromName(words);
  const catalog::GpuModel* pick = nullptr;
  if (memory > 0) {
    double best_distance = 0;
    for (const catalog::GpuModel* m : family) {
      if (!MemoryFits(*m, memory) || m->memory_mib <= 0) continue;
      double d =
          std::abs(std::log(static_cast<double>(memory) / static_cast<double>(m->memory_mib)));
      if (pick == nullptr || d < best_distance) pick = m, best_distance = d;
    }
  } else if (family.size() == 1) {
    pick = family.front();
  }
  if (pick != nullptr) return pick->id;
  std::string known;
  for (const catalog::GpuModel* m : family) {
    known += (known.empty() ? "" : ", ") + m->id + " (" + std::to_string(m->memory_mib) + " MiB)";
  }
  const char* why = memory > 0 ? "the memory matches none of "
                               : "the memory is unknown and the name fits all of ";
  return Status::NotFound("no catalog GPU model for " + Describe(name, memory_mib) + ": " + why +
                          known);
}

std::vector<std::vector<int>> NvlinkIslands(const std::vector<GpuInfo>& gpus) {
  std::map<int, size_t> pos;
  for (size_t i = 0; i < gpus.size(); ++i) pos.emplace(gpus[i].index, i);
  std::vector<size_t> parent(gpus.size());
  std::iota(parent.begin(), parent.end(), size_t{0});
  auto find = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (size_t i = 0; i < gpus.size(); ++i) {
    for (int peer : gpus[i].nvlink_peers) {
      auto it = pos.find(peer);
      if (it != pos.end()) parent[find(i)] = find(it->second);
    }
  }
  std::map<size_t, std::vector<int>> groups;
  for (size_t i = 0; i < gpus.size(); ++i) groups[find(i)].push_back(gpus[i].index);
  std::vector<std::vector<int>> islands;
  for (auto& [root, members] : groups) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    if (members.size() >= 2) islands.push_back(std::move(members));
  }
  std::sort(islands.begin(), islands.end());
  return islands;
}

void ReadHostResources(int64_t& cpu_milli, int64_t& memory_mib) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_milli = cpus > 0 ? static_cast<int64_t>(cpus) * 1000 : 0;
  memory_mib = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (fields >> key >> kib && key == "MemTotal:") {
      memory_mib = kib / 1024;
      return;
    }
  }
}

}  // namespace tessera::agent
