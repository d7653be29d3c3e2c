// WorkloadSupervisor: the agent's side of the workload files (the shim's side is
// workload_shim.cc). It writes `state`, `stop`, the preemption notice and the lease, reads
// `pids`, `exit`, `log.dropped` and the log segments, and checks the shims are alive through
// /proc. Cgroup set-up is in workload_cgroup.cc.
// Thread-safety: as workload.h says, one thread uses a supervisor.
#include "agent/workload.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "agent/volumes.h"
#include "agent/workload_cgroup.h"
#include "agent/workload_entry.h"
#include "agent/workload_files.h"
#include "agent/workload_shim.h"
#include "agent/workload_uids.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::agent {
namespace fs = std::filesystem;

using workload_internal::ContainerFilesIn;
using workload_internal::kMaxGraceMs;
using workload_internal::kMaxUnixMs;
using workload_internal::RemoveWorkspace;
using workload_internal::UnixMs;

namespace {

constexpr char kNoticeEnv[] = "TESSERA_PREEMPT_NOTICE";
// <work_dir>/.control/<id>: each workload's supervisor files, owned by the agent and 0700, out of
// the workload's reach when it runs as a uid of its own. Earlier agents kept them in
// <work_dir>/<id>/.tessera; what they started is still adopted from there.
constexpr char kControlRoot[] = ".control";
constexpr char kBasePath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
constexpr int64_t kMaxCpuMilli = 100'000'000;        // 100,000 cores.
constexpr int64_t kMaxMemoryMib = int64_t{1} << 30;  // 1 EiB.

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
  });
}

bool ValidEnvName(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string ReadBootId() {
  auto text = ReadTextFile("/proc/sys/kernel/random/boot_id");
  if (!text.ok()) return "";
  std::string id = *text;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

// The environment: a small clean base, the caller's variables (which may replace the base's),
// and the notice path.
Result<std::vector<std::string>> BuildEnv(const WorkloadSpec& spec, const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"PATH", kBasePath}, {"HOME", dir}, {"LANG", "C.UTF-8"}};
  std::set<std::string> given;
  for (const auto& [name, value] : spec.env) {
    if (!ValidEnvName(name)) {
      return Status::InvalidArgument(
          fmt::format("workload '{}': env: bad variable name {}", spec.id, Quote(name)));
    }
    if (name == kNoticeEnv) {
      return Status::InvalidArgument(
          fmt::format("workload '{}': env: {} is set by the agent (the preemption notice's path)",
                      spec.id, name));
    }
    if (!given.insert(name).second) {
      return Status::InvalidArgument(
          fmt::format("workload '{}': env: {} is given twice", spec.id, name));
    }
    if (value.find('\0') != std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("workload '{}': env: the value of {} holds a NUL byte", spec.id, name));
    }
    auto it =
        std::find_if(vars.begin(), vars.end(), [&](const auto& v) { return v.first == name; });
    if (it != vars.end()) {
      it->second = value;
    } else {
      vars.emplace_back(name, value);
    }
  }
  vars.emplace_back(kNoticeEnv, dir + "/" + shim::kNoticeFile);
  for (const WorkloadSpec::Volume& v : spec.volumes) {
    std::string name = "TESSERA_VOLUME_";
    for (const char c : v.name) {
      name += c == '-' || c == '.' ? '_'
                                   : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    vars.emplace_back(std::move(name), spec.image.empty() ? dir + v.path : v.path);
  }
  std::vector<std::string> env;
  for (const auto& [name, value] : vars) env.push_back(name + "=" + value);
  return env;
}

