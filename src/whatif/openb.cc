#include "whatif/openb.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "catalog/embedded.h"

namespace tessera::whatif {

namespace {

// The array under `key` of the JSON data file `file` among `texts`.
Result<nlohmann::json*> Entries(std::map<std::string, nlohmann::json>& docs,
                                const std::string& file, const char* key) {
  auto it = docs.find(file);
  if (it == docs.end() || !it->second.contains(key) || !it->second[key].is_array()) {
    return Status::Internal(fmt::format("the embedded catalog has no {} in {}", key, file));
  }
  return &it->second[key];
}

// The unit's vCPUs and memory (see OpenbStandIn), within what a catalog entry may say (4,096
// vCPUs, 16 TiB).
std::pair<int64_t, int64_t> UnitFor(const fleet::Fleet& fleet, const std::vector<Job>& jobs) {
  std::set<std::pair<int64_t, int64_t>> shapes;  // Node vCPUs and memory, GPU nodes only.
  for (const fleet::Node& n : fleet.nodes()) {
    if (!n.gpus.empty()) shapes.emplace(n.cpu_milli / 1000, n.memory_mib);
  }
  std::vector<const Job*> whole;  // The whole 1-GPU jobs, the ones a unit may hold.
  for (const Job& j : jobs) {
    if (j.gpus == 1 && j.gpu_milli >= fleet::kMilliPerGpu) whole.push_back(&j);
  }
  std::pair<int64_t, int64_t> best{1, 1};
  double best_covered = -1;
  for (const auto& [cpu, mem] : shapes) {
    int64_t vcpus = 1, memory = 1;
    for (const Job* j : whole) {
      if (j->vcpus > cpu || j->memory_mib > mem) continue;
      vcpus = std::max(vcpus, j->vcpus);
      memory = std::max(memory, j->memory_mib);
    }
    vcpus = std::min<int64_t>(vcpus, 4096);
    memory = std::min<int64_t>(memory, int64_t{16} << 20);
    double covered = 0;
    for (const Job* j : whole) {
      if (j->vcpus <= vcpus && j->memory_mib <= memory)
        covered += static_cast<double>(j->duration_s);
    }
    if (covered > best_covered) {
      best_covered = covered;
      best = {vcpus, memory};
    }
  }
  return best;
}

}  // namespace

Result<std::unique_ptr<StandIn>> OpenbStandIn(const fleet::Fleet& fleet,
                                              const std::vector<Job>& jobs,
                                              std::string_view priced_as) {
  std::map<std::string, nlohmann::json> docs;
  for (const catalog::EmbeddedFile& f : catalog::EmbeddedFiles()) {
    docs[std::string(f.path)] = nlohmann::json::parse(f.content);
  }
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json * gpus, Entries(docs, "gpus.json", "gpus"));
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json * types,
                           Entries(docs, "instance_types.json", "instance_types"));
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json * prices, Entries(docs, "prices.json", "prices"));

  const nlohmann::json* like = nullptr;
  for (const nlohmann::json& t : *types) {
    if (t.value("id", "") == priced_as && t.value("gpus", 0) == 1 &&
        t.value("sharing", "") == "exclusive") {
      like = &t;
    }
  }
  const nlohmann::json* rates = nullptr;
  for (const nlohmann::json& p : *prices) {
    if (p.value("instance_type", "") == priced_as) rates = &p;
  }
  if (!like || !rates) {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not a priced 1-GPU exclusive instance type of the catalog", priced_as));
  }

  // The unit: for some node shape of the fleet, room for the largest whole 1-GPU pods that node
  // holds; of those, the one that covers the most of such pods' GPU-hours. A pod no node holds is
  // refused at admission; one the unit does not cover runs unreserved.
  auto [vcpus, memory] = UnitFor(fleet, jobs);
  const std::string stand_in_of = fmt::format(
      "the what-if simulator's stand-in for openb's GPU models (G2 and G3 undisclosed, P100 no "
      "longer rented), priced per GPU as {}",
      priced_as);
  gpus->push_back({{"id", kOpenbModel},
                   {"aliases", nlohmann::json::array()},
                   {"vendor", "undisclosed"},
                   {"architecture", "undisclosed"},
                   {"memory_mib", 0},
                   {"memory_bandwidth_gbps", 0},
                   {"fp32_tflops", 0},
                   {"tf32_tflops", 0},
                   {"fp16_tflops", 0},
                   {"fp8_tflops", 0},
                   {"int8_tops", 0},
                   {"tdp_watts", 0},
                   {"nvlink_gbps", 0},
                   {"mig", false},
                   {"source", stand_in_of}});
  types->push_back({{"id", kOpenbUnit},
                    {"family", "general"},
                    {"description", fmt::format("1 x openb GPU, {} vCPU, {} MiB", vcpus, memory)},
                    {"vcpus", vcpus},
                    {"memory_mib", memory},
                    {"gpu_model", kOpenbModel},
                    {"sharing", "exclusive"},
                    {"gpus", 1}});
  nlohmann::json price = *rates;
  price["instance_type"] = kOpenbUnit;
  price["source"] = fmt::format("{}: {}'s rates", stand_in_of, priced_as);
  prices->push_back(std::move(price));

  std::map<std::string, std::string, std::less<>> texts;
  for (const auto& [file, doc] : docs) texts[file] = doc.dump();
  auto standin = std::make_unique<StandIn>();
  TESSERA_ASSIGN_OR_RETURN(standin->catalog, catalog::Catalog::ParseTexts(texts));
  standin->fleet = std::make_unique<fleet::Fleet>(&standin->catalog);
  for (const fleet::Node& n : fleet.nodes()) {
    fleet::NodeSpec spec{.name = n.name,
                         .gpu_model = n.gpus.empty() ? "" : std::string(kOpenbModel),
                         .gpus = static_cast<int>(n.gpus.size()),
                         .cpu_milli = n.cpu_milli,
                         .memory_mib = n.memory_mib,
                         .default_mode = catalog::SharingMode::kShared};
    std::map<int, std::vector<int>> islands;
    for (size_t g = 0; g < n.gpus.size(); ++g) {
      if (n.gpus[g].island >= 0) islands[n.gpus[g].island].push_back(static_cast<int>(g));
    }
    for (auto& [island, members] : islands) spec.nvlink_islands.push_back(std::move(members));
    TESSERA_RETURN_IF_ERROR(standin->fleet->AddNode(spec).status());
  }
  return standin;
}

}  // namespace tessera::whatif
