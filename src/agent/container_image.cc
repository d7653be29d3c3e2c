#include "agent/container_image.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "agent/container_exec.h"
#include "common/files.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::agent {
namespace fs = std::filesystem;
namespace {

bool Contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Podman's last "Error: ..." line (the verdict; earlier lines are retries), cut short.
std::string LastErrorLine(const std::string& err) {
  std::string last;
  size_t start = 0;
  while (start < err.size()) {
    size_t end = err.find('\n', start);
    if (end == std::string::npos) end = err.size();
    const std::string line = err.substr(start, end - start);
    if (line.rfind("Error: ", 0) == 0) last = line.substr(7);
    start = end + 1;
  }
  if (last.empty()) last = err.substr(0, err.find('\n'));
  return EscapeForTerminal(last.substr(0, 300));
}

// The bytes of every regular file under `dir`; files come and go while podman works, so errors
// only end the walk early.
int64_t DirBytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      const auto size = it->file_size(size_ec);
      if (!size_ec) total += static_cast<int64_t>(size);
    }
  }
  return total;
}

// Removes a directory tree or a file when it goes out of scope.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    if (path.empty()) return;
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

Result<PullPolicy> ParsePullPolicy(std::string_view text) {
  if (text == "if_not_present" || text.empty()) return PullPolicy::kIfNotPresent;
  if (text == "always") return PullPolicy::kAlways;
  if (text == "never") return PullPolicy::kNever;
  return Status::InvalidArgument(
      fmt::format("pull_policy \"{}\": want if_not_present, always or never", Quote(text)));
}

Status ClassifyPullFailure(const std::string& image, const std::string& podman_stderr,
                           bool had_credentials, bool timed_out) {
  const std::string err = Lower(podman_stderr);
  const std::string detail = LastErrorLine(podman_stderr);
  if (timed_out) {
    return Status::Unavailable(fmt::format("image {}: the pull did not finish in time", image))
        .WithReason("pull_timeout");
  }
  if (Contains(err, "no space left on device")) {
    return Status::ResourceExhausted(
               fmt::format("image {}: no space left on device while pulling", image))
        .WithReason("disk_full");
  }
  if (Contains(err, "unauthorized") || Contains(err, "authentication required") ||
      Contains(err, "access to the resource is denied") || Contains(err, "denied:")) {
    return Status::Unauthenticated(
               fmt::format("image {}: unauthorized: {}", image,
                           had_credentials ? "the registry refused the credentials"
                                           : "the registry wants credentials and none were given"))
        .WithReason("registry_unauthorized");
  }
  if (Contains(err, "manifest unknown") || Contains(err, "name unknown") ||
      Contains(err, "not found")) {
    return Status::NotFound(
               fmt::format("image {}: not found in its registry (manifest unknown)", image))
        .WithReason("image_not_found");
  }
  for (const char* net :
       {"connection refused", "no such host", "i/o timeout", "network is unreachable",
        "no route to host", "pinging container registry", "tls handshake", "connection reset"}) {
    if (Contains(err, net)) {
      return Status::Unavailable(fmt::format("image {}: registry unreachable: {}", image, detail))
          .WithReason("registry_unreachable");
    }
  }
  return Status::Unavailable(fmt::format("image {}: pull failed: {}", image, detail))
      .WithReason("pull_failed");
}

ImageStore::ImageStore(Options options) : options_(std::move(options)) {
  if (options_.pull_tmp_dir.empty()) options_.pull_tmp_dir = options_.state_dir + "/pulls";
}

Result<std::unique_ptr<ImageStore>> ImageStore::Open(Options options) {
  if (options.state_dir.empty()) return Status::InvalidArgument("image store: no state_dir");
  std::unique_ptr<ImageStore> store(new ImageStore(std::move(options)));
  for (const auto& dir : {store->options_.state_dir, store->options_.pull_tmp_dir}) {
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Internal(fmt::format("{}: cannot create: {}", dir, strerror(errno)));
    }
  }
  if (chmod(store->options_.state_dir.c_str(), 0700) != 0) {
    return Status::Internal(
        fmt::format("{}: cannot chmod: {}", store->options_.state_dir, strerror(errno)));
  }
  TESSERA_RETURN_IF_ERROR(store->Load());
  return store;
}

Status ImageStore::Load() {
  const std::string path = options_.state_dir + "/images.json";
  const auto text = ReadSmallFile(path);
  if (!text) return Status::Ok();
  auto j = ParseJson(*text, path);
  // The cache's bookkeeping is advisory: a damaged file costs eviction order, not images.
  if (!j.ok() || !j->is_object() || !j->contains("images") || !(*j)["images"].is_array()) {
    spdlog::warn("{}: unreadable, starting an empty image cache", path);
    return Status::Ok();
  }
  for (const auto& e : (*j)["images"]) {
    if (!e.is_object()) continue;
    entries_.push_back(
        {e.value("image", ""), e.value("id", ""), e.value("last_used_unix_ms", int64_t{0})});
  }
  return Status::Ok();
}

