// The API between the HTTP layer and the core: the route table, and the path every request
// takes through it. At the head stage, before a byte of the body is read, a request is matched
// to a route (404, 405), its token is checked against the principal index the core publishes
// (401, 403; no durable write, only a counter and a sampled log line), a query parameter the
// route does not take is refused (400, as an unknown body field is), and a JSON route's media
// type and announced length are checked (415, 413). Then the body is parsed (400 naming the
// field) and the route's operation runs as one command on the core, which checks the token again
// (it may have been revoked since), runs the operation and, for a mutating route, appends the
// audit record to the same durable batch. The answer is rendered on the I/O thread.
// Routes live in tenant_routes.cc, instance_routes.cc and admin_routes.cc.
// Thread-safety: Api's methods run on the I/O threads; operations run on the core thread.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/audit.h"
#include "api/http.h"
#include "api/metrics.h"
#include "catalog/catalog.h"
#include "common/clock.h"
#include "core/core.h"
#include "core/replica.h"

namespace tessera::api {

class KeyRotator;       // keys.h
class ServiceBalancer;  // service.h
class ExecBroker;       // exec.h

// Who may call a route.
enum class Access {
  kPublic,    // No token (health checks).
  kAnyToken,  // The admin or any tenant.
  kAdmin,     // The operator's admin token only.
  kTenant,    // A tenant's token only (the admin has no quota to spend).
  kNode,      // A node token only: the agent routes (docs/agent.md).
};

// What a route takes as its body.
enum class BodyKind {
  kNone,          // Nothing (a body sent anyway is read, up to 4 KiB, and ignored).
  kJson,          // A JSON object, Content-Type application/json.
  kOptionalJson,  // As kJson when a body is sent; an empty body reads as {}.
  kRaw,           // Any media type, kept as sent (the proxy to an instance's port).
};

// One request on its way through the API.
struct Call {
  HttpRequest request;
  std::string route;                // The route's pattern, for metrics: "/v1/instances/{id}".
  bool audited = false;             // A mutating route: the outcome goes to the audit log.
  std::vector<std::string> params;  // The pattern's {placeholders}, in order.
  std::string token_hash;           // Empty on public routes.
  core::Principal principal;
  // What the route asks of a tenant's token: a role, and whether it writes (docs/users.md).
  core::Role need = core::Role::kViewer;
  bool write = false;
  nlohmann::json body;  // The parsed body (kJson, kOptionalJson); {} otherwise.
  Status body_status;   // Why the body could not be parsed, if it could not.
  Responder responder;
};

// An operation on the core for a call, and how its answer looks.
template <typename T>
struct Op {
  // Runs as the authenticated caller; what it writes to the batch is committed with its audit.
  std::function<Result<T>(core::State&, store::Batch&, const core::Tenant&)> run;
  int ok_status = 200;
  std::function<nlohmann::json(const T&)> render;
  // The id the operation acted on, for the audit log; may be empty.
  std::function<std::string(const T&)> target;
  // When set, the whole answer for a result, in place of `render`'s JSON (CSV, text).
  std::function<HttpResponse(const T&)> respond = nullptr;
  // When set, the success status for a result, in place of `ok_status` (200 or 202 by outcome).
  std::function<int(const T&)> status = nullptr;
  // When set, what the audit record says of a success (an exec's command).
  std::function<std::string(const T&)> detail = nullptr;
  // When set, a success is handed over with the duty to answer it (on the core thread), in place
  // of any answer: an exec's connection waits for its agent.
  std::function<void(const T&, const Responder&)> deliver = nullptr;
};

class Api {
 public:
  using Handler = std::function<void(Api&, std::shared_ptr<Call>)>;

  // `catalog` and `clock` must outlive this; set_core before serving.
  Api(const catalog::Catalog* catalog, const Clock* clock);

  // Registers a route; `pattern` segments in braces ("{id}") match any one segment, and a last
  // segment "{*}" any path after the others (the handler reads it from the target). The pattern
  // ends in the query parameters the route takes, if any ("/v1/instances?limit&page_token"); a
  // request with any other is refused with 400 naming it. "?*" takes any (the console's files).
  // `need` is the role a tenant's user must have (docs/users.md): by default a viewer for GET and
  // HEAD, a member for the rest; owner routes say so.
  void Add(std::string method, std::string pattern, Access access, BodyKind body, bool audited,
           Handler handler, std::optional<core::Role> need = std::nullopt);
  // Every route: {"method", "pattern", "query", "access", "role", "write"}, role and write being
  // what a tenant's token needs (GET /v1/routes, the role table test, docs/users.md).
  nlohmann::json RoutesJson() const;

