// The operator's routes (nodes, the audit log) and the health checks.
#include <fmt/format.h>

#include <charconv>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;

// A GPU's sharing mode (docs/agent.md, "Changing a GPU's mode"): {"mode": "mig" | "exclusive" |
// "shared", "allow_reset": false}. 200 when applied at once, 202 with the request its agent is
// sent (into or out of MIG).
void AddGpuModeRoute(Api& table) {
  table.Add(
      "POST", "/v1/nodes/{id}/gpus/{index}/mode", Access::kAdmin, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        catalog::SharingMode mode = catalog::SharingMode::kExclusive;
        bool allow_reset = false;
        int gpu = -1;
        Status refusal = call->body_status;
        if (refusal.ok()) {
          JsonFields f(call->body, "body");
          f.RejectUnknown({"mode", "allow_reset"});
          const std::string text = f.String("mode");
          allow_reset = f.Bool("allow_reset", false);
          if (auto m = catalog::ParseSharingMode(text)) {
            mode = *m;
          } else if (f.ok()) {
            f.Fail("mode", fmt::format("'{}' is not mig, exclusive or shared", Quote(text)));
          }
          refusal = BodyStatus(f);
        }
        const std::string& text = call->params[1];
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), gpu);
        if (refusal.ok() && (ec != std::errc() || end != text.data() + text.size() || gpu < 0)) {
          refusal = Status::InvalidArgument(
              fmt::format("field 'index': '{}' is not a GPU index (0, 1, ...)", Quote(text)));
        }
        const std::string node = call->params[0];
        api.Run<json>(call, refusal,
                      {[node, gpu, mode, allow_reset](core::State& s, store::Batch& b,
                                                      const core::Tenant&) -> Result<json> {
                         TESSERA_ASSIGN_OR_RETURN(
                             core::GpuModeChange c,
                             s.agent_hub().SetGpuMode(node, gpu, mode, allow_reset, b));
                         json j = {{"id", node},
                                   {"gpu", gpu},
                                   {"mode", catalog::SharingModeName(c.mode)},
                                   {"state", core::ModeChangeStateName(c.state)}};
                         if (!c.reason.empty()) j["reason"] = c.reason;
                         if (c.id > 0) j["request"] = c.ToJson();
                         return j;
                       },
                       200, Passthrough, [](const json& j) { return j.value("id", ""); }, nullptr,
                       [](const json& j) { return j.contains("request") ? 202 : 200; }});
      });
}

