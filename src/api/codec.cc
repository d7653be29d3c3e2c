#include "api/codec.h"

#include <fmt/format.h>

#include <cmath>

#include "common/ids.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api {

using nlohmann::json;

namespace {

HttpError ToHttpErrorOfCode(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return {200, "ok"};
    case StatusCode::kInvalidArgument:
      return {400, "invalid_argument"};
    case StatusCode::kUnauthenticated:
      return {401, "unauthenticated"};
    case StatusCode::kPermissionDenied:
      return {403, "forbidden"};
    case StatusCode::kResourceExhausted:
      return {403, "quota_exceeded"};
    case StatusCode::kNotFound:
      return {404, "not_found"};
    case StatusCode::kAlreadyExists:
      return {409, "already_exists"};
    case StatusCode::kFailedPrecondition:
      return {409, "failed_precondition"};
    case StatusCode::kUnavailable:
      return {503, "unavailable"};
    default:
      return {500, "internal"};
  }
}

}  // namespace

HttpError ToHttpError(const Status& s) {
  HttpError e = ToHttpErrorOfCode(s);
  if (!s.reason().empty()) e.code = s.reason();
  // Not a quota that the tenant's spending set, but a limit on how much may wait at once: the
  // same request succeeds once some of its pending work was placed or deleted.
  if (s.reason() == "too_many_pending") e.status = 429;
  return e;
}

json ErrorBody(const std::string& code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

// JsonFields prefixes errors with "body: field 'x': ..."; the API names the field plainly.
Status BodyStatus(const JsonFields& f) { return f.body_error(); }

int64_t ReadGpus(JsonFields& f, std::string_view key) {
  const double gpus = f.Number(key, 0, 1e6);
  const double milli = gpus * 1000;
  if (f.ok() && std::abs(milli - std::round(milli)) > 1e-6) {
    f.Fail(key, fmt::format("{} is finer than the unit, a thousandth of a GPU", gpus));
  }
  return static_cast<int64_t>(std::llround(milli));
}

namespace {

struct Quota {
  std::optional<int64_t> gpu_milli, max_pending, volumes_gib;  // Each unset when absent.
};

// `body`'s quota: `gpus` in GPUs (fractions allowed, in whole milli-GPUs: the unit every share is
// counted in), as milli-GPU, where a finer amount is refused rather than rounded without a word;
// `max_pending`, the cap on pending instances; and `volumes_gib`, the most its volumes may hold. A
// quota object gives at least `gpus`, or `max_pending` or `volumes_gib` without it.
Quota ReadQuota(JsonFields& f, const json& body, bool required) {
  Quota out;
  JsonFields q = f.Object("quota", required);
  if (q.absent()) return out;
  q.RejectUnknown({"gpus", "max_pending", "volumes_gib"});
  const json& given = body.at("quota");  // An object: the reader is not absent.
  if (given.contains("gpus") ||
      (!given.contains("max_pending") && !given.contains("volumes_gib"))) {
    out.gpu_milli = ReadGpus(q, "gpus");
  }
  if (given.contains("max_pending")) {
    out.max_pending = q.Int("max_pending", 0, core::kMaxMaxPending);
  }
  if (given.contains("volumes_gib")) {
    out.volumes_gib = q.Int("volumes_gib", 0, int64_t{1} << 40);
  }
  return out;
}

}  // namespace

Result<CreateTenantRequest> ParseCreateTenant(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"name", "quota"});
  CreateTenantRequest r;
  r.name = f.String("name");
  if (f.ok() && !IsValidIdBody(r.name)) f.Fail("name", kNameRule);
  const Quota quota = ReadQuota(f, body, /*required=*/false);
  r.quota_gpu_milli = quota.gpu_milli.value_or(0);
  r.max_pending = quota.max_pending;
  r.volumes_gib = quota.volumes_gib;
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

Result<UpdateTenantRequest> ParseUpdateTenant(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"quota", "disabled"});
  UpdateTenantRequest r;
  if (body.is_object() && body.contains("quota")) {
    const Quota quota = ReadQuota(f, body, true);
    r.quota_gpu_milli = quota.gpu_milli;
    r.max_pending = quota.max_pending;
    r.volumes_gib = quota.volumes_gib;
  }
  if (body.is_object() && body.contains("disabled")) r.disabled = f.Bool("disabled");
  if (f.ok() && !r.quota_gpu_milli && !r.max_pending && !r.volumes_gib && !r.disabled) {
    f.Fail("quota", "give quota, disabled or both");
  }
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

