// WorkloadSupervisor after a start: ports and endpoints, stop and preemption requests, the lease,
// what each workload's shim files and /proc say (Poll, CPU use), exec targets, its log, and
// forgetting it. The start is in workload.cc.
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "agent/volumes.h"
#include "agent/workload.h"
#include "agent/workload_cgroup.h"
#include "agent/workload_entry.h"
#include "agent/workload_files.h"
#include "agent/workload_shim.h"
#include "agent/workload_uids.h"
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

// Whether a TCP listener could bind `port` on every IPv4 address now.
bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return free;
}

}  // namespace

// The lowest port of the range that no running workload holds and nothing on the node listens on.
Result<int> WorkloadSupervisor::ReservePort(const std::string& id) {
  std::set<int> held;
  for (const auto& [other, e] : entries_) {
    if (e->status.port > 0 && e->status.phase == WorkloadPhase::kRunning)
      held.insert(e->status.port);
  }
  for (int port = options_.first_port; port <= options_.last_port; ++port) {
    if (!held.count(port) && PortFree(port)) return port;
  }
  return Status::ResourceExhausted(
      fmt::format("workload '{}': reserve_port: every port of {}-{} is in use on this node", id,
                  options_.first_port, options_.last_port));
}

Result<std::vector<std::pair<int, int>>> WorkloadSupervisor::ReserveEndpoints(
    const WorkloadSpec& spec) {
  std::set<int> held;
  for (const auto& [other, e] : entries_) {
    if (e->status.phase != WorkloadPhase::kRunning) continue;
    for (const auto& [port, host_port] : e->status.endpoints) held.insert(host_port);
  }
  std::vector<std::pair<int, int>> out;
  int next = options_.first_endpoint_port;
  for (const int port : spec.ports) {
    while (next <= options_.last_endpoint_port && (held.count(next) || !PortFree(next))) ++next;
    if (next > options_.last_endpoint_port) {
      return Status::ResourceExhausted(
          fmt::format("workload '{}': ports: every port of {}-{} is in use on this node", spec.id,
                      options_.first_endpoint_port, options_.last_endpoint_port));
    }
    out.emplace_back(port, next++);
  }
  return out;
}

Result<WorkloadSupervisor::Entry*> WorkloadSupervisor::Find(const std::string& id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    return Status::NotFound(fmt::format("workload {}: no such workload", Quote(id)));
  }
  return it->second.get();
}

std::map<std::string, double> WorkloadSupervisor::CpuSeconds() {
  std::map<pid_t, std::string> by_session;
  for (const auto& [id, e] : entries_) {  // As the last Poll left them.
    if (e->status.phase != WorkloadPhase::kRunning || !e->pids_known) continue;
    pid_t leader = e->pids.pid;  // Its own session (the shim's setsid).
    if (!e->container.empty()) {
      // The container's processes are not podman's children: its init's session.
      const std::optional<pid_t> pid = ReadContainerPid(ContainerFilesIn(e->control).pid_file);
      shim::ProcStat st;
      if (!pid || !shim::ReadProcStat(*pid, &st)) continue;
      leader = st.session;
    }
    by_session[leader] = id;
  }
  std::map<std::string, double> out;
  if (by_session.empty()) return out;
  const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  shim::ForEachProcess([&](pid_t pid) {
    shim::ProcStat st;
    if (!shim::ReadProcStat(pid, &st)) return true;
    if (auto it = by_session.find(st.session); it != by_session.end()) {
      out[it->second] += static_cast<double>(st.cpu_ticks) * tick;
    }
    return true;
  });
  return out;
}

Result<ExecTarget> WorkloadSupervisor::ExecTargetOf(const std::string& id) {
  TESSERA_ASSIGN_OR_RETURN(Entry * e, Find(id));
  Refresh(*e);
  if (e->status.phase != WorkloadPhase::kRunning || !e->pids_known || e->status.stopping) {
    return Status::FailedPrecondition(
        fmt::format("workload {} is not running (or is stopping)", Quote(id)));
  }
  ExecTarget t;
  t.container = e->container;
  t.podman = options_.podman;
  if (!e->container.empty()) {
    t.container_pid_file = ContainerFilesIn(e->control).pid_file;
  }
  t.uid = e->uid;
  t.nproc_limit = e->uid >= 0 ? options_.nproc_limit : 0;
  t.dir = e->dir;
  t.cgroup_dir = e->cgroup_dir;
  t.pid = e->pids.pid;
  return t;
}

