#include "agent/container_registry.h"

#include <fmt/format.h>
#include <httplib.h>
#include <sys/utsname.h>

#include <map>
#include <memory>

#include "common/json.h"
#include "common/text.h"

namespace tessera::agent {
namespace {

constexpr char kAcceptManifests[] =
    "application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

bool AllOf(const std::string& s, std::string_view allowed_extra) {
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    allowed_extra.find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return !s.empty();
}

// The architecture as OCI platforms name it.
std::string PlatformArchitecture() {
  utsname u{};
  if (uname(&u) != 0) return "amd64";
  const std::string m = u.machine;
  if (m == "aarch64") return "arm64";
  if (m == "x86_64") return "amd64";
  return m;
}

// key="value" pairs of a WWW-Authenticate challenge after its scheme.
std::map<std::string, std::string> ChallengeParams(const std::string& header) {
  std::map<std::string, std::string> out;
  size_t i = header.find(' ');
  while (i != std::string::npos && i < header.size()) {
    while (i < header.size() && (header[i] == ' ' || header[i] == ',')) ++i;
    const size_t eq = header.find('=', i);
    if (eq == std::string::npos) break;
    const std::string key = header.substr(i, eq - i);
    std::string value;
    size_t j = eq + 1;
    if (j < header.size() && header[j] == '"') {
      const size_t close = header.find('"', j + 1);
      if (close == std::string::npos) break;
      value = header.substr(j + 1, close - j - 1);
      j = close + 1;
    } else {
      const size_t comma = header.find(',', j);
      value = header.substr(j, comma == std::string::npos ? std::string::npos : comma - j);
      j = comma;
    }
    out[key] = value;
    i = j;
  }
  return out;
}

// "https://auth.example.com/token" -> origin and path.
bool SplitUrl(const std::string& url, std::string& origin, std::string& path) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return false;
  const size_t slash = url.find('/', scheme + 3);
  origin = url.substr(0, slash);
  path = slash == std::string::npos ? "/" : url.substr(slash);
  return true;
}

std::unique_ptr<httplib::Client> MakeClient(const std::string& origin,
                                            std::chrono::milliseconds timeout) {
  auto client = std::make_unique<httplib::Client>(origin);
  client->set_connection_timeout(timeout);
  client->set_read_timeout(timeout);
  client->set_write_timeout(timeout);
  client->set_keep_alive(false);
  return client;
}

class ManifestReader {
 public:
  ManifestReader(const ImageReference& ref, bool insecure,
                 const std::optional<RegistryCredentials>& credentials,
                 std::chrono::milliseconds timeout)
      : ref_(ref), credentials_(credentials), timeout_(timeout) {
    const std::string host = ref.registry == "docker.io" ? "registry-1.docker.io" : ref.registry;
    client_ = MakeClient((insecure ? "http://" : "https://") + host, timeout);
  }

  // The manifest (or index) at `reference`, authenticating when the registry asks.
  Result<nlohmann::json> Get(const std::string& reference) {
    const std::string path = fmt::format("/v2/{}/manifests/{}", ref_.repository, reference);
    for (int attempt = 0; attempt < 2; ++attempt) {
      httplib::Headers headers = {{"Accept", kAcceptManifests}};
      if (!authorization_.empty()) headers.emplace("Authorization", authorization_);
      auto res = client_->Get(path, headers);
      if (!res) {
        return Status::Unavailable(fmt::format("image {}: registry {} unreachable: {}",
                                               ref_.Canonical(), ref_.registry,
                                               httplib::to_string(res.error())));
      }
      if (res->status == 401 && attempt == 0) {
        TESSERA_RETURN_IF_ERROR(Authenticate(res->get_header_value("WWW-Authenticate")));
        continue;
      }
      if (res->status == 401 || res->status == 403) {
        return Status::Unauthenticated(fmt::format("image {}: the registry refused {} ({})",
                                                   ref_.Canonical(),
                                                   credentials_ ? "the credentials"
                                                                : "access "
                                                                  "without credentials",
                                                   res->status));
      }
      if (res->status == 404) {
        return Status::NotFound(
            fmt::format("image {}: manifest unknown to the registry", ref_.Canonical()));
      }
      if (res->status != 200) {
        return Status::Unavailable(fmt::format(
            "image {}: the registry answered {} for its manifest", ref_.Canonical(), res->status));
      }
      return ParseJson(res->body, "manifest of " + ref_.Canonical());
    }
    return Status::Internal("unreachable");
  }

 private:
  Status Authenticate(const std::string& challenge) {
    const std::string scheme = challenge.substr(0, challenge.find(' '));
    const std::string basic =
        credentials_ ? Base64Encode(credentials_->username + ":" + credentials_->password) : "";
    if (scheme == "Basic") {
      if (!credentials_) return Refused("no credentials were given");
      authorization_ = "Basic " + basic;
      return Status::Ok();
    }
    if (scheme != "Bearer") return Refused("unknown auth scheme " + Quote(scheme, 20));
    auto params = ChallengeParams(challenge);
    std::string origin;
    std::string path;
    if (!SplitUrl(params["realm"], origin, path)) return Refused("no token realm");
    const std::string scope = params.count("scope") != 0
                                  ? params["scope"]
                                  : fmt::format("repository:{}:pull", ref_.repository);
    httplib::Params query = {{"scope", scope}};
    if (params.count("service") != 0) query.emplace("service", params["service"]);
    httplib::Headers headers;
    if (credentials_) headers.emplace("Authorization", "Basic " + basic);
    auto token_client = MakeClient(origin, timeout_);
    auto res = token_client->Get(path, query, headers);
    if (!res || res->status != 200) return Refused("the token service refused");
    auto body = ParseJson(res->body, "token");
    if (!body.ok() || !body->is_object()) return Refused("the token service's answer is not JSON");
    for (const char* key : {"token", "access_token"}) {
      if (body->contains(key) && (*body)[key].is_string()) {
        authorization_ = "Bearer " + (*body)[key].get<std::string>();
        return Status::Ok();
      }
    }
    return Refused("the token service gave no token");
  }

