// The node's volumes (docs/volumes.md): a tenant's storage that outlives its instances, kept
// under the agent's volumes directory. Where the agent may (root, loop devices, mkfs.ext4), each
// volume is an ext4 file system of its own in a sparse image file, loop-mounted nosuid and nodev
// at DIR/<id>, so its size is a hard limit (a write past it fails with ENOSPC) and a tenant can
// neither fill the node's disk nor reach another volume; otherwise a volume is a plain directory
// DIR/<id>, its size only watched, and the node says so (enforced() false, note()).
// A volume's root belongs to the uid of the tenant whose workload mounts it (0700); the directory
// above it is root's (0711), so no other tenant's uid can list or enter it.
// Thread-safety: one thread (the agent loop) uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace tessera::agent {

struct HeldVolume {
  std::string id;
  int64_t used_bytes = 0;
  int64_t size_bytes = 0;
  bool enforced = false;  // A file system of its own, mounted.
};

class VolumeHost {
 public:
  struct Options {
    std::string dir;         // Created when missing (0711).
    bool use_images = true;  // false: plain directories, sizes only watched.
    std::string mkfs = "mkfs.ext4";
    std::string mount = "mount";
    std::string umount = "umount";
  };
  // Opens the directory and decides how sizes are held (enforced(), note()). Errors name the
  // directory.
  static Result<std::unique_ptr<VolumeHost>> Open(Options options);

  // Volume `id` (vol-<digits>) of `size_gib`, made on first use and mounted again after a
  // reboot: its directory. InvalidArgument for a malformed id or size; Internal naming the step
  // (mkfs, mount) that failed.
  Result<std::string> Prepare(const std::string& id, int64_t size_gib);
  // Removes volume `id` and its data. OK when it is not here; Unavailable while it is busy (a
  // process still has it open: try again later).
  Status Remove(const std::string& id);
  // Every volume here, by id, with its use: statfs for a mounted one, a walk of the files for a
  // directory (at most every `walk_every` calls, the last figure in between).
  std::vector<HeldVolume> List();

  bool enforced() const { return enforced_; }
  const std::string& note() const { return note_; }
  const std::string& dir() const { return options_.dir; }

 private:
  explicit VolumeHost(Options options) : options_(std::move(options)) {}
  bool Mounted(const std::string& id) const;

  Options options_;
  bool enforced_ = false;
  std::string note_;
  std::vector<HeldVolume> walked_;  // Plain directories' last use.
  int64_t lists_ = 0;
};

// Gives the volume at `dir` to `uid` (uid and gid alike) for a workload that mounts it. Its files
// are `uid`'s already when the volume was last given to `uid` (DIR.owner, beside it, says whom):
// only the root changes hands then. Otherwise the whole tree does, as Kubernetes'
// fsGroupChangePolicy OnRootMismatch does: every entry, links not followed, nothing on another
// file system, and no file with more than one link (it could be a link to a file outside). The
// root is made 0700.
Status ClaimVolumeDir(const std::string& dir, int64_t uid);
// Locks a volume no workload mounts: its root becomes root's (0700), so a workload uid that goes
// to another tenant later cannot enter it. Nothing to do for an agent that is not root.
Status LockVolumeDir(const std::string& dir);

}  // namespace tessera::agent