Status ValidateSpec(const WorkloadSpec& spec) {
  if (!ValidId(spec.id)) {
    return Status::InvalidArgument(
        fmt::format("workload id {}: must be 1 to 64 of a-z, 0-9 and '-' (it names a directory)",
                    Quote(spec.id)));
  }
  if ((spec.command.empty() && spec.image.empty()) ||
      spec.command.find('\0') != std::string::npos) {
    return Status::InvalidArgument(
        fmt::format("workload '{}': command: must be non-empty text without NUL bytes", spec.id));
  }
  if (spec.cpu_milli < 0 || spec.cpu_milli > kMaxCpuMilli) {
    return Status::InvalidArgument(fmt::format("workload '{}': cpu_milli: {} is not in [0, {}]",
                                               spec.id, spec.cpu_milli, kMaxCpuMilli));
  }
  if (spec.memory_mib < 0 || spec.memory_mib > kMaxMemoryMib) {
    return Status::InvalidArgument(fmt::format("workload '{}': memory_mib: {} is not in [0, {}]",
                                               spec.id, spec.memory_mib, kMaxMemoryMib));
  }
  if (spec.ports.size() > 16) {
    return Status::InvalidArgument(fmt::format("workload '{}': ports: at most 16", spec.id));
  }
  for (size_t i = 0; i < spec.ports.size(); ++i) {
    const int p = spec.ports[i];
    if (p < 1 || p > 65535 || std::count(spec.ports.begin(), spec.ports.end(), p) > 1) {
      return Status::InvalidArgument(
          fmt::format("workload '{}': ports: {} is not a port 1..65535 given once", spec.id, p));
    }
  }
  for (const WorkloadSpec::Volume& v : spec.volumes) {
    const std::string normal = fs::path(v.path).lexically_normal().string();
    if (v.path.size() < 2 || v.path[0] != '/' || normal != v.path ||
        v.path.find("..") != std::string::npos || v.path.find_first_of(":,") != std::string::npos ||
        v.host_dir.empty() || v.name.empty()) {
      return Status::InvalidArgument(fmt::format(
          "workload '{}': volume {}: path {} must be absolute and normalized, without '..', ':' "
          "or ','",
          spec.id, Quote(v.name), Quote(v.path)));
    }
  }
  return Status::Ok();
}

// Gives volume `v` to the workload's `uid` (-1: the agent's own user) and, for a bare process,
// links it at its directory `dir` + v.path, the directories on the way made as the workload's.
Status MountVolume(const WorkloadSpec::Volume& v, int64_t uid, const std::string& dir,
                   bool container) {
  if (uid >= 0) TESSERA_RETURN_IF_ERROR(ClaimVolumeDir(v.host_dir, uid));
  if (container) return Status::Ok();
  std::string at = dir;
  const std::vector<std::string_view> parts = Split(std::string_view(v.path).substr(1), '/');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    at += '/';
    at += parts[i];
    if (mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Internal(
          fmt::format("volume {}: cannot create {}: {}", v.name, at, strerror(errno)));
    }
    if (uid >= 0 && lchown(at.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(uid)) != 0) {
      return Status::Internal(
          fmt::format("volume {}: cannot chown {}: {}", v.name, at, strerror(errno)));
    }
  }
  const std::string link = dir + v.path;
  if (symlink(v.host_dir.c_str(), link.c_str()) != 0) {
    return Status::Internal(fmt::format("volume {}: cannot link {} to {}: {}", v.name, link,
                                        v.host_dir, strerror(errno)));
  }
  return Status::Ok();
}

// Reads a small JSON file the shim wrote; NotFound when it is absent.
Result<nlohmann::json> ReadJsonFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseJson(text, path);
}

}  // namespace

namespace workload_internal {

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Removes a workload's directory. One a workload uid owns is emptied as that uid: its processes
// may still run (another of the tenant's workloads) and swap a directory for a symlink to the
// agent's files while root walks it.
Status RemoveWorkspace(const std::string& dir) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return Status::Ok();
  if (S_ISDIR(st.st_mode) && st.st_uid != geteuid()) return RemoveTreeAs(dir, st.st_uid);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) return Status::Internal(fmt::format("cannot remove {}: {}", dir, ec.message()));
  return Status::Ok();
}

ContainerControlFiles ContainerFilesIn(const std::string& control) {
  return ControlFilesIn(control + "/container");
}

}  // namespace workload_internal

