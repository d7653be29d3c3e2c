// Image references and the one question the agent asks a registry itself: how many bytes an
// image is, from its manifest (config plus layers), so a pull can report a percentage. Podman's
// own pull prints no byte counts when its output is not a terminal; the bytes done come from the
// blobs it stages (container_image.h), the total from here.
//
// The registry protocol is the OCI distribution API: GET /v2/<repository>/manifests/<reference>,
// an index followed to the linux/amd64 manifest, and the two auth schemes registries use (Basic,
// and Bearer tokens from the realm named in WWW-Authenticate). Credentials travel in headers only
// and are never part of an error message.
//
// Thread-safety: pure functions and blocking HTTP calls; any thread may call them.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "common/result.h"

namespace tessera::agent {

struct ImageReference {
  std::string registry;    // "registry.example.com:5000"; "docker.io" for Docker Hub.
  std::string repository;  // "team/train"; "library/ubuntu" for Docker Hub's official images.
  std::string tag;         // "latest" when neither a tag nor a digest was given.
  std::string digest;      // "sha256:..."; when set, the tag is ignored for fetching.
  // "registry/repository:tag" or "registry/repository@digest": the name podman is given, so no
  // short-name lookup (registries.conf search lists) can pick another registry.
  std::string Canonical() const;
};

// Parses "[registry/]repository[:tag][@digest]" as Docker does: the first component is a registry
// when it has a '.' or ':' or is "localhost"; else the image is on Docker Hub. InvalidArgument
// names the text.
Result<ImageReference> ParseImageReference(const std::string& text);

struct RegistryCredentials {
  std::string username;
  std::string password;  // Or a token.
};

// The bytes a pull of `ref` downloads: the config blob plus every layer of the linux/amd64
// manifest. `insecure` uses plain HTTP (registries the agent was told are insecure; one that
// serves HTTPS with a certificate nobody signed gives no size, while podman still pulls). Errors:
// Unauthenticated (401/403), NotFound (manifest unknown), Unavailable (unreachable, timeout),
// each naming the image.
Result<int64_t> FetchImageSize(const ImageReference& ref, bool insecure,
                               const std::optional<RegistryCredentials>& credentials,
                               std::chrono::milliseconds timeout);

}  // namespace tessera::agent
