// An instance's OCI image (docs/api.md, "Images"): the reference, when its node's agent pulls it,
// and the registry credentials it pulls with; and the progress of a pull as the agent reports it.
// The rules for a reference are one pure function (ValidateImageRef) with a table test beside it.
//
// The registry password is a secret: the API form of an image (Secrets::kHidden) shows the
// username only (and the name of the tenant's secret the password comes from, if it does); the
// store's form (Secrets::kStored) holds it sealed (common/envelope.h) under the context
// "<record>/registry_auth/password"; only the node's own agent's desired state (Secrets::kIncluded)
// carries it in the clear.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/result.h"

namespace tessera {
class Sealer;
}  // namespace tessera

namespace tessera::core {

// When the node's agent pulls the image: only when its cache lacks it (the default), before every
// start, or never (the image must be in the cache already).
enum class PullPolicy { kIfNotPresent, kAlways, kNever };
std::string_view PullPolicyName(PullPolicy p);  // "if_not_present", "always", "never".
std::optional<PullPolicy> ParsePullPolicy(std::string_view s);

// Credentials for the image's registry: a username and a password or token.
struct RegistryAuth {
  std::string username;
  std::string password;  // Secret: never shown, logged or audited. In the clear in memory.
  std::string password_secret = "";  // Or: the tenant's secret holding it (resolved for the agent).
  std::string sealed = "";           // The password as stored: enc:v1:...; empty until sealed.
};

// Which JSON form: the API's (no secret values), the store's (literals sealed), the agent's
// (values in the clear; references to the tenant's secrets are resolved by the caller).
enum class Secrets { kHidden, kStored, kIncluded };

struct ImageSpec {
  std::string ref;  // Empty: no image; the instance runs its command as a bare process.
  PullPolicy pull_policy = PullPolicy::kIfNotPresent;
  std::optional<RegistryAuth> auth;

  bool empty() const { return ref.empty(); }
};

// The longest image reference, and the longest registry username or password, in bytes.
inline constexpr size_t kMaxImageRefBytes = 255;
inline constexpr size_t kMaxRegistryAuthBytes = 1024;

// OK, or InvalidArgument saying what is wrong with `ref` (without a field name): 1-255 bytes
// without whitespace or control characters; an optional registry host (lowercase, dotted, or
// `localhost`) with an optional `:port`; lowercase path components of [a-z0-9._-], each starting
// and ending with a letter or digit; an optional `:tag` ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}); and
// an optional `@sha256:` followed by 64 lowercase hex digits.
Status ValidateImageRef(std::string_view ref);

// Reads `image`, `pull_policy` and `registry_auth` of a create request into `out`; errors go to
// `f` naming the field ("image", "registry_auth.password"). They never quote a username or a
// password. `pull_policy` and `registry_auth` are refused without an image. The password is a
// string or {"secret": "NAME"}; read from the store's form (`form` kStored), {"sealed": "enc:..."}
// too (and a string, as servers before envelope encryption stored it: sealed at the next save).
void ReadImageSpec(JsonFields& f, const nlohmann::json& body, ImageSpec& out,
                   Secrets form = Secrets::kHidden);

// Adds `image`, `pull_policy` and `registry_auth` to `j` when `image` is set: registry_auth as
// {"username"} (and {"password": {"secret"}} for a reference) under Secrets::kHidden, with the
// sealed password under kStored (REQUIRES: sealed, SealImageAuth), with the password in the clear
// under kIncluded (a reference's value is the caller's to add).
void AddImageJson(const ImageSpec& image, Secrets secrets, nlohmann::json& j);

// Seals a literal registry password not yet sealed, under the context of record `record`
// ("instance/inst-000042"); FailedPrecondition without a sealer. OpenImageAuth opens a sealed
// one into `password`; errors name the record and the key id.
Status SealImageAuth(Sealer* sealer, std::string_view record, ImageSpec& image);
Status OpenImageAuth(Sealer* sealer, std::string_view record, ImageSpec& image);
// True when the stored form would hold the password in the clear (a record written before
// envelope encryption, not yet sealed again).
bool HoldsPlainPassword(const ImageSpec& image);

// An image pull in progress, as the node's agent last reported it. Kept in memory only: it
// changes every report, and a restarted server hears it again from the agent.
struct PullProgress {
  int64_t bytes = 0;
  int64_t total_bytes = 0;  // 0: not known yet.
  int percent = 0;          // 0..100.
};

// {"bytes", "total_bytes", "percent", "image"}: what GET /v1/instances/{id} shows as `pull`.
nlohmann::json PullJson(const PullProgress& pull, const std::string& image);

}  // namespace tessera::core
