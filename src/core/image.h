// An instance's OCI image (docs/api.md, "Images"): the reference, when its node's agent pulls it,
// and the registry credentials it pulls with; and the progress of a pull as the agent reports it.
// The rules for a reference are one pure function (ValidateImageRef) with a table test beside it.
//
// The registry password is a secret: the API form of an image (ImageJson with Secrets::kHidden)
// shows the username only, and only the store's form and the node's own agent's desired state
// carry the password. It is stored as given until envelope encryption (issue 29) wraps it.
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/result.h"

namespace tessera::core {

// When the node's agent pulls the image: only when its cache lacks it (the default), before every
// start, or never (the image must be in the cache already).
enum class PullPolicy { kIfNotPresent, kAlways, kNever };
std::string_view PullPolicyName(PullPolicy p);  // "if_not_present", "always", "never".
std::optional<PullPolicy> ParsePullPolicy(std::string_view s);

// Credentials for the image's registry: a username and a password or token.
struct RegistryAuth {
  std::string username;
  std::string password;  // Secret: never shown, logged or audited.
};

// Whether a JSON form carries secrets: the API's never does; the store's and the agent's do.
enum class Secrets { kHidden, kIncluded };

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
// password. `pull_policy` and `registry_auth` are refused without an image.
void ReadImageSpec(JsonFields& f, const nlohmann::json& body, ImageSpec& out);

// Adds `image`, `pull_policy` and `registry_auth` to `j` when `image` is set: registry_auth as
// {"username"} under Secrets::kHidden, {"username", "password"} under Secrets::kIncluded.
void AddImageJson(const ImageSpec& image, Secrets secrets, nlohmann::json& j);

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