void AddNodeRoutes(Api& table) {
  table.Add(
      "GET", "/v1/nodes?limit&page_token", Access::kAdmin, BodyKind::kNone, false,
      [](Api& api, std::shared_ptr<Call> call) {
        int64_t after = 0;
        size_t limit = 0;
        Status refusal = PageParams(call->request.parsed, after, limit);
        api.Run<json>(
            call, refusal,
            {[after, limit](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
               // Nodes are listed in the fleet file's order; a token is the
               // position after which the next page starts.
               const size_t begin = static_cast<size_t>(after);
               json nodes = NodesJson(s.fleet(), begin, limit);
               for (json& n : nodes) AddAgentFields(n, AgentJson(s, n["id"].get<std::string>()));
               json j = {{"nodes", std::move(nodes)}};
               // Joined nodes whose agent has not registered yet are not in the fleet.
               json waiting = json::array();
               for (const auto& [name, node] : s.agents().nodes()) {
                 if (!node.registered()) {
                   json w = {{"id", name}};
                   AddAgentFields(w, AgentJson(s, name));
                   waiting.push_back(std::move(w));
                 }
               }
               if (!waiting.empty()) j["waiting_for_agent"] = std::move(waiting);
               if (begin + limit < s.fleet().size()) {
                 j["next_page_token"] = PageToken(static_cast<int64_t>(begin + limit));
               }
               return j;
             },
             200, Passthrough, nullptr});
      });
  table.Add("POST", "/v1/nodes", Access::kAdmin, BodyKind::kJson, true,
            [](Api& api, std::shared_ptr<Call> call) {
              std::string name;
              std::map<std::string, std::string> labels;
              catalog::SharingMode sharing = catalog::SharingMode::kExclusive;
              Status refusal = call->body_status;
              if (refusal.ok()) {
                JsonFields f(call->body, "body");
                f.RejectUnknown({"name", "labels", "sharing"});
                name = f.String("name");
                labels = f.StringMap("labels", false);
                const std::string mode = f.String("sharing", false, "exclusive");
                if (auto m = catalog::ParseSharingMode(mode)) {
                  sharing = *m;
                } else {
                  f.Fail("sharing", fmt::format("'{}' is not exclusive or shared", Quote(mode)));
                }
                refusal = BodyStatus(f);
                if (refusal.ok()) refusal = core::ValidateLabels(labels);
              }
              auto token = NewToken();
              if (!token.ok()) return api.ReplyError(*call, token.status());
              api.Run<json>(
                  call, refusal,
                  {[name, labels, sharing, token](core::State& s, store::Batch& b,
                                                  const core::Tenant&) -> Result<json> {
                     TESSERA_ASSIGN_OR_RETURN(
                         core::AgentNode node,
                         s.agent_hub().CreateNode(name, labels, sharing, token->second, b));
                     json j = {{"id", node.name},
                               {"labels", node.labels},
                               {"sharing", catalog::SharingModeName(node.sharing)},
                               {"state", "waiting_for_agent"}};
                     j["token"] = token->first;  // Shown this once; only its hash is stored.
                     return j;
                   },
                   201, Passthrough, [](const json& j) { return j.value("id", ""); }});
            });
  table.Add(
      "POST", "/v1/nodes/{id}/faults", Access::kAdmin, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        std::string fault;
        Status refusal = call->body_status;
        if (refusal.ok()) {
          JsonFields f(call->body, "body");
          f.RejectUnknown({"fault"});
          fault = f.String("fault");
          const bool known = fault.rfind("xid:", 0) == 0 || fault.rfind("overheat:", 0) == 0 ||
                             fault.rfind("cool:", 0) == 0 || fault.rfind("lost:", 0) == 0 ||
                             fault.rfind("found:", 0) == 0;
          if (f.ok() && (!known || fault.size() > 64)) {
            f.Fail("fault", "must be xid:GPU:CODE, overheat:GPU, cool:GPU, lost:GPU or found:GPU");
          }
          refusal = BodyStatus(f);
        }
        const std::string node = call->params[0];
        api.Run<json>(
            call, refusal,
            {[node, fault](core::State& s, store::Batch&, const core::Tenant&) -> Result<json> {
               TESSERA_ASSIGN_OR_RETURN(int64_t id, s.agents().InjectFault(node, fault));
               return json{{"id", node}, {"fault", fault}, {"fault_id", id}};
             },
             202, Passthrough, [](const json& j) { return j.value("id", ""); }});
      });
  // An operator's word on a GPU: {"state": "ok"} puts it back in service, {"state":
  // "unhealthy", "reason": "..."} takes it out (docs/gpu-health.md).
  table.Add(
      "POST", "/v1/nodes/{id}/gpus/{gpu}/health", Access::kAdmin, BodyKind::kJson, true,
      [](Api& api, std::shared_ptr<Call> call) {
        std::string state, reason;
        int gpu = -1;
        Status refusal = call->body_status;
        if (refusal.ok()) {
          JsonFields f(call->body, "body");
          f.RejectUnknown({"state", "reason"});
          state = f.String("state");
          reason = f.String("reason", false);
          if (f.ok() && state != "ok" && state != "unhealthy") {
            f.Fail("state", "must be ok or unhealthy");
          }
          if (f.ok() && (reason.size() > 200 || !IsValidUtf8(reason))) {
            f.Fail("reason", "must be at most 200 bytes of UTF-8");
          }
          refusal = BodyStatus(f);
        }
        const std::string& text = call->params[1];
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), gpu);
        if (refusal.ok() && (ec != std::errc() || end != text.data() + text.size() || gpu < 0)) {
          refusal = Status::InvalidArgument(
              fmt::format("path: GPU {} is not a GPU index (0, 1, ...)", Quote(text)));
        }
        const std::string node = call->params[0];
        api.Run<json>(call, refusal,
                      {[node, gpu, state, reason](core::State& s, store::Batch& b,
                                                  const core::Tenant&) -> Result<json> {
                         TESSERA_RETURN_IF_ERROR(
                             s.node_health().SetGpuHealth(node, gpu, state == "ok", reason, b));
                         return json{{"id", node}, {"gpu", gpu}, {"state", state}};
                       },
                       200, Passthrough, [](const json& j) { return j.value("id", ""); }});
      });
  AddGpuModeRoute(table);
  table.Add("DELETE", "/v1/nodes/{id}?force", Access::kAdmin, BodyKind::kNone, true,
            [](Api& api, std::shared_ptr<Call> call) {
              const std::string* raw = call->request.parsed.Param("force");
              const std::string force = raw ? *raw : "false";
              Status refusal = force == "true" || force == "false"
                                   ? Status::Ok()
                                   : Status::InvalidArgument(fmt::format(
                                         "query parameter 'force': '{}' is not true or false",
                                         Quote(force, 16)));
              api.Run<json>(
                  call, refusal,
                  {[node = call->params[0], force](core::State& s, store::Batch& b,
                                                   const core::Tenant&) -> Result<json> {
                     TESSERA_ASSIGN_OR_RETURN(core::NodeHealth::Removal r,
                                              s.node_health().RemoveNode(node, force == "true", b));
                     if (r.removed) return json{{"id", node}, {"state", "removed"}};
                     return json{{"id", node}, {"state", "removing"}, {"reason", r.waiting_for}};
                   },
                   200, Passthrough, [](const json& j) { return j.value("id", ""); }, nullptr,
                   [](const json& j) { return j.value("state", "") == "removing" ? 202 : 200; }});
            });
  for (const bool drain : {true, false}) {
    const std::string verb = drain ? "drain" : "undrain";
    table.Add(
        "POST", "/v1/nodes/{id}/" + verb, Access::kAdmin, BodyKind::kOptionalJson, true,
        [drain](Api& api, std::shared_ptr<Call> call) {
          Status refusal = call->body_status;
          if (refusal.ok()) {
            JsonFields f(call->body, "body");
            f.RejectUnknown({});
            refusal = BodyStatus(f);
          }
          const std::string node = call->params[0];
          api.Run<json>(
              call, refusal,
              {[drain, node](core::State& s, store::Batch& b, const core::Tenant&) -> Result<json> {
                 TESSERA_RETURN_IF_ERROR(s.node_health().SetNodeDrained(node, drain, b));
                 return json{{"id", node}, {"state", drain ? "draining" : "ready"}};
               },
               200, Passthrough, [](const json& j) { return j.value("id", ""); }});
        });
  }
}