WorkloadSupervisor::WorkloadSupervisor(Options options) : options_(std::move(options)) {}
WorkloadSupervisor::~WorkloadSupervisor() {
  if (lock_fd_ >= 0) close(lock_fd_);
}

Result<std::unique_ptr<WorkloadSupervisor>> WorkloadSupervisor::Open(Options options) {
  if (options.work_dir.empty()) {
    return Status::InvalidArgument("workload supervisor: work_dir: must be set");
  }
  if (options.log_limit_bytes < 2) {
    return Status::InvalidArgument(fmt::format(
        "workload supervisor: log_limit_bytes: {} is below 2", options.log_limit_bytes));
  }
  if (options.lease_kill_grace.count() < 0) {
    return Status::InvalidArgument("workload supervisor: lease_kill_grace: must not be negative");
  }
  if (options.first_port < 1 || options.last_port > 65535 ||
      options.first_port > options.last_port) {
    return Status::InvalidArgument(
        fmt::format("workload supervisor: rendezvous ports: {}-{} is not a range within 1-65535",
                    options.first_port, options.last_port));
  }
  std::error_code ec;
  fs::create_directories(options.work_dir, ec);
  if (ec) {
    return Status::Internal(
        fmt::format("workload supervisor: cannot create {}: {}", options.work_dir, ec.message()));
  }
  const fs::path abs = fs::absolute(options.work_dir, ec);
  if (ec || !fs::is_directory(abs, ec)) {
    return Status::Internal(
        fmt::format("workload supervisor: {} is not a directory", options.work_dir));
  }
  options.work_dir = abs.lexically_normal().string();
  while (options.work_dir.size() > 1 && options.work_dir.back() == '/') options.work_dir.pop_back();
  if (options.workspace_dir.empty()) options.workspace_dir = options.work_dir;
  fs::create_directories(options.workspace_dir, ec);
  options.workspace_dir = fs::absolute(options.workspace_dir, ec).lexically_normal().string();
  while (options.workspace_dir.size() > 1 && options.workspace_dir.back() == '/') {
    options.workspace_dir.pop_back();
  }
  if (ec || !fs::is_directory(options.workspace_dir, ec)) {
    return Status::Internal(fmt::format("workload supervisor: workspace dir {} is not a directory",
                                        options.workspace_dir));
  }

  // One supervisor per work dir: two would each start what the server asked of them, twice.
  const std::string lock_path = options.work_dir + "/" + shim::kLockFile;
  // 0600: a workload that could open the lock, even to read, could flock it and keep the next
  // agent out.
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    return Status::Internal(
        fmt::format("workload supervisor: cannot open {}: {}", lock_path, strerror(errno)));
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(lock_fd);
    return Status::FailedPrecondition(fmt::format(
        "workload supervisor: {} is in use by another supervisor (it holds the lock {}): {}",
        options.work_dir, lock_path, strerror(err)));
  }
  std::unique_ptr<WorkloadSupervisor> sup(new WorkloadSupervisor(std::move(options)));
  sup->lock_fd_ = lock_fd;
  sup->boot_id_ = ReadBootId();
  CgroupChoice cg = ChooseCgroupRoot(sup->options_.cgroup_root);
  sup->limits_enforced_ = !cg.root.empty();
  sup->cgroup_root_ = std::move(cg.root);
  sup->limits_note_ = std::move(cg.note);
  TESSERA_RETURN_IF_ERROR(sup->SetUpIsolation());
  sup->container_host_ = DetectContainerHost();
  sup->container_host_.podman = sup->options_.podman;
  if (sup->limits_enforced_ || sup->options_.cgroup_root == "none") {
    spdlog::info("workload limits: {}", sup->limits_note_);
  } else {
    spdlog::warn("workload limits are not enforced: {}", sup->limits_note_);
  }

  // What this and earlier agents started: ids with a control directory, and the ids of the
  // earlier layout (<id>/.tessera).
  std::set<std::string> ids;
  for (const std::string& root :
       {sup->options_.work_dir + "/" + kControlRoot, sup->options_.work_dir}) {
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code type_ec;
      if (ValidId(name) && it->is_directory(type_ec)) ids.insert(name);
    }
    if (ec) break;
  }
  for (const std::string& id : ids) sup->Adopt(id);
  if (ec) {
    return Status::Internal(fmt::format("workload supervisor: cannot list {}: {}",
                                        sup->options_.work_dir, ec.message()));
  }
  return sup;
}

