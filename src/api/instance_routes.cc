// Instances (docs/api.md, "Instances").
#include <fmt/format.h>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;

json Render(const core::Instance& i) { return core::ToJson(i); }
std::string AuditTarget(const core::Instance& i) { return i.id.str(); }

// The path's instance id, or the 404 to answer for text that no instance id could be.
Result<std::string> InstanceIdParam(const Call& call) {
  const std::string& id = call.params[0];
  if (!InstanceId::Parse(id).ok()) {
    std::string shown = EscapeForTerminal(std::string_view(id).substr(0, 64));
    if (id.size() > 64) shown += "...";
    return Status::NotFound(fmt::format("instance '{}' not found", shown));
  }
  return id;
}

}  // namespace

void AddInstanceRoutes(Api& table) {
  table.Add("POST", "/v1/instances", Access::kTenant, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<core::CreateInstanceRequest> req =
                  call->body_status.ok() ? ParseCreateInstance(call->body)
                                         : Result<core::CreateInstanceRequest>(call->body_status);
              api.Run<core::Instance>(
                  call, req.status(),
                  {[req](core::State& s, store::Batch& b, const core::Tenant& caller) {
                     return s.CreateInstance(caller, *req, b);
                   },
                   201, Render, AuditTarget});
            });
  table.Add("GET", "/v1/instances", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              Status refusal;
              std::optional<core::InstanceState> state;
              if (const std::string* text = call->request.parsed.Param("state")) {
                state = core::ParseState(*text);
                if (!state) {
                  refusal = Status::InvalidArgument(
                      fmt::format("query parameter 'state': '{}' is not an instance state",
                                  EscapeForTerminal(text->substr(0, 40))));
                }
              }
              core::LabelSelector selector;
              if (const std::string* text = call->request.parsed.Param("label_selector")) {
                auto parsed = core::ParseLabelSelector(*text);
                if (parsed.ok()) {
                  selector = std::move(*parsed);
                } else {
                  refusal = parsed.status();
                }
              }
              api.Run<json>(call, refusal,
                            {[state, selector](core::State& s, store::Batch&,
                                               const core::Tenant& caller) -> Result<json> {
                               json out = json::array();
                               for (const auto& i : s.ListInstances(caller, state, selector)) {
                                 out.push_back(core::ToJson(i));
                               }
                               return json{{"instances", std::move(out)}};
                             },
                             200, [](const json& j) { return j; }, nullptr});
            });
  table.Add("GET", "/v1/instances/{id}", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              auto id = InstanceIdParam(*call);
              if (!id.ok()) return api.ReplyError(*call, id.status());
              api.Run<core::Instance>(
                  call, Status::Ok(),
                  {[id = *id](core::State& s, store::Batch&, const core::Tenant& caller) {
                     return s.GetInstance(caller, id);
                   },
                   200, Render, nullptr});
            });
  table.Add("DELETE", "/v1/instances/{id}", Access::kAnyToken, BodyKind::kNone, true,
            [](Api& api, std::shared_ptr<Call> call) {
              auto id = InstanceIdParam(*call);
              api.Run<core::Instance>(
                  call, id.status(),
                  {[id](core::State& s, store::Batch& b, const core::Tenant& caller) {
                     return s.DeleteInstance(caller, *id, b);
                   },
                   200, Render, AuditTarget});
            });
}

}  // namespace tessera::api