  // The HTTP layer's head handler: match, authenticate, check the media type.
  HeadDecision OnHead(const HttpRequest& head);

  // Runs `op` on the core for `call`, unless `refusal` is an error, which is answered instead
  // (and audited on a mutating route). The answer goes to call->responder.
  template <typename T>
  void Run(std::shared_ptr<Call> call, Status refusal, Op<T> op);

  // Answers `call` with `response`, counting it under the route.
  void Reply(Call& call, HttpResponse response);
  // Answers `call` with `status`'s HTTP error.
  void ReplyError(Call& call, const Status& status);
  // Appends one audit record in its own core round: for refusals answered before the core ran,
  // and for what is answered without it (the proxy to an instance's port).
  void AuditAsync(const core::Principal& who, const HttpRequest& head, int status,
                  const std::string& detail);

  core::Core& core() { return *core_; }
  void set_core(core::Core* core) { core_ = core; }
  const catalog::Catalog& catalog() const { return *catalog_; }
  const Clock& clock() const { return *clock_; }
  Metrics& metrics() { return metrics_; }
  void set_http_stats(std::function<HttpStats()> stats) { http_stats_ = std::move(stats); }
  HttpStats http_stats() const { return http_stats_ ? http_stats_() : HttpStats{}; }
  // The replica this server is, when several share a store (docs/ha.md); null otherwise. Must
  // outlive serving.
  const core::Replica* replica() const { return replica_; }
  void set_replica(const core::Replica* replica) { replica_ = replica; }
  bool ready() const { return ready_; }
  void set_ready(bool ready) { ready_ = ready; }
  // Mutual TLS for the agent routes (--client-ca): a node token is taken only over a connection
  // whose client certificate, signed by the client CA, names the node.
  void set_require_client_certs(bool require) { require_client_certs_ = require; }
  // The balancer of groups' services (service.h); null when not set. Must outlive serving.
  ServiceBalancer* services() const { return services_; }
  void set_services(ServiceBalancer* services) { services_ = services; }
  // The broker of exec sessions (exec.h); null when not set. Must outlive serving.
  ExecBroker* exec() const { return exec_; }
  void set_exec(ExecBroker* exec) { exec_ = exec; }
  // Key rotation (keys.h); null when not set. Must outlive serving.
  KeyRotator* keys() const { return keys_; }
  void set_keys(KeyRotator* keys) { keys_ = keys; }
  // Whether tenants' webhooks may name private addresses (--allow-private-receivers).
  bool allow_private_receivers() const { return allow_private_receivers_; }
  void set_allow_private_receivers(bool allow) { allow_private_receivers_ = allow; }

 private:
  struct Route {
    std::string method;
    std::string pattern;  // Without its query part: "/v1/instances/{id}".
    std::vector<std::string> segments;
    std::vector<std::string> query;  // The query parameters it takes, in the pattern's order.
    bool any_query = false;          // "?*": any parameter is taken (and may be ignored).
    Access access;
    BodyKind body;
    bool audited;
    Handler handler;
    core::Role need;
    bool write;  // Not GET or HEAD: a read-only token is refused.
  };

  // The route and its parameters for a path, and the methods the path allows.
  const Route* Match(const HttpRequest& head, std::vector<std::string>& params,
                     std::vector<std::string>& allowed) const;
  // InvalidArgument naming the first query parameter of `target` that `route` does not take.
  static Status CheckQuery(const Route& route, const Target& target);
  // The principal behind the request's bearer token, or the refusal to answer (401, 403).
  Result<core::Principal> Authenticate(const HttpRequest& head, std::string& token_hash);
  // Appends `row` to `batch` as the audit gate admits it (cut to size; a refusal past its
  // caller's rate is counted instead).
  void Audit(store::Batch& batch, store::AuditRecord row);
  // Logs an unauthenticated request, at most one line a second with a count of the rest.
  void SampleAnonymous(const HttpRequest& head, const std::string& why);

  // A follower's answer to a request only the leader serves: 307 to the leader's URL, or 503
  // while no replica leads. nullopt when this replica serves it.
  std::optional<HttpResponse> RedirectToLeader(const Route& route, const HttpRequest& head);

