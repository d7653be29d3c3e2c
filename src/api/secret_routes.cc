// Secrets (docs/secrets.md): a tenant's named values for its workloads. Every answer is metadata;
// no route returns a value, and no error quotes one.
#include <fmt/format.h>

#include "api/api.h"
#include "api/routes.h"
#include "common/json.h"

namespace tessera::api {

namespace {

using nlohmann::json;

struct PutSecretRequest {
  std::string name;
  std::string value;
};

// {"name", "value"} (POST) or {"value"} (PUT, the name in the path). Errors name the field and
// never quote the value.
Result<PutSecretRequest> ParsePutSecret(const json& body, bool with_name) {
  JsonFields f(body, "body");
  if (with_name) {
    f.RejectUnknown({"name", "value"});
  } else {
    f.RejectUnknown({"value"});
  }
  PutSecretRequest r;
  if (with_name) r.name = f.String("name");
  r.value = f.String("value");
  TESSERA_RETURN_IF_ERROR(f.body_error());
  return r;
}

json Metadata(const core::State& s, const core::Secret& secret) {
  json j = core::ToJson(secret);
  j["used_by"] = s.SecretUsers(secret.tenant, secret.name);
  return j;
}

// Creates (POST) or replaces (PUT) a secret of the caller's tenant.
void Put(Api& api, std::shared_ptr<Call> call, bool replace) {
  Result<PutSecretRequest> req = call->body_status.ok()
                                     ? ParsePutSecret(call->body, !replace)
                                     : Result<PutSecretRequest>(call->body_status);
  if (replace && req.ok()) req->name = call->params[0];
  const std::string user = call->principal.user;
  api.Run<json>(
      call, req.status(),
      {[req, user, replace](core::State& s, store::Batch& b,
                            const core::Tenant& caller) -> Result<json> {
         TESSERA_ASSIGN_OR_RETURN(core::Secret secret,
                                  s.PutSecret(caller, req->name, req->value, user, replace, b));
         return Metadata(s, secret);
       },
       replace ? 200 : 201, Passthrough, [](const json& j) { return j.value("name", ""); }});
}

}  // namespace

void AddSecretRoutes(Api& table) {
  table.Add(
      "POST", "/v1/secrets", Access::kTenant, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) { Put(api, std::move(call), false); },
      core::Role::kOwner);
  table.Add(
      "PUT", "/v1/secrets/{name}", Access::kTenant, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) { Put(api, std::move(call), true); },
      core::Role::kOwner);
  table.Add("GET", "/v1/secrets", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<json>(
                  call, Status::Ok(),
                  {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     json list = json::array();
                     for (const core::Secret* secret :
                          s.secrets().List(caller.admin ? "" : caller.id.str())) {
                       list.push_back(Metadata(s, *secret));
                     }
                     return json{{"secrets", std::move(list)}};
                   },
                   200, Passthrough, nullptr});
            });
  table.Add(
      "GET", "/v1/secrets/{name}", Access::kTenant, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        const std::string name = call->params[0];
        api.Run<json>(
            call, Status::Ok(),
            {[name](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(core::Secret secret, s.GetSecret(caller, name));
               return Metadata(s, secret);
             },
             200, Passthrough, nullptr});
      });
  table.Add(
      "DELETE", "/v1/secrets/{name}?force", Access::kTenant, BodyKind::kNone, true,
      [](Api& api, std::shared_ptr<Call> call) {
        const std::string name = call->params[0];
        const std::string* force_text = call->request.parsed.Param("force");
        Status refusal;
        if (force_text && *force_text != "true" && *force_text != "false") {
          refusal = Status::InvalidArgument("query parameter 'force': true or false");
        }
        const bool force = force_text && *force_text == "true";
        api.Run<json>(call, refusal,
                      {[name, force](core::State& s, store::Batch& b,
                                     const core::Tenant& caller) -> Result<json> {
                         TESSERA_RETURN_IF_ERROR(s.DeleteSecret(caller, name, force, b));
                         return json{{"name", name}, {"deleted", true}};
                       },
                       200, Passthrough, [](const json& j) { return j.value("name", ""); }});
      },
      core::Role::kOwner);
}

}  // namespace tessera::api
