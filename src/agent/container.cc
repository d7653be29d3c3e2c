#include "agent/container.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "agent/container_exec.h"
#include "common/files.h"

namespace tessera::agent {
namespace {

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

bool IsNameChar(char c, bool first) {
  if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) return true;
  return !first && (c == '-' || c == '_' || c == '.');
}

Status CheckName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128;
  for (size_t i = 0; ok && i < name.size(); ++i) ok = IsNameChar(name[i], i == 0);
  if (!ok) {
    return Status::InvalidArgument(
        fmt::format("name {:?}: want [a-z0-9][a-z0-9_.-]{{0,127}}", name.substr(0, 80)));
  }
  return Status::Ok();
}

bool IsEnvName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

// Podman reads an env file a line at a time: NAME=VALUE, the value verbatim (no quotes are
// interpreted, so none are added); a name without "=" would import the agent's own variable,
// which validation rules out.
Result<std::string> EnvFileContent(const ContainerSpec& spec) {
  std::string out;
  for (const auto& [name, value] : spec.env) {
    if (!IsEnvName(name)) {
      return Status::InvalidArgument(
          fmt::format("env: name {:?}: want [A-Za-z_][A-Za-z0-9_]*", name.substr(0, 80)));
    }
    if (value.find_first_of(std::string_view("\n\r\0", 3)) != std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("env {}: the value holds a line break or NUL, which an env file cannot "
                      "carry",
                      name));
    }
    out += name + "=" + value + "\n";
  }
  return out;
}

// A path podman's "-v SRC:DST:OPTIONS" and "--device SRC" syntax cannot misread.
Status CheckHostPath(const std::string& field, const std::string& path) {
  if (path.empty() || path[0] != '/' || path.find_first_of(":,\n") != std::string::npos) {
    return Status::InvalidArgument(fmt::format("{} {:?}: want an absolute path without ':' or ','",
                                               field, path.substr(0, 200)));
  }
  return Status::Ok();
}

// "vendor.com/class=name", the CDI form podman 4.3 accepts for --device.
Status CheckCdiName(const std::string& device) {
  const size_t slash = device.find('/');
  const size_t eq = device.find('=');
  const bool ok = slash != std::string::npos && slash > 0 && eq != std::string::npos &&
                  eq > slash + 1 && eq + 1 < device.size() &&
                  device.find_first_of(" \t\n:,") == std::string::npos;
  if (!ok) {
    return Status::InvalidArgument(
        fmt::format("cdi device {:?}: want vendor.com/class=name", device.substr(0, 200)));
  }
  return Status::Ok();
}

// Milli-cores as the decimal podman's --cpus takes: 1500 -> "1.5", 250 -> "0.25", 2000 -> "2".
std::string CpusText(int64_t milli) {
  std::string out = fmt::format("{}.{:03}", milli / 1000, milli % 1000);
  while (out.back() == '0') out.pop_back();
  if (out.back() == '.') out.pop_back();
  return out;
}

const char* NetworkName(ContainerNetwork network) {
  switch (network) {
    case ContainerNetwork::kNone:
      return "none";
    case ContainerNetwork::kHost:
      return "host";
    case ContainerNetwork::kPrivate:
      break;
  }
  return "bridge";
}