Status ImageStore::SaveLocked() const {
  nlohmann::json images = nlohmann::json::array();
  for (const auto& e : entries_) {
    images.push_back(
        {{"image", e.image}, {"id", e.id}, {"last_used_unix_ms", e.last_used_unix_ms}});
  }
  return WritePrivateFile(options_.state_dir + "/images.json",
                          DumpJson({{"images", images}}, 1) + "\n", 0600);
}

int64_t ImageStore::NowMs() const {
  const Clock& clock = options_.clock != nullptr ? *options_.clock : SystemClock::Get();
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock.Now().time_since_epoch())
      .count();
}

bool ImageStore::Insecure(const ImageReference& ref) const {
  return std::find(options_.insecure_registries.begin(), options_.insecure_registries.end(),
                   ref.registry) != options_.insecure_registries.end();
}

Result<bool> ImageStore::Present(const std::string& image) const {
  TESSERA_ASSIGN_OR_RETURN(ImageReference ref, ParseImageReference(image));
  auto r = RunCommand({options_.podman, "image", "exists", ref.Canonical()});
  if (!r.ok()) return r.status();
  if (r->exit_code == 0) return true;
  if (r->exit_code == 1) return false;
  return Status::Unavailable(fmt::format("image {}: podman image exists failed: {}",
                                         ref.Canonical(), LastErrorLine(r->err)));
}

Status ImageStore::Record(const std::string& image, bool pulled) {
  auto r = RunCommand({options_.podman, "image", "inspect", "--format", "{{.Id}}", image});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return Status::Unavailable(
        fmt::format("image {}: podman image inspect failed: {}", image, LastErrorLine(r->err)));
  }
  const std::string id = r->out.substr(0, r->out.find('\n'));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.image == image; });
  if (it == entries_.end()) {
    // Only what this store pulled is its to count and evict.
    if (!pulled) return Status::Ok();
    entries_.push_back({image, id, NowMs()});
  } else {
    it->id = id;
    it->last_used_unix_ms = NowMs();
  }
  return SaveLocked();
}

Status ImageStore::MarkUsed(const std::string& image) {
  TESSERA_ASSIGN_OR_RETURN(ImageReference ref, ParseImageReference(image));
  return Record(ref.Canonical(), false);
}

Status ImageStore::Pull(const std::string& image, PullPolicy policy,
                        const std::optional<RegistryCredentials>& auth,
                        const PullProgressFn& progress) {
  TESSERA_ASSIGN_OR_RETURN(ImageReference ref, ParseImageReference(image));
  const std::string name = ref.Canonical();
  if (policy != PullPolicy::kAlways) {
    TESSERA_ASSIGN_OR_RETURN(bool present, Present(name));
    if (present) {
      TESSERA_RETURN_IF_ERROR(Record(name, false));
      if (progress) progress({name, "done", 0, 0, 100});
      return Status::Ok();
    }
    if (policy == PullPolicy::kNever) {
      return Status::NotFound(
                 fmt::format("image {}: not on this node, and pull_policy is never", name))
          .WithReason("image_not_present");
    }
  }
  TESSERA_RETURN_IF_ERROR(RunPull(ref, auth, progress));
  TESSERA_RETURN_IF_ERROR(Record(name, true));
  if (options_.cache_limit_bytes > 0) {
    auto evicted = Evict({name});
    if (!evicted.ok()) spdlog::warn("image cache: {}", evicted.status().ToString());
  }
  return Status::Ok();
}

