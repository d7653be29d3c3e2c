// A workload's environment as its owner gives it (POST /v1/instances, a group's template,
// docs/api.md "Environment and secrets"): literal values, and references to the tenant's secrets
// (core/secrets.h), resolved when the node's agent is told to run the workload.
//
// Literal values are held in the clear in memory only. At rest each is sealed (common/envelope.h)
// under a context naming its record and variable ("instance/inst-000042/env/HF_HOME"), so a value
// copied into another record does not open. The API shows literals and references, never a
// secret's value; the store holds sealed literals and references; only the agent of the node
// that runs the workload is sent the values. Errors name the variable and never quote a value.
// Thread-safety: plain values and functions.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/result.h"

namespace tessera {
class Sealer;
}  // namespace tessera

namespace tessera::core {

struct EnvValue {
  std::string value = "";   // A literal, in the clear (memory only).
  std::string secret = "";  // Or the name of a secret of the tenant.
  std::string sealed = "";  // The literal as stored: enc:v1:...; empty until sealed.
  // The literal was dropped from the record: its instance ended, and values are not kept at rest
  // for work that will not run again.
  bool dropped = false;

  bool is_secret() const { return !secret.empty(); }
};
using Env = std::map<std::string, EnvValue>;

// Limits: variables per workload, bytes of one literal, bytes of all literals together.
inline constexpr size_t kMaxEnvVars = 128;
inline constexpr size_t kMaxEnvValueBytes = 32 << 10;
inline constexpr size_t kMaxEnvBytes = 256 << 10;

// True for a secret's name: 1 to 63 of [A-Za-z0-9_.-], starting with a letter or digit.
bool IsValidSecretName(std::string_view name);

// Reads the optional `env` object of a request: {"NAME": "value" | {"secret": "name"}}. Names are
// [A-Za-z_][A-Za-z0-9_]* up to 128 bytes, and not the ones Tessera sets (CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES, CUDA_MPS_*, TESSERA_*, and a group's MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE, RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, PET_*); values are UTF-8 without NUL bytes.
// Errors go to `f` as "env.NAME: ..." and never quote a value.
void ReadEnv(JsonFields& f, Env& out);

// The API form: literals as strings, references as {"secret": "name"}, dropped literals as null.
nlohmann::json EnvJson(const Env& env);
// The stored form: {"NAME": {"sealed": "enc:v1:..."} | {"secret": "name"} | {"dropped": true}}.
// REQUIRES: every literal is sealed (SealEnv).
nlohmann::json StoredEnvJson(const Env& env);
// Reads the stored form; literals stay sealed (OpenEnv opens them). DataLoss naming `where`.
Result<Env> EnvFromStoredJson(const nlohmann::json& j, const std::string& where);

// The context a literal of record `record` ("instance/inst-000042") is sealed under.
std::string EnvContext(std::string_view record, std::string_view name);
// Seals every literal of `env` that is not yet sealed. Without a sealer, FailedPrecondition
// saying the server has no key-encryption key. Errors name the variable, never its value.
Status SealEnv(Sealer* sealer, std::string_view record, Env& env);
// Opens every sealed literal of `env` into `value`. Errors name the record and variable and the
// key id (a key missing from the keyring: the server must not start without it).
Status OpenEnv(Sealer* sealer, std::string_view record, Env& env);
// Drops every literal's value and sealed form (the record's work ended); references stay.
void DropEnvValues(Env& env);
// The names of the secrets `env` refers to.
std::vector<std::string> SecretRefs(const Env& env);

}  // namespace tessera::core