  Status Refused(const std::string& why) const {
    return Status::Unauthenticated(
        fmt::format("image {}: unauthorized: {}", ref_.Canonical(), why));
  }

  const ImageReference& ref_;
  const std::optional<RegistryCredentials>& credentials_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<httplib::Client> client_;
  std::string authorization_;
};

int64_t SizeField(const nlohmann::json& j) {
  return j.is_object() && j.contains("size") && j["size"].is_number_integer()
             ? j["size"].get<int64_t>()
             : -1;
}

}  // namespace

std::string ImageReference::Canonical() const {
  if (!digest.empty()) return fmt::format("{}/{}@{}", registry, repository, digest);
  return fmt::format("{}/{}:{}", registry, repository, tag);
}

Result<ImageReference> ParseImageReference(const std::string& text) {
  const auto bad = [&](const char* why) {
    return Status::InvalidArgument(fmt::format("image {}: {}", Quote(text, 200), why));
  };
  if (text.empty() || text.size() > 512) return bad("want 1 to 512 characters");
  ImageReference ref;
  std::string rest = text;
  const size_t at = rest.find('@');
  if (at != std::string::npos) {
    ref.digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    const size_t colon = ref.digest.find(':');
    const std::string hex = colon == std::string::npos ? "" : ref.digest.substr(colon + 1);
    if (colon == std::string::npos || !AllOf(ref.digest.substr(0, colon), "+._-") || hex.empty() ||
        hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return bad("the digest is not algorithm:hex");
    }
  }
  const size_t slash = rest.find('/');
  const std::string first = rest.substr(0, slash);
  if (slash != std::string::npos &&
      (first.find_first_of(".:") != std::string::npos || first == "localhost")) {
    ref.registry = first;
    rest = rest.substr(slash + 1);
    if (!AllOf(ref.registry, ".-:ABCDEFGHIJKLMNOPQRSTUVWXYZ[]")) return bad("bad registry host");
  } else {
    ref.registry = "docker.io";
  }
  const size_t last_slash = rest.rfind('/');
  const size_t colon = rest.find(':', last_slash == std::string::npos ? 0 : last_slash);
  if (colon != std::string::npos) {
    ref.tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (ref.tag.size() > 128 || !AllOf(ref.tag, "._-ABCDEFGHIJKLMNOPQRSTUVWXYZ")) {
      return bad("bad tag");
    }
  } else if (ref.digest.empty()) {
    ref.tag = "latest";
  }
  if (!AllOf(rest, "._/-") || rest.front() == '/' || rest.back() == '/' ||
      rest.find("//") != std::string::npos) {
    return bad("the repository wants lower-case letters, digits and . _ - /");
  }
  if (ref.registry == "docker.io" && rest.find('/') == std::string::npos) rest = "library/" + rest;
  ref.repository = rest;
  return ref;
}

Result<int64_t> FetchImageSize(const ImageReference& ref, bool insecure,
                               const std::optional<RegistryCredentials>& credentials,
                               std::chrono::milliseconds timeout) {
  ManifestReader reader(ref, insecure, credentials, timeout);
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json manifest,
                           reader.Get(ref.digest.empty() ? ref.tag : ref.digest));
  if (manifest.is_object() && manifest.contains("manifests") && manifest["manifests"].is_array()) {
    const std::string arch = PlatformArchitecture();
    std::string digest;
    for (const auto& m : manifest["manifests"]) {
      if (!m.is_object() || !m.contains("platform") || !m.contains("digest")) continue;
      const auto& p = m["platform"];
      if (p.value("os", "") == "linux" && p.value("architecture", "") == arch) {
        digest = m["digest"].is_string() ? m["digest"].get<std::string>() : "";
        break;
      }
    }
    if (digest.empty()) {
      return Status::NotFound(
          fmt::format("image {}: no linux/{} manifest in its index", ref.Canonical(), arch));
    }
    TESSERA_ASSIGN_OR_RETURN(manifest, reader.Get(digest));
  }
  if (!manifest.is_object() || !manifest.contains("layers") || !manifest["layers"].is_array()) {
    return Status::Unavailable(
        fmt::format("image {}: its manifest lists no layer sizes", ref.Canonical()));
  }
  int64_t total = std::max<int64_t>(0, SizeField(manifest.value("config", nlohmann::json())));
  for (const auto& layer : manifest["layers"]) {
    const int64_t size = SizeField(layer);
    if (size < 0) {
      return Status::Unavailable(
          fmt::format("image {}: a layer of its manifest has no size", ref.Canonical()));
    }
    total += size;
  }
  return total;
}

}  // namespace tessera::agent
