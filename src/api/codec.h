// The API's JSON codecs and error mapping: request bodies into core requests (every field
// checked, unknown fields refused, errors naming the field), Status codes into HTTP statuses, and
// catalog entries into response bodies.
// Thread-safety: pure functions.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "catalog/catalog.h"
#include "common/json.h"
#include "common/result.h"
#include "core/state.h"

namespace tessera::api {

struct HttpError {
  int status = 500;
  std::string code;  // e.g. "invalid_argument", "quota_exceeded".
};

// 400 invalid_argument, 401 unauthenticated, 403 forbidden or quota_exceeded, 404 not_found,
// 409 already_exists / failed_precondition, 429 too_many_pending, 503 unavailable, else 500
// internal; a status's reason, when it has one, is the code.
HttpError ToHttpError(const Status& s);

// {"error": {"code": code, "message": message}}.
nlohmann::json ErrorBody(const std::string& code, const std::string& message);

// The most a `command` may hold.
inline constexpr size_t kMaxCommandBytes = core::kMaxCommandBytes;

// POST /v1/tenants: {name, quota?: {gpus, max_pending?, volumes_gib?}}.
struct CreateTenantRequest {
  std::string name;
  int64_t quota_gpu_milli = 0;
  std::optional<int64_t> max_pending;  // Unset: the server's default.
  std::optional<int64_t> volumes_gib;  // Unset: no limit.
};
Result<CreateTenantRequest> ParseCreateTenant(const nlohmann::json& body);

// PATCH /v1/tenants/{id}: {quota?: {gpus?, max_pending?, volumes_gib?}, disabled?}, at least one.
struct UpdateTenantRequest {
  std::optional<int64_t> quota_gpu_milli;
  std::optional<int64_t> max_pending;
  std::optional<int64_t> volumes_gib;
  std::optional<bool> disabled;
};
Result<UpdateTenantRequest> ParseUpdateTenant(const nlohmann::json& body);

// POST /v1/tenants/{id}/tokens: {grace_seconds?: 0..30 days (default 3600) | revoke_previous?}.
struct RotateTokenRequest {
  Duration grace = std::chrono::hours(1);
};
Result<RotateTokenRequest> ParseRotateToken(const nlohmann::json& body);

// Field `key` of `f` in GPUs (fractions allowed, in whole milli-GPUs: the unit every share is
// counted in), as milli-GPU; a finer amount is an error rather than rounded without a word.
int64_t ReadGpus(JsonFields& f, std::string_view key);

// POST /v1/instances: billing, optional name/command/restart/labels/annotations, optional
// image/pull_policy/registry_auth (core/image.h), and the shape as instance_type or {gpu_model,
// gpus | mig_profile | milli_gpu, gpu_memory_mib?, vcpus, memory_mib, nvlink?}.
Result<core::CreateInstanceRequest> ParseCreateInstance(const nlohmann::json& body);
// POST /v1/groups: {name?, template, size, ...} (core::ReadGroupRequest); errors name the field.
Result<core::GroupRequest> ParseCreateGroup(const nlohmann::json& body);

// A JsonFields reader's first error, on one line, without the reader's own prefix ("body: ").
Status BodyStatus(const JsonFields& f);

// The agent protocol (docs/agent.md). The longest an agent may wait in one long poll.
inline constexpr auto kMaxAgentWait = std::chrono::seconds(30);
// POST /v1/agent/register: {protocol: 1, agent_id, inventory}.
Result<core::AgentRegistration> ParseRegistration(const nlohmann::json& body);
// POST /v1/agent/sync: {protocol: 1, agent_id, seq, generation, wait_ms?, workloads?, logs?,
// limits?, isolation?, telemetry?}. Takes the telemetry out of `body` rather than copy it.
Result<core::AgentSync> ParseSync(nlohmann::json& body);
// What a node's agent is told, in the protocol's form (docs/agent.md, "Desired state").
nlohmann::json DesiredStateJson(const core::DesiredState& d);

// GET /v1/instance-types: every type with its shape and its price in each billing mode.
// The catalog's instance types, each with `offered_here`: whether this fleet has its GPU model.
nlohmann::json InstanceTypesJson(const catalog::Catalog& catalog,
                                 const std::function<bool(const catalog::InstanceType&)>& offered);

// GET /v1/nodes: capacity, allocations and state of nodes [begin, begin + count) of the fleet.
nlohmann::json NodesJson(const fleet::Fleet& fleet, size_t begin, size_t count);
// A joined node's agent fields for GET /v1/nodes (api::AddAgentFields places them).
nlohmann::json AgentJson(const core::AgentNode& n);
// Node `node`'s agent fields; null for a node no agent joined.
nlohmann::json AgentJson(const core::State& s, const std::string& node);
// Adds a node's agent fields (AgentJson; null for a node no agent serves) to `node`: its
// state "not_ready" when the agent lost its lease, "isolation" and "isolation_note" at the top
// level, and the rest under "agent".
void AddAgentFields(nlohmann::json& node, nlohmann::json agent);

}  // namespace tessera::api