Result<RotateTokenRequest> ParseRotateToken(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"grace_seconds", "revoke_previous"});
  RotateTokenRequest r;
  const int64_t max =
      std::chrono::duration_cast<std::chrono::seconds>(core::kMaxTokenGrace).count();
  r.grace = std::chrono::seconds(f.Int("grace_seconds", 0, max, false, 3600));
  const bool revoke = f.Bool("revoke_previous", false, false);
  if (revoke && body.contains("grace_seconds")) {
    f.Fail("revoke_previous", "give either revoke_previous or grace_seconds, not both");
  }
  if (revoke) r.grace = Duration::zero();
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

Result<core::CreateInstanceRequest> ParseCreateInstance(const json& body) {
  JsonFields f(body, "body");
  Result<core::CreateInstanceRequest> r = core::ReadCreateInstance(f, body);
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

json InstanceTypesJson(const catalog::Catalog& catalog,
                       const std::function<bool(const catalog::InstanceType&)>& offered) {
  json out = json::array();
  for (const auto& it : catalog.instance_types()) {
    json j = {{"id", it.id},
              {"offered_here", offered(it)},
              {"family", it.family},
              {"description", it.description},
              {"vcpus", it.vcpus},
              {"memory_mib", it.memory_mib},
              {"gpu_model", it.gpu_model},
              {"sharing", catalog::SharingModeName(it.sharing)}};
    switch (it.sharing) {
      case catalog::SharingMode::kExclusive:
        j["gpus"] = it.gpus;
        break;
      case catalog::SharingMode::kMig:
        j["mig_profile"] = it.mig_profile;
        break;
      case catalog::SharingMode::kShared:
        j["milli_gpu"] = it.milli_gpu;
        j["gpu_memory_mib"] = it.gpu_memory_mib;
        break;
    }
    if (const catalog::Price* p = catalog.FindPrice(it.id)) {
      j["price_per_hour_usd"] = {{"on_demand", p->on_demand_per_hour.ToString()},
                                 {"reserved_1y", p->reserved_1y_per_hour.ToString()},
                                 {"reserved_3y", p->reserved_3y_per_hour.ToString()},
                                 {"spot", p->spot_per_hour.ToString()}};
    }
    out.push_back(std::move(j));
  }
  return out;
}

json NodesJson(const fleet::Fleet& fleet, size_t begin, size_t count) {
  json out = json::array();
  for (size_t at = begin; at < fleet.size() && at < begin + count; ++at) {
    const fleet::Node& n = fleet.nodes()[at];
    if (n.removed) continue;
    json gpus = json::array();
    for (size_t i = 0; i < n.gpus.size(); ++i) {
      const fleet::Gpu& g = n.gpus[i];
      json gj = {{"index", i},
                 {"mode", catalog::SharingModeName(g.mode)},
                 {"free_milli", g.free_milli},
                 {"health", g.healthy ? "ok" : "unhealthy"}};
      if (g.mode == catalog::SharingMode::kShared) gj["free_memory_mib"] = g.free_memory_mib;
      if (g.mode == catalog::SharingMode::kMig) {
        json mig = json::array();
        for (const auto& m : g.mig_instances) {
          mig.push_back(fmt::format("{}@{}", m.profile->name, m.start));
        }
        gj["mig_instances"] = std::move(mig);
      }
      if (g.island >= 0) gj["nvlink_island"] = g.island;
      gpus.push_back(std::move(gj));
    }
    out.push_back({{"id", n.name},
                   {"state", fleet::NodeStateName(n.state)},
                   {"gpu_model", n.model.valid() ? fleet.catalog().gpu(n.model).id : ""},
                   {"vcpus", n.cpu_milli / 1000},
                   {"vcpus_free", static_cast<double>(n.cpu_milli_free) / 1000},
                   {"memory_mib", n.memory_mib},
                   {"memory_mib_free", n.memory_mib_free},
                   {"workloads", n.workloads},
                   {"gpus", std::move(gpus)}});
  }
  return out;
}

void AddAgentFields(json& node, json agent) {
  if (agent.is_null()) return;
  if (agent["state"] == "not_ready") node["state"] = "not_ready";
  // Whom the node may host is the node's business, not only its agent's: top level.
  for (const char* key : {"isolation", "isolation_note"}) {
    if (agent.contains(key)) {
      node[key] = std::move(agent[key]);
      agent.erase(key);
    }
  }
  // Why each GPU out of service is out, beside the GPU.
  if (agent.contains("unhealthy_gpus")) {
    for (const json& u : agent["unhealthy_gpus"]) {
      const size_t gpu = u.value("gpu", size_t{0});
      if (!node.contains("gpus") || gpu >= node["gpus"].size()) continue;
      node["gpus"][gpu]["health_reason"] = u.value("reason", "");
      node["gpus"][gpu]["unhealthy_since"] = u.value("since", "");
    }
    agent.erase("unhealthy_gpus");
  }
  // The MIG devices on each GPU, beside the GPU.
  if (agent.contains("mig_devices")) {
    for (json& d : agent["mig_devices"]) {
      const size_t gpu = d.value("gpu", size_t{0});
      if (!node.contains("gpus") || gpu >= node["gpus"].size()) continue;
      d.erase("gpu");
      node["gpus"][gpu]["mig_devices"].push_back(std::move(d));
    }
    agent.erase("mig_devices");
  }
  // A GPU's outstanding mode change, else its last one, beside the GPU.
  if (agent.contains("gpu_mode_changes")) {
    for (const json& c : agent["gpu_mode_changes"]) {
      const size_t gpu = c.value("gpu", size_t{0});
      if (!node.contains("gpus") || gpu >= node["gpus"].size()) continue;
      json shown = c;
      shown.erase("gpu");
      node["gpus"][gpu]["mode_change"] = std::move(shown);
    }
    agent.erase("gpu_mode_changes");
  }
  node["agent"] = std::move(agent);
}

// A joined node's agent fields for GET /v1/nodes: its state, isolation, health, shares and MIG
// devices, and its last telemetry.
json AgentJson(const core::AgentNode& n) {
  json j = {{"state", n.StateName()},
            {"labels", n.labels},
            {"address", n.address.empty() ? n.name : n.address},
            {"joined_at", FormatRfc3339(n.created_at)},
            {"last_report_at", FormatRfc3339(n.last_seen)},
            {"limits_enforced", n.limits_enforced ? json(*n.limits_enforced) : json()}};
  if (!n.limits_note.empty()) j["limits_note"] = n.limits_note;
  j["isolation"] = core::IsolationName(n.isolation.value_or(core::Isolation::kNone));
  j["isolation_note"] = n.IsolationNote();
  if (n.registered()) {
    j["backend"] = n.inventory.value("backend", "");
    j["driver_version"] = n.inventory.value("driver_version", "");
  }
  j["unhealthy_gpus"] = n.UnhealthyJson();
  // Whether its volumes' sizes are hard limits (docs/volumes.md).
  j["volume_quota_enforced"] = n.volumes_enforced ? json(*n.volumes_enforced) : json();
  if (!n.volumes_note.empty()) j["volume_quota_note"] = n.volumes_note;
  // How shares of its GPUs are held to their size (docs/agent.md, "Shares on a GPU: MPS").
  j["share_enforcement"] = n.shares_mps.value_or(false) ? "mps" : "time_sliced";
  if (!n.shares_mps.value_or(false)) {
    j["share_enforcement_note"] =
        n.shares_note.empty() ? "its agent has not said it runs MPS" : n.shares_note;
  }
  if (n.registered()) {
    // Each GPU's MIG devices, whose each is: an instance's, idle (""), or an operator's.
    json mig = json::array();
    const json& gpus = n.inventory.value("gpus", json::array());
    for (size_t g = 0; g < gpus.size(); ++g) {
      for (const json& d : gpus[g].value("mig_devices", json::array())) {
        json shown = {{"gpu", g},
                      {"uuid", d.value("uuid", "")},
                      {"profile", d.value("profile", "")},
                      {"start", d.value("start", -1)}};
        for (const core::MigReport& m : n.mig) {
          if (m.uuid == shown["uuid"]) shown["owner"] = m.owner;
        }
        mig.push_back(std::move(shown));
      }
    }
    j["mig_devices"] = std::move(mig);  // Shown beside each GPU (api::AddAgentFields).
  }
  if (!n.mode_changes.empty()) {
    json changes = json::array();
    for (const auto& [_, c] : n.mode_changes) changes.push_back(c.ToJson());
    j["gpu_mode_changes"] = std::move(changes);  // Shown beside each GPU (api::AddAgentFields).
  }
  if (n.telemetry) {
    j["telemetry"] = telemetry::ToJson(*n.telemetry);
    j["telemetry_at"] = FormatRfc3339(n.telemetry_at);
  }
  return j;
}

json AgentJson(const core::State& s, const std::string& node) {
  const core::AgentNode* n = s.agents().Find(node);
  return n ? AgentJson(*n) : json();
}

}  // namespace tessera::api
