// Unprivileged identities for bare workloads: the node's range of workload uids (one per tenant
// on the node, so one tenant's processes can neither read, signal nor ptrace another's), and the
// few things the agent does as such a uid rather than as root: killing everything a uid still
// runs once its tenant's last workload has ended, and removing a directory the tenant controlled
// (as the tenant, so a symlink swapped in during the removal can only reach the tenant's own
// files).
// Thread-safety: pure functions of the system's state; each may fork a short-lived child, which
// uses only async-signal-safe calls, so they are safe from any thread of a multithreaded agent.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/result.h"

namespace tessera::agent {

// The agent's default --workload-uids: far above the ranges of accounts (1000-60000) and of
// /etc/subuid (100000 up, 65536 a user), below the 2^31 that user namespaces' "containers" range
// (--userns=auto) usually starts at.
inline constexpr char kDefaultWorkloadUids[] = "1999000000-1999000999";

struct UidRange {
  uint32_t first = 0;
  uint32_t last = 0;  // Inclusive.
};

// Parses "FROM-TO" (the agent's --workload-uids). InvalidArgument names the flag's text.
Result<UidRange> ParseUidRange(const std::string& text);

// Checks that the range can hold workloads: not root, not the nobody uid (65534) or -1, and no
// account in /etc/passwd nor group in /etc/group within it (those are someone's files). The error
// names the first clash.
Status CheckUidRange(const UidRange& range);

// The first directory from `path` up to "/" that others may not traverse (no o+x), so a workload
// uid could not reach its directory below it; "" when every one may be traversed. A relative
// `path` is taken from the working directory up.
std::string FirstUntraversable(const std::string& path);

// Several agents may share a machine (the server's simulated nodes, tests): a uid is claimed
// machine-wide before a workload runs as it, by a file in `claims_dir` (default
// /run/tessera/workload-uids, root's, gone at reboot with the processes) naming the claiming work
// dir. True when `uid` is now `owner`'s: claimed anew, already its, or claimed by a work dir that
// no longer exists (whatever ran there is gone with it).
bool ClaimUid(uid_t uid, const std::string& owner, const std::string& claims_dir);
// Gives up `owner`'s claim on `uid`; another owner's claim is left alone.
void UnclaimUid(uid_t uid, const std::string& owner, const std::string& claims_dir);

// Whether any process runs (or is a zombie) with `uid` as its real uid.
bool UidHasProcesses(uid_t uid);

// Sends SIGKILL to every process of `uid` (as that uid: kill(-1)), until none is left or
// `timeout_ms` passes. False when some are left. Needs root.
bool KillUid(uid_t uid, int timeout_ms = 2000);

// Removes `path` (a directory the workload uid owned, or anything in it): its contents as `uid`
// (`rm -rf` after dropping to it), then the directory itself as the caller. Internal names the
// path when something is left.
Status RemoveTreeAs(const std::string& path, uid_t uid);

}  // namespace tessera::agent
