// State's telemetry: the series of the nodes agents serve, of faults' interruptions and of
// budgets, which /metrics shows and Monitoring evaluates, and per-GPU readings for tenants and
// operators.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "common/envelope.h"
#include "common/json.h"
#include "core/sealing.h"
#include "core/state.h"

namespace tessera::core {
namespace {

using nlohmann::json;

json PointsJson(const std::vector<telemetry::Point>& points) {
  json out = json::array();
  for (const telemetry::Point& p : points) {
    out.push_back({{"t", FormatRfc3339(Time(std::chrono::milliseconds(p.t_ms)))},
                   {"gpu_util", p.gpu_util},
                   {"fb_used_mib", p.fb_used_mib},
                   {"power_w", p.power_w},
                   {"temperature_c", p.temperature_c}});
  }
  return out;
}

// The latest readings of one GPU (or MIG instance) of a report.
json LatestJson(const telemetry::Telemetry& t, const GpuRef& g) {
  const auto r = telemetry::ReadHolder(t, g.index, g.mig_profile, g.mig_start);
  if (!r) return nullptr;
  if (r->lost) return {{"lost", true}};
  return {{"gpu_util", r->gpu_util},
          {"fb_used_mib", r->fb_used_mib},
          {"fb_total_mib", r->fb_total_mib},
          {"power_w", r->power_w},
          {"temperature_c", r->temperature_c}};
}

}  // namespace

std::vector<telemetry::Target> State::Targets() const {
  std::vector<telemetry::Target> out;
  std::vector<telemetry::Holder> holders;
  for (const auto& [name, node] : agents_.nodes()) {
    if (!node.registered() || !node.info) continue;
    holders.clear();
    for (const std::string& id : node.assigned) {
      const Instance* inst = instances_.Find(id);
      if (!inst || inst->node != name) continue;
      for (const GpuRef& g : inst->gpus) {
        holders.push_back(telemetry::Holder{g.index, inst->id.str(), inst->tenant.str(),
                                            g.milli_gpu > 0 ? g.milli_gpu : 1000, g.mig_profile,
                                            g.mig_start, -1});
      }
    }
    telemetry::NodeTargets(*node.info, node.telemetry.get(), holders, !node.lost, out);
  }
  // One series per instance a fault moved lately: its owner's to see and alert on.
  monitoring_.InterruptionTargets(out);
  // One series per budget: the tenant's spend this month in percent of it.
  for (const auto& [tenant, budget] : budgets_) {
    telemetry::Target t;
    t.labels = {{"tenant", tenant}};
    t.tenant = tenant;
    t.set(telemetry::Field::kBudgetUsedPercent,
          static_cast<double>(UseOf(tenant, budget).basis_points) / 100);
    out.push_back(std::move(t));
  }
  return out;
}

Result<json> State::InstanceMetrics(const Tenant& caller, std::string_view id,
                                    Duration window) const {
  const Instance* inst = instances_.Find(id);
  if (!inst || !Visible(caller, *inst)) {
    return Status::NotFound(fmt::format("instance '{}' not found", id));
  }
  const Time now = clock_->Now();
  json gpus = json::array();
  for (const GpuRef& g : inst->gpus) {
    json gj = {{"index", g.index}, {"uuid", g.uuid}, {"model", g.model}};
    if (!g.mig_profile.empty()) gj["mig_profile"] = g.mig_profile;
    if (g.milli_gpu > 0) gj["milli_gpu"] = g.milli_gpu;
    gj["points"] = PointsJson(monitoring_.history().Points(
        inst->node, g.index, g.mig_profile.empty() ? -1 : g.mig_start, now - window));
    gpus.push_back(std::move(gj));
  }
  return json{{"id", inst->id.str()},
              {"state", StateName(inst->state)},
              {"node", inst->node.empty() ? json(nullptr) : json(inst->node)},
              {"window_seconds", std::chrono::duration_cast<std::chrono::seconds>(window).count()},
              {"gpus", std::move(gpus)}};
}

Result<json> State::NodeMetrics(const std::string& node, Duration window) const {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex index, fleet_->Find(node));
  const fleet::Node& n = fleet_->node(index);
  const Time since = clock_->Now() - window;
  json gpus = json::array();
  auto agent = agents_.nodes().find(node);
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    const int gpu = static_cast<int>(i);
    json gj = {{"index", gpu},
               {"points", PointsJson(monitoring_.history().Points(node, gpu, -1, since))}};
    if (agent != agents_.nodes().end() && agent->second.telemetry) {
      GpuRef whole;
      whole.index = gpu;
      gj["latest"] = LatestJson(*agent->second.telemetry, whole);
    }
    json mig = json::array();
    for (const fleet::MigInstance& m : n.gpus[i].mig_instances) {
      mig.push_back(
          {{"profile", m.profile->name},
           {"start", m.start},
           {"points", PointsJson(monitoring_.history().Points(node, gpu, m.start, since))}});
    }
    if (!mig.empty()) gj["mig_instances"] = std::move(mig);
    gpus.push_back(std::move(gj));
  }
  return gpus;
}

json State::TopInstances(const Tenant& caller) const {
  json out = json::array();
  instances_.ForEach([&](const Instance& inst) {
    if (!Visible(caller, inst) || inst.gpus.empty() || inst.node.empty()) return;
    if (inst.state != InstanceState::kRunning && inst.state != InstanceState::kPreempting &&
        inst.state != InstanceState::kScheduled && inst.state != InstanceState::kStopping) {
      return;
    }
    auto node = agents_.nodes().find(inst.node);
    const telemetry::Telemetry* t =
        node != agents_.nodes().end() ? node->second.telemetry.get() : nullptr;
    json gpus = json::array();
    for (const GpuRef& g : inst.gpus) {
      json gj = {{"index", g.index}, {"latest", t ? LatestJson(*t, g) : json(nullptr)}};
      if (!g.mig_profile.empty()) gj["mig_profile"] = g.mig_profile;
      if (g.milli_gpu > 0) gj["milli_gpu"] = g.milli_gpu;
      gpus.push_back(std::move(gj));
    }
    json j = {{"id", inst.id.str()},
              {"name", inst.name},
              {"state", StateName(inst.state)},
              {"node", inst.node},
              {"gpus", std::move(gpus)}};
    if (caller.admin) j["tenant"] = inst.tenant.str();
    if (node != agents_.nodes().end() && node->second.telemetry) {
      j["sampled_at"] = FormatRfc3339(node->second.telemetry_at);
    }
    out.push_back(std::move(j));
  });
  return json{{"instances", std::move(out)}};
}

void State::EvaluateAlerts(store::Batch& batch) {
  if (monitoring_.Due()) monitoring_.Evaluate(Targets(), batch);
}

}  // namespace tessera::core