Status WorkloadSupervisor::Stop(const std::string& id, std::chrono::milliseconds grace) {
  TESSERA_ASSIGN_OR_RETURN(Entry * e, Find(id));
  if (grace.count() < 0) {
    return Status::InvalidArgument(fmt::format("workload '{}': stop: grace is negative", id));
  }
  const int64_t now = shim::MonotonicMs();
  return RequestStop(*e, now, now + std::min<int64_t>(grace.count(), kMaxGraceMs), "stop");
}

Status WorkloadSupervisor::Preempt(const std::string& id, int64_t deadline_unix_ms,
                                   const std::string& reason, std::chrono::milliseconds grace) {
  TESSERA_ASSIGN_OR_RETURN(Entry * e, Find(id));
  if (grace.count() < 0) {
    return Status::InvalidArgument(fmt::format("workload '{}': preempt: grace is negative", id));
  }
  if (deadline_unix_ms < 0 || deadline_unix_ms > kMaxUnixMs) {
    return Status::InvalidArgument(fmt::format(
        "workload '{}': preempt: deadline_unix_ms {} is not a time in years 1970 to 9999", id,
        deadline_unix_ms));
  }
  if (e->status.phase == WorkloadPhase::kExited) return Status::Ok();
  const Time deadline{std::chrono::milliseconds(deadline_unix_ms)};
  const nlohmann::json notice = {{"deadline", FormatRfc3339(deadline)}, {"reason", reason}};
  // Written where the workload cannot reach, then renamed into its directory: rename replaces
  // whatever the workload put at that name (a symlink to a file of the agent's, say) and never
  // follows it.
  const std::string staged = e->File(shim::kNoticeFile);
  TESSERA_RETURN_IF_ERROR(WriteFileAtomic(staged, DumpJson(notice) + "\n"));
  chmod(staged.c_str(), 0644);  // The agent's umask is private; the workload must read it.
  if (rename(staged.c_str(), (e->dir + "/" + shim::kNoticeFile).c_str()) != 0) {
    spdlog::warn("workload '{}': the preemption notice could not be put in {}: {}", id, e->dir,
                 strerror(errno));
  }
  const int64_t term_at = shim::MonotonicMs() + std::max<int64_t>(0, deadline_unix_ms - UnixMs());
  return RequestStop(*e, term_at, term_at + std::min<int64_t>(grace.count(), kMaxGraceMs),
                     "preempt");
}

// Writes the stop file; an earlier request's times stand where they are sooner.
Status WorkloadSupervisor::RequestStop(Entry& e, int64_t term_at_ms, int64_t kill_at_ms,
                                       const char* kind) {
  if (e.status.phase == WorkloadPhase::kExited) return Status::Ok();
  if (term_at_ms >= e.term_at && kill_at_ms >= e.kill_at) return Status::Ok();
  e.term_at = std::min(e.term_at, term_at_ms);
  e.kill_at = std::min(e.kill_at, kill_at_ms);
  e.status.stopping = true;
  return WriteFileAtomic(e.File(shim::kStopFile),
                         fmt::format("{} {} {}\n", e.term_at, e.kill_at, kind));
}

void WorkloadSupervisor::RenewLease(std::chrono::milliseconds valid_for) {
  const int64_t deadline =
      shim::MonotonicMs() + std::clamp<int64_t>(valid_for.count(), 0, kMaxGraceMs);
  Status s = WriteFileAtomic(options_.work_dir + "/" + shim::kLeaseFile,
                             fmt::format("{} {}\n", boot_id_, deadline));
  if (!s.ok()) spdlog::warn("workload lease not renewed: {}", s.ToString());
}

std::vector<WorkloadStatus> WorkloadSupervisor::Poll() {
  std::vector<WorkloadStatus> out;
  out.reserve(entries_.size());
  for (auto& [id, e] : entries_) {
    Refresh(*e);
    out.push_back(e->status);
  }
  return out;
}

// Brings one entry up to date from its shim's files and /proc.
void WorkloadSupervisor::Refresh(Entry& e) {
  if (e.status.phase == WorkloadPhase::kExited) return;
  if (auto text = ReadTextFile(e.File(shim::kExitFile)); text.ok()) {
    Finish(e, *text);
    return;
  }
  if (e.killing_orphan) {
    MarkLost(e, e.lost_reason.c_str());
    return;
  }
  if (!e.pids_known) ReadPids(e);  // After a Start whose shim was slow to report.
  if (e.pids_known && shim::ProcAlive(e.pids.shim_pid, e.shim_start)) {
    if (auto dropped = ReadTextFile(e.File(shim::kDroppedFile)); dropped.ok()) {
      e.status.log_dropped_bytes = std::atoll(dropped->c_str());
    }
    return;
  }
  // The shim is gone; it writes `exit` before it exits, so look once more.
  if (auto text = ReadTextFile(e.File(shim::kExitFile)); text.ok()) {
    Finish(e, *text);
    return;
  }
  MarkLost(e, "shim died");
}

