// Groups (group_service.h): creating, reading, scaling, patching and deleting groups, the
// autoscaler, and their records. Placing gangs is in group_gangs.cc.
#include "core/group_service.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "common/text.h"
#include "core/invariant.h"

namespace tessera::core {

Result<GroupStatus> Groups::Create(const Tenant& caller, const GroupRequest& req,
                                   store::Batch& batch) {
  Group g;
  table_.Number(g);
  g.tenant = caller.id;
  g.spec = req;
  // The template's values are sealed under the group's own record (its members' under theirs).
  TESSERA_RETURN_IF_ERROR(
      secrets_->CheckRefs(caller.id.str(), g.spec.member.env, g.spec.member.image, "template."));
  TESSERA_RETURN_IF_ERROR(secrets_->SealValues(TenantSecrets::TemplateRecord(g.id),
                                               g.spec.member.env, g.spec.member.image));
  g.created_at = g.updated_at = clock_->Now();
  Group& stored = table_.Add(std::move(g));
  if (Status s = AddMembers(stored, 0, stored.spec.size, batch); !s.ok()) {
    table_.Erase(stored.id);  // AddMembers made nothing.
    return s;
  }
  batch.settings.emplace_back(std::string(GroupTable::kNextKey), std::to_string(table_.next()));
  if (!PlaceGang(stored, batch)) stored.failed_in = queue_->generation();
  table_.Save(stored, batch);
  return StatusOf(stored);
}

Result<Admitted> Groups::AdmitMembers(const Group& g, int count, bool readmit) {
  const Tenant* owner = tenants_->Find(g.tenant.str());
  if (!owner) return Status::NotFound(fmt::format("tenant '{}' not found", g.tenant.str()));
  auto admitted = lifecycle_->Admit(*owner, g.spec.member, count, readmit, g.id);
  if (admitted.ok()) return admitted;
  // What admission says of the shape is about the template; quota and budget are not.
  const Status& s = admitted.status();
  const bool shape =
      s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition;
  return shape ? s.WithPrefix("template") : s;
}

Status Groups::AddMembers(Group& g, int from, int to, store::Batch& batch, bool readmit) {
  TESSERA_ASSIGN_OR_RETURN(Admitted admitted, AdmitMembers(g, to - from, readmit));
  const Tenant* owner = tenants_->Find(g.tenant.str());
  if (g.spec.member.billing == Billing::kReserved) {
    // Every new member claims a unit: all of them, or none is made.
    TESSERA_RETURN_IF_ERROR(
        accounts_->ClaimReservation(*owner, admitted.shape, to - from).status());
  }
  g.members.resize(static_cast<size_t>(to));
  for (int rank = from; rank < to; ++rank) {
    CreateInstanceRequest req = g.spec.member;
    req.name = fmt::format("{}-{}", g.spec.name.empty() ? g.id : g.spec.name, rank);
    TESSERA_ASSIGN_OR_RETURN(Instance * inst, lifecycle_->Add(*owner, req, admitted));
    inst->group = g.id;
    inst->rank = rank;
    g.members[static_cast<size_t>(rank)] = inst->id.str();
    lifecycle_->Save(*inst, batch);
  }
  table_.Retry();
  g.failed_in = -1;  // New members: worth a try whatever the capacity.
  table_.MarkWaiting(g.id);
  return Status::Ok();
}

GroupStatus Groups::StatusOf(const Group& g) const {
  GroupStatus out;
  out.group = g;
  for (const std::string& id : g.members) {
    GroupMemberStatus m;
    m.instance = id;
    if (const Instance* inst = instances_->Find(id)) {
      m.known = true;
      m.rank = inst->rank;
      m.state = inst->state;
      m.node = inst->node;
      if (inst->assignment) ++out.placed;
    }
    out.members.push_back(std::move(m));
  }
  return out;
}

Result<GroupStatus> Groups::Get(const Tenant& caller, std::string_view id) const {
  TESSERA_ASSIGN_OR_RETURN(const Group* g, table_.Of(caller, id));
  return StatusOf(*g);
}

std::vector<GroupStatus> Groups::List(const Tenant& caller) const {
  std::vector<GroupStatus> out;
  for (const auto& [id, g] : table_.all()) {
    if (caller.admin || caller.id == g.tenant) out.push_back(StatusOf(g));
  }
  return out;
}

Result<GroupStatus> Groups::Delete(const Tenant& caller, std::string_view id, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Group * found, table_.Of(caller, id));
  Group& g = *found;
  if (g.state != GroupState::kDeleted) {
    g.state = GroupState::kDeleted;
    g.reason = "deleted by its owner";
    g.updated_at = clock_->Now();
    for (const std::string& m : g.members) {
      if (Instance* inst = instances_->Find(m))
        lifecycle_->Stop(*inst, "its group was deleted", batch, billing::Ending::kCustomer);
    }
    table_.Save(g, batch);
  }
  return StatusOf(g);
}