Status ImageStore::RunPull(const ImageReference& ref,
                           const std::optional<RegistryCredentials>& auth,
                           const PullProgressFn& progress) {
  const std::string name = ref.Canonical();
  std::string tmp = options_.pull_tmp_dir + "/pull-XXXXXX";
  if (mkdtemp(tmp.data()) == nullptr) {
    return Status::Internal(fmt::format("{}: cannot create: {}", tmp, strerror(errno)));
  }
  const RemoveOnExit remove_tmp{tmp};
  // Always an auth file of this pull's own, empty without credentials: podman's default one
  // may hold the operator's logins, which a tenant must not borrow.
  std::string auth_file = options_.state_dir + "/auth-XXXXXX";
  const int fd = mkstemp(auth_file.data());
  if (fd < 0)
    return Status::Internal(fmt::format("{}: cannot create: {}", auth_file, strerror(errno)));
  close(fd);
  const RemoveOnExit remove_auth{auth_file};
  nlohmann::json auths = nlohmann::json::object();
  if (auth) auths[ref.registry] = {{"auth", Base64Encode(auth->username + ":" + auth->password)}};
  TESSERA_RETURN_IF_ERROR(WritePrivateFile(auth_file, DumpJson({{"auths", auths}}) + "\n", 0600));

  const auto start = std::chrono::steady_clock::now();
  PullProgress state{name, "resolving", 0, 0, 0};
  if (progress) progress(state);
  const bool insecure = Insecure(ref);
  auto total = FetchImageSize(ref, insecure, auth,
                              std::min(options_.manifest_timeout, options_.pull_deadline / 2));
  if (total.ok()) state.bytes_total = *total;

  std::vector<std::string> argv = {options_.podman, "pull", "--quiet", "--authfile=" + auth_file};
  if (insecure) argv.push_back("--tls-verify=false");
  argv.push_back(name);
  ExecOptions exec;
  // containers/image stages blobs in TMPDIR (podman's image_copy_tmp_dir follows it).
  exec.env = {{"TMPDIR", tmp}};
  exec.deadline =
      std::max(std::chrono::milliseconds(1000),
               options_.pull_deadline - std::chrono::duration_cast<std::chrono::milliseconds>(
                                            std::chrono::steady_clock::now() - start));
  state.phase = "downloading";
  exec.on_tick = [&] {
    state.bytes_done = std::max(state.bytes_done, DirBytes(tmp));
    if (state.bytes_total > 0) {
      state.percent =
          static_cast<int>(std::min<int64_t>(99, state.bytes_done * 100 / state.bytes_total));
    }
    if (progress) progress(state);
  };
  auto r = RunCommand(argv, exec);
  if (!r.ok()) return r.status();
  if (r->exit_code != 0 || r->timed_out) {
    return ClassifyPullFailure(name, r->err, auth.has_value(), r->timed_out);
  }
  state.phase = "done";
  state.bytes_done = std::max(state.bytes_done, state.bytes_total);
  state.percent = 100;
  if (progress) progress(state);
  return Status::Ok();
}

Result<std::vector<ImageStore::PodmanImage>> ImageStore::ListImages() const {
  auto r = RunCommand({options_.podman, "images", "--format", "json"});
  if (!r.ok()) return r.status();
  if (r->exit_code != 0) {
    return Status::Unavailable("podman images failed: " + LastErrorLine(r->err));
  }
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(r->out, "podman images"));
  std::vector<PodmanImage> out;
  if (!j.is_array()) return out;
  for (const auto& i : j) {
    if (!i.is_object()) continue;
    out.push_back(
        {i.value("Id", ""), i.value("Size", int64_t{0}), i.value("Containers", int64_t{0})});
  }
  return out;
}

Result<int64_t> ImageStore::CachedBytes() const {
  TESSERA_ASSIGN_OR_RETURN(std::vector<PodmanImage> images, ListImages());
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> ids;
  for (const auto& e : entries_) ids.insert(e.id);
  int64_t total = 0;
  for (const auto& i : images) {
    if (ids.count(i.id) != 0) total += i.size;
  }
  return total;
}

Result<std::vector<std::string>> ImageStore::Evict(const std::vector<std::string>& keep) {
  std::set<std::string> kept;
  for (const auto& k : keep) {
    auto ref = ParseImageReference(k);
    kept.insert(ref.ok() ? ref->Canonical() : k);
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<PodmanImage> images, ListImages());
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, PodmanImage> by_id;
  for (const auto& i : images) by_id[i.id] = i;
  // Images removed behind the store's back are forgotten.
  std::erase_if(entries_, [&](const Entry& e) { return by_id.count(e.id) == 0; });
  std::set<std::string> ids;
  for (const auto& e : entries_) ids.insert(e.id);
  int64_t total = 0;
  for (const auto& id : ids) total += by_id[id].size;
  std::vector<std::string> evicted;
  if (options_.cache_limit_bytes <= 0 || total <= options_.cache_limit_bytes) {
    TESSERA_RETURN_IF_ERROR(SaveLocked());
    return evicted;
  }
  std::vector<Entry> order = entries_;
  std::stable_sort(order.begin(), order.end(), [](const Entry& a, const Entry& b) {
    return a.last_used_unix_ms < b.last_used_unix_ms;
  });
  for (const auto& victim : order) {
    if (total <= options_.cache_limit_bytes) break;
    if (kept.count(victim.image) != 0 || by_id[victim.id].containers > 0) continue;
    // Without --force: podman refuses an image a container started from in the meantime.
    auto r = RunCommand({options_.podman, "rmi", victim.image});
    if (!r.ok() || r->exit_code != 0) continue;
    std::erase_if(entries_, [&](const Entry& e) { return e.image == victim.image; });
    const bool id_still_named = std::any_of(entries_.begin(), entries_.end(),
                                            [&](const Entry& e) { return e.id == victim.id; });
    if (!id_still_named) total -= by_id[victim.id].size;
    evicted.push_back(victim.image);
  }
  TESSERA_RETURN_IF_ERROR(SaveLocked());
  return evicted;
}

}  // namespace tessera::agent