Status CheckSpec(const ContainerSpec& spec) {
  TESSERA_RETURN_IF_ERROR(CheckName(spec.name));
  // A leading '-' would make podman read the image as a flag.
  if (spec.image.empty() || spec.image[0] == '-' ||
      spec.image.find_first_of(" \t\n") != std::string::npos) {
    return Status::InvalidArgument(fmt::format("image {:?}: not an image reference", spec.image));
  }
  if (!spec.image_has_shell && !spec.command.empty()) {
    return Status::InvalidArgument(
        "command: the image has no shell, so the command must come as args (exec form)");
  }
  if (spec.user_mode == ContainerUserMode::kHostUid && (spec.uid == 0 || spec.gid == 0)) {
    return Status::InvalidArgument("uid/gid: a container never runs as the host's root");
  }
  if (spec.cpu_milli < 0 || spec.memory_mib < 0 || spec.pids_limit < 0) {
    return Status::InvalidArgument("cpu_milli, memory_mib and pids_limit must not be negative");
  }
  if (spec.nofile_limit <= 0 || spec.nproc_limit <= 0) {
    return Status::InvalidArgument("nofile_limit and nproc_limit must be positive");
  }
  if (!spec.work_dir.empty()) TESSERA_RETURN_IF_ERROR(CheckHostPath("work_dir", spec.work_dir));
  for (const auto& [host, path] : spec.binds) {
    TESSERA_RETURN_IF_ERROR(CheckHostPath("binds", host));
    TESSERA_RETURN_IF_ERROR(CheckHostPath("binds", path));
  }
  for (const auto& [host_port, port] : spec.publish) {
    if (spec.network != ContainerNetwork::kPrivate || host_port < 1 || host_port > 65535 ||
        port < 1 || port > 65535) {
      return Status::InvalidArgument(
          "publish: ports 1..65535, and only for a container on its own network");
    }
  }
  for (const auto& d : spec.cdi_devices) TESSERA_RETURN_IF_ERROR(CheckCdiName(d));
  for (const auto& d : spec.device_nodes) {
    TESSERA_RETURN_IF_ERROR(CheckHostPath("device_nodes", d));
    if (d.rfind("/dev/", 0) != 0) {
      return Status::InvalidArgument(fmt::format("device_nodes {:?}: not under /dev", d));
    }
  }
  return Status::Ok();
}

void AddLimits(const ContainerSpec& spec, const ContainerHost& host, ContainerRun& run) {
  auto& a = run.argv;
  if (spec.cpu_milli > 0) {
    if (host.cpu_limits) {
      a.push_back("--cpus=" + CpusText(spec.cpu_milli));
    } else {
      run.notes.push_back(fmt::format(
          "cpu limit ({} milli-cores) not enforced: no cpu cgroup controller", spec.cpu_milli));
    }
  }
  if (spec.memory_mib > 0) {
    if (host.memory_limits) {
      a.push_back(fmt::format("--memory={}m", spec.memory_mib));
      // Without it the container may use as much swap again as its memory limit.
      a.push_back(fmt::format("--memory-swap={}m", spec.memory_mib));
    } else {
      run.notes.push_back(fmt::format(
          "memory limit ({} MiB) not enforced: no memory cgroup controller", spec.memory_mib));
    }
  }
  if (spec.pids_limit > 0) {
    if (host.pids_limits) {
      a.push_back(fmt::format("--pids-limit={}", spec.pids_limit));
    } else {
      run.notes.push_back(
          fmt::format("pids limit ({}) not enforced: no pids cgroup controller", spec.pids_limit));
    }
  }
  a.push_back(fmt::format("--ulimit=nofile={0}:{0}", spec.nofile_limit));
  a.push_back(fmt::format("--ulimit=nproc={0}:{0}", spec.nproc_limit));
}

// The command after the image. The entrypoint is set too, so an image's own entrypoint script
// never wraps (or swallows) the instance's command.
void AddCommand(const ContainerSpec& spec, ContainerRun& run, std::vector<std::string>& tail) {
  if (spec.image_has_shell && !spec.command.empty()) {
    run.argv.push_back("--entrypoint=/bin/sh");
    tail = {"-c", spec.command};
  } else if (!spec.image_has_shell && !spec.args.empty()) {
    run.argv.push_back("--entrypoint=" + spec.args[0]);
    tail.assign(spec.args.begin() + 1, spec.args.end());
  }
}

}  // namespace

