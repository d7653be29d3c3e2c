#include "api/codec.h"

#include <fmt/format.h>

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
  return e;
}

json ErrorBody(const std::string& code, const std::string& message) {
  return {{"error", {{"code", code}, {"message", message}}}};
}

// JsonFields prefixes errors with "body: field 'x': ..."; the API names the field plainly.
Status BodyStatus(const JsonFields& f) { return f.body_error(); }

namespace {

constexpr std::string_view kNameRule =
    "must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit";

// A quota in GPUs (fractions allowed), as milli-GPU.
int64_t QuotaMilli(JsonFields& f, bool required) {
  JsonFields q = f.Object("quota", required);
  q.RejectUnknown({"gpus"});
  const double gpus = q.Number("gpus", 0, 1e6, !q.absent());
  return static_cast<int64_t>(gpus * 1000 + 0.5);
}

}  // namespace

Result<CreateTenantRequest> ParseCreateTenant(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"name", "quota"});
  CreateTenantRequest r;
  r.name = f.String("name");
  if (f.ok() && !IsValidIdBody(r.name)) f.Fail("name", kNameRule);
  r.quota_gpu_milli = QuotaMilli(f, /*required=*/false);
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

Result<UpdateTenantRequest> ParseUpdateTenant(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"quota", "disabled"});
  UpdateTenantRequest r;
  if (body.is_object() && body.contains("quota")) r.quota_gpu_milli = QuotaMilli(f, true);
  if (body.is_object() && body.contains("disabled")) r.disabled = f.Bool("disabled");
  if (f.ok() && !r.quota_gpu_milli && !r.disabled) {
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
  f.RejectUnknown({"billing", "name", "command", "restart", "stop_grace_seconds", "labels",
                   "annotations", "instance_type", "gpu_model", "gpus", "mig_profile", "milli_gpu",
                   "gpu_memory_mib", "vcpus", "memory_mib", "nvlink"});
  core::CreateInstanceRequest r;
  const std::string billing = f.String("billing");
  if (f.ok()) {
    if (auto b = core::ParseBilling(billing)) {
      r.billing = *b;
    } else {
      f.Fail("billing", fmt::format("'{}' is not on_demand, reserved or spot", Quote(billing)));
    }
  }
  r.name = f.String("name", false);
  if (!r.name.empty() && !IsValidIdBody(r.name)) f.Fail("name", kNameRule);
  r.command = f.String("command", false);
  if (r.command.size() > kMaxCommandBytes) {
    f.Fail("command", fmt::format("is {} bytes; at most {}", r.command.size(), kMaxCommandBytes));
  }
  r.restart = f.Bool("restart", false, true);
  r.stop_grace_seconds = static_cast<int>(f.Int("stop_grace_seconds", 0, 3600, false, 10));
  r.labels = f.StringMap("labels", false);
  r.annotations = f.StringMap("annotations", false);
  if (f.ok()) {
    for (const Status& s :
         {core::ValidateLabels(r.labels), core::ValidateAnnotations(r.annotations)}) {
      if (!s.ok()) return s;
    }
  }
  r.instance_type = f.String("instance_type", false);
  const bool custom = body.is_object() && body.contains("gpu_model");
  if (!r.instance_type.empty() && custom) {
    f.Fail("instance_type", "give either instance_type or gpu_model, not both");
  } else if (r.instance_type.empty() && !custom && f.ok()) {
    f.Fail("instance_type", "is required unless the shape is given with gpu_model");
  } else if (custom) {
    core::Shape& s = r.shape;
    s.gpu_model = f.String("gpu_model");
    s.vcpus = f.Int("vcpus", 1, 4096);
    s.memory_mib = f.Int("memory_mib", 1, int64_t{64} << 20);
    s.nvlink = f.Bool("nvlink", false);
    const int kinds = int(body.contains("gpus")) + int(body.contains("mig_profile")) +
                      int(body.contains("milli_gpu"));
    if (kinds != 1) {
      f.Fail("gpus", "give exactly one of gpus, mig_profile or milli_gpu");
    } else if (body.contains("gpus")) {
      s.mode = catalog::SharingMode::kExclusive;
      s.gpus = static_cast<int>(f.Int("gpus", 1, fleet::kMaxGpusPerNode));
    } else if (body.contains("mig_profile")) {
      s.mode = catalog::SharingMode::kMig;
      s.mig_profile = f.String("mig_profile");
    } else {
      s.mode = catalog::SharingMode::kShared;
      s.milli_gpu = static_cast<int>(f.Int("milli_gpu", 1, 999));
      s.gpu_memory_mib = f.Int("gpu_memory_mib", 0, int64_t{1} << 30, false);
    }
    if (s.mode != catalog::SharingMode::kShared && body.contains("gpu_memory_mib")) {
      f.Fail("gpu_memory_mib", "applies only to milli_gpu shares");
    }
  }
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

json InstanceTypesJson(const catalog::Catalog& catalog) {
  json out = json::array();
  for (const auto& it : catalog.instance_types()) {
    json j = {{"id", it.id},
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
    json gpus = json::array();
    for (size_t i = 0; i < n.gpus.size(); ++i) {
      const fleet::Gpu& g = n.gpus[i];
      json gj = {
          {"index", i}, {"mode", catalog::SharingModeName(g.mode)}, {"free_milli", g.free_milli}};
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

}  // namespace tessera::api