Result<GroupStatus> Groups::Scale(const Tenant& caller, std::string_view id, int size,
                                  store::Batch& batch) {
  GroupPatch patch;
  patch.size = size;
  return Patch(caller, id, patch, batch);
}

Result<GroupStatus> Groups::Patch(const Tenant& caller, std::string_view id,
                                  const GroupPatch& patch, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Group * found, table_.Of(caller, id));
  Group& g = *found;
  if (Ended(g.state)) {
    return Status::FailedPrecondition(
        fmt::format("group '{}' is {}: it cannot change", g.id, GroupStateName(g.state)));
  }
  // Everything is checked before anything changes: a refused size leaves the autoscale as it was.
  const std::optional<Autoscale>& a = patch.autoscale ? *patch.autoscale : g.spec.autoscale;
  if (patch.autoscale && a) {
    if (a->metric == AutoscaleMetric::kRps && !g.spec.service) {
      return Status::InvalidArgument("field 'autoscale.metric': rps needs a service");
    }
    if (const auto& e = g.spec.elastic; e && (a->min < e->min || a->max > e->max)) {
      return Status::InvalidArgument(fmt::format(
          "field 'autoscale': [{}, {}] is outside the group's elastic [min, max] = [{}, {}] (its "
          "members' rendezvous was made for that range; recreate the group to widen it)",
          a->min, a->max, e->min, e->max));
    }
  }
  if (patch.size) {
    if (*patch.size < 1 || *patch.size > kMaxGroupSize) {
      return Status::InvalidArgument(
          fmt::format("field 'size': {} is out of range [1, {}]", *patch.size, kMaxGroupSize));
    }
    if (patch.autoscale && a && (*patch.size < a->min || *patch.size > a->max)) {
      return Status::InvalidArgument(
          fmt::format("field 'size': {} is outside autoscale's [min, max] = [{}, {}]", *patch.size,
                      a->min, a->max));
    }
    TESSERA_RETURN_IF_ERROR(Resize(g, *patch.size, "its group was scaled in", batch));
  }
  if (patch.autoscale) {
    // The size is left to the next evaluation, whose window starts again.
    g.spec.autoscale = *patch.autoscale;
    g.recommendations.clear();
    g.metric_value.reset();
    g.desired = 0;
    g.floor = 0;
    g.decision.clear();
    g.updated_at = clock_->Now();
    table_.Save(g, batch);
  }
  return StatusOf(g);
}

