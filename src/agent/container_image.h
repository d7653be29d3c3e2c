// The node's image store: pulls images through podman as a visible step with byte progress,
// keeps them in a node-local cache with a size cap, and evicts the least recently used images
// no container uses.
//
// Where progress comes from, and why (measured on podman 4.3.1):
// - `podman pull`'s output, when not a terminal, is one "Copying blob sha256:..." line as each
//   blob starts: no byte counts, no completion.
// - The REST service's compat /images/create streams {"current","total"} per layer once a
//   second, but needs a root API daemon on the node (a socket that can start privileged
//   containers), registries.conf for insecure registries, and a cancelled request does not stop
//   the pull.
// - So: the `podman pull` CLI (its deadline is a SIGKILL; auth and TLS are per-call flags) with
//   TMPDIR set to a directory of this pull's own, where containers/image stages every blob as it
//   downloads it (measured: the files grow as bytes arrive, until the layers are committed);
//   bytes done = their sizes, bytes total = the config and layer sizes of the registry's manifest
//   (container_registry.h). When the manifest cannot be read the total is 0 (unknown) and the
//   pull still runs: podman's verdict is the one that counts.
//
// Credentials go to podman in an `--authfile` written 0600 in the store's own directory and
// removed after the pull; never on argv, never in a log or an error.
//
// The cache counts only images this store pulled (its state file, images.json, keeps each one's
// id and last use); images the operator loaded otherwise are neither counted nor evicted. Sizes
// are podman's per-image sizes, so layers shared between images are counted once per image.
//
// Thread-safety: every method may be called from any thread, several pulls at once; a mutex
// guards the state file.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/container_registry.h"
#include "common/clock.h"
#include "common/result.h"

namespace tessera::agent {

enum class PullPolicy { kIfNotPresent, kAlways, kNever };

// "if_not_present", "always", "never". InvalidArgument names the text.
Result<PullPolicy> ParsePullPolicy(std::string_view text);

struct PullProgress {
  std::string image;  // The canonical reference.
  // "resolving" (reading the manifest), "downloading", "done".
  std::string phase;
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;  // 0 = unknown.
  int percent = 0;          // 0..100; 100 only once the image is stored.
};

using PullProgressFn = std::function<void(const PullProgress&)>;

// Turns a failed `podman pull` into a Status whose message names the image, with a reason:
// "image_not_found" (NotFound), "registry_unauthorized" (Unauthenticated), "disk_full"
// (ResourceExhausted), "registry_unreachable" or "pull_timeout" or "pull_failed" (Unavailable).
// Pure; `podman_stderr` is podman's error output.
Status ClassifyPullFailure(const std::string& image, const std::string& podman_stderr,
                           bool had_credentials, bool timed_out);

class ImageStore {
 public:
  struct Options {
    std::string podman = "/usr/bin/podman";
    // Agent-owned; made 0700. Holds images.json, the auth files and (by default) the pulls'
    // staging directories.
    std::string state_dir;
    // Where each pull stages its blobs ("" = state_dir/pulls); needs room for the largest image.
    std::string pull_tmp_dir;
    int64_t cache_limit_bytes = 0;  // 0 = no cap.
    // "host[:port]" of registries reached without TLS verification (plain HTTP for the manifest).
    std::vector<std::string> insecure_registries;
    std::chrono::milliseconds pull_deadline{std::chrono::minutes(30)};
    std::chrono::milliseconds manifest_timeout{std::chrono::seconds(10)};
    const Clock* clock = nullptr;  // For last-use times; SystemClock when null.
  };

  // Makes the state directory and reads images.json (a missing one is an empty cache). Errors
  // name the path.
  static Result<std::unique_ptr<ImageStore>> Open(Options options);

  // Makes `image` present according to `policy`, calling `progress` (may be empty) from this
  // thread about every quarter second while it downloads and once at the end. Blocks at most
  // about pull_deadline. Afterwards the cache is brought under its cap (never evicting `image`).
  // Errors: see ClassifyPullFailure; InvalidArgument for a malformed reference; NotFound
  // ("image_not_present") for kNever and an absent image.
  Status Pull(const std::string& image, PullPolicy policy,
              const std::optional<RegistryCredentials>& auth, const PullProgressFn& progress = {});

  // Whether podman has the image.
  Result<bool> Present(const std::string& image) const;

  // Records that a container starts from `image` now, for least-recently-used eviction.
  Status MarkUsed(const std::string& image);

  // Removes this store's least recently used images that no container (running or not) uses and
  // that are not in `keep`, until its images fit the cap. Returns what it removed.
  Result<std::vector<std::string>> Evict(const std::vector<std::string>& keep = {});

  // The bytes of this store's images that are present.
  Result<int64_t> CachedBytes() const;

 private:
  struct Entry {
    std::string image;
    std::string id;
    int64_t last_used_unix_ms = 0;
  };
  struct PodmanImage {
    std::string id;
    int64_t size = 0;
    int64_t containers = 0;
  };

  explicit ImageStore(Options options);
  Status Load();
  Status SaveLocked() const;
  Status Record(const std::string& image, bool pulled);
  Result<std::vector<PodmanImage>> ListImages() const;
  Status RunPull(const ImageReference& ref, const std::optional<RegistryCredentials>& auth,
                 const PullProgressFn& progress);
  bool Insecure(const ImageReference& ref) const;
  int64_t NowMs() const;

  Options options_;
  mutable std::mutex mu_;
  std::vector<Entry> entries_;  // GUARDED_BY(mu_)
};

}  // namespace tessera::agent
