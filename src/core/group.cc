#include "core/group.h"

#include <fmt/format.h>

#include "common/text.h"

namespace tessera::core {

std::string_view PlacementName(Placement p) { return p == Placement::kPack ? "pack" : "spread"; }

std::optional<Placement> ParsePlacement(std::string_view s) {
  if (s == "pack") return Placement::kPack;
  if (s == "spread") return Placement::kSpread;
  return std::nullopt;
}

std::string_view TopologyName(Topology t) {
  switch (t) {
    case Topology::kNvlink:
      return "nvlink";
    case Topology::kNode:
      return "node";
    case Topology::kAny:
      return "any";
  }
  return "any";
}

std::optional<Topology> ParseTopology(std::string_view s) {
  if (s == "nvlink") return Topology::kNvlink;
  if (s == "node") return Topology::kNode;
  if (s == "any") return Topology::kAny;
  return std::nullopt;
}

std::string_view AutoscaleMetricName(AutoscaleMetric m) {
  switch (m) {
    case AutoscaleMetric::kGpuUtil:
      return "gpu_util";
    case AutoscaleMetric::kFbUsed:
      return "fb_used";
    case AutoscaleMetric::kPending:
      return "pending";
    case AutoscaleMetric::kRps:
      return "rps";
  }
  return "gpu_util";
}

std::optional<Autoscale> ReadAutoscale(JsonFields& f, const nlohmann::json& body) {
  JsonFields a = f.Object("autoscale", false);
  if (a.absent()) return std::nullopt;
  a.RejectUnknown(
      {"min", "max", "metric", "target", "scale_down_stabilization_seconds", "schedule"});
  Autoscale out;
  out.min = static_cast<int>(a.Int("min", 1, kMaxGroupSize));
  out.max = static_cast<int>(a.Int("max", 1, kMaxGroupSize));
  if (a.ok() && out.max < out.min) a.Fail("max", fmt::format("is less than min ({})", out.min));
  const std::string metric = a.String("metric", false, "gpu_util");
  bool known = false;
  for (AutoscaleMetric m : {AutoscaleMetric::kGpuUtil, AutoscaleMetric::kFbUsed,
                            AutoscaleMetric::kPending, AutoscaleMetric::kRps}) {
    if (AutoscaleMetricName(m) == metric) {
      out.metric = m;
      known = true;
    }
  }
  if (!known) {
    a.Fail("metric",
           fmt::format("'{}' is not gpu_util, fb_used, pending or rps", Quote(metric, 32)));
  }
  const bool percent =
      out.metric != AutoscaleMetric::kPending && out.metric != AutoscaleMetric::kRps;
  out.target = a.Number("target", percent ? 1 : 0.001, percent ? 100 : 1e9);
  out.scale_down_stabilization_seconds =
      a.Int("scale_down_stabilization_seconds", 0, 86400, false, 300);
  const nlohmann::json& raw = body["autoscale"];
  if (raw.is_object() && raw.contains("schedule")) {
    const nlohmann::json& list = raw["schedule"];
    if (!list.is_array() || list.size() > 32) {
      a.Fail("schedule", "is not a list of at most 32 {cron, min} entries");
      return out;
    }
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = fmt::format("schedule[{}]", i);
      const nlohmann::json& e = list[i];
      if (!e.is_object() || !e.contains("cron") || !e["cron"].is_string() || !e.contains("min") ||
          !e["min"].is_number_integer()) {
        a.Fail(at, "is not {\"cron\": \"M H DOM MON DOW\", \"min\": N}");
        continue;
      }
      auto cron = Cron::Parse(e["cron"].get<std::string>());
      if (!cron.ok()) {
        a.Fail(at + ".cron", cron.status().message());
        continue;
      }
      const int64_t min = e["min"].get<int64_t>();
      if (min < out.min || min > out.max) {
        a.Fail(at + ".min",
               fmt::format("{} is outside [min, max] = [{}, {}]", min, out.min, out.max));
        continue;
      }
      out.schedule.push_back({std::move(*cron), static_cast<int>(min)});
    }
  }
  return out;
}