void WorkloadSupervisor::ReadPids(Entry& e) const {
  const std::string path = e.File(shim::kPidsFile);
  auto pids = ReadJsonFile(path);
  if (!pids.ok()) return;
  JsonFields f(*pids, path);
  e.pids.shim_pid = static_cast<pid_t>(f.Int("shim_pid", 1, INT_MAX));
  e.shim_start = static_cast<uint64_t>(f.Int("shim_start", 0, INT64_MAX));
  e.pids.pid = static_cast<pid_t>(f.Int("pid", 1, INT_MAX));
  e.pid_start = static_cast<uint64_t>(f.Int("pid_start", 0, INT64_MAX));
  // Pids from another boot name other processes.
  e.pids_known = f.ok() && e.boot_id == boot_id_;
}

// Takes over a workload an earlier agent started. A directory without `state` is not one (a
// Start that died before it wrote it): Start may reuse it.
void WorkloadSupervisor::Adopt(const std::string& id) {
  auto e = std::make_unique<Entry>();
  e->dir = options_.workspace_dir + "/" + id;
  e->control = options_.work_dir + "/" + kControlRoot + "/" + id;
  const std::string legacy = options_.work_dir + "/" + id;
  if (!Exists(e->control) && Exists(legacy + "/" + shim::kControlDir)) {
    e->dir = legacy;
    e->control = legacy + "/" + shim::kControlDir;
  }
  e->status.id = id;
  auto state = ReadJsonFile(e->File(shim::kStateFile));
  if (!state.ok() && state.status().code() == StatusCode::kNotFound) return;
  if (state.ok()) {
    JsonFields f(*state, e->File(shim::kStateFile));
    e->status.started_at_unix_ms = f.Int("started_at_unix_ms", 0, INT64_MAX, false);
    e->boot_id = f.String("boot_id", false);
    e->cgroup_dir = f.String("cgroup", false);
    e->status.port = static_cast<int>(f.Int("port", 0, 65535, false));
    e->tenant = f.String("tenant", false);
    e->uid = f.Int("uid", -1, UINT32_MAX, false, -1);
    e->container = f.String("container", false);
    e->volumes = f.Strings("volumes", false);
    if (const nlohmann::json* eps = f.Get("endpoints", false); eps && eps->is_array()) {
      for (const nlohmann::json& ep : *eps) {
        if (ep.is_array() && ep.size() == 2 && ep[0].is_number_integer() &&
            ep[1].is_number_integer()) {
          e->status.endpoints.emplace_back(ep[0].get<int>(), ep[1].get<int>());
        }
      }
    }
  } else {
    spdlog::warn("workload {}: {}", id, state.status().ToString());
  }
  e->status.stopping = Exists(e->File(shim::kStopFile));
  ReadPids(*e);
  Entry& entry = *e;
  entries_[id] = std::move(e);
  auto exit_text = ReadTextFile(entry.File(shim::kExitFile));
  if (exit_text.ok()) {
    Finish(entry, *exit_text);
  } else if (!entry.pids_known || !shim::ProcAlive(entry.pids.shim_pid, entry.shim_start)) {
    MarkLost(entry, "agent restarted");
  }
}

