// The REST API: JSON over HTTP under /v1, plus /healthz, /readyz and /metrics. Handlers
// authenticate the bearer token, validate the body (400 naming the field, 413 over the size limit,
// 415 for non-JSON) and hand a command to the core; they never change state themselves. Every
// mutating request, accepted or refused, is written to the audit log. Errors have the body
// {"error": {"code": "...", "message": "..."}}. Routes are documented in docs/api.md.
// Thread-safety: handlers run on the HTTP server's worker threads; shared counters are locked.
#pragma once

#include <memory>
#include <string>

#include "common/result.h"
#include "core/core.h"

namespace tessera::api {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 picks a free port.
  size_t max_body_bytes = 1 << 20;
  // HTTP worker threads. Each keep-alive connection holds one while open, so this bounds the
  // clients served at once; handlers mostly wait on the core's durable commit, not on CPU.
  size_t workers = 128;
};

class ApiServer {
 public:
  // `core` and `catalog` must outlive the server.
  ApiServer(core::Core* core, const catalog::Catalog* catalog, ServerOptions options);
  ~ApiServer();

  // Binds the listening socket; errors name the address. After this, port() is known.
  Status Bind();
  int port() const;
  // Serves until Stop(); blocks.
  void Serve();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::api
