// Instances (docs/api.md, "Instances").
#include <fmt/format.h>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "api/stacks.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;

json Render(const core::Instance& i) { return core::ToJson(i); }
std::string AuditTarget(const core::Instance& i) { return i.id.str(); }

// The path's instance id, or the 404 to answer for text that no instance id could be.
Result<std::string> InstanceIdParam(const Call& call) {
  const std::string& id = call.params[0];
  if (!InstanceId::Parse(id).ok()) return core::InstanceNotFound(id);
  return id;
}

// An instance that left the working set, read from the store; NotFound as for an unknown one.
Result<core::Instance> Archived(core::Core& core, const core::State& s, const core::Tenant& caller,
                                const std::string& id) {
  const Status unknown = core::InstanceNotFound(id);
  TESSERA_ASSIGN_OR_RETURN(auto record, core.store().GetInstance(id));
  if (!record) return unknown;
  TESSERA_ASSIGN_OR_RETURN(json doc, ParseJson(record->doc, "stored instance " + id));
  TESSERA_ASSIGN_OR_RETURN(core::StoredInstance stored, core::FromStoredJson(doc, s.fleet()));
  if (!core::Visible(caller, stored.instance)) return unknown;
  return stored.instance;
}

// PATCH /v1/instances/{id}: {labels?, annotations?}, at least one.
struct RelabelRequest {
  std::optional<std::map<std::string, std::string>> labels, annotations;
};

Result<RelabelRequest> ParseRelabel(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"labels", "annotations"});
  RelabelRequest r;
  if (body.contains("labels")) r.labels = f.StringMap("labels");
  if (body.contains("annotations")) r.annotations = f.StringMap("annotations");
  if (f.ok() && !r.labels && !r.annotations) {
    f.Fail("labels", "is missing (give labels, annotations, or both)");
  }
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  if (r.labels) TESSERA_RETURN_IF_ERROR(core::ValidateLabels(*r.labels));
  if (r.annotations) TESSERA_RETURN_IF_ERROR(core::ValidateAnnotations(*r.annotations));
  return r;
}

}  // namespace