void AddObservabilityRoutes(Api& table) {
  table.Add("GET", "/healthz", Access::kPublic, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Reply(*call, JsonResponse(200, {{"status", "ok"}}));
            });
  table.Add("GET", "/readyz", Access::kPublic, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              if (!api.ready())
                return api.Reply(*call, ErrorResponse(503, "unavailable", "starting"));
              json body = {{"status", "ready"}};
              if (const core::Replica* replica = api.replica()) {
                const core::ReplicaStatus s = replica->view();
                body["role"] = s.leader ? "leader" : "follower";
                body["leader"] = s.leader ? "self" : s.leader_url;
                body["epoch"] = s.epoch;
              } else {
                body["role"] = "leader";
              }
              api.Reply(*call, JsonResponse(200, body));
            });
  table.Add("GET", "/v1/cluster", Access::kAdmin, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              json body = {{"replicated", api.replica() != nullptr}};
              if (const core::Replica* replica = api.replica()) {
                const core::ReplicaStatus s = replica->view();
                body["self"] = s.id;
                body["role"] = s.leader ? "leader" : "follower";
                body["epoch"] = s.epoch;
                body["leader"] = s.leader ? "self" : s.leader_url;
                json replicas = json::array();
                for (const store::ReplicaView& r : s.replicas) {
                  replicas.push_back({{"id", r.id},
                                      {"url", r.url},
                                      {"role", r.role},
                                      {"seen_ago_seconds", r.seen_ago_s},
                                      {"applied_commits", r.applied_commits},
                                      {"lag_seconds", static_cast<double>(r.lag_ms) / 1000}});
                }
                body["replicas"] = std::move(replicas);
              }
              api.Reply(*call, JsonResponse(200, body));
            });
  table.Add("GET", "/v1/audit?after&limit", Access::kAdmin, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              int64_t after = 0;
              int64_t limit = 100;
              Status refusal = IntParam(call->request.parsed, "after", 0, INT64_MAX, after);
              if (refusal.ok()) refusal = IntParam(call->request.parsed, "limit", 0, 1000, limit);
              core::Core* core = &api.core();
              api.Run<json>(
                  call, refusal,
                  {[core, after, limit](core::State& s, store::Batch&,
                                        const core::Tenant&) -> Result<json> {
                     // The store belongs to the core thread, where this runs.
                     TESSERA_ASSIGN_OR_RETURN(
                         auto entries, core->store().ListAudit(after, static_cast<int>(limit)));
                     json out = json::array();
                     for (const auto& e : entries) {
                       json row = {{"seq", e.seq},       {"at", e.at},         {"actor", e.actor},
                                   {"action", e.action}, {"target", e.target}, {"status", e.status},
                                   {"detail", e.detail}};
                       // The user who acted, with its name while it exists.
                       row["user"] = e.user.empty() ? json() : json(e.user);
                       if (const core::User* u = s.tenants().users().Find(e.user)) {
                         row["user_name"] = u->name;
                       }
                       out.push_back(std::move(row));
                     }
                     return json{{"entries", std::move(out)}};
                   },
                   200, Passthrough, nullptr});
            });
}

}  // namespace

void AddAdminRoutes(Api& table) {
  // What each route takes and who may call it: the role a tenant's user needs (docs/users.md).
  table.Add("GET", "/v1/routes", Access::kAnyToken, BodyKind::kNone, false,
            [](Api& api, std::shared_ptr<Call> call) {
              api.Reply(*call, JsonResponse(200, {{"routes", api.RoutesJson()}}));
            });
  AddNodeRoutes(table);
  AddObservabilityRoutes(table);
}

}  // namespace tessera::api
