// The route families of the API, each registered by one function (docs/api.md). Each line names
// the paths, the file that parses and answers them, and the file in src/core/ (or src/billing/)
// whose method does what they ask: a route's behaviour is two files from here.
// Thread-safety: called once, before serving starts.
#pragma once

namespace tessera::api {

class Api;

// /v1/tenants..., /v1/whoami, /v1/instance-types (tenant_routes.cc -> core/state.cc,
// core/tenants.cc)
void AddTenantRoutes(Api& api);
// /v1/instances..., logs (instance_routes.cc -> core/instance_service.cc; get, list and logs:
// core/instance_views.cc)
void AddInstanceRoutes(Api& api);
// /v1/nodes... (admin_routes.cc -> core/agent_hub.cc; remove, drain and GPU health:
// core/node_health.cc; GPU modes: core/node_gpus.cc), /v1/audit, /healthz, /readyz
// (admin_routes.cc, audit.cc)
void AddAdminRoutes(Api& api);
// /metrics (monitoring_routes.cc -> core/state_monitoring.cc); /v1/instances/{id}/metrics,
// /v1/metrics/instances, /v1/nodes/{id}'s readings (-> core/readings.cc); /v1/alert-rules...,
// /v1/alerts (-> core/monitoring.cc)
void AddMonitoringRoutes(Api& api);
// /v1/agent/... with node tokens (agent_routes.cc, agent_codec.cc -> core/agent_hub.cc; the
// desired state: core/desired_state.cc; the inventory: core/inventory.cc)
void AddAgentRoutes(Api& api);
// /v1/reservations..., /v1/tenants/{id}/budget, /v1/budgets, /v1/usage, /v1/invoices/{month},
// /v1/reports/... (billing_routes.cc -> core/accounts.cc; the recommender's dry runs:
// core/state_billing.cc; ledger reads: core/ledger_reads.cc)
void AddBillingRoutes(Api& api);
// /v1/groups... (group_routes.cc -> core/group_service.cc)
void AddGroupRoutes(Api& api);
void AddConsoleRoutes(Api& api);  // /, /console/... (console.cc: static files)
// /v1/secrets... (secret_routes.cc -> core/state_secrets.cc)
void AddSecretRoutes(Api& api);
// /v1/tenants/{id}/users... and their tokens (user_routes.cc -> core/users.cc)
void AddUserRoutes(Api& api);
// /v1/keys... (keys.cc -> core/rotation.cc)
void AddKeyRoutes(Api& api);
// /v1/volumes... (volume_routes.cc -> core/state_volumes.cc)
void AddVolumeRoutes(Api& api);
// /v1/instances/{id}/ports/{port}/..., /v1/groups/{id}/service/... (proxy_routes.cc ->
// core/endpoint_index.h)
void AddProxyRoutes(Api& api);
// /v1/instances/{id}/exec, /v1/agent/exec/{session} (exec.cc -> core/state_exec.cc)
void AddExecRoutes(Api& api);
// /v1/stacks... (stack_routes.cc -> api/stacks.cc, which plans and applies through core/state*.cc;
// records: core/stacks.cc)
void AddStackRoutes(Api& api);

}  // namespace tessera::api
