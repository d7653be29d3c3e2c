// Fuzzes the fleet-description loader (fleet::ParseFleetJson, src/fleet/fleet_file.h) with the
// embedded catalog. A rejected file gets an error naming it; an accepted one is a fleet with as
// many nodes as its shapes count, uniquely named, within the per-node limits, with NVLink islands
// of at least two GPUs each and totals that add up.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "catalog/catalog_testing.h"
#include "fleet/fleet_file.h"
#include "fuzz/fuzz_util.h"

namespace tessera::fuzz {
namespace {

constexpr const char* kName = "fleet.json";
// A fleet of a million nodes is valid, but building one per input would starve the fuzzer; the
// limit itself is covered by fleet_file_test.
constexpr int64_t kMaxNodes = 20'000;

// The nodes the shapes ask for, counting only integer counts; 0 when the text is not a fleet.
int64_t RequestedNodes(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("shapes") || !j["shapes"].is_array()) return 0;
  int64_t total = 0;
  for (const nlohmann::json& s : j["shapes"]) {
    if (!s.is_object() || !s.contains("count") || !s["count"].is_number()) continue;
    const double count = s["count"].get<double>();
    if (count > 0) total += count > 1e12 ? int64_t{1'000'000'000'000} : static_cast<int64_t>(count);
  }
  return total;
}

void CheckFleet(const fleet::Fleet& f, std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  Check(f.name() == j["name"].get<std::string>(), "the fleet lost its name");
  int64_t want_nodes = 0;
  for (const nlohmann::json& s : j["shapes"]) want_nodes += s["count"].get<int64_t>();
  Check(static_cast<int64_t>(f.size()) == want_nodes, "the fleet has another node count");
  std::set<std::string> names;
  int64_t gpus = 0;
  for (const fleet::Node& n : f.nodes()) {
    Check(names.insert(n.name).second, "two nodes share a name");
    Check(n.cpu_milli > 0 && n.memory_mib > 0, "a node has no CPU or memory");
    Check(n.gpus.size() <= fleet::kMaxGpusPerNode, "a node has too many GPUs");
    Check(n.model.valid() == !n.gpus.empty(), "a node's model and GPU count disagree");
    std::vector<int> island_sizes;
    for (const fleet::Gpu& g : n.gpus) {
      if (g.mode == catalog::SharingMode::kMig) {
        Check(f.catalog().gpu(n.model).mig != nullptr, "a MIG GPU's model has no MIG table");
      }
      if (g.island < 0) continue;
      if (static_cast<size_t>(g.island) >= island_sizes.size()) {
        island_sizes.resize(static_cast<size_t>(g.island) + 1);
      }
      ++island_sizes[static_cast<size_t>(g.island)];
    }
    for (int size : island_sizes) Check(size >= 2, "an NVLink island has fewer than 2 GPUs");
    gpus += static_cast<int64_t>(n.gpus.size());
  }
  Check(gpus == f.total_gpus(), "the fleet's GPU total is not the sum of its nodes'");
}

void FuzzOne(const std::string& text) {
  if (RequestedNodes(text) > kMaxNodes) return;
  Result<fleet::Fleet> f = fleet::ParseFleetJson(catalog::EmbeddedCatalogForTest(), text, kName);
  if (!f.ok()) {
    CheckError(f.status(), kName);
    return;
  }
  CheckFleet(*f, text);
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
