// Workload uids (see workload_uids.h). The children forked here run in a copy of a possibly
// multithreaded agent, so between fork and exec or _exit they make system calls only.
#include "agent/workload_uids.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/workload_shim.h"
#include "common/text.h"

namespace tessera::agent {
namespace {

constexpr uint32_t kNobody = 65534;

// Every uid or gid field (the third) of a passwd- or group-style file that falls in `range`.
std::string FirstIdInRange(const char* path, const UidRange& range) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    const size_t c = b == std::string::npos ? b : line.find(':', b + 1);
    if (c == std::string::npos) continue;
    uint32_t id = 0;
    auto [p, ec] = std::from_chars(line.data() + b + 1, line.data() + c, id);
    if (ec != std::errc() || p != line.data() + c) continue;
    if (id >= range.first && id <= range.last)
      return line.substr(0, a) + " (" + std::to_string(id) + ")";
  }
  return "";
}

// Drops the calling (forked) process to uid and gid `id`, with no supplementary groups.
bool DropTo(uid_t id) {
  return setgroups(0, nullptr) == 0 && setresgid(id, id, id) == 0 && setresuid(id, id, id) == 0;
}

// Forks; the child runs `child` (which must not return), the parent waits for it.
template <typename F>
int RunChild(F child) {
  const pid_t pid = fork();
  if (pid == 0) child();
  if (pid < 0) return -1;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

Result<UidRange> ParseUidRange(const std::string& text) {
  const size_t dash = text.find('-');
  UidRange r;
  const char* end = text.data() + text.size();
  const bool ok =
      dash != std::string::npos &&
      std::from_chars(text.data(), text.data() + dash, r.first).ptr == text.data() + dash &&
      std::from_chars(text.data() + dash + 1, end, r.last).ptr == end && r.first <= r.last;
  if (!ok) {
    return Status::InvalidArgument(
        fmt::format("--workload-uids: {} is not FROM-TO (two uids, FROM <= TO)", Quote(text)));
  }
  return r;
}

Status CheckUidRange(const UidRange& range) {
  if (range.first == 0) {
    return Status::InvalidArgument("--workload-uids: the range holds uid 0 (root)");
  }
  if (range.last >= 0xFFFFFFFFu || (range.first <= kNobody && range.last >= kNobody)) {
    return Status::InvalidArgument(
        fmt::format("--workload-uids: {}-{} holds nobody (65534) or -1", range.first, range.last));
  }
  for (const char* file : {"/etc/passwd", "/etc/group"}) {
    const std::string clash = FirstIdInRange(file, range);
    if (!clash.empty()) {
      return Status::InvalidArgument(fmt::format(
          "--workload-uids: {}-{} holds {} of {}: workloads would own its files; choose a range "
          "no account uses",
          range.first, range.last, clash, file));
    }
  }
  return Status::Ok();
}

std::string FirstUntraversable(const std::string& path) {
  // Absolute first: walking "./data" up by its slashes would stop at "." for ever.
  std::error_code ec;
  std::string p = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) return path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  while (!p.empty()) {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return p;
    if (p == "/") break;
    const size_t slash = p.find_last_of('/');
    p = slash == 0 ? "/" : p.substr(0, slash);
  }
  return "";
}

bool ClaimUid(uid_t uid, const std::string& owner, const std::string& claims_dir) {
  std::error_code ec;
  std::filesystem::create_directories(claims_dir, ec);
  chmod(claims_dir.c_str(), 0700);
  const std::string path = claims_dir + "/" + std::to_string(uid);
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      const std::string line = owner + "\n";
      const bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
      close(fd);
      return ok;
    }
    if (errno != EEXIST) return false;
    std::ifstream in(path);
    std::string holder;
    std::getline(in, holder);
    if (holder == owner) return true;
    struct stat st {};
    if (holder.empty() || stat(holder.c_str(), &st) == 0) return false;
    unlink(path.c_str());  // Its work dir is gone: so is the claim.
  }
  return false;
}

void UnclaimUid(uid_t uid, const std::string& owner, const std::string& claims_dir) {
  const std::string path = claims_dir + "/" + std::to_string(uid);
  std::ifstream in(path);
  std::string holder;
  std::getline(in, holder);
  if (holder == owner) unlink(path.c_str());
}

bool UidHasProcesses(uid_t uid) {
  bool found = false;
  shim::ForEachProcess([&](pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/status", pid));
    std::string line;
    bool zombie = false;
    while (std::getline(in, line)) {
      if (line.rfind("State:", 0) == 0) zombie = line.find('Z') != std::string::npos;
      if (line.rfind("Uid:", 0) != 0) continue;
      std::istringstream fields(line.substr(4));
      uint64_t real = 0, effective = 0;
      fields >> real >> effective;
      if (!zombie && (real == uid || effective == uid)) found = true;
      break;
    }
    return !found;
  });
  return found;
}

bool KillUid(uid_t uid, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (!UidHasProcesses(uid)) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    // kill(-1) reaches every process the sender may signal: as `uid`, exactly uid's processes.
    RunChild([uid] {
      if (DropTo(uid)) kill(-1, SIGKILL);
      _exit(0);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status RemoveTreeAs(const std::string& path, uid_t uid) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::Internal(fmt::format("cannot stat {}: {}", path, strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    // The tenant may have made its own directories unreadable: it may make them readable again.
    // rm removes the contents; the directory itself is in the agent's directory, which the uid
    // may not write, so the caller removes it after.
    static constexpr char kScript[] =
        "chmod -R u+rwX -- \"$1\" 2>/dev/null; rm -rf -- \"$1\" 2>/dev/null; exit 0";
    RunChild([&] {
      if (!DropTo(uid)) _exit(1);
      const char* argv[] = {"sh", "-c", kScript, "sh", path.c_str(), nullptr};
      const char* envp[] = {"PATH=/usr/bin:/bin", nullptr};
      execve("/bin/sh", const_cast<char* const*>(argv), const_cast<char* const*>(envp));
      _exit(127);
    });
    if (rmdir(path.c_str()) != 0 && errno != ENOENT) {
      return Status::Internal(fmt::format("cannot remove {}: {}", path, strerror(errno)));
    }
    return Status::Ok();
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Status::Internal(fmt::format("cannot remove {}: {}", path, strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace tessera::agent
