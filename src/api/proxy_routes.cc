// The proxy to an instance's ports (docs/volumes.md, "Reaching a port through the server"):
// /v1/instances/{id}/ports/{port}/REST goes to the endpoint its agent mapped that port to, as
// REST, for the tokens of the instance's own tenant only. It is answered on the I/O thread from
// the endpoint index the core publishes, with no core round per request; the connection is then
// spliced to the workload, so a response streams as the workload sends it and a WebSocket
// upgrade carries on as one.
#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "api/api.h"
#include "api/routes.h"
#include "common/text.h"

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

bool ContainsToken(std::string_view list, std::string_view token) {
  for (std::string_view item : Split(list, ',')) {
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.size() == token.size() &&
        std::equal(item.begin(), item.end(), token.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == b;
        })) {
      return true;
    }
  }
  return false;
}

void Proxy(Api& api, std::shared_ptr<Call> call) {
  const HttpRequest& r = call->request;
  const std::string& id = call->params[0];
  const std::string& port_text = call->params[1];
  const core::Principal& who = call->principal;
  if (who.admin) {
    return api.ReplyError(
        *call, Status::PermissionDenied("an instance's ports are for its own tenant's tokens"));
  }
  int port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
    return api.ReplyError(*call, Status::InvalidArgument(fmt::format(
                                     "path: '{}' is not a port 1..65535", Quote(port_text))));
  }
  // Another tenant's running instance reads as one that does not exist, or does not run.
  const auto index = api.core().endpoints();
  const auto found = index->find(id);
  const core::Endpoint* ep = nullptr;
  if (found != index->end() && found->second.tenant == who.tenant.str()) {
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
  // What follows the prefix, as the client wrote it (its escapes and its query kept).
  const std::string prefix = fmt::format("/v1/instances/{}/ports/{}", id, port_text);
  if (r.target.rfind(prefix, 0) != 0) {
    return api.ReplyError(*call, Status::InvalidArgument(fmt::format(
                                     "path: write it as {}/... (without escapes before the "
                                     "instance's path)",
                                     prefix)));
  }
  std::string rest = r.target.substr(prefix.size());
  if (rest.empty() || rest[0] != '/') rest = fmt::format("/{}", rest);
  const std::string* connection = r.Header("connection");
  const std::string* upgrade = r.Header("upgrade");
  const bool upgrading = upgrade && connection && ContainsToken(*connection, "upgrade");
  std::string head = fmt::format("{} {} HTTP/1.1\r\nHost: {}:{}\r\n", r.method, rest,
                                 ep->node_address, ep->host_port);
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
  // What changes something, and every upgrade, is audited; reads are not, as elsewhere.
  if (call->write || upgrading) {
    api.AuditAsync(who, r, 0,
                   fmt::format("{} to port {} at {}:{}", upgrading ? "upgrade" : "proxied", port,
                               ep->node_address, ep->host_port));
  }
  call->responder.Splice({ep->node_address, ep->host_port, std::move(head)});
}

}  // namespace

void AddProxyRoutes(Api& table) {
  for (const char* method : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}) {
    table.Add(method, "/v1/instances/{id}/ports/{port}/{*}?*", Access::kAnyToken, BodyKind::kRaw,
              false, Proxy);
  }
}

}  // namespace tessera::api