namespace {

// `elastic`: false, or {"min", "max"}; absent, an autoscaled group is elastic over its autoscale
// range. Errors name "elastic.<field>", or "size" outside the range.
std::optional<Elastic> ReadElastic(JsonFields& f, const nlohmann::json& body, int size,
                                   const std::optional<Autoscale>& autoscale) {
  const nlohmann::json* raw =
      body.is_object() && body.contains("elastic") ? &body["elastic"] : nullptr;
  if (raw == nullptr) {
    if (!autoscale) return std::nullopt;
    return Elastic{autoscale->min, autoscale->max};
  }
  if (raw->is_boolean() && !raw->get<bool>()) return std::nullopt;
  if (!raw->is_object()) {
    f.Fail("elastic", "is neither false nor {\"min\": m, \"max\": n}");
    return std::nullopt;
  }
  JsonFields e = f.Object("elastic");
  e.RejectUnknown({"min", "max"});
  Elastic out;
  out.min = static_cast<int>(e.Int("min", 1, kMaxGroupSize));
  out.max = static_cast<int>(e.Int("max", 1, kMaxGroupSize));
  if (e.ok() && out.max < out.min) e.Fail("max", fmt::format("is less than min ({})", out.min));
  if (!e.ok() || !f.ok()) return std::nullopt;
  if (size < out.min || size > out.max) {
    f.Fail("size",
           fmt::format("{} is outside elastic's [min, max] = [{}, {}]", size, out.min, out.max));
  } else if (autoscale && (autoscale->min < out.min || autoscale->max > out.max)) {
    f.Fail("elastic", fmt::format("[{}, {}] does not hold autoscale's [{}, {}]", out.min, out.max,
                                  autoscale->min, autoscale->max));
  }
  return out;
}

// The `service` object of a group request: {"port", "health_path"?}; errors name
// "service.<field>".
std::optional<Service> ReadService(JsonFields& f) {
  JsonFields s = f.Object("service", false);
  if (s.absent()) return std::nullopt;
  s.RejectUnknown({"port", "health_path", "path"});  // "path" is what the group shows: ignored.
  Service out;
  out.port = static_cast<int>(s.Int("port", 1, 65535));
  out.health_path = s.String("health_path", false, "/");
  if (out.health_path.empty() || out.health_path[0] != '/' || out.health_path.size() > 256 ||
      std::any_of(out.health_path.begin(), out.health_path.end(),
                  [](char c) { return c <= 0x20 || c == 0x7f; })) {
    s.Fail("health_path", "must be a path starting with '/', without spaces, at most 256 bytes");
  }
  return out;
}

nlohmann::json AutoscaleJson(const Autoscale& a) {
  nlohmann::json schedule = nlohmann::json::array();
  for (const ScheduleEntry& e : a.schedule) {
    schedule.push_back({{"cron", e.cron.text()}, {"min", e.min}});
  }
  return {{"min", a.min},
          {"max", a.max},
          {"metric", AutoscaleMetricName(a.metric)},
          {"target", a.target},
          {"scale_down_stabilization_seconds", a.scale_down_stabilization_seconds},
          {"schedule", std::move(schedule)}};
}

}  // namespace

std::string_view GroupStateName(GroupState s) {
  switch (s) {
    case GroupState::kWaiting:
      return "waiting";
    case GroupState::kRunning:
      return "running";
    case GroupState::kSucceeded:
      return "succeeded";
    case GroupState::kFailed:
      return "failed";
    case GroupState::kDeleted:
      return "deleted";
  }
  return "waiting";
}

std::optional<GroupState> ParseGroupState(std::string_view s) {
  for (GroupState g : {GroupState::kWaiting, GroupState::kRunning, GroupState::kSucceeded,
                       GroupState::kFailed, GroupState::kDeleted}) {
    if (GroupStateName(g) == s) return g;
  }
  return std::nullopt;
}

Result<GroupRequest> ReadGroupRequest(JsonFields& f, const nlohmann::json& body, Secrets form) {
  f.RejectUnknown({"name", "template", "size", "placement", "topology", "min_available", "restart",
                   "autoscale", "elastic", "service"});
  GroupRequest r;
  r.name = f.String("name", false);
  if (!r.name.empty() && !IsValidIdBody(r.name)) f.Fail("name", kNameRule);
  r.size = static_cast<int>(f.Int("size", 1, kMaxGroupSize));
  r.min_available = static_cast<int>(f.Int("min_available", 1, kMaxGroupSize, false, 0));
  if (f.ok() && r.min_available > r.size) {
    f.Fail("min_available", fmt::format("is {}, more than the size {}", r.min_available, r.size));
  }
  const std::string placement = f.String("placement", false, "pack");
  if (auto p = ParsePlacement(placement)) {
    r.placement = *p;
  } else if (f.ok()) {
    f.Fail("placement", fmt::format("'{}' is not pack or spread", Quote(placement, 32)));
  }
  const std::string topology = f.String("topology", false, "any");
  if (auto t = ParseTopology(topology)) {
    r.topology = *t;
  } else if (f.ok()) {
    f.Fail("topology", fmt::format("'{}' is not nvlink, node or any", Quote(topology, 32)));
  }
  r.restart = f.Bool("restart", false, true);
  r.autoscale = ReadAutoscale(f, body);
  if (r.autoscale && f.ok() && (r.size < r.autoscale->min || r.size > r.autoscale->max)) {
    f.Fail("size", fmt::format("{} is outside autoscale's [min, max] = [{}, {}]", r.size,
                               r.autoscale->min, r.autoscale->max));
  }
  if (f.ok()) r.elastic = ReadElastic(f, body, r.size, r.autoscale);
  r.service = ReadService(f);
  JsonFields t = f.Object("template");
  if (!t.absent()) {
    auto member = ReadCreateInstance(t, body["template"], form);
    if (!member.ok() && f.ok()) return member.status().WithPrefix("field 'template'");
    if (member.ok()) r.member = std::move(*member);
  }
  if (r.service && f.ok() &&
      std::find(r.member.ports.begin(), r.member.ports.end(), r.service->port) ==
          r.member.ports.end()) {
    f.Fail("service.port", fmt::format("{} is not one of the template's ports", r.service->port));
  }
  if (r.autoscale && r.autoscale->metric == AutoscaleMetric::kRps && !r.service && f.ok()) {
    f.Fail("autoscale.metric", "rps needs a service");
  }
  TESSERA_RETURN_IF_ERROR(f.status());
  if (r.min_available == 0) r.min_available = r.size;
  return r;
}

