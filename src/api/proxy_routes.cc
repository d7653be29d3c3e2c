// The proxies to what workloads serve (docs/volumes.md): an instance's port,
// /v1/instances/{id}/ports/{port}/REST, and a group's service, /v1/groups/{id}/service/REST,
// balanced over its healthy members. Both go to the endpoint an agent mapped the port to, as
// REST, for the tokens of the instance's or group's own tenant only. They are answered on the I/O
// thread from the endpoint index the core publishes, with no core round per request; the
// connection is then spliced to the workload, so a response streams as the workload sends it
// and a WebSocket upgrade carries on as one.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>

#include "api/api.h"
#include "api/routes.h"
#include "api/service.h"
#include "common/text.h"
#include "core/core.h"

namespace tessera::api {

namespace {

// Fields that are the connection's, not the request's (RFC 9110 7.6.1), and what the proxy
// writes itself. The caller's bearer token never reaches the workload.
bool Dropped(std::string_view name) {
  static constexpr std::string_view kDropped[] = {
      "connection",     "keep-alive",        "proxy-connection", "proxy-authorization", "te",
      "trailer",        "transfer-encoding", "upgrade",          "authorization",       "host",
      "content-length", "x-forwarded-for",   "x-forwarded-host", "x-forwarded-prefix"};
  return std::find(std::begin(kDropped), std::end(kDropped), name) != std::end(kDropped);
}

// Hands `call` over to endpoint `ep` as the request under `prefix` it is (the rest of its target
// as the client wrote it, escapes and query kept); audits what may change something, and every
// upgrade; `done` hears when it ends.
void Forward(Api& api, Call& call, const std::string& prefix, const core::Endpoint& ep,
             std::function<void(bool)> done = nullptr) {
  const HttpRequest& r = call.request;
  if (r.target.rfind(prefix, 0) != 0) {
    if (done) done(false);
    return api.ReplyError(
        call, Status::InvalidArgument(
                  fmt::format("path: write it as {}/... (without escapes in that part)", prefix)));
  }
  std::string rest = r.target.substr(prefix.size());
  if (rest.empty() || rest[0] != '/') rest = fmt::format("/{}", rest);
  const std::string* connection = r.Header("connection");
  const std::string* upgrade = r.Header("upgrade");
  const bool upgrading = upgrade && connection && ContainsToken(*connection, "upgrade");
  std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\n", r.method, rest,
                                 ep.node_address, ep.host_port);
  for (const auto& [name, value] : r.headers) {
    if (!Dropped(name)) head += fmt::format("{}: {}\r\n", name, value);
  }
  if (const std::string* host = r.Header("host")) {
    head += fmt::format("X-Forwarded-Host: {}\r\n", *host);
  }
  if (r.peer != kInProcessPeer) head += fmt::format("X-Forwarded-For: {}\r\n", r.peer);
  head += fmt::format("X-Forwarded-Prefix: {}\r\n", prefix);
  head += upgrading ? fmt::format("Connection: Upgrade\r\nUpgrade: {}\r\n", *upgrade)
                    : std::string("Connection: close\r\n");
  if (r.has_body || !r.body.empty()) head += fmt::format("Content-Length: {}\r\n", r.body.size());
  head += "\r\n";
  head += r.body;
  if (call.write || upgrading) {
    api.AuditAsync(call.principal, r, 0,
                   fmt::format("{} to {}:{} (port {})", upgrading ? "upgrade" : "proxied",
                               ep.node_address, ep.host_port, ep.port));
  }
  call.responder.Splice({ep.node_address, ep.host_port, std::move(head), std::chrono::seconds(5),
                         std::chrono::hours(1), std::move(done)});
}

Status OwnTenantsOnly(const core::Principal& who) {
  return who.admin
             ? Status::PermissionDenied("what a workload serves is for its own tenant's tokens")
             : Status::Ok();
}

void ToInstance(Api& api, std::shared_ptr<Call> call) {
  const std::string& id = call->params[0];
  const std::string& port_text = call->params[1];
  if (Status s = OwnTenantsOnly(call->principal); !s.ok()) return api.ReplyError(*call, s);
  int port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return api.ReplyError(*call, Status::InvalidArgument(fmt::format(
                                     "path: '{}' is not a port 1..65535", Quote(port_text))));
  }
  // Another tenant's running instance reads as one that does not exist, or does not run.
  const auto index = api.core().endpoints();
  const auto found = index->instances.find(id);
  const core::Endpoint* ep = nullptr;
  if (found != index->instances.end() && found->second.tenant == call->principal.tenant.str()) {
    for (const core::Endpoint& e : found->second.endpoints) {
      if (e.port == port) ep = &e;
    }
  }
  if (!ep) {
    return api.ReplyError(*call, Status::NotFound(fmt::format(
                                     "instance '{}' has no endpoint for port {}: it is not "
                                     "running, it does not exist, or it did not ask for that "
                                     "port (\"ports\")",
                                     Quote(id), port)));
  }
  Forward(api, *call, fmt::format("/v1/instances/{}/ports/{}", id, port_text), *ep);
}

void ToService(Api& api, std::shared_ptr<Call> call) {
  const std::string& id = call->params[0];
  if (Status s = OwnTenantsOnly(call->principal); !s.ok()) return api.ReplyError(*call, s);
  const auto index = api.core().endpoints();
  const auto found = index->services.find(id);
  if (found == index->services.end() || found->second.tenant != call->principal.tenant.str()) {
    return api.ReplyError(*call, Status::NotFound(fmt::format(
                                     "group '{}' has no service: it does not exist, it ended, "
                                     "or it has no \"service\"",
                                     Quote(id))));
  }
  core::ServiceStats& stats = api.core().service_stats();
  ServiceBalancer* balancer = api.services();
  auto pick = balancer ? balancer->Choose(found->second, *index) : std::nullopt;
  if (!pick) {
    stats.Record(id, 0, /*failed=*/true);
    HttpResponse r = ErrorResponse(
        503, "unavailable",
        fmt::format("no member of group '{}' is running and healthy on port {} ({} checked "
                    "every second)",
                    Quote(id), found->second.service.port, found->second.service.health_path));
    r.headers.emplace_back("Retry-After", "1");
    return api.Reply(*call, std::move(r));
  }
  const auto start = std::chrono::steady_clock::now();
  Forward(api, *call, fmt::format("/v1/groups/{}/service", id), pick->endpoint,
          [balancer, &stats, id, chosen = *pick, start](bool reached) {
            balancer->End(chosen);
            stats.Record(
                id, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                !reached);
          });
}

}  // namespace

void AddProxyRoutes(Api& table) {
  for (const char* method : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    table.Add(method, "/v1/instances/{id}/ports/{port}/{*}?*", Access::kAnyToken, BodyKind::kRaw,
              false, ToInstance);
    table.Add(method, "/v1/groups/{id}/service/{*}?*", Access::kAnyToken, BodyKind::kRaw, false,
              ToService);
  }
}

}  // namespace tessera::api
