#include "core/readings.h"

#include <fmt/format.h>

#include "core/instance_views.h"

namespace tessera::core {
namespace {

// `inst`'s readings with no GPU yet.
InstanceReadings ReadingsOf(const Instance& inst) {
  InstanceReadings r;
  r.id = inst.id.str();
  r.name = inst.name;
  r.tenant = inst.tenant.str();
  r.node = inst.node;
  r.state = inst.state;
  return r;
}

GpuReadings ReadingsOf(const GpuRef& g) {
  GpuReadings r;
  r.gpu = g;
  return r;
}

}  // namespace

void Readings::NodeTargets(std::vector<telemetry::Target>& out) const {
  std::vector<telemetry::Holder> holders;
  for (const auto& [name, node] : agents_->nodes()) {
    if (!node.registered() || !node.info) continue;
    holders.clear();
    for (const std::string& id : node.assigned) {
      const Instance* inst = instances_->Find(id);
      if (!inst || inst->node != name) continue;
      for (const GpuRef& g : inst->gpus) {
        holders.push_back(telemetry::Holder{g.index, inst->id.str(), inst->tenant.str(),
                                            g.milli_gpu > 0 ? g.milli_gpu : 1000, g.mig_profile,
                                            g.mig_start, -1});
      }
    }
    telemetry::NodeTargets(*node.info, node.telemetry.get(), holders, !node.lost, out);
  }
}

Result<InstanceReadings> Readings::OfInstance(const Tenant& caller, std::string_view id,
                                              Duration window) const {
  Result<const Instance*> found = instances_->FindFor(caller, id);
  if (!found.ok()) return found.status();
  const Instance* inst = *found;
  const Time since = clock_->Now() - window;
  InstanceReadings out = ReadingsOf(*inst);
  for (const GpuRef& g : inst->gpus) {
    GpuReadings r = ReadingsOf(g);
    r.points =
        history_->Points(inst->node, g.index, g.mig_profile.empty() ? -1 : g.mig_start, since);
    out.gpus.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<GpuReadings>> Readings::OfNode(const std::string& node, Duration window) const {
  TESSERA_ASSIGN_OR_RETURN(fleet::NodeIndex index, fleet_->Find(node));
  const fleet::Node& n = fleet_->node(index);
  const Time since = clock_->Now() - window;
  const AgentNode* agent = agents_->Find(node);
  const telemetry::Telemetry* latest = agent ? agent->telemetry.get() : nullptr;
  std::vector<GpuReadings> out;
  for (size_t i = 0; i < n.gpus.size(); ++i) {
    GpuReadings r;
    r.gpu.index = static_cast<int>(i);
    r.points = history_->Points(node, r.gpu.index, -1, since);
    r.sampled = latest != nullptr;
    if (latest) r.latest = telemetry::ReadHolder(*latest, r.gpu.index, "", 0);
    for (const fleet::MigInstance& m : n.gpus[i].mig_instances) {
      GpuReadings slice;
      slice.gpu.index = r.gpu.index;
      slice.gpu.mig_profile = m.profile->name;
      slice.gpu.mig_start = m.start;
      slice.points = history_->Points(node, r.gpu.index, m.start, since);
      r.mig.push_back(std::move(slice));
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<InstanceReadings> Readings::Top(const Tenant& caller) const {
  std::vector<InstanceReadings> out;
  instances_->ForEach([&](const Instance& inst) {
    if (!Visible(caller, inst) || inst.gpus.empty() || inst.node.empty()) return;
    if (inst.state != InstanceState::kRunning && inst.state != InstanceState::kPreempting &&
        inst.state != InstanceState::kScheduled && inst.state != InstanceState::kStopping) {
      return;
    }
    const AgentNode* node = agents_->Find(inst.node);
    const telemetry::Telemetry* t = node ? node->telemetry.get() : nullptr;
    InstanceReadings r = ReadingsOf(inst);
    if (t) r.sampled_at = node->telemetry_at;
    for (const GpuRef& g : inst.gpus) {
      GpuReadings gr = ReadingsOf(g);
      gr.sampled = t != nullptr;
      if (t) gr.latest = telemetry::ReadHolder(*t, g.index, g.mig_profile, g.mig_start);
      r.gpus.push_back(std::move(gr));
    }
    out.push_back(std::move(r));
  });
  return out;
}

}  // namespace tessera::core
