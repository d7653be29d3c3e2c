// The shim process (see workload_shim.h). Everything in the anonymous namespace below runs in a
// child forked from a possibly multithreaded agent and never execs, so it keeps to system calls
// and fixed buffers: no allocation, no stdio, no logging, no exceptions. LaunchShim, at the end,
// runs in the agent.
// Thread-safety: the shim has one thread; LaunchShim may be called from any one agent thread.
#include "agent/workload_shim.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>

namespace tessera::agent::shim {
namespace {

// What the shim tells LaunchShim through the report pipe: one write of this struct.
enum Stage : int32_t { kStarted = 0, kForkShim, kChdir, kPipe, kForkWorkload };
struct Report {
  int32_t shim_pid = 0;
  int32_t pid = 0;
  int32_t err = 0;  // errno of the failed stage.
  int32_t stage = kStarted;
};

constexpr char kTmpSuffixExit[] = "exit.tmp";
constexpr char kTmpSuffixPids[] = "pids.tmp";
constexpr char kLogLinkTmp[] = "log.tmp";
constexpr size_t kExitReserve = 512;  // Bytes of exit.tmp written at start, so a full disk
                                      // cannot keep the exit code from being recorded.

// ---- Async-signal-safe helpers ----

// A fixed buffer that text and numbers are appended to; it silently stops at its capacity.
class Text {
 public:
  Text& Add(const char* s) {
    while (*s != '\0' && len_ < kCap) buf_[len_++] = *s++;
    return *this;
  }
  Text& AddInt(int64_t v, size_t min_digits = 1) {
    char tmp[24];
    size_t n = 0;
    uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      tmp[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0 || n < min_digits);
    if (v < 0) Add("-");
    while (n > 0 && len_ < kCap) buf_[len_++] = tmp[--n];
    return *this;
  }
  const char* c_str() {
    buf_[len_] = '\0';
    return buf_;
  }
  size_t size() const { return len_; }

