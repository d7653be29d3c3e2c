// Volumes (docs/volumes.md): a tenant's storage that outlives its instances.
#include <fmt/format.h>

#include "api/api.h"
#include "api/routes.h"
#include "common/json.h"

namespace tessera::api {

namespace {

using nlohmann::json;

json Shown(const core::State& s, const core::Volume& v) {
  return core::ToJson(v, s.mounts().Users(v.tenant, v.name));
}

// The name a volume answer is audited under.
std::string NameOf(const json& j) { return j.value("name", ""); }

}  // namespace

void AddVolumeRoutes(Api& table) {
  table.Add("POST", "/v1/volumes", Access::kTenant, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<core::Volumes::Request> req =
                  call->body_status.ok() ? core::Volumes::Parse(call->body)
                                         : Result<core::Volumes::Request>(call->body_status);
              const std::string user = call->principal.user;
              api.Run<json>(call, req.status(),
                            {[req, user](core::State& s, store::Batch& b,
                                         const core::Tenant& caller) -> Result<json> {
                               TESSERA_ASSIGN_OR_RETURN(core::Volume v,
                                                        s.CreateVolume(caller, *req, user, b));
                               return Shown(s, v);
                             },
                             201, Passthrough, NameOf});
            });
  table.Add(
      "GET", "/v1/volumes", Access::kAnyToken, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        api.Run<json>(
            call, Status::Ok(),
            {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
               json list = json::array();
               for (const core::Volume* v : s.volumes().List(caller.admin ? "" : caller.id.str())) {
                 list.push_back(Shown(s, *v));
               }
               return json{{"volumes", std::move(list)}};
             },
             200, Passthrough, nullptr});
      });
  table.Add("GET", "/v1/volumes/{name}", Access::kTenant, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              const std::string name = call->params[0];
              api.Run<json>(call, Status::Ok(),
                            {[name](core::State& s, store::Batch&,
                                    const core::Tenant& caller) -> Result<json> {
                               TESSERA_ASSIGN_OR_RETURN(core::Volume v, s.GetVolume(caller, name));
                               return Shown(s, v);
                             },
                             200, Passthrough, nullptr});
            });
  table.Add(
      "DELETE", "/v1/volumes/{name}", Access::kTenant, BodyKind::kNone, true,
      [](Api& api, std::shared_ptr<Call> call) {
        const std::string name = call->params[0];
        api.Run<json>(
            call, Status::Ok(),
            {[name](core::State& s, store::Batch& b, const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(core::Volume v, s.DeleteVolume(caller, name, b));
               json j = core::ToJson(v, {});
               // Gone at once, or once its node's agent removed its data.
               if (!s.volumes().Find(caller.id.str(), name)) j["state"] = "deleted";
               return j;
             },
             200, Passthrough, NameOf});
      });
}

}  // namespace tessera::api
