// Users inside a tenant and their tokens (docs/users.md). The operator manages any tenant's
// users; a tenant's owners manage their own tenant's. Any user makes, lists and revokes its own
// tokens; an owner those of every user of its tenant. A token is shown once, when it is made.
#include <fmt/format.h>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;

// The most a token may live: a year, or less.
constexpr int64_t kMaxTokenSeconds = 366 * 24 * 3600;

struct CreateUserRequest {
  std::string name;
  core::Role role = core::Role::kMember;
  std::optional<int64_t> quota_gpu_milli;
};

struct TokenRequest {
  std::string name;
  std::optional<int64_t> expires_in_seconds;
  bool read_only = false;
};

core::Role ReadRole(JsonFields& f, core::Role fallback) {
  const std::string text = f.String("role", false, std::string(core::RoleName(fallback)));
  auto role = core::ParseRole(text);
  if (!role) {
    f.Fail("role", fmt::format("'{}' is not viewer, member or owner", Quote(text, 32)));
    return fallback;
  }
  return *role;
}

// `quota`: {"gpus": N} sets the user's own quota, null removes it.
std::optional<std::optional<int64_t>> ReadUserQuota(JsonFields& f, const json& body) {
  if (!body.contains("quota")) return std::nullopt;
  if (body["quota"].is_null()) return std::optional<int64_t>();
  JsonFields q = f.Object("quota");
  if (q.absent()) return std::nullopt;
  q.RejectUnknown({"gpus"});
  return std::optional<int64_t>(ReadGpus(q, "gpus"));
}

Result<CreateUserRequest> ParseCreateUser(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"name", "role", "quota"});
  CreateUserRequest r;
  r.name = f.String("name");
  r.role = ReadRole(f, core::Role::kMember);
  if (auto quota = ReadUserQuota(f, body)) r.quota_gpu_milli = *quota;
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

Result<core::UserUpdate> ParseUpdateUser(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"role", "disabled", "quota"});
  core::UserUpdate u;
  if (body.contains("role")) u.role = ReadRole(f, core::Role::kMember);
  if (body.contains("disabled")) u.disabled = f.Bool("disabled");
  u.quota_gpu_milli = ReadUserQuota(f, body);
  if (f.ok() && !u.role && !u.disabled && !u.quota_gpu_milli) {
    f.Fail("role", "give role, disabled or quota");
  }
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return u;
}

Result<TokenRequest> ParseTokenRequest(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"name", "expires_in_seconds", "read_only"});
  TokenRequest r;
  r.name = f.String("name", false);
  if (r.name.size() > 64 || !IsPrintableAscii(r.name)) {
    f.Fail("name", "must be at most 64 printable ASCII characters");
  }
  if (body.contains("expires_in_seconds")) {
    r.expires_in_seconds = f.Int("expires_in_seconds", 1, kMaxTokenSeconds);
  }
  r.read_only = f.Bool("read_only", false, false);
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

// User `ref` (an id or a name) of tenant `id`, as `caller` may see them.
Result<const core::User*> UserAt(const core::State& s, const core::Tenant& caller,
                                 const std::string& id, const std::string& ref) {
  TESSERA_ASSIGN_OR_RETURN(const core::Tenant* t, VisibleTenant(s, caller, id));
  const core::User* u = s.tenants().users().Lookup(t->id, ref);
  if (!u) {
    return Status::NotFound(
        fmt::format("user '{}' not found in tenant '{}'", Quote(ref), t->id.str()));
  }
  return u;
}

// A user's tokens are its own to manage, and its tenant's owners' (and the operator's).
Status MayManageTokensOf(const core::Principal& who, const core::User& u) {
  if (who.admin || who.role == core::Role::kOwner || who.user == u.id) return Status::Ok();
  return Status::PermissionDenied(fmt::format(
      "the tokens of user '{}' are its own and its tenant's owners' to manage; user '{}' has role "
      "{}",
      u.name, who.user_name, core::RoleName(who.role)));
}

json UserJson(const core::State& s, const core::User& u) {
  return core::ToJson(u, s.instances().UserGpuMilli(u.id));
}

}  // namespace

