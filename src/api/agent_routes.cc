// The agent routes (docs/agent.md): an agent registers its node's inventory, then long-polls
// POST /v1/agent/sync with its reports and is answered with its node's desired state as soon as
// that changes, or when its wait ends. Only node tokens may call them, each as its own node.
#include <fmt/format.h>

#include "api/api.h"
#include "api/codec.h"
#include "api/routes.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;

// Runs `fn` as the node behind the call's token, on the core.
template <typename Fn>
void AsNode(Api& api, std::shared_ptr<Call> call, Fn fn) {
  Api* a = &api;
  api.core().Submit<std::optional<std::string>>(
      [call, fn = std::move(fn)](core::State& s,
                                 store::Batch& b) -> Result<std::optional<std::string>> {
        TESSERA_ASSIGN_OR_RETURN(const core::AgentNode* node,
                                 s.agent_hub().Authenticate(call->token_hash));
        return fn(s, b, node->name);
      },
      [call, a](Result<std::optional<std::string>> r) {
        if (!r.ok()) return a->ReplyError(*call, r.status());
        if (!*r) return;  // Parked: answered when the node changes or the wait ends.
        HttpResponse response;
        response.body = std::move(**r);
        a->Reply(*call, std::move(response));
      });
}

}  // namespace

void AddAgentRoutes(Api& table) {
  table.Add("POST", "/v1/agent/register", Access::kNode, BodyKind::kJson, false,
            [](Api& api, std::shared_ptr<Call> call) {
              auto reg = call->body_status.ok()
                             ? ParseRegistration(call->body)
                             : Result<core::AgentRegistration>(call->body_status);
              if (!reg.ok()) return api.ReplyError(*call, reg.status());
              // Unless the agent says where other nodes reach it, where its call came from.
              if (reg->address.empty() && call->request.peer != kInProcessPeer &&
                  IsHostAddress(call->request.peer)) {
                reg->address = call->request.peer;
              }
              AsNode(api, call,
                     [reg = std::move(*reg)](
                         core::State& s, store::Batch& b,
                         const std::string& node) -> Result<std::optional<std::string>> {
                       TESSERA_RETURN_IF_ERROR(s.agent_hub().Register(node, reg, b));
                       return std::optional<std::string>(
                           DumpJson(DesiredStateJson(s.agent_hub().DesiredState(node))));
                     });
            });
  table.Add("POST", "/v1/agent/sync", Access::kNode, BodyKind::kJson, false,
            [](Api& api, std::shared_ptr<Call> call) {
              auto sync = call->body_status.ok() ? ParseSync(call->body)
                                                 : Result<core::AgentSync>(call->body_status);
              if (!sync.ok()) return api.ReplyError(*call, sync.status());
              Api* a = &api;
              AsNode(api, call,
                     [sync = std::move(*sync), call, a](
                         core::State& s, store::Batch& b,
                         const std::string& node) -> Result<std::optional<std::string>> {
                       TESSERA_ASSIGN_OR_RETURN(bool now, s.agent_hub().Sync(node, sync, b));
                       if (now)
                         return std::optional<std::string>(
                             DumpJson(DesiredStateJson(s.agent_hub().DesiredState(node))));
                       core::State* state = &s;
                       // The server's report period bounds the wait: the agent's lease is renewed
                       // no later.
                       const Duration wait = std::min(sync.wait, s.timing().report_period);
                       s.agents().Park(
                           node, {sync.generation, a->clock().Now() + wait, [state, node, call, a] {
                                    HttpResponse response;
                                    response.body = DumpJson(
                                        DesiredStateJson(state->agent_hub().DesiredState(node)));
                                    a->Reply(*call, std::move(response));
                                  }});
                       return std::optional<std::string>();
                     });
            });
}

}  // namespace tessera::api