Status Groups::Resize(Group& g, int size, const std::string& why, store::Batch& batch) {
  const int from = g.spec.size;
  if (g.spec.elastic && (size < g.spec.elastic->min || size > g.spec.elastic->max)) {
    return Status::InvalidArgument(
        fmt::format("field 'size': {} is outside the group's elastic [min, max] = [{}, {}]", size,
                    g.spec.elastic->min, g.spec.elastic->max));
  }
  const int current = static_cast<int>(g.members.size());
  // Whether the attempt's world has begun: a member placed, so it may run with the old size.
  const bool started = std::any_of(g.members.begin(), g.members.end(), [&](const std::string& m) {
    const Instance* inst = instances_->Find(m);
    return inst && inst->state != InstanceState::kPending;
  });
  const bool runs = !g.spec.member.command.empty() || !g.spec.member.image.empty();
  const bool restart = g.draining.empty() && !g.spec.elastic && started && runs;
  if (!g.draining.empty() || restart) {
    // The next attempt is made at the new size: what it adds must pass the gate now.
    const int base = restart ? current : from;
    if (size > base) {
      TESSERA_ASSIGN_OR_RETURN(Admitted admitted, AdmitMembers(g, size - base));
      if (g.spec.member.billing == Billing::kReserved) {
        TESSERA_RETURN_IF_ERROR(
            accounts_
                ->ClaimReservation(*tenants_->Find(g.tenant.str()), admitted.shape, size - base)
                .status());
      }
    }
  } else if (size > current) {
    TESSERA_RETURN_IF_ERROR(AddMembers(g, current, size, batch));
  } else {
    // The newest members first.
    for (int rank = current - 1; rank >= size; --rank) {
      const std::string m = g.members[static_cast<size_t>(rank)];
      g.members.pop_back();
      if (Instance* inst = instances_->Find(m))
        lifecycle_->Stop(*inst, why, batch, billing::Ending::kCustomer);
      ReleaseMembers({m});
    }
  }
  // A gang placed whole stays whole at its new size.
  g.spec.min_available = g.spec.min_available == from ? size : std::min(g.spec.min_available, size);
  g.spec.size = size;
  g.updated_at = clock_->Now();
  if (restart) {
    // Every rank of a world that is not elastic must agree on WORLD_SIZE: a new world.
    RestartWhole(
        g, fmt::format("its group was resized from {} to {}, and is not elastic", from, size),
        fmt::format("restarting whole at size {} (was {}): the group is not elastic", size, from),
        batch);
  } else {
    if (!PlaceGang(g, batch)) g.failed_in = queue_->generation();
  }
  table_.Save(g, batch);
  return Status::Ok();
}

Result<GroupStatus> Groups::SetBacklog(const Tenant& caller, std::string_view id, int64_t pending) {
  TESSERA_ASSIGN_OR_RETURN(Group * g, table_.Of(caller, id));
  g->backlog = pending;
  return StatusOf(*g);
}

std::optional<double> Groups::Metric(const Group& g) const {
  const Autoscale& a = *g.spec.autoscale;
  if (a.metric == AutoscaleMetric::kRps) {
    int running = 0;
    for (const std::string& id : g.members) {
      const Instance* inst = instances_->Find(id);
      running += inst && inst->state == InstanceState::kRunning;
    }
    return service_stats_->Rate(g.id) / std::max(1, running);
  }
  if (a.metric == AutoscaleMetric::kPending) {
    if (!g.backlog) return std::nullopt;
    return static_cast<double>(*g.backlog) / std::max(1, g.spec.size);
  }
  double sum = 0;
  int n = 0, missing = 0;
  for (const std::string& id : g.members) {
    const Instance* inst = instances_->Find(id);
    if (!inst) continue;
    const AgentNode* node = agents_->Find(inst->node);
    if (inst->state != InstanceState::kRunning || !node || !node->telemetry) {
      missing += std::max(1, inst->shape.gpus);
      continue;
    }
    for (const GpuRef& ref : inst->gpus) {
      const auto r =
          telemetry::ReadHolder(*node->telemetry, ref.index, ref.mig_profile, ref.mig_start);
      if (!r || r->lost) {
        ++missing;
        continue;
      }
      ++n;
      if (a.metric == AutoscaleMetric::kGpuUtil) {
        sum += r->gpu_util;
      } else if (r->fb_total_mib > 0) {
        sum += 100.0 * static_cast<double>(r->fb_used_mib) / static_cast<double>(r->fb_total_mib);
      }
    }
  }
  if (n == 0) return std::nullopt;
  const double ready = sum / n;
  if (missing == 0) return ready;
  // As HPA does: GPUs without readings (members starting, say) count as idle when the ready
  // ones ask for more and as on target when they ask for fewer, so a scale-out that has not
  // started yet does not scale out again; and when that reverses the direction, nothing moves.
  const double value = (sum + (ready > a.target ? 0 : a.target) * missing) / (n + missing);
  return (ready > a.target) == (value > a.target) ? value : a.target;
}