void WorkloadSupervisor::Finish(Entry& e, const std::string& exit_text) {
  const std::string where = e.File(shim::kExitFile);
  e.status.phase = WorkloadPhase::kExited;
  ReleaseUid(e);
  auto j = ParseJson(exit_text, where);
  if (!j.ok()) {
    e.status.exit_code = -1;
    e.status.reason = j.status().message();
    return;
  }
  JsonFields f(*j, where);
  e.status.exit_code = static_cast<int>(f.Int("exit_code", -1, 255 + 128));
  e.status.reason = f.String("reason");
  e.status.log_dropped_bytes = f.Int("log_dropped_bytes", 0, INT64_MAX, false);
  if (!f.ok()) e.status.reason = f.status().message();
}

// No shim supervises the workload: if its main process still runs, kill its group (nothing
// would fence it) and report it lost once it is gone; else report it lost now.
void WorkloadSupervisor::MarkLost(Entry& e, const char* reason) {
  e.lost_reason = reason;
  KillContainerOf(e);  // Nothing fences a container whose shim is gone.
  if (e.pids_known && shim::ProcAlive(e.pids.pid, e.pid_start)) {
    kill(-e.pids.pid, SIGKILL);
    kill(e.pids.pid, SIGKILL);
    e.killing_orphan = true;
    e.status.stopping = true;
    return;
  }
  e.killing_orphan = false;
  e.status.phase = WorkloadPhase::kExited;
  ReleaseUid(e);
  e.status.lost = true;
  e.status.exit_code = -1;
  e.status.reason = e.lost_reason;
}

Result<std::string> WorkloadSupervisor::ReadLog(const std::string& id, int64_t offset,
                                                size_t max_bytes, int64_t* next) {
  TESSERA_ASSIGN_OR_RETURN(Entry * e, Find(id));
  if (offset < 0) {
    return Status::InvalidArgument(
        fmt::format("workload '{}': log offset {} is negative", id, offset));
  }
  if (next == nullptr) return Status::InvalidArgument("ReadLog: next must not be null");
  return ReadLogSegments(e->ControlDir(), offset, max_bytes, next);
}

Status WorkloadSupervisor::Forget(const std::string& id) {
  TESSERA_ASSIGN_OR_RETURN(Entry * e, Find(id));
  Refresh(*e);
  if (e->status.phase != WorkloadPhase::kExited) {
    return Status::FailedPrecondition(
        fmt::format("workload '{}' still runs: Stop it and wait until Poll reports it exited", id));
  }
  KillContainerOf(*e);  // `podman rm` of what --rm left, if anything.
  std::error_code ec;
  fs::remove_all(e->control, ec);
  if (ec) {
    return Status::Internal(
        fmt::format("workload '{}': cannot remove {}: {}", id, e->control, ec.message()));
  }
  TESSERA_RETURN_IF_ERROR(RemoveWorkspace(e->dir).WithPrefix(fmt::format("workload '{}'", id)));
  if (!e->cgroup_dir.empty()) rmdir(e->cgroup_dir.c_str());
  const int64_t uid = e->uid;
  const std::vector<std::string> volumes = std::move(e->volumes);
  entries_.erase(id);
  // A volume no workload here mounts any more is locked (its root back to root, 0700) before the
  // uid may go to another tenant, who would own its files then.
  for (const std::string& dir : volumes) {
    if (std::none_of(entries_.begin(), entries_.end(), [&](const auto& other) {
          const auto& mine = other.second->volumes;
          return std::find(mine.begin(), mine.end(), dir) != mine.end();
        })) {
      TESSERA_RETURN_IF_ERROR(LockVolumeDir(dir).WithPrefix(fmt::format("workload '{}'", id)));
    }
  }
  if (uid >= 0 && std::none_of(entries_.begin(), entries_.end(),
                               [uid](const auto& other) { return other.second->uid == uid; })) {
    UnclaimUid(static_cast<uid_t>(uid), options_.work_dir, options_.uid_claims_dir);
  }
  return Status::Ok();
}

}  // namespace tessera::agent