 private:
  static constexpr size_t kCap = 511;
  char buf_[kCap + 1];
  size_t len_ = 0;
};

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool WriteFileAtomic(const char* tmp, const char* path, const char* data, size_t n) {
  const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = WriteAll(fd, data, n);
  close(fd);
  return ok && rename(tmp, path) == 0;
}

// Reads up to cap-1 bytes of a small file into buf, NUL-terminated; -1 when it cannot.
ssize_t ReadSmall(const char* path, char* buf, size_t cap) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  while (len + 1 < cap) {
    const ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += static_cast<size_t>(r);
  }
  close(fd);
  buf[len] = '\0';
  return static_cast<ssize_t>(len);
}

// Parses a decimal integer at *p after optional spaces, advancing *p; false when none.
bool ParseInt(const char** p, int64_t* out) {
  const char* s = *p;
  while (*s == ' ') ++s;
  const bool neg = *s == '-';
  if (neg) ++s;
  if (*s < '0' || *s > '9') return false;
  int64_t v = 0;
  while (*s >= '0' && *s <= '9') {
    if (v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (*s++ - '0');
  }
  *out = neg ? -v : v;
  *p = s;
  return true;
}

void SleepMs(int ms) {
  timespec ts{ms / 1000, static_cast<long>(ms % 1000) * 1'000'000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int64_t UnixMs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

void CloseRange(unsigned lo, unsigned hi, int max_fd) {
  if (lo > hi) return;
  if (close_range(lo, hi, 0) == 0) return;
  for (unsigned fd = lo; fd <= hi && fd < static_cast<unsigned>(max_fd); ++fd)
    close(static_cast<int>(fd));
}

// Closes every descriptor above 2 except `keep` (-1 for none).
void CloseAllBut(int keep, int max_fd) {
  if (keep >= 3) {
    CloseRange(3, static_cast<unsigned>(keep) - 1, max_fd);
    CloseRange(static_cast<unsigned>(keep) + 1, UINT_MAX, max_fd);
  } else {
    CloseRange(3, UINT_MAX, max_fd);
  }
}

// Every handler back to its default and nothing blocked. The shim then ignores the signals a
// terminal, a pipe or a file-size limit might send it: it must outlive the agent's session.
void ResetSignals(bool shim) {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) {
    if (s != SIGKILL && s != SIGSTOP) sigaction(s, &sa, nullptr);
  }
  if (shim) {
    sa.sa_handler = SIG_IGN;
    for (int s : {SIGPIPE, SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGXFSZ, SIGUSR1, SIGUSR2}) {
      sigaction(s, &sa, nullptr);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

[[noreturn]] void FailReport(int report_fd, Stage stage, int err) {
  Report r;
  r.shim_pid = getpid();
  r.err = err;
  r.stage = stage;
  WriteAll(report_fd, &r, sizeof r);
  _exit(1);
}

}  // namespace

[[noreturn]] void BecomeWorkload(const ShimPlan& plan) {
  ResetSignals(false);
  CloseAllBut(-1, plan.max_fd);
  if (chdir(plan.dir.c_str()) != 0) {
    Text msg;
    msg.Add("tessera: cannot enter ").Add(plan.dir.c_str()).Add(" (errno ").AddInt(errno);
    msg.Add(")\n");
    WriteAll(2, msg.c_str(), msg.size());
    _exit(126);
  }
  if (!plan.cgroup_dir.empty()) {
    Text pid;
    pid.AddInt(getpid()).Add("\n");
    const int fd = open(plan.cgroup_procs.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const bool ok = fd >= 0 && WriteAll(fd, pid.c_str(), pid.size());
    const int err = errno;
    if (fd >= 0) close(fd);
    if (!ok) {
      Text msg;
      msg.Add("tessera: cannot join the cgroup ").Add(plan.cgroup_dir.c_str()).Add(" (errno ");
      msg.AddInt(err).Add("); the workload does not run without its limits\n");
      WriteAll(2, msg.c_str(), msg.size());
      _exit(126);
    }
  }
  if (plan.nproc_limit > 0) {
    const rlimit lim{static_cast<rlim_t>(plan.nproc_limit), static_cast<rlim_t>(plan.nproc_limit)};
    setrlimit(RLIMIT_NPROC, &lim);
  }
  if (plan.uid >= 0) {
    // The tenant's own identity: no group of the agent's, and no way back (setuid programs do not
    // raise it either).
    const auto id = static_cast<uid_t>(plan.uid);
    if (setgroups(0, nullptr) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0 ||
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
      Text msg;
      msg.Add("tessera: cannot switch to uid ").AddInt(plan.uid).Add(" (errno ").AddInt(errno);
      msg.Add("); the workload does not run with the agent's powers\n");
      WriteAll(2, msg.c_str(), msg.size());
      _exit(126);
    }
  }
  umask(022);  // The shim's is the agent's private 077; a workload gets the usual default.
  execve(plan.exec_path.c_str(), plan.argv.data(), plan.envp.data());
  Text msg;
  msg.Add("tessera: cannot run ").Add(plan.exec_path.c_str()).Add(" (errno ").AddInt(errno);
  msg.Add(")\n");
  WriteAll(2, msg.c_str(), msg.size());
  _exit(127);
}

namespace {

// The workload: a session and process group of its own, output into the log pipe, its directory
// as cwd, its cgroup joined, then /bin/sh -c. Runs in the shim's child.
[[noreturn]] void RunWorkload(const ShimPlan& plan, int out_fd) {
  setsid();
  const int in = open("/dev/null", O_RDONLY);
  if (in >= 0) dup2(in, 0);
  dup2(out_fd, 1);
  dup2(out_fd, 2);
  BecomeWorkload(plan);
}

// The bounded log: segments named by the offset of their first byte ("log." + 20 digits) of at
// most segment_bytes each; a new one is begun when the current is full and the one before the
// previous is removed, so at most two (the log limit) are kept. `log` is a hard link to the
// newest, for `tail -F`. A write that fails (disk full) drops its bytes and counts them: the
// workload never waits on the disk's state.
class Log {
 public:
  explicit Log(int64_t segment_bytes) : seg_max_(segment_bytes < 1 ? 1 : segment_bytes) {}

  void Open() {
    dropped_fd_ = open(kDroppedFile, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FlushDropped();
    NewSegment();
  }

  void Write(const char* p, size_t n) {
    while (n > 0) {
      if (fd_ < 0 && !NewSegment()) break;
      const size_t room = static_cast<size_t>(seg_max_ - seg_size_);
      const ssize_t w = write(fd_, p, n < room ? n : room);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      seg_size_ += w;
      total_ += w;
      p += w;
      n -= static_cast<size_t>(w);
      if (seg_size_ >= seg_max_) {
        close(fd_);
        fd_ = -1;
      }
    }
    dropped_ += static_cast<int64_t>(n);
  }

  // Shows the dropped count in log.dropped: a fixed-width overwrite, which needs no new space.
  void FlushDropped() {
    if (dropped_fd_ < 0 || dropped_ == dropped_shown_) return;
    Text t;
    t.AddInt(dropped_, 20).Add("\n");
    if (pwrite(dropped_fd_, t.c_str(), t.size(), 0) == static_cast<ssize_t>(t.size())) {
      dropped_shown_ = dropped_;
    }
  }

  int64_t total() const { return total_; }
  int64_t dropped() const { return dropped_; }

 private:
  bool NewSegment() {
    char name[32];
    SegmentName(total_, name);
    const int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    fd_ = fd;
    seg_size_ = 0;
    if (prev_base_ >= 0) {
      char old[32];
      SegmentName(prev_base_, old);
      unlink(old);
    }
    prev_base_ = cur_base_;
    cur_base_ = total_;
    unlink(kLogLinkTmp);
    if (link(name, kLogLinkTmp) == 0) rename(kLogLinkTmp, kLogLink);
    return true;
  }

  int64_t seg_max_;
  int fd_ = -1;
  int64_t seg_size_ = 0;
  int64_t cur_base_ = -1;
  int64_t prev_base_ = -1;
  int64_t total_ = 0;
  int64_t dropped_ = 0;
  int64_t dropped_shown_ = -1;
  int dropped_fd_ = -1;
};

// The supervising loop. Times are CLOCK_MONOTONIC milliseconds.
class Shim {
 public:
  explicit Shim(const ShimPlan& plan) : plan_(plan), log_(plan.log_segment_bytes) {}

  // Files made before the workload starts: exit.tmp with room reserved, the log.
  void Prepare() {
    exit_fd_ = open(kTmpSuffixExit, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (exit_fd_ >= 0) {
      char spaces[kExitReserve];
      for (char& c : spaces) c = ' ';
      WriteAll(exit_fd_, spaces, sizeof spaces);
    }
    log_.Open();
  }

  [[noreturn]] void Run(pid_t pid, int out_fd, int report_fd) {
    pid_ = pid;
    out_fd_ = out_fd;
    WritePids();
    // Known before the agent hears of the start, so a lease file gone from then on ends it.
    ReadLease(MonotonicMs());
    Report r;
    r.shim_pid = getpid();
    r.pid = pid;
    WriteAll(report_fd, &r, sizeof r);
    close(report_fd);
    for (;;) {
      const int timeout_ms = main_done_ ? 10 : 100;
      if (out_fd_ >= 0) {
        pollfd pfd{out_fd_, POLLIN, 0};
        poll(&pfd, 1, timeout_ms);
      } else {
        SleepMs(timeout_ms);
      }
      Drain();
      Reap();
      WatchContainer();
      const int64_t now = MonotonicMs();
      ReadStop();
      ReadLease(now);
      if (!main_done_) {
        if (!term_sent_ && now >= term_at_) {
          Signal(SIGTERM);
          term_sent_ = true;
        }
        if (!kill_sent_ && now >= kill_at_) {
          Signal(SIGKILL);
          KillCgroup();
          kill_sent_ = true;
        }
      } else {
        // The main process is gone: the instance is over, and what it left in its group goes.
        if (!cgroup_killed_) KillCgroup();
        if (kill(-pid_, 0) == -1 && errno == ESRCH) Finish();
        kill(-pid_, SIGKILL);
      }
      log_.FlushDropped();
    }
  }

 private:
  enum Kind { kNone, kStop, kPreempt };

  void WritePids() {
    ProcStat self{}, child{};
    ReadProcStat(getpid(), &self);
    ReadProcStat(pid_, &child);  // Not yet reaped, so the pid cannot have been reused.
    Text t;
    t.Add("{\"shim_pid\":").AddInt(getpid()).Add(",\"shim_start\":");
    t.AddInt(static_cast<int64_t>(self.start_time)).Add(",\"pid\":").AddInt(pid_);
    t.Add(",\"pid_start\":").AddInt(static_cast<int64_t>(child.start_time)).Add("}\n");
    WriteFileAtomic(kTmpSuffixPids, kPidsFile, t.c_str(), t.size());
  }

  // Copies what the pipe holds into the log, at most `max_reads` reads, so that a workload that
  // writes faster than the disk takes it cannot keep the loop from its stop and lease checks.
  void Drain(int max_reads = 64) {
    for (int reads = 0; out_fd_ >= 0 && reads < max_reads; ++reads) {
      const ssize_t r = read(out_fd_, buf_, sizeof buf_);
      if (r > 0) {
        log_.Write(buf_, static_cast<size_t>(r));
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) {  // Every writer is gone.
        close(out_fd_);
        out_fd_ = -1;
      }
      return;
    }
  }

  // Reaps the main process and, as a subreaper, whatever of its descendants was orphaned.
  void Reap() {
    int st = 0;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
      if (p == pid_) {
        main_done_ = true;
        main_status_ = st;
      }
    }
  }

  // The stop file: "<term_at> <kill_at> <stop|preempt>". An earlier time always wins.
  void ReadStop() {
    char buf[128];
    if (ReadSmall(kStopFile, buf, sizeof buf) <= 0) return;
    const char* p = buf;
    int64_t term = 0, kill_at = 0;
    if (!ParseInt(&p, &term) || !ParseInt(&p, &kill_at)) return;
    while (*p == ' ') ++p;
    if (term < term_at_) {
      term_at_ = term;
      kind_ = p[0] == 'p' ? kPreempt : kStop;
    }
    if (kill_at < kill_at_) kill_at_ = kill_at;
  }

  // The lease: "<boot id> <deadline>". The last deadline read stands when the file cannot be
  // read, so nothing can unfence a workload; one from another boot is ignored. A file gone after
  // one was read ends the lease at once. Once it has fired the stop goes on even if the lease is
  // renewed: the server may have moved the work.
  void ReadLease(int64_t now) {
    char buf[128];
    const ssize_t n_read = ReadSmall(plan_.lease_path.c_str(), buf, sizeof buf);
    if (n_read < 0 && (errno == ENOENT || errno == ENOTDIR) && lease_deadline_ > 0) {
      // The lease was there and is gone: the agent's work dir was deleted, so nothing can renew
      // the lease and no agent can adopt this workload. The lease ends now.
      lease_deadline_ = now;
    }
    if (n_read > 0) {
      const char* p = buf;
      const size_t n = plan_.boot_id.size();
      if (n == 0 || (memcmp(buf, plan_.boot_id.c_str(), n) == 0 && buf[n] == ' ')) {
        p += n;
        int64_t deadline = 0;
        if (ParseInt(&p, &deadline)) lease_deadline_ = deadline;
      }
    }
    if (lease_deadline_ > 0 && now >= lease_deadline_ && !lease_fired_ && !main_done_) {
      lease_fired_ = true;
      if (now < term_at_) term_at_ = now;
      if (now + plan_.lease_kill_grace_ms < kill_at_) kill_at_ = now + plan_.lease_kill_grace_ms;
    }
  }

  // To the group, and to the main process itself in case it has not yet made its group.
  void Signal(int sig) {
    kill(-pid_, sig);
    if (!main_done_) kill(pid_, sig);
  }

  // The container's init, once conmon has written its pid (with its start time, so a pid reused
  // later is never hit).
  void WatchContainer() {
    if (plan_.container_pid_file.empty() || container_pid_ > 0) return;
    char buf[32];
    if (ReadSmall(plan_.container_pid_file.c_str(), buf, sizeof buf) <= 0) return;
    const char* p = buf;
    int64_t pid = 0;
    ProcStat st{};
    if (!ParseInt(&p, &pid) || pid <= 1 || pid > INT32_MAX) return;
    if (!ReadProcStat(static_cast<pid_t>(pid), &st)) return;
    container_pid_ = static_cast<pid_t>(pid);
    container_start_ = st.start_time;
  }

  // cgroup.kill (Linux 5.14) also reaches processes that left the group with setsid; the
  // container's init is outside the group too.
  void KillCgroup() {
    cgroup_killed_ = true;
    WatchContainer();
    if (container_pid_ > 0 && ProcAlive(container_pid_, container_start_)) {
      kill(container_pid_, SIGKILL);
    }
    if (plan_.cgroup_dir.empty()) return;
    const int fd = open(plan_.cgroup_kill.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    WriteAll(fd, "1", 1);
    close(fd);
  }

  const char* Reason() const {
    if (!term_sent_ && !kill_sent_) return "exited";
    if (lease_fired_) return "lease expired";
    if (kill_sent_) return "killed after grace";
    return kind_ == kPreempt ? "preempted" : "stopped";
  }

  int ExitCode() const {
    if (WIFEXITED(main_status_)) return WEXITSTATUS(main_status_);
    if (WIFSIGNALED(main_status_)) return 128 + WTERMSIG(main_status_);
    return -1;
  }

  // Replaces exit.tmp's reserved bytes with `t` and renames it to `exit`; falls back to a fresh
  // file. False with errno set when neither worked.
  bool WriteExit(Text& t) {
    if (exit_fd_ >= 0 &&
        pwrite(exit_fd_, t.c_str(), t.size(), 0) == static_cast<ssize_t>(t.size()) &&
        ftruncate(exit_fd_, static_cast<off_t>(t.size())) == 0 &&
        rename(kTmpSuffixExit, kExitFile) == 0) {
      return true;
    }
    return WriteFileAtomic(kTmpSuffixExit, kExitFile, t.c_str(), t.size());
  }

  // Removes the cgroup, records the exit (exit.tmp was reserved at start, so this overwrite needs
  // no new space on most file systems) and exits. Retries for a minute if the disk is full.
  [[noreturn]] void Finish() {
    Reap();
    Drain(1024);
    log_.FlushDropped();
    // The cgroup goes first: once `exit` is there the agent may reuse the id (Forget, Start).
    if (!plan_.cgroup_dir.empty()) {
      for (int attempt = 0; attempt < 50 && rmdir(plan_.cgroup_dir.c_str()) != 0 && errno == EBUSY;
           ++attempt) {
        SleepMs(10);
      }
    }
    Text t;
    t.Add("{\"exit_code\":").AddInt(ExitCode()).Add(",\"reason\":\"").Add(Reason());
    t.Add("\",\"log_bytes\":").AddInt(log_.total()).Add(",\"log_dropped_bytes\":");
    t.AddInt(log_.dropped()).Add(",\"ended_at_unix_ms\":").AddInt(UnixMs()).Add("}\n");
    // Only a full disk is worth waiting for; a directory removed under us (Forget, or a test's
    // clean-up) has no reader left.
    for (int attempt = 0; attempt < 600 && !WriteExit(t); ++attempt) {
      if (errno != ENOSPC && errno != EDQUOT) break;
      SleepMs(100);
    }
    _exit(0);
  }

  const ShimPlan& plan_;
  Log log_;
  pid_t pid_ = 0;
  int out_fd_ = -1;
  int exit_fd_ = -1;
  bool main_done_ = false;
  int main_status_ = 0;
  int64_t term_at_ = INT64_MAX;
  int64_t kill_at_ = INT64_MAX;
  Kind kind_ = kNone;
  bool term_sent_ = false;
  bool kill_sent_ = false;
  bool cgroup_killed_ = false;
  pid_t container_pid_ = 0;
  uint64_t container_start_ = 0;
  int64_t lease_deadline_ = 0;
  bool lease_fired_ = false;
  char buf_[64 * 1024];
};

// The shim's body, in the grandchild of the agent (already in a session of its own).
[[noreturn]] void RunShim(const ShimPlan& plan, int report_fd) {
  ResetSignals(true);
  if (report_fd <= 2) report_fd = fcntl(report_fd, F_DUPFD_CLOEXEC, 3);
  const int null_fd = open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    for (int fd = 0; fd <= 2; ++fd) dup2(null_fd, fd);
  }
  CloseAllBut(report_fd, plan.max_fd);  // Also the agent's sockets, and null_fd.
  if (chdir(plan.control_dir.c_str()) != 0) FailReport(report_fd, kChdir, errno);
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) FailReport(report_fd, kPipe, errno);
  fcntl(out[0], F_SETPIPE_SZ, 1 << 20);  // Best effort: more room while the disk is slow.
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  // Static: the shim's copy of the agent's memory is its own, and the object is large.
  alignas(Shim) static char storage[sizeof(Shim)];
  Shim* shim = new (storage) Shim(plan);
  shim->Prepare();
  const pid_t pid = _Fork();
  if (pid < 0) FailReport(report_fd, kForkWorkload, errno);
  if (pid == 0) RunWorkload(plan, out[1]);
  close(out[1]);
  shim->Run(pid, out[0], report_fd);
}

const char* StageName(int32_t stage) {
  switch (stage) {
    case kForkShim:
      return "fork the shim";
    case kChdir:
      return "enter the workload directory";
    case kPipe:
      return "create the output pipe";
    case kForkWorkload:
      return "fork the workload";
    default:
      return "start";
  }
}

}  // namespace

void ShimPlan::Seal() {
  argv.clear();
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  envp.clear();
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  cgroup_procs = cgroup_dir.empty() ? "" : cgroup_dir + "/cgroup.procs";
  cgroup_kill = cgroup_dir.empty() ? "" : cgroup_dir + "/cgroup.kill";
}

bool ReadProcStat(pid_t pid, ProcStat* out) {
  Text path;
  path.Add("/proc/").AddInt(pid).Add("/stat");
  char buf[1024];
  const ssize_t n = ReadSmall(path.c_str(), buf, sizeof buf);
  if (n <= 0) return false;
  // The command name (field 2) is in parentheses and may hold anything, ")" included.
  const char* p = nullptr;
  for (ssize_t i = n - 1; i >= 0; --i) {
    if (buf[i] == ')') {
      p = buf + i + 1;
      break;
    }
  }
  if (p == nullptr || p[0] != ' ') return false;
  ++p;
  out->state = *p;
  out->cpu_ticks = 0;
  // From field 3 (the state) to field 22 (the start time).
  for (int field = 4; field <= 22; ++field) {
    while (*p != '\0' && *p != ' ') ++p;
    if (*p == '\0') return false;
    ++p;
    const bool cpu = field >= 14 && field <= 17;
    if (field != 6 && !cpu && field != 22) continue;
    int64_t v = 0;
    if (!ParseInt(&p, &v)) return false;
    if (field == 6) out->session = static_cast<pid_t>(v);
    if (cpu && v > 0) out->cpu_ticks += static_cast<uint64_t>(v);
    if (field == 22) out->start_time = static_cast<uint64_t>(v);
  }
  return true;
}

void ForEachProcess(const std::function<bool(pid_t)>& visit) {
  DIR* d = opendir("/proc");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    char* end = nullptr;
    const long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    if (!visit(static_cast<pid_t>(pid))) break;
  }
  closedir(d);
}

bool ProcAlive(pid_t pid, uint64_t start_time) {
  ProcStat st;
  if (pid <= 0 || !ReadProcStat(pid, &st)) return false;
  return st.start_time == start_time && st.state != 'Z' && st.state != 'X';
}

int64_t MonotonicMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

void SegmentName(int64_t base, char* out) {
  Text t;
  t.Add(kSegmentPrefix).AddInt(base, kSegmentDigits);
  memcpy(out, t.c_str(), t.size() + 1);
}

Result<ShimPids> LaunchShim(const ShimPlan& plan) {
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return Status::Unavailable(
        fmt::format("{}: cannot create the shim's report pipe: {}", plan.dir, strerror(errno)));
  }
  // Signals stay blocked across the fork until the shim has reset the agent's handlers.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t middle = fork();
  if (middle == 0) {
    close(report[0]);
    setsid();
    const pid_t shim = _Fork();
    if (shim == 0) RunShim(plan, report[1]);
    if (shim < 0) FailReport(report[1], kForkShim, errno);
    _exit(0);
  }
  const int fork_err = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(report[1]);
  if (middle < 0) {
    close(report[0]);
    return Status::Internal(
        fmt::format("{}: cannot fork the shim: {}", plan.dir, strerror(fork_err)));
  }
  while (waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
  }
  Report r;
  size_t got = 0;
  const int64_t deadline = MonotonicMs() + 10'000;
  while (got < sizeof r) {
    const int64_t left = deadline - MonotonicMs();
    pollfd pfd{report[0], POLLIN, 0};
    if (left <= 0 || poll(&pfd, 1, static_cast<int>(left)) == 0) {
      close(report[0]);
      return Status::Unavailable(
          fmt::format("{}: the shim did not report within 10 s; it may be running", plan.dir));
    }
    const ssize_t n = read(report[0], reinterpret_cast<char*>(&r) + got, sizeof r - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(report[0]);
  if (got < sizeof r) {
    return Status::Internal(fmt::format("{}: the shim exited before it reported", plan.dir));
  }
  if (r.stage != kStarted) {
    return Status::Internal(fmt::format("{}: the shim could not {}: {}", plan.dir,
                                        StageName(r.stage), strerror(r.err)));
  }
  return ShimPids{r.shim_pid, r.pid};
}

}  // namespace tessera::agent::shim
