#include "whatif/jobs.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/clock.h"
#include "common/csv.h"
#include "sim/trace.h"

namespace tessera::whatif {

namespace {

constexpr int kMaxJobGpus = 1024;
constexpr double kMaxDurationS = 10.0 * 365 * 24 * 3600;  // Ten years: rejects nonsense.

}  // namespace

Result<std::vector<Job>> ParsePhillyJobs(std::string name, std::string text) {
  CsvReader csv(std::move(name), std::move(text));
  TESSERA_RETURN_IF_ERROR(
      csv.ReadHeader({"timestamp", "duration", "num_gpus"}, {"gpu_time", "cluster"}));
  struct Row {
    int64_t submit;
    Job job;
  };
  std::vector<Row> rows;
  while (csv.Next()) {
    std::string stamp(csv.Field("timestamp"));
    if (stamp.size() != 19 || stamp[10] != ' ') {
      return csv.Error(fmt::format("timestamp '{}' is not YYYY-MM-DD HH:MM:SS", stamp));
    }
    stamp[10] = 'T';
    auto at = ParseRfc3339(stamp + "Z");
    if (!at.ok())
      return csv.Error(
          fmt::format("timestamp '{}': {}", csv.Field("timestamp"), at.status().message()));
    const std::string_view d = csv.Field("duration");
    double seconds = 0;
    const auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), seconds);
    if (ec != std::errc() || end != d.data() + d.size() || !std::isfinite(seconds) || seconds < 0 ||
        seconds > kMaxDurationS) {
      return csv.Error(
          fmt::format("duration '{}' is not a number of seconds in [0, {:.0f}]", d, kMaxDurationS));
    }
    TESSERA_ASSIGN_OR_RETURN(int64_t gpus, csv.Int("num_gpus", 1, kMaxJobGpus));
    Job job;
    job.name = fmt::format("philly-{:06}", rows.size() + 1);
    job.duration_s = std::max<int64_t>(1, std::llround(seconds));
    job.gpus = static_cast<int>(gpus);
    rows.push_back(
        {std::chrono::duration_cast<std::chrono::seconds>(at->time_since_epoch()).count(),
         std::move(job)});
  }
  TESSERA_RETURN_IF_ERROR(csv.status());
  if (rows.empty()) return Status::InvalidArgument(fmt::format("{}: no jobs", csv.name()));
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.submit < b.submit; });
  std::vector<Job> jobs;
  jobs.reserve(rows.size());
  for (Row& r : rows) {
    r.job.submit_s = r.submit - rows.front().submit;
    jobs.push_back(std::move(r.job));
  }
  return jobs;
}

Result<std::vector<Job>> LoadPhillyJobs(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParsePhillyJobs(path, std::move(text));
}

Result<std::vector<Job>> ParseOpenbJobs(const catalog::Catalog& catalog, std::string name,
                                        std::string text) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<sim::Pod> pods,
                           sim::ParseOpenbPods(catalog, name, std::move(text)));
  std::vector<Job> jobs;
  jobs.reserve(pods.size());
  int64_t first = INT64_MAX;
  for (const sim::Pod& p : pods) {
    if (p.creation_s < 0 || p.deletion_s < 0) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: no creation_time or deletion_time; --mode dynamic replays a pod list with its "
          "times (openb_pod_list_default.csv, gpushare* or cpu*; not multigpu*)",
          name, p.line));
    }
    for (auto [column, value] :
         {std::pair{"creation_time", p.creation_s}, std::pair{"deletion_time", p.deletion_s},
          std::pair{"scheduled_time", p.scheduled_s}}) {
      if (static_cast<double>(value) > kMaxDurationS) {
        return Status::InvalidArgument(
            fmt::format("{}:{}: {} {} is more than ten years of seconds into the trace", name,
                        p.line, column, value));
      }
    }
    if (!p.gpu_spec.empty()) {
      return Status::InvalidArgument(fmt::format(
          "{}:{}: gpu_spec '{}': --mode dynamic prices openb's GPUs as one stand-in model, so it "
          "cannot honour a pod's model constraint (docs/cost-simulation.md)",
          name, p.line, p.gpu_spec));
    }
    Job job;
    job.name = p.name;
    job.submit_s = p.creation_s;
    const int64_t placed = p.scheduled_s >= p.creation_s ? p.scheduled_s : p.creation_s;
    job.duration_s = std::max<int64_t>(1, p.deletion_s - placed);
    job.gpus = p.num_gpu;
    job.gpu_milli = p.num_gpu == 0 ? 0 : p.gpu_milli;
    job.vcpus = std::max<int64_t>(1, (p.cpu_milli + 999) / 1000);
    job.memory_mib = p.memory_mib;
    job.best_effort = p.qos == "BE";
    // LS, Burstable and Guaranteed pods are services: moved elsewhere, a service loses no work and
    // runs out the rest of its life. BE pods are batch work and start over.
    job.checkpoints = !job.best_effort;
    first = std::min(first, job.submit_s);
    jobs.push_back(std::move(job));
  }
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const Job& a, const Job& b) { return a.submit_s < b.submit_s; });
  for (Job& j : jobs) j.submit_s -= first;
  return jobs;
}

Result<std::vector<Job>> LoadJobs(const catalog::Catalog& catalog, const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  if (text.starts_with("name,cpu_milli")) return ParseOpenbJobs(catalog, path, std::move(text));
  return ParsePhillyJobs(path, std::move(text));
}

bool AreOpenbJobs(const std::vector<Job>& jobs) { return !jobs.empty() && jobs.front().vcpus > 0; }

}  // namespace tessera::whatif