Status WorkloadSupervisor::SetUpIsolation() {
  const std::string control_root = options_.work_dir + "/" + kControlRoot;
  if (mkdir(control_root.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::Internal(
        fmt::format("workload supervisor: cannot create {}: {}", control_root, strerror(errno)));
  }
  chmod(control_root.c_str(), 0700);
  if (options_.first_uid == 0 && options_.last_uid == 0) {
    isolation_note_ =
        "no workload uids were given (--workload-uids): workloads run as the agent's user";
    return Status::Ok();
  }
  const UidRange range{options_.first_uid, options_.last_uid};
  TESSERA_RETURN_IF_ERROR(CheckUidRange(range));
  if (geteuid() != 0) {
    isolation_note_ = fmt::format(
        "the agent runs as uid {}, not root: it cannot run workloads as uids of their own",
        geteuid());
    spdlog::warn("workload isolation: none: {}", isolation_note_);
    return Status::Ok();
  }
  // Workloads reach their own directories below the work dir and nothing else of it: it may be
  // traversed, not listed; what is in it is the agent's (0600, 0700) or a workload's own.
  const std::string& spaces = options_.workspace_dir;
  if (chmod(spaces.c_str(), 0711) != 0) {
    return Status::Internal(
        fmt::format("workload supervisor: cannot chmod {}: {}", spaces, strerror(errno)));
  }
  const std::string blocked = FirstUntraversable(spaces);
  if (!blocked.empty()) {
    return Status::FailedPrecondition(fmt::format(
        "workload supervisor: {} may not be traversed by others, so a workload uid could not "
        "reach its directory in {}: choose a work dir below directories with o+x, or "
        "--workload-uids none",
        blocked, spaces));
  }
  isolation_ = "uid";
  isolation_note_ = fmt::format(
      "each tenant's workloads run as a uid of their own from {}-{}, without the agent's files",
      range.first, range.last);
  spdlog::info("workload isolation: {}", isolation_note_);
  return Status::Ok();
}

int64_t WorkloadSupervisor::RunningUidOf(const std::string& tenant, std::set<int64_t>& held) const {
  for (const auto& [other, e] : entries_) {
    if (e->uid < 0) continue;
    if (e->tenant == tenant && e->status.phase == WorkloadPhase::kRunning) return e->uid;
    held.insert(e->uid);
  }
  return -1;
}

int64_t WorkloadSupervisor::PlannedUid(const std::string& tenant) const {
  if (isolation_ != "uid") return -1;
  std::set<int64_t> held;
  if (const int64_t running = RunningUidOf(tenant, held); running >= 0) return running;
  for (int64_t uid = options_.first_uid; uid <= options_.last_uid; ++uid) {
    if (!held.count(uid)) return uid;
  }
  return -1;
}

Result<int64_t> WorkloadSupervisor::AssignUid(const std::string& id, const std::string& tenant) {
  std::set<int64_t> held;  // By other tenants, or by ended work whose files are still there.
  if (const int64_t running = RunningUidOf(tenant, held); running >= 0) return running;
  for (int64_t uid = options_.first_uid; uid <= options_.last_uid; ++uid) {
    if (held.count(uid)) continue;
    if (!ClaimUid(static_cast<uid_t>(uid), options_.work_dir, options_.uid_claims_dir)) continue;
    // Whatever still runs as a free uid (left behind by a crashed agent) belongs to nobody now.
    if (!KillUid(static_cast<uid_t>(uid), 500)) {
      UnclaimUid(static_cast<uid_t>(uid), options_.work_dir, options_.uid_claims_dir);
      spdlog::warn("workload uid {} keeps processes that SIGKILL does not end; skipped", uid);
      continue;
    }
    return uid;
  }
  return Status::ResourceExhausted(fmt::format(
      "workload '{}': every workload uid of {}-{} is held by other tenants' work on this node", id,
      options_.first_uid, options_.last_uid));
}

void WorkloadSupervisor::ReleaseUid(const Entry& e) {
  if (e.uid < 0) return;
  for (const auto& [other, o] : entries_) {
    if (o.get() != &e && o->uid == e.uid && o->status.phase == WorkloadPhase::kRunning) return;
  }
  if (UidHasProcesses(static_cast<uid_t>(e.uid)) && !KillUid(static_cast<uid_t>(e.uid), 500)) {
    spdlog::warn("workload {}: processes of uid {} outlive SIGKILL", e.status.id, e.uid);
  }
}

// Container names are the host's, not the agent's: two agents on one host (two clusters, or tests
// run side by side) both run an `inst-000002-a0`. The work dir, which one agent holds locked, tells
// them apart; the name is kept in the workload's state, so a later agent finds it whatever it is.
std::string WorkloadSupervisor::ContainerNameOf(const std::string& id) const {
  return fmt::format("tessera-{}-{}", id, HashToken(options_.work_dir).substr(0, 8));
}

Status WorkloadSupervisor::PlanContainer(const WorkloadSpec& spec, int64_t uid,
                                         const std::string& dir, const std::string& control,
                                         const std::vector<std::pair<int, int>>& endpoints,
                                         shim::ShimPlan& plan) {
  if (options_.podman.empty() || !Exists(options_.podman)) {
    return Status::FailedPrecondition(
        fmt::format("image {}: this node runs no containers (no podman at {})", Quote(spec.image),
                    options_.podman.empty() ? "(none configured)" : options_.podman));
  }
  if (uid < 0) {
    return Status::FailedPrecondition(
        fmt::format("image {}: a container runs as its tenant's workload uid, and this agent has "
                    "none: {}",
                    Quote(spec.image), isolation_note_));
  }
  ContainerSpec c;
  c.name = ContainerNameOf(spec.id);
  c.image = spec.image;
  c.image_has_shell = spec.image_has_shell;
  if (spec.image_has_shell) {
    c.command = spec.command;
  } else {
    for (std::string_view word : Split(spec.command, ' ')) {
      if (!word.empty()) c.args.emplace_back(word);
    }
  }
  // What the workload sees, as a bare process would, but at its paths inside the container.
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> env, BuildEnv(spec, "/workspace"));
  for (const std::string& var : env) {
    const size_t eq = var.find('=');
    c.env.emplace_back(var.substr(0, eq), var.substr(eq + 1));
  }
  c.user_mode = ContainerUserMode::kHostUid;
  c.uid = static_cast<uint32_t>(uid);
  c.gid = static_cast<uint32_t>(uid);
  c.cpu_milli = spec.cpu_milli;
  c.memory_mib = spec.memory_mib;
  c.pids_limit = options_.nproc_limit;
  c.nproc_limit = options_.nproc_limit;
  c.work_dir = dir;
  for (const WorkloadSpec::Volume& v : spec.volumes) c.binds.emplace_back(v.host_dir, v.path);
  c.cdi_devices = spec.cdi_devices;
  // Its own network namespace (no reach to the node's loopback services); a group's rank that
  // holds the rendezvous port needs the node's network for the other ranks to reach it.
  c.network = spec.reserve_port.empty() ? ContainerNetwork::kPrivate : ContainerNetwork::kHost;
  // On its own network only the ports it asked for are reachable from outside, at their host
  // ports; on the node's, it listens on the host ports itself.
  if (c.network == ContainerNetwork::kPrivate) {
    for (const auto& [port, host_port] : endpoints) c.publish.emplace_back(host_port, port);
  }
  const ContainerControlFiles files = ContainerFilesIn(control);
  TESSERA_ASSIGN_OR_RETURN(ContainerRun run, BuildPodmanRun(c, container_host_, files));
  for (const std::string& note : run.notes) spdlog::warn("workload '{}': {}", spec.id, note);
  TESSERA_RETURN_IF_ERROR(PrepareContainerRun(run, files));
  plan.exec_path = run.argv[0];
  plan.args = std::move(run.argv);
  // podman's own environment, not the tenant's (that is in the env file).
  plan.env = {std::string("PATH=") + kBasePath, "HOME=/root", "LANG=C.UTF-8"};
  plan.container_pid_file = files.pid_file;
  plan.uid = -1;  // podman runs as the agent; the container as `uid`.
  plan.nproc_limit = 0;
  return Status::Ok();
}