void AddInstanceRoutes(Api& table) {
  table.Add("POST", "/v1/instances", Access::kTenant, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<core::CreateInstanceRequest> req =
                  call->body_status.ok() ? ParseCreateInstance(call->body)
                                         : Result<core::CreateInstanceRequest>(call->body_status);
              if (req.ok()) req->user = call->principal.user;
              api.Run<core::Instance>(
                  call, req.status(),
                  {[req](core::State& s, store::Batch& b, const core::Tenant& caller) {
                     return s.instances().Create(caller, *req, b);
                   },
                   201, Render, AuditTarget});
            });
  table.Add("GET", "/v1/instances?limit&page_token&state&label_selector", Access::kAnyToken,
            BodyKind::kNone, false, [](Api& api, std::shared_ptr<Call> call) {
              core::ListQuery query;
              Status refusal = PageParams(call->request.parsed, query.after_seq, query.limit);
              if (const std::string* text = call->request.parsed.Param("state")) {
                query.state = core::ParseState(*text);
                if (*text == "pulling") {
                  // Shown for a scheduled instance whose image its agent is pulling.
                  query.state = core::InstanceState::kScheduled;
                  query.pulling = true;
                }
                if (!query.state) {
                  refusal = Status::InvalidArgument(fmt::format(
                      "query parameter 'state': '{}' is not an instance state", Quote(*text)));
                }
              }
              if (const std::string* text = call->request.parsed.Param("label_selector")) {
                auto parsed = core::ParseLabelSelector(*text);
                if (parsed.ok()) {
                  query.selector = std::move(*parsed);
                } else {
                  refusal = parsed.status();
                }
              }
              api.Run<json>(call, refusal,
                            {[query](core::State& s, store::Batch&,
                                     const core::Tenant& caller) -> Result<json> {
                               const core::InstancePage page = s.views().List(caller, query);
                               json out = json::array();
                               for (const auto& i : page.items) {
                                 json j = core::ToJson(i);
                                 AddStackOwner(s, "instance", j);
                                 out.push_back(std::move(j));
                               }
                               json j = {{"instances", std::move(out)}};
                               if (page.next_after)
                                 j["next_page_token"] = PageToken(*page.next_after);
                               return j;
                             },
                             200, Passthrough, nullptr});
            });
  table.Add("GET", "/v1/instances/{id}", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              auto id = InstanceIdParam(*call);
              if (!id.ok()) return api.ReplyError(*call, id.status());
              core::Core* core = &api.core();
              api.Run<json>(call, Status::Ok(),
                            {[id = *id, core](core::State& s, store::Batch&,
                                              const core::Tenant& caller) -> Result<json> {
                               auto inst = s.views().Get(caller, id);
                               // Ended long enough ago to have left memory: the store still has it.
                               if (!inst.ok() && inst.status().code() == StatusCode::kNotFound) {
                                 inst = Archived(*core, s, caller, id);
                               }
                               if (!inst.ok()) return inst.status();
                               json j = core::ToJson(*inst);
                               AddStackOwner(s, "instance", j);
                               return j;
                             },
                             200, Passthrough, nullptr});
            });
  table.Add("GET", "/v1/instances/{id}/logs?tail&after", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              auto id = InstanceIdParam(*call);
              if (!id.ok()) return api.ReplyError(*call, id.status());
              int64_t tail = 1000;
              int64_t after = -1;  // None: the last `tail` lines.
              Status refusal = IntParam(call->request.parsed, "tail", 1, 100'000, tail);
              if (refusal.ok())
                refusal = IntParam(call->request.parsed, "after", 0, INT64_MAX, after);
              if (!refusal.ok()) return api.ReplyError(*call, refusal);
              Api* a = &api;
              api.core().Submit<core::InstanceViews::LogSlice>(
                  [call, id = *id, tail, after](
                      core::State& s, store::Batch&) -> Result<core::InstanceViews::LogSlice> {
                    TESSERA_ASSIGN_OR_RETURN(const core::Tenant* caller,
                                             s.tenants().Authenticate(call->token_hash));
                    return s.views().Log(*caller, id, static_cast<size_t>(tail),
                                         after < 0 ? std::nullopt : std::optional(after));
                  },
                  [call, a](Result<core::InstanceViews::LogSlice> slice) {
                    if (!slice.ok()) return a->ReplyError(*call, slice.status());
                    call->responder.SendLater([call, a, slice = std::move(*slice)] {
                      HttpResponse r;
                      r.content_type = "text/plain; charset=utf-8";
                      r.body = ToValidUtf8(slice.text);
                      // Where to follow from, and whether there is more to follow.
                      r.headers.emplace_back("X-Log-Offset", std::to_string(slice.end));
                      r.headers.emplace_back("X-Instance-State",
                                             std::string(core::StateName(slice.state)));
                      a->metrics().CountRequest(call->request.method, call->route, 200);
                      return r;
                    });
                  });
            });
  // Labels and annotations change in place: each given replaces the whole map, as a stack's
  // apply sets them.
  table.Add("PATCH", "/v1/instances/{id}", Access::kTenant, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              auto id = InstanceIdParam(*call);
              Result<RelabelRequest> req = !id.ok() ? Result<RelabelRequest>(id.status())
                                           : call->body_status.ok()
                                               ? ParseRelabel(call->body)
                                               : Result<RelabelRequest>(call->body_status);
              api.Run<core::Instance>(
                  call, req.status(),
                  {[id, req](core::State& s, store::Batch& b,
                             const core::Tenant& caller) -> Result<core::Instance> {
                     TESSERA_ASSIGN_OR_RETURN(core::Instance now, s.views().Get(caller, *id));
                     return s.instances().Relabel(caller, *id, req->labels.value_or(now.labels),
                                                  req->annotations.value_or(now.annotations), b);
                   },
                   200, Render, AuditTarget});
            });
  table.Add("DELETE", "/v1/instances/{id}", Access::kAnyToken, BodyKind::kNone, true,
            [](Api& api, std::shared_ptr<Call> call) {
              auto id = InstanceIdParam(*call);
              api.Run<core::Instance>(
                  call, id.status(),
                  {[id](core::State& s, store::Batch& b, const core::Tenant& caller) {
                     return s.instances().Delete(caller, *id, b);
                   },
                   200, Render, AuditTarget});
            });
}

}  // namespace tessera::api