void Groups::RunAutoscaler(store::Batch& batch) {
  const Time now = clock_->Now();
  if (!autoscaler_.Due(now)) return;
  for (auto& entry : table_.all()) {
    Group& g = entry.second;
    if (!g.spec.autoscale || Ended(g.state)) continue;
    std::optional<Autoscaler::Room> room;
    if (const Tenant* owner = tenants_->Find(g.tenant.str())) {
      room = Autoscaler::Room{pending_->Room(*owner), pending_->Count(owner->id.str()),
                              pending_->CapOf(*owner)};
    }
    const Autoscaler::Decision d = autoscaler_.Decide(g, Metric(g), room, now);
    if (d.resize) {
      if (Status s = Resize(g, d.to, "scaled in by its autoscaler", batch); !s.ok()) {
        g.decision += "; refused: " + s.message();
      }
    }
    if (!d.audit) continue;
    const Autoscale& a = *g.spec.autoscale;
    nlohmann::json detail = {
        {"from", d.from},      {"to", d.to},       {"metric", AutoscaleMetricName(a.metric)},
        {"target", a.target},  {"floor", g.floor}, {"max", a.max},
        {"reason", g.decision}};
    if (g.metric_value) detail["value"] = *g.metric_value;
    batch.audit.push_back(
        {0, FormatRfc3339(now), "autoscaler", "scale group", g.id, 200, DumpJson(detail)});
    spdlog::info("group {} autoscaled {}", g.id, g.decision);
  }
}

void Groups::EvictEnded(Time cutoff) {
  table_.EvictEnded(cutoff, options_->retention, [this](const Group& g) {
    ReleaseMembers(g.members);
    service_stats_->Forget(g.id);
  });
}

std::string Groups::NodeAddress(const std::string& node) const {
  const AgentNode* agent = agents_->Find(node);
  return agent && !agent->address.empty() ? agent->address : node;
}

void Groups::ReleaseMembers(const std::vector<std::string>& ids) {
  // The eviction sweep kept them while their group listed them: they may go now.
  for (const std::string& id : ids) {
    if (const Instance* inst = instances_->Find(id); inst && !IsActive(inst->state)) {
      instances_->Ended(*inst);
    }
  }
}

Status Groups::Restore(const std::vector<std::pair<std::string, std::string>>& records,
                       store::Batch& batch) {
  for (const auto& [key, value] : records) {
    if (key == GroupTable::kNextKey) {
      table_.NextAtLeast(std::atoll(value.c_str()));
      continue;
    }
    auto j = ParseJson(value, "setting " + key);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(Group g, GroupFromJson(*j, "setting " + key));
    table_.NextAtLeast(g.seq + 1);
    TESSERA_ASSIGN_OR_RETURN(
        const bool changed,
        secrets_->OpenValues(TenantSecrets::TemplateRecord(g.id), Ended(g.state), g.spec.member.env,
                             g.spec.member.image));
    if (changed) table_.Save(g, batch);
    // As in a running server, an ended group stays in memory for the retention only.
    if (Ended(g.state) && g.updated_at < clock_->Now() - options_->retention) continue;
    // The window's recommendations are gone with the last run: none is made up.
    if (g.spec.autoscale) {
      g.scale_down_after =
          clock_->Now() + std::chrono::seconds(g.spec.autoscale->scale_down_stabilization_seconds);
    }
    if (!Ended(g.state)) table_.MarkWaiting(g.id);  // PlaceGang drops those with none.
    for (const std::string& id : g.draining) {
      // Instances are restored first: one that ended lets the next attempt start.
      const Instance* inst = instances_->Find(id);
      if (!inst || !IsActive(inst->state)) table_.MemberEnded(id);
    }
    table_.Add(std::move(g));
  }
  table_.Retry();
  return Status::Ok();
}

}  // namespace tessera::core