void AddUserRoutes(Api& table) {
  table.Add(
      "POST", "/v1/tenants/{id}/users", Access::kAnyToken, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        Result<CreateUserRequest> req = call->body_status.ok()
                                            ? ParseCreateUser(call->body)
                                            : Result<CreateUserRequest>(call->body_status);
        const std::string id = call->params[0];
        api.Run<json>(
            call, req.status(),
            {[req, id](core::State& s, store::Batch& b,
                       const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(const core::Tenant* t, VisibleTenant(s, caller, id));
               TESSERA_ASSIGN_OR_RETURN(
                   core::User u,
                   s.tenants().CreateUser(t->id, req->name, req->role, req->quota_gpu_milli, b));
               return UserJson(s, u);
             },
             201, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kOwner);
  table.Add("GET", "/v1/tenants/{id}/users", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              const std::string id = call->params[0];
              api.Run<json>(
                  call, Status::Ok(),
                  {[id](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     TESSERA_ASSIGN_OR_RETURN(const core::Tenant* t, VisibleTenant(s, caller, id));
                     json list = json::array();
                     for (const core::User* u : s.tenants().users().List(t->id)) {
                       list.push_back(UserJson(s, *u));
                     }
                     return json{{"users", std::move(list)}};
                   },
                   200, Passthrough, nullptr});
            });
  table.Add(
      "GET", "/v1/tenants/{id}/users/{user}", Access::kAnyToken, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        const std::string id = call->params[0], ref = call->params[1];
        api.Run<json>(
            call, Status::Ok(),
            {[id, ref](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(const core::User* u, UserAt(s, caller, id, ref));
               return UserJson(s, *u);
             },
             200, Passthrough, nullptr});
      });
  table.Add(
      "PATCH", "/v1/tenants/{id}/users/{user}", Access::kAnyToken, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        Result<core::UserUpdate> req = call->body_status.ok()
                                           ? ParseUpdateUser(call->body)
                                           : Result<core::UserUpdate>(call->body_status);
        const std::string id = call->params[0], ref = call->params[1];
        api.Run<json>(call, req.status(),
                      {[req, id, ref](core::State& s, store::Batch& b,
                                      const core::Tenant& caller) -> Result<json> {
                         TESSERA_ASSIGN_OR_RETURN(const core::User* u, UserAt(s, caller, id, ref));
                         TESSERA_ASSIGN_OR_RETURN(core::User updated,
                                                  s.tenants().UpdateUser(u->id, *req, b));
                         return UserJson(s, updated);
                       },
                       200, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kOwner);
  table.Add(
      "DELETE", "/v1/tenants/{id}/users/{user}", Access::kAnyToken, BodyKind::kNone, true,
      [](Api& api, std::shared_ptr<Call> call) {
        const std::string id = call->params[0], ref = call->params[1];
        api.Run<json>(call, Status::Ok(),
                      {[id, ref](core::State& s, store::Batch& b,
                                 const core::Tenant& caller) -> Result<json> {
                         TESSERA_ASSIGN_OR_RETURN(const core::User* u, UserAt(s, caller, id, ref));
                         const std::string user = u->id;
                         TESSERA_RETURN_IF_ERROR(s.tenants().DeleteUser(user, b));
                         return json{{"id", user}, {"deleted", true}};
                       },
                       200, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kOwner);
  // A user's own tokens: any role may make (a viewer's read nothing more than it may), list and
  // revoke its own; an owner any user's of its tenant.
  table.Add(
      "POST", "/v1/tenants/{id}/users/{user}/tokens", Access::kAnyToken, BodyKind::kOptionalJson,
      true,
      [](Api& api, std::shared_ptr<Call> call) {
        Result<TokenRequest> req = call->body_status.ok() ? ParseTokenRequest(call->body)
                                                          : Result<TokenRequest>(call->body_status);
        auto token = NewToken();
        if (!token.ok()) return api.ReplyError(*call, token.status());
        const std::string id = call->params[0], ref = call->params[1];
        const core::Principal who = call->principal;
        api.Run<json>(
            call, req.status(),
            {[req, token, id, ref, who](core::State& s, store::Batch& b,
                                        const core::Tenant& caller) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(const core::User* u, UserAt(s, caller, id, ref));
               TESSERA_RETURN_IF_ERROR(MayManageTokensOf(who, *u));
               std::optional<Time> expires;
               if (req->expires_in_seconds) {
                 expires = s.clock().Now() + std::chrono::seconds(*req->expires_in_seconds);
               }
               TESSERA_ASSIGN_OR_RETURN(core::UserToken made,
                                        s.tenants().AddUserToken(u->id, token->second, req->name,
                                                                 expires, req->read_only, b));
               json j = core::ToJson(made);
               j["user"] = u->id;
               j["token"] = token->first;  // Shown this once; only its hash is stored.
               return j;
             },
             201, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kViewer);
  table.Add("GET", "/v1/tenants/{id}/users/{user}/tokens", Access::kAnyToken, BodyKind::kNone,
            false, [](Api& api, std::shared_ptr<Call> call) {
              const std::string id = call->params[0], ref = call->params[1];
              const core::Principal who = call->principal;
              api.Run<json>(call, Status::Ok(),
                            {[id, ref, who](core::State& s, store::Batch&,
                                            const core::Tenant& caller) -> Result<json> {
                               TESSERA_ASSIGN_OR_RETURN(const core::User* u,
                                                        UserAt(s, caller, id, ref));
                               TESSERA_RETURN_IF_ERROR(MayManageTokensOf(who, *u));
                               json list = json::array();
                               for (const core::UserToken& k : u->tokens) {
                                 list.push_back(core::ToJson(k));
                               }
                               return json{{"tokens", std::move(list)}};
                             },
                             200, Passthrough, nullptr});
            });
  table.Add(
      "DELETE", "/v1/tenants/{id}/users/{user}/tokens/{token}", Access::kAnyToken, BodyKind::kNone,
      true,
      [](Api& api, std::shared_ptr<Call> call) {
        const std::string id = call->params[0], ref = call->params[1], tok = call->params[2];
        const core::Principal who = call->principal;
        api.Run<json>(call, Status::Ok(),
                      {[id, ref, tok, who](core::State& s, store::Batch& b,
                                           const core::Tenant& caller) -> Result<json> {
                         TESSERA_ASSIGN_OR_RETURN(const core::User* u, UserAt(s, caller, id, ref));
                         TESSERA_RETURN_IF_ERROR(MayManageTokensOf(who, *u));
                         TESSERA_RETURN_IF_ERROR(s.tenants().RevokeUserToken(u->id, tok, b));
                         return json{{"id", tok}, {"revoked", true}};
                       },
                       200, Passthrough, [](const json& j) { return j.value("id", ""); }});
      },
      core::Role::kViewer);
}

}  // namespace tessera::api
