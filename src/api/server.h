// The REST API server: the HTTP layer (http.h) serving the API's routes (api.h) for one core.
// Routes are documented in docs/api.md, the HTTP layer's limits in docs/http.md.
// Thread-safety: Bind, Start and Stop are called from one thread (the server command's).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "api/http.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/core.h"
#include "core/replica.h"

namespace tessera::api {

struct ServerOptions {
  HttpOptions http;
  const Clock* clock = nullptr;  // Defaults to the system clock.
  // --allow-private-receivers: tenants' webhooks may name private addresses.
  bool allow_private_receivers = false;
};

class ApiServer {
 public:
  // `catalog` must outlive the server.
  ApiServer(const catalog::Catalog* catalog, ServerOptions options);
  ~ApiServer();

  // Binds the listening socket; errors name the address (in use, not an address) or the TLS
  // file at fault. After this, port() is known; nothing is served before Start.
  Status Bind();
  int port() const;
  bool tls() const;
  // Serves `core` from now on, on the HTTP layer's threads; returns at once. `core` must outlive
  // the server, or Stop.
  void Start(core::Core* core);
  // The replica this server is, when several share a store (docs/ha.md); before Start. It must
  // outlive serving (Stop first).
  void set_replica(const core::Replica* replica);
  // Reads the TLS certificate and key again (SIGHUP): new connections get them. See
  // HttpServer::ReloadTls.
  Status ReloadTls();
  // The sealer of values at rest, for key rotation (api/keys.h), and what its keyring is
  // ("keyring file F"); before Start. Null: the server has no keyring. Must outlive serving.
  void set_keyring(Sealer* sealer, std::string description);
  // Stops serving: requests in flight get a moment to finish. Idempotent.
  void Stop();

  // Serves one request made in process, through the same routes, token checks and codecs as a
  // request from the network, without a socket: the server's own simulated agents use it.
  // `deliver` gets the answer, on the core thread or the calling one. After Start.
  void Dispatch(const std::string& method, const std::string& target, const std::string& token,
                std::string body, std::function<void(HttpResponse)> deliver);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::api
