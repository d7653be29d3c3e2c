// Declarative stacks (docs/stacks.md): plan, apply, state and destroy, for the CLI, the console
// and any client alike.
#include <fmt/format.h>

#include "api/api.h"
#include "api/routes.h"
#include "api/stacks.h"
#include "common/ids.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;

// The path's stack name, or the 404 to answer for text no stack could be named.
Result<std::string> StackName(const Call& call) {
  const std::string& name = call.params[0];
  if (!IsValidIdBody(name)) {
    return Status::InvalidArgument(fmt::format("stack name '{}': {}", Quote(name, 64), kNameRule));
  }
  return name;
}

StackCaller CallerOf(const Api& api, const Call& call, const core::Tenant& tenant) {
  StackCaller c;
  c.tenant = &tenant;
  c.user = call.principal.user;
  c.role = call.principal.role;
  c.allow_private_receivers = api.allow_private_receivers();
  return c;
}

std::string NameOf(const json& j) { return j.value("stack", ""); }

// POST .../plan and .../apply: the same body, one answered with the plan, the other applied.
void AddPlanOrApply(Api& table, const char* verb, bool apply) {
  table.Add("POST", fmt::format("/v1/stacks/{{name}}/{}", verb), Access::kTenant, BodyKind::kJson,
            apply, [apply](Api& api, std::shared_ptr<Call> call) {
              Result<std::string> name = StackName(*call);
              Result<StackRequest> req = !name.ok() ? Result<StackRequest>(name.status())
                                         : call->body_status.ok()
                                             ? ParseStackRequest(call->body)
                                             : Result<StackRequest>(call->body_status);
              auto shared = std::make_shared<Result<StackRequest>>(std::move(req));
              const Api* a = &api;
              api.Run<json>(
                  call, shared->status(),
                  {[a, call, shared, name, apply](core::State& s, store::Batch& b,
                                                  const core::Tenant& caller) -> Result<json> {
                     const StackCaller who = CallerOf(*a, *call, caller);
                     return apply ? ApplyStack(s, who, *name, **shared, b)
                                  : PlanStack(s, who, *name, **shared);
                   },
                   200, Passthrough, NameOf});
            });
}

}  // namespace

void AddStackRoutes(Api& table) {
  AddPlanOrApply(table, "plan", false);
  AddPlanOrApply(table, "apply", true);
  table.Add("GET", "/v1/stacks", Access::kTenant, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<json>(
                  call, Status::Ok(),
                  {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     return StackListJson(s, caller);
                   },
                   200, Passthrough, nullptr});
            });
  table.Add("GET", "/v1/stacks/{name}", Access::kTenant, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<std::string> name = StackName(*call);
              api.Run<json>(call, name.status(),
                            {[name](core::State& s, store::Batch&, const core::Tenant& caller)
                                 -> Result<json> { return StackStateJson(s, caller, *name); },
                             200, Passthrough, nullptr});
            });
  table.Add("DELETE", "/v1/stacks/{name}", Access::kTenant, BodyKind::kNone, true,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<std::string> name = StackName(*call);
              const Api* a = &api;
              api.Run<json>(call, name.status(),
                            {[a, call, name](core::State& s, store::Batch& b,
                                             const core::Tenant& caller) -> Result<json> {
                               return DestroyStack(s, CallerOf(*a, *call, caller), *name, b);
                             },
                             200, Passthrough, NameOf});
            });
}

}  // namespace tessera::api