  core::Core* core_ = nullptr;
  const core::Replica* replica_ = nullptr;
  KeyRotator* keys_ = nullptr;
  ServiceBalancer* services_ = nullptr;
  ExecBroker* exec_ = nullptr;
  const catalog::Catalog* catalog_;
  const Clock* clock_;
  Metrics metrics_;
  AuditGate audit_gate_;
  std::function<HttpStats()> http_stats_;
  std::atomic<bool> ready_{false};
  bool allow_private_receivers_ = false;
  bool require_client_certs_ = false;
  std::vector<Route> routes_;  // Fixed before serving starts.

  std::mutex sample_mu_;
  Time last_sample_;       // Guarded by sample_mu_.
  int64_t unsampled_ = 0;  // Guarded by sample_mu_.
};

// The error answer for a Status: its HTTP status and code (docs/api.md) and its message.
HttpResponse StatusResponse(const Status& status);
// A JSON answer.
HttpResponse JsonResponse(int status, const nlohmann::json& body);
// An Op's render for operations that build their answer themselves.
inline nlohmann::json Passthrough(const nlohmann::json& j) { return j; }

// The actor an audit record names: "admin", a tenant id.
std::string Actor(const core::Tenant& t);

// A list route's page: query parameters `limit` (1..max_limit, default default_limit) and
// `page_token` (as a previous page's next_page_token gave it) into the position to start after
// and the size. InvalidArgument naming the parameter.
Status PageParams(const Target& target, int64_t& after, size_t& limit, int64_t default_limit = 100,
                  int64_t max_limit = 1000);
// The next_page_token for a page that ended at position `after`.
std::string PageToken(int64_t after);

// Reads query parameter `name`, when given, as an integer in [min, max] into `value`;
// InvalidArgument naming the parameter otherwise.
Status IntParam(const Target& target, const char* name, int64_t min, int64_t max, int64_t& value);

// A new bearer token and its hash.
Result<std::pair<std::string, std::string>> NewToken();

// Tenant `id` as `caller` may see it: a tenant sees only itself, the operator any. NotFound for
// any other, as for one that does not exist.
Result<const core::Tenant*> VisibleTenant(const core::State& s, const core::Tenant& caller,
                                          const std::string& id);

template <typename T>
void Api::Run(std::shared_ptr<Call> call, Status refusal, Op<T> op) {
  auto shared_op = std::make_shared<Op<T>>(std::move(op));
  core_->Submit<T>(
      [call, refusal = std::move(refusal), shared_op, this](core::State& s,
                                                            store::Batch& b) -> Result<T> {
        auto caller = s.tenants().Authenticate(call->token_hash);
        // A token refused here was valid at the head stage and revoked since: no audit either.
        if (!caller.ok()) return caller.status();
        // Its user's role may have changed since the head stage too.
        if (auto p = core::Authenticate(*s.tenants().index(), call->token_hash, clock_->Now());
            p.ok()) {
          TESSERA_RETURN_IF_ERROR(core::Authorize(*p, call->need, call->write));
        }
        Result<T> out = refusal.ok() ? shared_op->run(s, b, **caller) : Result<T>(refusal);
        if (call->audited) {
          const int status = !out.ok()           ? StatusResponse(out.status()).status
                             : shared_op->status ? shared_op->status(*out)
                                                 : shared_op->ok_status;
          Audit(b, {0, FormatRfc3339(clock_->Now()), Actor(**caller),
                    call->request.method + " " + call->request.parsed.path,
                    out.ok() && shared_op->target ? shared_op->target(*out) : "", status,
                    !out.ok()           ? out.status().message()
                    : shared_op->detail ? shared_op->detail(*out)
                                        : "",
                    call->principal.user});
        }
        return out;
      },
      [call, shared_op, this](Result<T> r) {
        if (r.ok() && shared_op->deliver) {
          metrics_.CountRequest(call->request.method, call->route, shared_op->ok_status);
          return shared_op->deliver(*r, call->responder);
        }
        // On the core thread: hand the result over and render it on the connection's thread.
        call->responder.SendLater([call, shared_op, this, r = std::move(r)]() {
          HttpResponse response =
              !r.ok() ? StatusResponse(r.status())
              : shared_op->respond
                  ? shared_op->respond(*r)
                  : JsonResponse(shared_op->status ? shared_op->status(*r) : shared_op->ok_status,
                                 shared_op->render(*r));
          metrics_.CountRequest(call->request.method, call->route, response.status);
          return response;
        });
      });
}

}  // namespace tessera::api
