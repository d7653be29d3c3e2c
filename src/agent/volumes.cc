#include "agent/volumes.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <ftw.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "agent/container_exec.h"
#include "common/files.h"
#include "common/text.h"

namespace tessera::agent {

namespace fs = std::filesystem;

namespace {

bool ValidId(const std::string& id) {
  if (id.size() < 5 || id.size() > 24 || id.rfind("vol-", 0) != 0) return false;
  for (size_t i = 4; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return false;
  }
  return true;
}

// Whether `program` is found on PATH (or is a path that exists).
bool Found(const std::string& program) {
  if (program.find('/') != std::string::npos) return access(program.c_str(), X_OK) == 0;
  const char* path = getenv("PATH");
  for (std::string_view dir : Split(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin", ':')) {
    if (!dir.empty() && access(fmt::format("{}/{}", dir, program).c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Runs a short system command; Internal naming it and its output when it fails.
Status Run(const std::vector<std::string>& argv, const std::string& what) {
  ExecOptions opts;
  opts.deadline = std::chrono::seconds(120);
  // mkfs and mount live in sbin, which a non-login PATH may lack.
  opts.env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
  auto r = RunCommand(argv, opts);
  if (!r.ok()) return r.status().WithPrefix(what);
  if (r->timed_out || r->exit_code != 0) {
    std::string out = r->err.empty() ? r->out : r->err;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    return Status::Internal(fmt::format("{}: {} {}: {}", what, argv[0],
                                        r->timed_out ? "timed out" : "failed",
                                        ToValidUtf8(out.substr(0, 400))));
  }
  return Status::Ok();
}

// Bytes the files under `dir` take, links not followed, other file systems not entered.
int64_t DiskUse(const std::string& dir) {
  std::error_code ec;
  int64_t used = 0;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (lstat(it->path().c_str(), &st) == 0) used += static_cast<int64_t>(st.st_blocks) * 512;
  }
  return used;
}

// ClaimVolumeDir's walk: nftw takes no context, and one thread walks at a time.
thread_local uid_t claim_uid;
thread_local dev_t claim_dev;
thread_local int64_t claim_skipped;

int ClaimEntry(const char* path, const struct stat* st, int, struct FTW*) {
  if (st->st_dev != claim_dev || (!S_ISDIR(st->st_mode) && st->st_nlink > 1)) {
    ++claim_skipped;
    return 0;
  }
  if (lchown(path, claim_uid, claim_uid) != 0) ++claim_skipped;
  return 0;
}

}  // namespace

Result<std::unique_ptr<VolumeHost>> VolumeHost::Open(Options options) {
  std::error_code ec;
  fs::create_directories(options.dir, ec);
  if (ec || !fs::is_directory(options.dir)) {
    return Status::Internal(fmt::format("volumes dir {}: cannot create: {}", options.dir,
                                        ec ? ec.message() : "not a directory"));
  }
  options.dir = fs::absolute(options.dir).lexically_normal().string();
  while (options.dir.size() > 1 && options.dir.back() == '/') options.dir.pop_back();
  // Others may pass through to their own volume (their uid owns it), never list.
  if (geteuid() == 0 && chmod(options.dir.c_str(), 0711) != 0) {
    return Status::Internal(
        fmt::format("volumes dir {}: cannot chmod: {}", options.dir, strerror(errno)));
  }
  std::unique_ptr<VolumeHost> host(new VolumeHost(std::move(options)));
  const Options& o = host->options_;
  if (!o.use_images) {
    host->note_ = "volume images are turned off (--volume-images=false)";
  } else if (geteuid() != 0) {
    host->note_ = "the agent is not root, so it cannot loop-mount a file system per volume";
  } else if (access("/dev/loop-control", R_OK | W_OK) != 0) {
    host->note_ = "no /dev/loop-control: this machine has no loop devices for volume images";
  } else if (!Found(o.mkfs) && !Found("/sbin/" + o.mkfs) && !Found("/usr/sbin/" + o.mkfs)) {
    host->note_ = fmt::format("{} is not installed (Debian's e2fsprogs)", o.mkfs);
  } else {
    host->enforced_ = true;
  }
  if (!host->enforced_) {
    host->note_ += "; a volume is a plain directory and its size is only watched";
  }
  return host;
}

bool VolumeHost::Mounted(const std::string& id) const {
  struct stat top {
  }, root{};
  return stat(options_.dir.c_str(), &top) == 0 &&
         lstat((options_.dir + "/" + id).c_str(), &root) == 0 && S_ISDIR(root.st_mode) &&
         root.st_dev != top.st_dev;
}

Result<std::string> VolumeHost::Prepare(const std::string& id, int64_t size_gib) {
  if (!ValidId(id)) {
    return Status::InvalidArgument(fmt::format("volume id '{}' is not vol-<digits>", Quote(id)));
  }
  if (size_gib < 1 || size_gib > 64 * 1024) {
    return Status::InvalidArgument(
        fmt::format("volume {}: size {} GiB is out of range", id, size_gib));
  }
  const std::string dir = options_.dir + "/" + id;
  const std::string image = dir + ".img";
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::Internal(
        fmt::format("volume {}: cannot create {}: {}", id, dir, strerror(errno)));
  }
  if (!enforced_ || Mounted(id)) return dir;
  struct stat st {};
  if (stat(image.c_str(), &st) != 0) {
    // A sparse file: the disk is taken as the tenant writes. Made under a temporary name, so a
    // crash mid-mkfs never leaves an image that looks made.
    const std::string part = image + ".part";
    const int fd = open(part.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, size_gib << 30) != 0) {
      const std::string why = strerror(errno);
      if (fd >= 0) close(fd);
      unlink(part.c_str());
      return Status::Internal(fmt::format("volume {}: cannot make {}: {}", id, part, why));
    }
    close(fd);
    // -m 0: no blocks kept back for root; the tenant gets the size it pays for, less ext4's own.
    Status s = Run({options_.mkfs, "-q", "-F", "-m", "0", "-L", id, part}, "volume " + id);
    if (s.ok() && rename(part.c_str(), image.c_str()) != 0) {
      s = Status::Internal(
          fmt::format("volume {}: cannot rename {}: {}", id, part, strerror(errno)));
    }
    if (!s.ok()) {
      unlink(part.c_str());
      return s;
    }
  }
  TESSERA_RETURN_IF_ERROR(
      Run({options_.mount, "-o", "loop,nosuid,nodev", image, dir}, "volume " + id));
  if (chmod(dir.c_str(), 0700) != 0) {
    return Status::Internal(
        fmt::format("volume {}: cannot chmod {}: {}", id, dir, strerror(errno)));
  }
  return dir;
}

Status VolumeHost::Remove(const std::string& id) {
  if (!ValidId(id)) {
    return Status::InvalidArgument(fmt::format("volume id '{}' is not vol-<digits>", Quote(id)));
  }
  const std::string dir = options_.dir + "/" + id;
  if (Mounted(id)) {
    Status s = Run({options_.umount, dir}, "volume " + id);
    if (!s.ok()) return Status::Unavailable(s.message());
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec)
    return Status::Internal(fmt::format("volume {}: cannot remove {}: {}", id, dir, ec.message()));
  for (const std::string& f : {dir + ".img", dir + ".img.part", dir + ".owner"}) {
    if (unlink(f.c_str()) != 0 && errno != ENOENT) {
      return Status::Internal(
          fmt::format("volume {}: cannot remove {}: {}", id, f, strerror(errno)));
    }
  }
  std::erase_if(walked_, [&](const HeldVolume& v) { return v.id == id; });
  return Status::Ok();
}

std::vector<HeldVolume> VolumeHost::List() {
  constexpr int64_t kWalkEvery = 5;
  const bool walk = lists_++ % kWalkEvery == 0;
  std::vector<HeldVolume> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!ValidId(name) || !entry.is_directory(ec)) continue;
    HeldVolume v;
    v.id = name;
    const std::string dir = options_.dir + "/" + name;
    struct statvfs sv {};
    if (Mounted(name) && statvfs(dir.c_str(), &sv) == 0) {
      v.enforced = true;
      v.size_bytes = static_cast<int64_t>(sv.f_blocks * sv.f_frsize);
      v.used_bytes = static_cast<int64_t>((sv.f_blocks - sv.f_bfree) * sv.f_frsize);
    } else if (walk) {
      v.used_bytes = DiskUse(dir);
    } else {
      for (const HeldVolume& last : walked_) {
        if (last.id == name) v.used_bytes = last.used_bytes;
      }
    }
    out.push_back(v);
  }
  if (walk) walked_ = out;
  return out;
}

Status ClaimVolumeDir(const std::string& dir, int64_t uid) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::Internal(fmt::format("volume {}: not a directory", dir));
  }
  const std::string owner_file = dir + ".owner";
  const std::string owner = std::to_string(uid);
  if (st.st_uid != static_cast<uid_t>(uid) && ReadSmallFile(owner_file) == owner) {
    // Locked since `uid` last had it: its files are `uid`'s.
    if (lchown(dir.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(uid)) != 0) {
      return Status::Internal(fmt::format("volume {}: cannot chown: {}", dir, strerror(errno)));
    }
  } else if (st.st_uid != static_cast<uid_t>(uid)) {
    claim_uid = static_cast<uid_t>(uid);
    claim_dev = st.st_dev;
    claim_skipped = 0;
    if (nftw(dir.c_str(), ClaimEntry, 32, FTW_PHYS | FTW_MOUNT) != 0) {
      return Status::Internal(fmt::format("volume {}: cannot walk it: {}", dir, strerror(errno)));
    }
    if (claim_skipped > 0) {
      spdlog::warn(
          "volume {}: {} entries kept their owner (hard links, other file systems or "
          "refused)",
          dir, claim_skipped);
    }
  }
  if (chmod(dir.c_str(), 0700) != 0) {
    return Status::Internal(fmt::format("volume {}: cannot chmod: {}", dir, strerror(errno)));
  }
  return WritePrivateFile(owner_file, owner, 0600, /*sync=*/false);
}

Status LockVolumeDir(const std::string& dir) {
  if (geteuid() != 0) return Status::Ok();
  if (lchown(dir.c_str(), 0, 0) != 0 && errno != ENOENT) {
    return Status::Internal(fmt::format("volume {}: cannot lock: {}", dir, strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace tessera::agent
