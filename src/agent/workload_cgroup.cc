// Choosing and making workload cgroups (see workload_cgroup.h).
// Thread-safety: as the header says: ChooseCgroupRoot at start-up, from one thread.
#include "agent/workload_cgroup.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

#include "agent/workload_files.h"

namespace tessera::agent {
namespace {

constexpr char kAgentLeaf[] = "tessera-agent";
constexpr char kWorkloadsDir[] = "tessera-workloads";

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

bool HasCpuAndMemory(const std::string& controllers) {
  const auto w = Words(controllers);
  return std::count(w.begin(), w.end(), "cpu") > 0 && std::count(w.begin(), w.end(), "memory") > 0;
}

// Writes `content` to an existing cgroupfs file; 0 or the errno.
int WriteErrno(const std::string& path, const std::string& content) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t w = write(fd, content.data(), content.size());
  const int err = w == static_cast<ssize_t>(content.size()) ? 0 : (w < 0 ? errno : EIO);
  close(fd);
  return err;
}

// Empty when `dir` is a cgroup v2 directory whose children may have cpu and memory.
std::string CheckOffers(const std::string& dir) {
  auto controllers = ReadTextFile(dir + "/cgroup.controllers");
  if (!controllers.ok()) {
    return fmt::format("{} is not a cgroup v2 directory: {}", dir, controllers.status().message());
  }
  if (!HasCpuAndMemory(*controllers)) {
    std::string offered;
    for (const std::string& w : Words(*controllers)) offered += (offered.empty() ? "" : " ") + w;
    return fmt::format(
        "cgroup v2 at {} offers the controllers '{}', not both cpu and memory (held by cgroup v1, "
        "or not delegated)",
        dir, offered);
  }
  return "";
}

// Enables cpu and memory for the children of `dir`; 0 or the errno.
int EnableForChildren(const std::string& dir) {
  auto enabled = ReadTextFile(dir + "/cgroup.subtree_control");
  if (enabled.ok() && HasCpuAndMemory(*enabled)) return 0;
  return WriteErrno(dir + "/cgroup.subtree_control", "+cpu +memory");
}

std::string EnableNote(const std::string& dir, int err) {
  return fmt::format("cannot enable cpu and memory in {}/cgroup.subtree_control: {}{}", dir,
                     strerror(err),
                     err == EBUSY ? " (the cgroup holds processes, and cgroup v2 delegates "
                                    "controllers only from a cgroup without any)"
                                  : "");
}

// The directory of this process's cgroup v2, or an explanation prefixed with '!'.
std::string OwnCgroupDir() {
  auto self = ReadTextFile("/proc/self/cgroup");
  if (!self.ok()) return "!" + self.status().message();
  std::string rel;
  bool found = false;
  std::istringstream lines(*self);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::", 0) == 0) {
      rel = line.substr(3);
      found = true;
    }
  }
  if (!found)
    return "!this process is in no cgroup v2 hierarchy (/proc/self/cgroup has no 0:: line)";
  auto mounts = ReadTextFile("/proc/self/mountinfo");
  if (!mounts.ok()) return "!" + mounts.status().message();
  std::istringstream mlines(*mounts);
  for (std::string line; std::getline(mlines, line);) {
    const size_t sep = line.find(" - ");
    if (sep == std::string::npos) continue;
    const auto after = Words(line.substr(sep + 3));
    const auto before = Words(line.substr(0, sep));
    if (after.empty() || after[0] != "cgroup2" || before.size() < 5) continue;
    const std::string& root = before[3];
    const std::string& mount = before[4];
    if (root == "/") return rel == "/" ? mount : mount + rel;
    if (rel.rfind(root, 0) == 0) return mount + rel.substr(root.size());
    return fmt::format("!this process's cgroup {} lies outside the cgroup2 mount at {} (root {})",
                       rel, mount, root);
  }
  return "!no cgroup2 file system is mounted (/proc/self/mountinfo)";
}

CgroupChoice Detect() {
  std::string own = OwnCgroupDir();
  if (own.rfind('!', 0) == 0) return {"", own.substr(1)};
  // An earlier Open in this process may have moved it into the agent's leaf already.
  std::string base = own;
  const std::string leaf_suffix = std::string("/") + kAgentLeaf;
  if (base.size() > leaf_suffix.size() &&
      base.compare(base.size() - leaf_suffix.size(), leaf_suffix.size(), leaf_suffix) == 0) {
    base.resize(base.size() - leaf_suffix.size());
  }
  if (std::string why = CheckOffers(base); !why.empty()) return {"", why};
  int err = EnableForChildren(base);
  if (err == EBUSY && base == own) {
    const std::string leaf = base + "/" + kAgentLeaf;
    if (mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
      return {"", fmt::format("cannot create {}: {}", leaf, strerror(errno))};
    }
    if (int move = WriteErrno(leaf + "/cgroup.procs", std::to_string(getpid())); move != 0) {
      return {"", fmt::format("cannot move the agent into {}: {}", leaf, strerror(move))};
    }
    err = EnableForChildren(base);
  }
  if (err != 0) return {"", EnableNote(base, err)};
  const std::string root = base + "/" + kWorkloadsDir;
  if (mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) {
    return {"", fmt::format("cannot create {}: {}", root, strerror(errno))};
  }
  if (int e = EnableForChildren(root); e != 0) return {"", EnableNote(root, e)};
  return {root, fmt::format("cpu and memory limits are enforced through cgroup v2 under {}", root)};
}

}  // namespace

CgroupChoice ChooseCgroupRoot(const std::string& option) {
  if (option == "none") {
    return {"", "cgroup limits are disabled by configuration (cgroup_root = \"none\")"};
  }
  if (option.empty()) return Detect();
  std::string root = option;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st {};
  if (stat(root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return {"", fmt::format("cgroup_root {} is not a directory", root)};
  }
  if (std::string why = CheckOffers(root); !why.empty()) return {"", why};
  if (int err = EnableForChildren(root); err != 0) return {"", EnableNote(root, err)};
  return {root, fmt::format("cpu and memory limits are enforced through cgroup v2 under {}", root)};
}

Status MakeWorkloadCgroup(const std::string& dir, int64_t cpu_milli, int64_t memory_mib) {
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal(fmt::format("cannot create the cgroup {}: {}", dir, strerror(errno)));
  }
  const std::string cpu = cpu_milli > 0
                              ? fmt::format("{} 100000", std::max<int64_t>(1000, cpu_milli * 100))
                              : "max 100000";
  TESSERA_RETURN_IF_ERROR(WriteTextFile(dir + "/cpu.max", cpu + "\n"));
  const std::string memory = memory_mib > 0 ? std::to_string(memory_mib << 20) : "max";
  return WriteTextFile(dir + "/memory.max", memory + "\n");
}

}  // namespace tessera::agent
