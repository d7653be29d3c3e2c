// Tenants and their tokens (docs/api.md, "Tenants"), and the instance types any caller may read.
#include <fmt/format.h>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "common/auth.h"

namespace tessera::api {

namespace {

using nlohmann::json;

json TenantJson(const core::State& s, const core::Tenant& t) {
  json j = core::ToJson(t, s.instances().TenantGpuMilli(t.id));
  // The cap in force, the server's default unless the tenant's own, and what counts against it.
  j["quota"]["max_pending"] = s.instances().pending().CapOf(t);
  j["usage"]["pending"] = s.instances().pending().Count(t.id.str());
  j["usage"]["volumes_gib"] = s.volumes().GibOf(t.id.str());
  return j;
}

// A new token, or the error to answer (the system's random generator failed).
}  // namespace

void AddTenantRoutes(Api& table) {
  table.Add(
      "POST", "/v1/tenants", Access::kAdmin, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        Result<CreateTenantRequest> req = call->body_status.ok()
                                              ? ParseCreateTenant(call->body)
                                              : Result<CreateTenantRequest>(call->body_status);
        auto token = NewToken();
        if (!token.ok()) return api.ReplyError(*call, token.status());
        api.Run<json>(
            call, req.status(),
            {[req, token](core::State& s, store::Batch& b, const core::Tenant&) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(
                   core::Tenant t,
                   s.tenants().Create(req->name, req->quota_gpu_milli, token->second, b,
                                      req->max_pending, req->volumes_gib));
               json j = TenantJson(s, t);
               j["token"] = token->first;  // Shown this once; only its hash is stored.
               return j;
             },
             201, Passthrough, [](const json& j) { return j.value("id", ""); }});
      });
  table.Add("GET", "/v1/tenants?limit&page_token", Access::kAdmin, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              int64_t after = 0;
              size_t limit = 0;
              Status refusal = PageParams(call->request.parsed, after, limit);
              api.Run<json>(call, refusal,
                            {[after, limit](core::State& s, store::Batch&,
                                            const core::Tenant&) -> Result<json> {
                               json out = json::array();
                               std::optional<int64_t> next;
                               for (const core::Tenant* t : s.tenants().List()) {
                                 if (core::TenantNumber(t->id.str()) <= after) continue;
                                 if (out.size() == limit) {
                                   next = core::TenantNumber(out.back()["id"].get<std::string>());
                                   break;
                                 }
                                 out.push_back(TenantJson(s, *t));
                               }
                               json j = {{"tenants", std::move(out)}};
                               if (next) j["next_page_token"] = PageToken(*next);
                               return j;
                             },
                             200, Passthrough, nullptr});
            });
  // Who the token acts for: the console's sign-in, `tessera whoami`.
  table.Add(
      "GET", "/v1/whoami", Access::kAnyToken, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        const core::Principal who = call->principal;
        api.Run<json>(
            call, Status::Ok(),
            {[who](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
               if (caller.admin) return json{{"admin", true}};
               json j = {{"admin", false}, {"tenant", TenantJson(s, caller)}};
               // The user the token acts as, with its role as it is now.
               if (const core::User* u = s.tenants().users().Find(who.user)) {
                 j["user"] = {{"id", u->id}, {"name", u->name}, {"role", core::RoleName(u->role)}};
               }
               j["read_only"] = who.read_only;
               return j;
             },
             200, Passthrough, nullptr});
      });
  table.Add("GET", "/v1/tenants/{id}", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              const std::string id = call->params[0];
              api.Run<json>(
                  call, Status::Ok(),
                  {[id](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     TESSERA_ASSIGN_OR_RETURN(const core::Tenant* t, VisibleTenant(s, caller, id));
                     return TenantJson(s, *t);
                   },
                   200, Passthrough, nullptr});
            });
  table.Add("PATCH", "/v1/tenants/{id}", Access::kAdmin, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<UpdateTenantRequest> req =
                  call->body_status.ok() ? ParseUpdateTenant(call->body)
                                         : Result<UpdateTenantRequest>(call->body_status);
              const std::string id = call->params[0];
              api.Run<json>(
                  call, req.status(),
                  {[req, id](core::State& s, store::Batch& b, const core::Tenant&) -> Result<json> {
                     TESSERA_ASSIGN_OR_RETURN(
                         core::Tenant t, s.UpdateTenant(id, req->quota_gpu_milli, req->disabled, b,
                                                        req->max_pending, req->volumes_gib));
                     return TenantJson(s, t);
                   },
                   200, Passthrough, [](const json& j) { return j.value("id", ""); }});
            });
  // A tenant rotates its own token; the admin rotates any tenant's.
  table.Add(
      "POST", "/v1/tenants/{id}/tokens", Access::kAnyToken, BodyKind::kOptionalJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        Result<RotateTokenRequest> req = call->body_status.ok()
                                             ? ParseRotateToken(call->body)
                                             : Result<RotateTokenRequest>(call->body_status);
        auto token = NewToken();
        if (!token.ok()) return api.ReplyError(*call, token.status());
        const std::string id = call->params[0];
        api.Run<json>(call, req.status(),
                      {[req, token, id](core::State& s, store::Batch& b,
                                        const core::Tenant& caller) -> Result<json> {
                         TESSERA_RETURN_IF_ERROR(VisibleTenant(s, caller, id).status());
                         TESSERA_ASSIGN_OR_RETURN(
                             core::Tenant t, s.tenants().Rotate(id, token->second, req->grace, b));
                         json j = TenantJson(s, t);
                         j["token"] = token->first;  // Shown this once.
                         return j;
                       },
                       201, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kOwner);
  table.Add(
      "GET", "/v1/instance-types", Access::kAnyToken, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        // Whether each is offered here follows the fleet, which agents join: read in a round.
        api.Run<json>(
            call, Status::Ok(),
            {[](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
               return json{{"instance_types", InstanceTypesJson(s.catalog(), [&s](const auto& t) {
                              return s.OfferedHere(t);
                            })}};
             },
             200, Passthrough, nullptr});
      });
}

}  // namespace tessera::api
