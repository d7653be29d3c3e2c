// Fuzzes the openb pod-list loader (sim::ParseOpenbPods, src/sim/trace.h) with the embedded
// catalog. A rejected list gets an error naming the input; every pod of an accepted one is a
// request the scheduler accepts, whose gpu_spec means the models it was resolved to, and the list
// written back as CSV reads back the same. The typical-pod workload built from it has weights
// summing to 1.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "catalog/catalog_testing.h"
#include "common/clock.h"
#include "fleet/fleet_file.h"
#include "fuzz/fuzz_util.h"
#include "sched/scheduler.h"
#include "sched/target_workload.h"
#include "sim/run.h"
#include "sim/trace.h"

namespace tessera::fuzz {
namespace {

constexpr const char* kName = "pods.csv";

std::string WritePodList(const std::vector<sim::Pod>& pods) {
  std::string out = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
  for (const sim::Pod& p : pods) {
    out += CsvLine({p.name, std::to_string(p.cpu_milli), std::to_string(p.memory_mib),
                    std::to_string(p.num_gpu), std::to_string(p.gpu_milli), p.gpu_spec});
  }
  return out;
}

bool SamePods(const std::vector<sim::Pod>& a, const std::vector<sim::Pod>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].cpu_milli != b[i].cpu_milli ||
        a[i].memory_mib != b[i].memory_mib || a[i].num_gpu != b[i].num_gpu ||
        a[i].gpu_milli != b[i].gpu_milli || a[i].gpu_spec != b[i].gpu_spec ||
        a[i].allowed_models != b[i].allowed_models) {
      return false;
    }
  }
  return true;
}

void CheckPods(const catalog::Catalog& c, const std::vector<sim::Pod>& pods) {
  Check(!pods.empty(), "an accepted pod list has no pods");
  for (const sim::Pod& p : pods) {
    Check(!p.name.empty(), "a pod has no name");
    const Status valid = sched::ValidateRequest(sim::ToRequest(p));
    if (!valid.ok()) std::fprintf(stderr, "%s: %s\n", p.name.c_str(), valid.ToString().c_str());
    Check(valid.ok(), "a loaded pod is a request the scheduler refuses");
    Check(p.demand_milli() >= 0 && p.demand_milli() <= 8000, "a pod's GPU demand is out of range");
    Result<sched::ModelMask> mask = sched::ParseGpuSpec(c, p.gpu_spec);
    Check(mask.ok() && *mask == p.allowed_models, "a pod's models are not what its spec says");
  }
  const sched::TypicalWorkload typical = sim::TypicalWorkloadOf(pods);
  Check(!typical.workload.empty(), "a pod list has no typical pod");
  Check(typical.distinct >= typical.workload.size(), "more typical pods than distinct pods");
  Check(typical.coverage > 0 && typical.coverage <= 1 + 1e-9, "typical pods' coverage is off");
  double weights = 0;
  for (const sched::WorkloadClass& w : typical.workload) {
    Check(w.weight > 0, "a typical pod has no weight");
    weights += w.weight;
  }
  Check(std::abs(weights - 1) < 1e-9, "typical pods' weights do not sum to 1");
}

// The cluster the simulator runs on: two T4s, two V100s and a CPU-only node.
const fleet::Fleet& SimFleet() {
  static const fleet::Fleet* f = [] {
    Result<fleet::Fleet> parsed = fleet::ParseOpenbNodeCsv(
        catalog::EmbeddedCatalogForTest(),
        "sn,cpu_milli,memory_mib,gpu,model\n"
        "n1,32000,131072,2,T4\nn2,64000,262144,2,V100M32\nn3,16000,65536,0,\n",
        "sim fleet");
    Check(parsed.ok(), "the simulator's fleet does not load");
    return new fleet::Fleet(std::move(*parsed));
  }();
  return *f;
}

// Tuning copies pods until their GPU demand reaches 1.3 x capacity; a list whose copies would run
// to tens of thousands only makes the run slow.
constexpr double kMaxSimPods = 20'000;

void Simulate(const std::vector<sim::Pod>& pods, size_t policy_pick) {
  const fleet::Fleet& f = SimFleet();
  const double target = 1.3 * static_cast<double>(f.total_gpus()) * fleet::kMilliPerGpu;
  int64_t demand = 0;
  for (const sim::Pod& p : pods) demand += p.demand_milli();
  if (demand == 0 ||
      static_cast<double>(pods.size()) * target / static_cast<double>(demand) > kMaxSimPods) {
    return;
  }
  const std::vector<std::string> policies = sched::PolicyNames();
  const sched::Workload target_workload = sim::TypicalWorkloadOf(pods).workload;
  const sim::Scenario scenario = {"pods.csv", &f, &pods, &target_workload};
  const sim::RunSpec spec = {policies[policy_pick % policies.size()], 7, 1.3};
  Result<sim::RunStats> r = sim::RunOne(scenario, spec, SystemClock::Get());
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", spec.policy.c_str(), r.status().ToString().c_str());
    Check(r.status().code() != StatusCode::kInternal, "the simulator hit a scheduler bug");
    Check(!r.status().message().empty(), "a simulator run failed without a message");
    return;
  }
  Check(r->placed + r->failed == r->pods && r->placed >= 0 && r->failed >= 0,
        "a simulator run lost count of its pods");
}

void FuzzOne(std::string text) {
  const size_t text_size = text.size();
  const catalog::Catalog& c = catalog::EmbeddedCatalogForTest();
  Result<std::vector<sim::Pod>> pods = sim::ParseOpenbPods(c, kName, std::move(text));
  if (!pods.ok()) {
    CheckError(pods.status(), std::string(kName) + ":");
    return;
  }
  CheckPods(c, *pods);
  Result<std::vector<sim::Pod>> again = sim::ParseOpenbPods(c, kName, WritePodList(*pods));
  if (!again.ok()) std::fprintf(stderr, "again: %s\n", again.status().ToString().c_str());
  Check(again.ok() && SamePods(*pods, *again), "a pod list written back reads back different");
  Simulate(*pods, text_size);
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