void WorkloadSupervisor::KillContainerOf(Entry& e) {
  if (e.container.empty() || e.container_killed) return;
  e.container_killed = true;
  Status s = KillContainer(container_host_, e.container, ContainerFilesIn(e.control),
                           std::chrono::seconds(5));
  if (!s.ok()) spdlog::warn("workload {}: {}", e.status.id, s.ToString());
}

Status WorkloadSupervisor::Start(const WorkloadSpec& spec) {
  TESSERA_RETURN_IF_ERROR(ValidateSpec(spec));
  if (options_.refuse_unisolated && isolation_ != "uid") {
    return Status::FailedPrecondition(
        fmt::format("workload '{}': not run, since it could reach this server's files: {}", spec.id,
                    isolation_note_));
  }
  const std::string dir = options_.workspace_dir + "/" + spec.id;
  const std::string control = options_.work_dir + "/" + kControlRoot + "/" + spec.id;
  if (entries_.count(spec.id) > 0 || Exists(control + "/" + shim::kStateFile) ||
      Exists(options_.work_dir + "/" + spec.id + "/" + shim::kControlDir + "/" +
             shim::kStateFile)) {
    return Status::AlreadyExists(fmt::format(
        "workload '{}' was started before ({} holds its state); Forget it first", spec.id, dir));
  }
  int port = 0;
  WorkloadSpec with_port;
  const WorkloadSpec* run = &spec;
  if (!spec.reserve_port.empty()) {
    TESSERA_ASSIGN_OR_RETURN(port, ReservePort(spec.id));
    with_port = spec;
    const std::string text = std::to_string(port);
    for (auto& [name, value] : with_port.env) {
      if (std::find(spec.port_env.begin(), spec.port_env.end(), name) == spec.port_env.end()) {
        continue;
      }
      for (size_t at = value.find("{port}"); at != std::string::npos;
           at = value.find("{port}", at + text.size())) {
        value.replace(at, 6, text);
      }
    }
    with_port.env.emplace_back(spec.reserve_port, text);
    run = &with_port;
  }
  std::vector<std::pair<int, int>> endpoints;
  if (!spec.ports.empty()) {
    TESSERA_ASSIGN_OR_RETURN(endpoints, ReserveEndpoints(spec));
    if (run == &spec) with_port = spec;
    for (const auto& [asked, host_port] : endpoints) {
      with_port.env.emplace_back(fmt::format("TESSERA_PORT_{}", asked), std::to_string(host_port));
    }
    run = &with_port;
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> env, BuildEnv(*run, dir));
  int64_t uid = -1;
  if (isolation_ == "uid") {
    TESSERA_ASSIGN_OR_RETURN(uid, AssignUid(spec.id, spec.tenant));
  }
  // What a Start that died before writing `state` left.
  TESSERA_RETURN_IF_ERROR(RemoveWorkspace(dir).WithPrefix(fmt::format("workload '{}'", spec.id)));
  std::error_code ec;
  fs::remove_all(control, ec);
  if (mkdir(dir.c_str(), 0700) != 0 || mkdir(control.c_str(), 0700) != 0 ||
      (uid >= 0 && chown(dir.c_str(), static_cast<uid_t>(uid), static_cast<gid_t>(uid)) != 0)) {
    const std::string what = strerror(errno);
    (void)RemoveWorkspace(dir);
    fs::remove_all(control, ec);
    return Status::Internal(
        fmt::format("workload '{}': cannot create {} and {}: {}", spec.id, dir, control, what));
  }
  for (const WorkloadSpec::Volume& v : spec.volumes) {
    Status s = MountVolume(v, uid, dir, !spec.image.empty());
    if (!s.ok()) {
      (void)RemoveWorkspace(dir);
      fs::remove_all(control, ec);
      return s.WithPrefix(fmt::format("workload '{}'", spec.id));
    }
  }
  shim::ShimPlan plan;
  plan.dir = dir;
  plan.control_dir = control;
  plan.uid = uid;
  if (uid >= 0) plan.nproc_limit = options_.nproc_limit;
  // Undoes the start when nothing runs.
  auto cleanup = [&](Status s) {
    (void)RemoveWorkspace(dir);
    fs::remove_all(control, ec);
    if (!plan.cgroup_dir.empty()) rmdir(plan.cgroup_dir.c_str());
    return s.WithPrefix(fmt::format("workload '{}'", spec.id));
  };
  if (limits_enforced_ && spec.image.empty()) {  // A container's limits are podman's.
    plan.cgroup_dir = cgroup_root_ + "/" + spec.id;
    Status s = MakeWorkloadCgroup(plan.cgroup_dir, spec.cpu_milli, spec.memory_mib);
    if (!s.ok()) return cleanup(s);
  }
  if (!spec.image.empty()) {
    Status s = PlanContainer(*run, uid, dir, control, endpoints, plan);
    if (!s.ok()) return cleanup(s);
  }
  const int64_t started = UnixMs();
  nlohmann::json state = {
      {"id", spec.id},
      {"command", spec.command},
      {"started_at_unix_ms", started},
      {"boot_id", boot_id_},
      {"cgroup", plan.cgroup_dir},
      {"cpu_milli", spec.cpu_milli},
      {"memory_mib", spec.memory_mib},
      {"port", port},
      {"tenant", spec.tenant},
      {"uid", uid},
      {"image", spec.image},
      {"container", plan.container_pid_file.empty() ? "" : ContainerNameOf(spec.id)},
      {"volumes", nlohmann::json::array()},
      {"endpoints", endpoints}};
  for (const WorkloadSpec::Volume& v : spec.volumes) state["volumes"].push_back(v.host_dir);
  Status s = WriteFileAtomic(plan.control_dir + "/" + shim::kStateFile, DumpJson(state) + "\n");
  if (!s.ok()) return cleanup(s);

  plan.lease_path = options_.work_dir + "/" + shim::kLeaseFile;
  plan.boot_id = boot_id_;
  plan.log_segment_bytes = std::max<int64_t>(1, options_.log_limit_bytes / 2);
  plan.lease_kill_grace_ms = options_.lease_kill_grace.count();
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    plan.max_fd = static_cast<int>(std::min<rlim_t>(nofile.rlim_cur, 1 << 20));
  }
  if (spec.image.empty()) {
    plan.args = {"sh", "-c", spec.command};
    plan.env = std::move(env);
  }
  plan.Seal();

  auto e = std::make_unique<Entry>();
  e->dir = dir;
  e->control = control;
  e->tenant = spec.tenant;
  e->uid = uid;
  for (const WorkloadSpec::Volume& v : spec.volumes) e->volumes.push_back(v.host_dir);
  if (!plan.container_pid_file.empty()) e->container = ContainerNameOf(spec.id);
  e->boot_id = boot_id_;
  e->cgroup_dir = plan.cgroup_dir;
  e->status.id = spec.id;
  e->status.started_at_unix_ms = started;
  e->status.port = port;
  e->status.endpoints = endpoints;
  auto pids = shim::LaunchShim(plan);
  if (!pids.ok()) {
    // Unavailable: the shim may be running; keep the entry, and Poll will find out.
    if (pids.status().code() != StatusCode::kUnavailable) return cleanup(pids.status());
    entries_[spec.id] = std::move(e);
    return pids.status().WithPrefix(fmt::format("workload '{}'", spec.id));
  }
  // The shim wrote the pids file, with the start times, before it reported.
  ReadPids(*e);
  if (!e->pids_known || e->pids.shim_pid != pids->shim_pid) {
    spdlog::warn("workload '{}': the shim's pids file is unreadable; using what it reported",
                 spec.id);
    e->pids = *pids;
    shim::ProcStat st;
    if (shim::ReadProcStat(e->pids.shim_pid, &st)) e->shim_start = st.start_time;
    if (shim::ReadProcStat(e->pids.pid, &st)) e->pid_start = st.start_time;
    e->pids_known = true;
  }
  entries_[spec.id] = std::move(e);
  return Status::Ok();
}

}  // namespace tessera::agent