nlohmann::json ToJson(const Group& g, Secrets secrets) {
  nlohmann::json j = {{"id", g.id},
                      {"tenant", g.tenant.str()},
                      {"name", g.spec.name.empty() ? g.id : g.spec.name},
                      {"template", ToJson(g.spec.member, secrets)},
                      {"size", g.spec.size},
                      {"min_available", g.spec.min_available},
                      {"placement", PlacementName(g.spec.placement)},
                      {"topology", TopologyName(g.spec.topology)},
                      {"restart", g.spec.restart},
                      {"state", GroupStateName(g.state)},
                      {"restarts", g.restarts},
                      {"members", g.members},
                      {"seq", g.seq},
                      {"created_at", FormatRfc3339(g.created_at)},
                      {"updated_at", FormatRfc3339(g.updated_at)}};
  if (!g.reason.empty()) j["reason"] = g.reason;
  if (!g.draining.empty()) j["draining"] = g.draining;
  // Its members are made as this user's (their quota, their ledger lines).
  if (!g.spec.member.user.empty()) j["created_by"] = g.spec.member.user;
  if (g.spec.autoscale) j["autoscale"] = AutoscaleJson(*g.spec.autoscale);
  if (g.spec.service) {
    j["service"] = {{"port", g.spec.service->port},
                    {"health_path", g.spec.service->health_path},
                    {"path", fmt::format("/v1/groups/{}/service/", g.id)}};
  }
  j["elastic"] = g.spec.elastic
                     ? nlohmann::json{{"min", g.spec.elastic->min}, {"max", g.spec.elastic->max}}
                     : nlohmann::json(false);
  return j;
}

Result<Group> GroupFromJson(const nlohmann::json& j, const std::string& where) {
  JsonFields f(j, where);
  Group g;
  g.id = f.String("id");
  auto tenant = TenantId::Parse(f.String("tenant"));
  // The request's fields, read as POST /v1/groups reads them.
  nlohmann::json request = nlohmann::json::object();
  for (const char* key : {"name", "template", "size", "placement", "topology", "min_available",
                          "restart", "autoscale", "elastic", "service"}) {
    if (j.is_object() && j.contains(key)) request[key] = j[key];
  }
  JsonFields rf(request, where);
  auto spec = ReadGroupRequest(rf, request, Secrets::kStored);
  const auto state = ParseGroupState(f.String("state"));
  g.restarts = static_cast<int>(f.Int("restarts", 0, INT32_MAX));
  g.members = f.Strings("members");
  g.draining = f.Strings("draining", false);
  g.seq = f.Int("seq", 0, INT64_MAX);
  g.reason = f.String("reason", false);
  auto created = ParseRfc3339(f.String("created_at"));
  auto updated = ParseRfc3339(f.String("updated_at"));
  if (!state) f.Fail("state", "is not a known group state");
  if (!tenant.ok()) f.Fail("tenant", tenant.status().message());
  if (!created.ok() || !updated.ok()) f.Fail("created_at", "is not an RFC 3339 time");
  if (!f.ok() || !spec.ok()) {
    return Status::DataLoss(!f.ok() ? f.status().message() : spec.status().message());
  }
  g.tenant = *tenant;
  g.spec = std::move(*spec);
  g.spec.member.user = j.value("created_by", "");
  g.state = *state;
  g.created_at = *created;
  g.updated_at = *updated;
  return g;
}

}  // namespace tessera::core
