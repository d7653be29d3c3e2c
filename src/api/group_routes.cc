// Instance groups (docs/groups.md): gangs of instances placed all or nothing.
#include <fmt/format.h>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "api/stacks.h"
#include "common/text.h"
#include "core/core.h"

namespace tessera::api {

using nlohmann::json;

Result<core::GroupRequest> ParseCreateGroup(const json& body) {
  JsonFields f(body, "body");
  Result<core::GroupRequest> r = core::ReadGroupRequest(f, body);
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return r;
}

namespace {

// PATCH /v1/groups/{id}: {size?, autoscale?}, at least one; `"autoscale": null` removes it.
Result<core::GroupPatch> ParsePatch(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"size", "autoscale"});
  core::GroupPatch p;
  if (body.contains("size")) p.size = static_cast<int>(f.Int("size", 1, core::kMaxGroupSize));
  if (body.contains("autoscale")) {
    p.autoscale.emplace();  // null: removed.
    if (!body["autoscale"].is_null()) *p.autoscale = core::ReadAutoscale(f, body);
  }
  if (f.ok() && !p.size && !p.autoscale) {
    f.Fail("size", "is missing (give a size, an autoscale, or both)");
  }
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return p;
}

// PUT /v1/groups/{id}/backlog: {pending}.
Result<int64_t> ParseBacklog(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"pending"});
  const int64_t pending = f.Int("pending", 0, int64_t{1} << 40);
  TESSERA_RETURN_IF_ERROR(BodyStatus(f));
  return pending;
}

std::string GroupId(const core::GroupStatus& g) { return g.group.id; }

// A group as the API shows it: its record without the template's registry password, each member
// of its current attempt, and its autoscaler's state.
json GroupJson(const core::GroupStatus& st) {
  const core::Group& g = st.group;
  json j = core::ToJson(g, core::Secrets::kHidden);
  j.erase("seq");
  json members = json::array();
  for (const core::GroupMemberStatus& m : st.members) {
    json mj = {{"instance", m.instance}};
    if (m.known) {
      mj["rank"] = m.rank;
      mj["state"] = core::StateName(m.state);
      mj["node"] = m.node.empty() ? json() : json(m.node);
    }
    members.push_back(std::move(mj));
  }
  j["members"] = std::move(members);
  j["placed"] = st.placed;
  if (g.spec.autoscale) {
    json status = {{"desired", g.desired > 0 ? g.desired : g.spec.size},
                   {"floor", g.floor > 0 ? g.floor : g.spec.autoscale->min},
                   {"scale_ups", g.scale_ups},
                   {"scale_downs", g.scale_downs}};
    if (g.metric_value) status["value"] = *g.metric_value;
    if (g.backlog) status["backlog"] = *g.backlog;
    if (!g.decision.empty()) status["last_decision"] = g.decision;
    j["autoscale_status"] = std::move(status);
  }
  return j;
}

// A group that ended and left memory, from the store, as its owner or the admin sees it;
// NotFound as for an unknown one.
Result<json> ArchivedGroup(core::Core& core, const core::Tenant& caller, const std::string& id) {
  const Status unknown = Status::NotFound(fmt::format("group '{}' not found", Quote(id)));
  TESSERA_ASSIGN_OR_RETURN(auto record,
                           core.store().GetSetting(std::string(core::GroupTable::kPrefix) + id));
  if (!record) return unknown;
  TESSERA_ASSIGN_OR_RETURN(json doc, ParseJson(*record, "stored group " + id));
  TESSERA_ASSIGN_OR_RETURN(core::Group g, core::GroupFromJson(doc, "stored group " + id));
  if (!caller.admin && g.tenant != caller.id) return unknown;
  json j = core::ToJson(g, core::Secrets::kHidden);
  j.erase("seq");
  return j;
}

}  // namespace

void AddGroupRoutes(Api& table) {
  table.Add("POST", "/v1/groups", Access::kTenant, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<core::GroupRequest> req = call->body_status.ok()
                                                   ? ParseCreateGroup(call->body)
                                                   : Result<core::GroupRequest>(call->body_status);
              if (req.ok()) req->member.user = call->principal.user;
              api.Run<core::GroupStatus>(
                  call, req.status(),
                  {[req](core::State& s, store::Batch& b, const core::Tenant& caller) {
                     return s.groups().Create(caller, *req, b);
                   },
                   201, GroupJson, GroupId});
            });
  table.Add("GET", "/v1/groups", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<json>(
                  call, Status::Ok(),
                  {[](core::State& s, store::Batch&, const core::Tenant& caller) -> Result<json> {
                     json list = json::array();
                     for (const core::GroupStatus& g : s.groups().List(caller)) {
                       json j = GroupJson(g);
                       AddStackOwner(s, "group", j);
                       list.push_back(std::move(j));
                     }
                     return json{{"groups", std::move(list)}};
                   },
                   200, Passthrough, nullptr});
            });
  table.Add("GET", "/v1/groups/{id}", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              core::Core* core = &api.core();
              api.Run<json>(call, Status::Ok(),
                            {[call, core](core::State& s, store::Batch&,
                                          const core::Tenant& caller) -> Result<json> {
                               auto g = s.groups().Get(caller, call->params[0]);
                               if (g.ok()) {
                                 json j = GroupJson(*g);
                                 AddStackOwner(s, "group", j);
                                 return j;
                               }
                               if (g.status().code() != StatusCode::kNotFound) return g.status();
                               // Ended long enough ago to have left memory: the store still has it.
                               return ArchivedGroup(*core, caller, call->params[0]);
                             },
                             200, Passthrough, nullptr});
            });
  table.Add("PATCH", "/v1/groups/{id}", Access::kAnyToken, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<core::GroupPatch> patch = call->body_status.ok()
                                                   ? ParsePatch(call->body)
                                                   : Result<core::GroupPatch>(call->body_status);
              api.Run<core::GroupStatus>(
                  call, patch.status(),
                  {[call, patch](core::State& s, store::Batch& b, const core::Tenant& caller) {
                     return s.groups().Patch(caller, call->params[0], *patch, b);
                   },
                   200, GroupJson, GroupId});
            });
  table.Add("PUT", "/v1/groups/{id}/backlog", Access::kAnyToken, BodyKind::kJson, false,
            [](Api& api, std::shared_ptr<Call> call) {
              Result<int64_t> pending = call->body_status.ok() ? ParseBacklog(call->body)
                                                               : Result<int64_t>(call->body_status);
              api.Run<core::GroupStatus>(
                  call, pending.status(),
                  {[call, pending](core::State& s, store::Batch&, const core::Tenant& caller) {
                     return s.groups().SetBacklog(caller, call->params[0], *pending);
                   },
                   200, GroupJson, nullptr});
            });
  table.Add("DELETE", "/v1/groups/{id}", Access::kAnyToken, BodyKind::kNone, true,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Run<core::GroupStatus>(
                  call, Status::Ok(),
                  {[call](core::State& s, store::Batch& b, const core::Tenant& caller) {
                     return s.groups().Delete(caller, call->params[0], b);
                   },
                   200, GroupJson, GroupId});
            });
}

}  // namespace tessera::api
