#include "api/server.h"

#include "api/api.h"
#include "api/exec.h"
#include "api/keys.h"
#include "api/routes.h"
#include "api/service.h"

namespace tessera::api {

struct ApiServer::Impl {
  Api api;
  KeyRotator keys;           // Stops its rotation before `api` goes, after the HTTP threads did.
  ServiceBalancer services;  // Its health checks stop after the HTTP threads did.
  ExecBroker exec;           // Its waiting clients are answered after the HTTP threads stop.
  const bool mutual_tls;     // Read before `http` takes the options.
  HttpServer http;

  Impl(const catalog::Catalog* catalog, ServerOptions options)
      : api(catalog, options.clock ? options.clock : &SystemClock::Get()),
        keys(options.clock ? options.clock : &SystemClock::Get()),
        mutual_tls(!options.http.client_ca_file.empty()),
        http(std::move(options.http),
             [this](const HttpRequest& head) { return api.OnHead(head); }) {
    AddTenantRoutes(api);
    AddInstanceRoutes(api);
    AddAdminRoutes(api);
    AddMonitoringRoutes(api);
    AddAgentRoutes(api);
    AddBillingRoutes(api);
    AddGroupRoutes(api);
    AddSecretRoutes(api);
    AddVolumeRoutes(api);
    AddProxyRoutes(api);
    AddExecRoutes(api);
    AddStackRoutes(api);
    AddUserRoutes(api);
    AddKeyRoutes(api);
    AddConsoleRoutes(api);
    api.set_http_stats([this] { return http.Stats(); });
    api.set_keys(&keys);
    api.set_services(&services);
    api.set_exec(&exec);
    api.set_allow_private_receivers(options.allow_private_receivers);
    api.set_require_client_certs(mutual_tls);
  }
};

ApiServer::ApiServer(const catalog::Catalog* catalog, ServerOptions options)
    : impl_(std::make_unique<Impl>(catalog, std::move(options))) {}

ApiServer::~ApiServer() { Stop(); }

Status ApiServer::Bind() { return impl_->http.Bind(); }

int ApiServer::port() const { return impl_->http.port(); }

bool ApiServer::tls() const { return impl_->http.tls(); }

void ApiServer::set_replica(const core::Replica* replica) { impl_->api.set_replica(replica); }

Status ApiServer::ReloadTls() { return impl_->http.ReloadTls(); }

void ApiServer::set_keyring(Sealer* sealer, std::string description) {
  impl_->keys.set_keyring(sealer, std::move(description));
}

void ApiServer::Start(core::Core* core) {
  impl_->api.set_core(core);
  impl_->keys.set_core(core);
  impl_->api.set_ready(true);
  impl_->services.Start(core);
  impl_->http.Start();
}

void ApiServer::Dispatch(const std::string& method, const std::string& target,
                         const std::string& token, std::string body,
                         std::function<void(HttpResponse)> deliver) {
  HttpRequest request;
  request.method = method;
  request.target = target;
  auto parsed = ParseTarget(target);
  if (!parsed.ok())
    return deliver(ErrorResponse(400, "invalid_argument", parsed.status().message()));
  request.parsed = std::move(*parsed);
  request.headers = {{"authorization", "Bearer " + token}, {"content-type", "application/json"}};
  request.has_body = !body.empty();
  request.peer = std::string(kInProcessPeer);
  HeadDecision decision = impl_->api.OnHead(request);
  if (decision.refuse) return deliver(std::move(*decision.refuse));
  request.body = std::move(body);
  decision.handler(std::move(request), Responder::Local(std::move(deliver)));
}

void ApiServer::Stop() {
  impl_->api.set_ready(false);
  impl_->http.Stop();
  impl_->services.Stop();
  impl_->exec.Stop();
}

}  // namespace tessera::api
