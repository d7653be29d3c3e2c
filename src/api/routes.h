// The route families of the API, each registered by one function (docs/api.md).
// Thread-safety: called once, before serving starts.
#pragma once

namespace tessera::api {

class Api;

void AddTenantRoutes(Api& api);    // /v1/tenants..., /v1/instance-types
void AddInstanceRoutes(Api& api);  // /v1/instances...
void AddAdminRoutes(Api& api);     // /v1/nodes..., /v1/audit, /healthz, /readyz
// /metrics, /v1/instances/{id}/metrics, /v1/metrics/instances, /v1/nodes/{id}, /v1/alert-rules...,
// /v1/alerts
void AddMonitoringRoutes(Api& api);
void AddAgentRoutes(Api& api);  // /v1/agent/... (node tokens)
// /v1/reservations..., /v1/usage, /v1/invoices/{month}
void AddBillingRoutes(Api& api);
void AddGroupRoutes(Api& api);    // /v1/groups...
void AddConsoleRoutes(Api& api);  // /, /console/... (console.cc)
void AddSecretRoutes(Api& api);   // /v1/secrets... (secret_routes.cc)
void AddUserRoutes(Api& api);     // /v1/tenants/{id}/users... (user_routes.cc)
void AddKeyRoutes(Api& api);      // /v1/keys... (keys.cc)
void AddVolumeRoutes(Api& api);   // /v1/volumes... (volume_routes.cc)
// /v1/instances/{id}/ports/{port}/..., /v1/groups/{id}/service/... (proxy_routes.cc)
void AddProxyRoutes(Api& api);
// /v1/instances/{id}/exec, /v1/agent/exec/{session} (exec.cc)
void AddExecRoutes(Api& api);

}  // namespace tessera::api
