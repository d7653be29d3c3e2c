// Fuzzes the openb node-list loader (fleet::ParseOpenbNodeCsv, src/fleet/fleet_file.h) with the
// embedded catalog. A rejected list gets an error naming the input; an accepted one is a fleet of
// valid nodes, every GPU shared, whose totals add up, which written back as a node list reads back
// the same, and which the scheduler takes as the simulator does (building its node table sums
// every node's free CPU and GPUs) and places a GPU share and a CPU-only pod on.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "catalog/catalog_testing.h"
#include "fleet/fleet_file.h"
#include "fuzz/fuzz_util.h"
#include "sched/scheduler.h"

namespace tessera::fuzz {
namespace {

constexpr const char* kName = "nodes.csv";

// The fleet as an openb node list, each model by its catalog id.
std::string WriteNodeList(const fleet::Fleet& f) {
  std::string out = "sn,cpu_milli,memory_mib,gpu,model\n";
  for (const fleet::Node& n : f.nodes()) {
    const std::string model = n.model.valid() ? f.catalog().gpu(n.model).id : "";
    out += CsvLine({n.name, std::to_string(n.cpu_milli), std::to_string(n.memory_mib),
                    std::to_string(n.gpus.size()), model});
  }
  return out;
}

bool SameNodes(const fleet::Fleet& a, const fleet::Fleet& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const fleet::Node& x = a.nodes()[i];
    const fleet::Node& y = b.nodes()[i];
    if (x.name != y.name || x.cpu_milli != y.cpu_milli || x.memory_mib != y.memory_mib ||
        x.gpus.size() != y.gpus.size() || x.model != y.model) {
      return false;
    }
  }
  return true;
}

void CheckFleet(const fleet::Fleet& f) {
  Check(f.size() > 0, "an accepted node list has no nodes");
  int64_t gpus = 0;
  for (const fleet::Node& n : f.nodes()) {
    Check(!n.name.empty(), "a node has no name");
    Check(n.cpu_milli >= 0 && n.memory_mib >= 0, "a node has negative capacity");
    Check(n.cpu_milli_free == n.cpu_milli && n.memory_mib_free == n.memory_mib,
          "a new node is not all free");
    Check(n.gpus.size() <= fleet::kMaxGpusPerNode, "a node has too many GPUs");
    Check(n.model.valid() == !n.gpus.empty(), "a node's model and GPU count disagree");
    for (const fleet::Gpu& g : n.gpus) {
      Check(g.mode == catalog::SharingMode::kShared, "an openb GPU is not shared");
      Check(g.free_milli == fleet::kMilliPerGpu, "a new GPU is not free");
    }
    gpus += static_cast<int64_t>(n.gpus.size());
  }
  Check(gpus == f.total_gpus(), "the fleet's GPU total is not the sum of its nodes'");
}

void Schedule(fleet::Fleet& f) {
  sched::Options options;
  options.policy = "fgd";
  options.target = {{.cpu_milli = 4000, .gpu_count = 1, .gpu_milli = 500, .weight = 1}};
  Result<std::unique_ptr<sched::Scheduler>> s = sched::Scheduler::Create(&f, options);
  Check(s.ok(), "the scheduler does not take a loaded fleet");
  const sched::Request share = {
      .cpu_milli = 1000, .memory_mib = 1024, .gpu_count = 1, .gpu_milli = 500};
  const sched::Request cpu_only = {.cpu_milli = 1000, .memory_mib = 1024};
  for (const sched::Request& r : {share, cpu_only}) {
    (void)(*s)->Schedule(r);
    Check((*s)->last_error().ok(), "the scheduler booked a node the fleet refused");
  }
}

void FuzzOne(std::string text) {
  const catalog::Catalog& c = catalog::EmbeddedCatalogForTest();
  Result<fleet::Fleet> f = fleet::ParseOpenbNodeCsv(c, std::move(text), kName);
  if (!f.ok()) {
    CheckError(f.status(), std::string(kName) + ":");
    return;
  }
  CheckFleet(*f);
  Result<fleet::Fleet> again = fleet::ParseOpenbNodeCsv(c, WriteNodeList(*f), kName);
  if (!again.ok()) std::fprintf(stderr, "again: %s\n", again.status().ToString().c_str());
  Check(again.ok() && SameNodes(*f, *again), "a node list written back reads back different");
  Schedule(*f);
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
