#include "sim/trace.h"

#include <fmt/format.h>

#include <utility>

#include "common/csv.h"
#include "sched/target_workload.h"

namespace tessera::sim {

sched::Request ToRequest(const Pod& pod) {
  sched::Request r;
  r.cpu_milli = pod.cpu_milli;
  r.memory_mib = pod.memory_mib;
  r.gpu_count = pod.num_gpu;
  r.gpu_milli = pod.gpu_milli;
  r.allowed_models = pod.allowed_models;
  return r;
}

sched::TypicalWorkload TypicalWorkloadOf(const std::vector<Pod>& pods) {
  std::vector<sched::PodShape> shapes;
  shapes.reserve(pods.size());
  for (const Pod& p : pods) {
    sched::PodShape s;
    s.cpu_milli = p.cpu_milli;
    s.gpu_milli = p.gpu_milli;
    s.gpu_count = p.num_gpu;
    s.gpu_spec = p.gpu_spec;
    s.allowed_models = p.allowed_models;
    shapes.push_back(s);
  }
  return sched::BuildTypicalWorkload(shapes);
}

namespace {

// Reads the current row into a Pod, checking each value and the rules between them.
Result<Pod> ReadPod(const catalog::Catalog& catalog, const CsvReader& csv) {
  Pod pod;
  pod.name = std::string(csv.Field("name"));
  if (pod.name.empty()) return csv.Error("column 'name' is empty");
  TESSERA_ASSIGN_OR_RETURN(pod.cpu_milli, csv.Int("cpu_milli", 0, INT64_MAX / 4));
  TESSERA_ASSIGN_OR_RETURN(pod.memory_mib, csv.Int("memory_mib", 0, INT64_MAX / 4));
  TESSERA_ASSIGN_OR_RETURN(const int64_t num_gpu, csv.Int("num_gpu", 0, 8));
  TESSERA_ASSIGN_OR_RETURN(const int64_t gpu_milli, csv.Int("gpu_milli", 0, 1000));
  pod.num_gpu = static_cast<int>(num_gpu);
  pod.gpu_milli = static_cast<int>(gpu_milli);
  if ((pod.num_gpu == 0) != (pod.gpu_milli == 0)) {
    return csv.Error(
        fmt::format("num_gpu {} with gpu_milli {}: a pod either asks for no GPU "
                    "(both 0) or for some (both above 0)",
                    pod.num_gpu, pod.gpu_milli));
  }
  if (pod.num_gpu > 1 && pod.gpu_milli < 1000) {
    return csv.Error(fmt::format(
        "num_gpu {} with gpu_milli {}: a GPU share (gpu_milli < 1000) must ask for one GPU",
        pod.num_gpu, pod.gpu_milli));
  }
  pod.line = csv.line();
  pod.qos = std::string(csv.Field("qos"));
  // An absent or empty time is -1; one that is there must be a count of seconds.
  for (auto [column, field] :
       {std::pair{"creation_time", &pod.creation_s}, std::pair{"deletion_time", &pod.deletion_s},
        std::pair{"scheduled_time", &pod.scheduled_s}}) {
    if (csv.Field(column).empty()) continue;
    TESSERA_ASSIGN_OR_RETURN(*field, csv.Int(column, 0, INT64_MAX / 4));
  }
  if (pod.creation_s >= 0 && pod.deletion_s >= 0 && pod.deletion_s < pod.creation_s) {
    return csv.Error(
        fmt::format("deletion_time {} is before creation_time {}", pod.deletion_s, pod.creation_s));
  }
  pod.gpu_spec = std::string(csv.Field("gpu_spec"));
  auto mask = sched::ParseGpuSpec(catalog, pod.gpu_spec);
  if (!mask.ok()) return csv.Error(mask.status().message());
  pod.allowed_models = *mask;
  return pod;
}

}  // namespace

Result<std::vector<Pod>> ParseOpenbPods(const catalog::Catalog& catalog, std::string name,
                                        std::string text) {
  CsvReader csv(std::move(name), std::move(text));
  TESSERA_RETURN_IF_ERROR(csv.ReadHeader(
      {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
      {"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time"}));
  std::vector<Pod> pods;
  while (csv.Next()) {
    TESSERA_ASSIGN_OR_RETURN(Pod pod, ReadPod(catalog, csv));
    pods.push_back(std::move(pod));
  }
  TESSERA_RETURN_IF_ERROR(csv.status());
  if (pods.empty()) {
    return Status::InvalidArgument(fmt::format("{}: the pod list has no pods", csv.name()));
  }
  return pods;
}

Result<std::vector<Pod>> LoadOpenbPods(const catalog::Catalog& catalog, const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseOpenbPods(catalog, path, std::move(text));
}

}  // namespace tessera::sim