std::optional<pid_t> ReadContainerPid(const std::string& pid_file) {
  const std::string text = Trimmed(ReadSmallFile(pid_file).value_or(""));
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const long pid = strtol(text.c_str(), &end, 10);
  if (*end != '\0' || pid <= 1 || pid > INT32_MAX) return std::nullopt;
  return static_cast<pid_t>(pid);
}

ContainerControlFiles ControlFilesIn(const std::string& dir) {
  return {dir, dir + "/container.pid", dir + "/container.cid", dir + "/container.env"};
}

Result<ContainerRun> BuildPodmanRun(const ContainerSpec& spec, const ContainerHost& host,
                                    const ContainerControlFiles& files) {
  TESSERA_RETURN_IF_ERROR(CheckSpec(spec));
  if (spec.user_mode == ContainerUserMode::kUserNamespace && !host.userns_auto) {
    return Status::FailedPrecondition(
        "user namespaces need a \"containers\" range in /etc/subuid and /etc/subgid (run "
        "scripts/bootstrap.sh), or a workload uid");
  }
  TESSERA_ASSIGN_OR_RETURN(std::string env_content, EnvFileContent(spec));
  ContainerRun run;
  run.container_name = spec.name;
  run.env_file_content = std::move(env_content);
  auto& a = run.argv;
  a = {host.podman,
       "run",
       "--rm",
       "--runtime=" + host.runtime,
       "--name=" + run.container_name,
       "--pidfile=" + files.pid_file,
       "--cidfile=" + files.cid_file,
       "--pull=never",
       "--log-driver=none",
       "--sig-proxy=true",
       std::string("--network=") + NetworkName(spec.network),
       "--security-opt=no-new-privileges",
       "--cap-drop=all"};
  if (host.init) {
    a.push_back("--init");
  } else {
    run.notes.push_back(
        "no catatonit for --init: the command is the container's pid 1 and ignores SIGTERM "
        "unless it handles it, so a stop ends with SIGKILL after the grace");
  }
  if (spec.user_mode == ContainerUserMode::kUserNamespace) {
    a.push_back("--userns=auto");
  } else {
    a.push_back(fmt::format("--user={}:{}", spec.uid, spec.gid));
  }
  AddLimits(spec, host, run);
  if (!spec.work_dir.empty()) {
    // U: podman chowns the directory to the container's user, which under --userns=auto is only
    // known once the container is created.
    a.push_back("--volume=" + spec.work_dir + ":/workspace:rw,U");
    a.push_back("--workdir=/workspace");
  }
  for (const auto& [from, path] : spec.binds) {
    // Under --userns=auto only podman knows the container's uid; otherwise the agent gave the
    // volume to the workload's uid already (and a recursive chown at every start would cost).
    a.push_back(fmt::format("--volume={}:{}:rw{}", from, path,
                            spec.user_mode == ContainerUserMode::kUserNamespace ? ",U" : ""));
  }
  for (const auto& [host_port, port] : spec.publish) {
    a.push_back(fmt::format("--publish={}:{}/tcp", host_port, port));
  }
  for (const auto& d : spec.cdi_devices) a.push_back("--device=" + d);
  for (const auto& d : spec.device_nodes) a.push_back("--device=" + d);
  if (!spec.env.empty()) a.push_back("--env-file=" + files.env_file);
  std::vector<std::string> tail;
  AddCommand(spec, run, tail);
  a.push_back(spec.image);
  a.insert(a.end(), tail.begin(), tail.end());
  return run;
}

Status PrepareContainerRun(const ContainerRun& run, const ContainerControlFiles& files) {
  if (mkdir(files.dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::Internal(fmt::format("{}: cannot create: {}", files.dir, strerror(errno)));
  }
  // The directory may predate us with a wider mode; the env file's secrets must not be listed
  // or opened by a tenant.
  if (chmod(files.dir.c_str(), 0700) != 0) {
    return Status::Internal(fmt::format("{}: cannot chmod: {}", files.dir, strerror(errno)));
  }
  for (const auto& f : {files.pid_file, files.cid_file}) {
    if (unlink(f.c_str()) != 0 && errno != ENOENT) {
      return Status::Internal(fmt::format("{}: cannot remove: {}", f, strerror(errno)));
    }
  }
  return WritePrivateFile(files.env_file, run.env_file_content, 0600);
}

namespace {

// SIGKILL to the container's init when the pid file names a process that /proc shows in the
// container's own cgroup (its id is in the path), so a pid reused since is never signalled.
bool KillInit(const ContainerControlFiles& files) {
  const std::string cid = Trimmed(ReadSmallFile(files.cid_file).value_or(""));
  const std::optional<pid_t> pid = ReadContainerPid(files.pid_file);
  if (cid.size() < 12 || !pid) return false;
  const auto cgroup = ReadSmallFile(fmt::format("/proc/{}/cgroup", *pid));
  if (!cgroup || cgroup->find(cid) == std::string::npos) return false;
  return kill(*pid, SIGKILL) == 0;
}

}  // namespace

Status KillContainer(const ContainerHost& host, const std::string& container_name,
                     const ContainerControlFiles& files, std::chrono::milliseconds deadline) {
  const bool killed = KillInit(files);
  // Removes what is left: the container (conmon's own clean-up may be doing it at the same
  // time, hence --ignore), or one that never got to start, whose pid file is not written yet.
  ExecOptions options;
  options.deadline = deadline;
  auto rm =
      RunCommand({host.podman, "rm", "--force", "--ignore", "--time=0", container_name}, options);
  for (const auto& f : {files.pid_file, files.cid_file, files.env_file}) unlink(f.c_str());
  if (!rm.ok()) return rm.status().WithPrefix(container_name);
  if (rm->timed_out || rm->exit_code != 0) {
    return Status::Unavailable(fmt::format(
        "container {}: {}podman rm failed ({}): {}", container_name, killed ? "killed, but " : "",
        rm->timed_out ? "timed out" : fmt::format("exit {}", rm->exit_code),
        Trimmed(rm->err).substr(0, 500)));
  }
  return Status::Ok();
}

bool HasContainersRange(const std::string& subid_text) {
  std::istringstream in(subid_text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("containers:", 0) != 0) continue;
    // containers:START:COUNT with a positive count.
    const size_t colon = line.find(':', 11);
    if (colon == std::string::npos) continue;
    const std::string count = line.substr(colon + 1);
    if (!count.empty() && count.find_first_not_of("0123456789") == std::string::npos &&
        count != "0" && colon > 11) {
      return true;
    }
  }
  return false;
}

namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

ContainerHost DetectContainerHost(const std::string& cgroup_root, const std::string& subuid,
                                  const std::string& subgid) {
  ContainerHost host;
  if (const auto v2 = ReadSmallFile(cgroup_root + "/cgroup.controllers")) {
    std::istringstream in(*v2);
    std::string c;
    while (in >> c) {
      host.cpu_limits |= c == "cpu";
      host.memory_limits |= c == "memory";
      host.pids_limits |= c == "pids";
    }
  } else {
    host.cpu_limits = Exists(cgroup_root + "/cpu/cpu.cfs_quota_us");
    host.memory_limits = Exists(cgroup_root + "/memory/memory.limit_in_bytes");
    host.pids_limits = Exists(cgroup_root + "/pids/cgroup.procs");
  }
  host.userns_auto = HasContainersRange(ReadSmallFile(subuid).value_or("")) &&
                     HasContainersRange(ReadSmallFile(subgid).value_or(""));
  // Podman's default init_path (containers.conf), which Debian's catatonit package fills.
  host.init = access("/usr/libexec/podman/catatonit", X_OK) == 0;
  return host;
}

ContainerUserMode DefaultUserMode(const ContainerHost& host) {
  return host.userns_auto ? ContainerUserMode::kUserNamespace : ContainerUserMode::kHostUid;
}

}  // namespace tessera::agent
