#include "agent/mps.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "agent/container_exec.h"
#include "common/files.h"
#include "common/text.h"

extern char** environ;

namespace tessera::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;
using Env = std::vector<std::pair<std::string, std::string>>;

constexpr char kPipeVar[] = "CUDA_MPS_PIPE_DIRECTORY";
constexpr char kLogVar[] = "CUDA_MPS_LOG_DIRECTORY";
constexpr size_t kMaxAnswerBytes = 64 << 10;

// `name` itself when it holds a slash, else its first match in $PATH; "" when it is not an
// executable file.
std::string FindExecutable(const std::string& name) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = getenv("PATH");
  for (std::string_view dir : Split(path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin", ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return "";
}

// The agent's environment with `overrides` replacing or adding variables, as execve wants it.
std::vector<std::string> ChildEnvironment(const Env& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry = *e;
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(overrides.begin(), overrides.end(),
                                      [&](const auto& o) { return o.first == name; });
    if (!replaced) out.emplace_back(entry);
  }
  for (const auto& [name, value] : overrides) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Close(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void Close() { Reset(-1); }
  void Reset(int fd) {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct ControlRun {
  int exit_code = -1;  // 128+N when signal N ended it.
  bool timed_out = false;
  std::string out;  // stdout then stderr, each cut to kMaxAnswerBytes.
};

// Reads what is ready in `fd` into `out`; false once the pipe is closed.
bool ReadSome(int fd, std::string& out) {
  char buf[4096];
  const ssize_t got = read(fd, buf, sizeof buf);
  if (got > 0) {
    const size_t room = kMaxAnswerBytes - std::min(out.size(), kMaxAnswerBytes);
    out.append(buf, std::min(static_cast<size_t>(got), room));
    return true;
  }
  return got < 0 && (errno == EINTR || errno == EAGAIN);
}

// Starts `argv` (argv[0] = path) with the descriptors given as its stdin, stdout and stderr and
// every other descriptor of the agent closed (nothing of the agent's, a lock file or a socket,
// may live on in a daemon), default signal handling, in a process group of its own. Returns
// posix_spawn's error number, 0 when it started.
int Spawn(std::vector<std::string>& argv, const Env& env, int in, int out, int err, pid_t& pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in, 0);
  posix_spawn_file_actions_adddup2(&actions, out, 1);
  posix_spawn_file_actions_adddup2(&actions, err, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigset_t all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  std::vector<std::string> env_strings = ChildEnvironment(env);
  std::vector<char*> arg_ptrs = Pointers(argv);
  std::vector<char*> env_ptrs = Pointers(env_strings);
  const int rc =
      posix_spawn(&pid, argv[0].c_str(), &actions, &attr, arg_ptrs.data(), env_ptrs.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc;
}

// Waits for `pid` while reading its stdout and stderr pipes (either may be -1) into `run`; at
// `deadline` its process group gets SIGKILL. The exit is noticed by waitpid, not by the pipes
// closing, so short polls.
void Wait(pid_t pid, int out, int err, std::chrono::milliseconds deadline, ControlRun& run) {
  std::string err_text;
  pollfd fds[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
  auto drain = [&](int i) {
    if (!ReadSome(fds[i].fd, i == 0 ? run.out : err_text)) fds[i].fd = -1;
  };
  const auto start = SteadyClock::now();
  int status = 0;
  while (true) {
    if (SteadyClock::now() - start >= deadline) {
      run.timed_out = true;
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (poll(fds, 2, 10) > 0) {
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd >= 0 && fds[i].revents != 0) drain(i);
      }
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      // What it wrote just before exiting.
      for (int i = 0; i < 2; ++i) {
        while (fds[i].fd >= 0 && poll(&fds[i], 1, 0) > 0) drain(i);
      }
      break;
    }
  }
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.exit_code = 128 + WTERMSIG(status);
  run.out += err_text;
}

// Runs `argv` (argv[0] = path) with `input` as its whole stdin and waits for it until `deadline`.
// With `output_file`, stdout and stderr go there rather than to pipes: a daemon that `-d` leaves
// behind may keep them open for as long as it lives.
Result<ControlRun> RunControl(std::vector<std::string> argv, const std::string& input,
                              const Env& env, std::chrono::milliseconds deadline,
                              const std::string& output_file = "") {
  auto failed = [&](const char* what) {
    return Status::Internal(fmt::format("{}: {}: {}", argv[0], what, strerror(errno)));
  };
  // stdin is a pipe already holding the whole input (one command line, far below a pipe's
  // capacity) and closed, so writing it never blocks and the program sees its end.
  if (input.size() > 4096) return Status::InvalidArgument(argv[0] + ": input too long");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return failed("pipe");
  Fd in_read(fds[0]);
  {
    Fd in_write(fds[1]);
    if (!input.empty() &&
        write(in_write.get(), input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
      return failed("write");
    }
  }
  Fd file, out_read, out_write, err_read, err_write;
  if (!output_file.empty()) {
    file.Reset(
        open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (file.get() < 0) return failed("open its output file");
  } else {
    if (pipe2(fds, O_CLOEXEC) != 0) return failed("pipe");
    out_read.Reset(fds[0]);
    out_write.Reset(fds[1]);
    if (pipe2(fds, O_CLOEXEC) != 0) return failed("pipe");
    err_read.Reset(fds[0]);
    err_write.Reset(fds[1]);
  }
  pid_t pid = -1;
  const int rc = Spawn(argv, env, in_read.get(), file.get() >= 0 ? file.get() : out_write.get(),
                       file.get() >= 0 ? file.get() : err_write.get(), pid);
  in_read.Close();
  out_write.Close();
  err_write.Close();
  file.Close();
  if (rc != 0) {
    errno = rc;
    return failed("cannot start");
  }
  ControlRun run;
  Wait(pid, out_read.get(), err_read.get(), deadline, run);
  if (!output_file.empty()) run.out = ReadSmallFile(output_file).value_or("") + run.out;
  return run;
}

std::string Trimmed(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return "";
  return std::string(s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1));
}

// The real uid of process `pid`, from /proc; -1 when it is gone or unreadable.
int64_t ProcessUid(int64_t pid) {
  const auto text = ReadSmallFile(fmt::format("/proc/{}/status", pid));
  if (!text) return -1;
  const size_t at = text->find("\nUid:");
  if (at == std::string::npos) return -1;
  return std::strtoll(text->c_str() + at + 5, nullptr, 10);
}

// Creates `path` (one level) when missing, and checks it is a real directory of the agent's that
// no one else may write to: a symlink or a directory another user controls could redirect the
// daemon's pipes, or the agent's writes, elsewhere.
Status SafeDirectory(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::Internal(fmt::format("{}: cannot create: {}", path, strerror(errno)));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    return Status::Internal(fmt::format("{}: {}", path, strerror(errno)));
  }
  if (S_ISLNK(st.st_mode)) {
    return Status::FailedPrecondition(fmt::format("{} is a symlink; refused", path));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition(fmt::format("{} is not a directory; refused", path));
  }
  if (st.st_uid != geteuid()) {
    return Status::FailedPrecondition(
        fmt::format("{} belongs to uid {}, not to the agent's; refused", path, st.st_uid));
  }
  // 0755 whatever the umask: the workloads' uids connect to the daemon's pipes in it.
  if ((st.st_mode & 07777) != 0755 && chmod(path.c_str(), 0755) != 0) {
    return Status::Internal(fmt::format("{}: cannot chmod: {}", path, strerror(errno)));
  }
  return Status::Ok();
}

bool EmptyDirectory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_empty(path, ec) || ec;
}

bool ValidUuid(const std::string& uuid) {
  return !uuid.empty() && uuid.size() <= 128 && std::all_of(uuid.begin(), uuid.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '/' ||
           c == '.' || c == ':';
  });
}

}  // namespace

MpsDaemons::MpsDaemons(MpsOptions options) : options_(std::move(options)) {
  control_path_ = FindExecutable(options_.control);
  const char* consequence = "shares are time-sliced without memory limits";
  if (control_path_.empty()) {
    note_ = options_.control.find('/') != std::string::npos
                ? fmt::format("{} is not an executable file: {}", options_.control, consequence)
                : fmt::format("{} not found in PATH: {}", options_.control, consequence);
  } else if (options_.root.empty()) {
    note_ = fmt::format("no directory for the MPS daemons was given: {}", consequence);
  }
  available_ = note_.empty();
}

MpsDaemons::~MpsDaemons() {
  if (!options_.stop_at_exit) return;
  for (const auto& [gpu, d] : daemons_) {
    if (!d.started_here) continue;
    Status s = Quit(gpu, d);
    if (!s.ok()) spdlog::warn("MPS: {}", s.message());
  }
}

std::string MpsDaemons::GpuDir(int gpu) const {
  return fmt::format("{}/gpu-{}", options_.root, gpu);
}

Result<std::string> MpsDaemons::Command(int gpu, const Daemon& d,
                                        const std::string& command) const {
  const Env env = {{kPipeVar, d.pipe_dir}, {kLogVar, d.log_dir}};
  TESSERA_ASSIGN_OR_RETURN(
      ControlRun run, RunControl({control_path_}, command + "\n", env, options_.command_deadline));
  if (run.timed_out) {
    return Status::Unavailable(
        fmt::format("GPU {}: MPS command '{}': {} did not answer within {} ms", gpu, command,
                    options_.control, options_.command_deadline.count()));
  }
  if (run.exit_code != 0) {
    return Status::Internal(fmt::format("GPU {}: MPS command '{}' failed (exit {}): {}", gpu,
                                        command, run.exit_code, Quote(Trimmed(run.out), 300)));
  }
  return std::move(run.out);
}

Result<std::set<int64_t>> MpsDaemons::ServerPids(int gpu, const Daemon& d) const {
  TESSERA_ASSIGN_OR_RETURN(const std::string answer, Command(gpu, d, "get_server_list"));
  std::set<int64_t> pids;
  for (std::string_view line : Split(answer, '\n')) {
    const std::string word = Trimmed(line);
    if (word.empty()) continue;
    char* end = nullptr;
    const long long pid = std::strtoll(word.c_str(), &end, 10);
    if (*end != '\0' || pid <= 0) {
      return Status::Internal(fmt::format("GPU {}: MPS command 'get_server_list': not a PID: {}",
                                          gpu, Quote(answer, 300)));
    }
    pids.insert(pid);
  }
  return pids;
}

Status MpsDaemons::StartDaemon(int gpu, Daemon& d) {
  const Env env = {{"CUDA_VISIBLE_DEVICES", d.uuid}, {kPipeVar, d.pipe_dir}, {kLogVar, d.log_dir}};
  const std::string output = GpuDir(gpu) + "/start.out";
  TESSERA_ASSIGN_OR_RETURN(ControlRun run, RunControl({control_path_, "-d"}, "", env,
                                                      options_.command_deadline, output));
  if (run.timed_out || run.exit_code != 0) {
    return Status::Internal(fmt::format(
        "GPU {}: '{} -d' failed ({}): {}", gpu, options_.control,
        run.timed_out ? "no exit before the deadline" : fmt::format("exit {}", run.exit_code),
        Quote(Trimmed(run.out), 300)));
  }
  // The daemon may take a moment to listen after -d returns.
  const auto give_up = SteadyClock::now() + options_.command_deadline;
  auto pause = std::chrono::milliseconds(10);
  while (true) {
    Result<std::set<int64_t>> pids = ServerPids(gpu, d);
    if (pids.ok()) break;
    if (SteadyClock::now() + pause > give_up) {
      return pids.status().WithPrefix(fmt::format("GPU {}: the MPS daemon started but", gpu));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  d.started_here = true;
  d.server_by_uid.clear();
  SaveServers(gpu, d);
  Status s = WritePrivateFile(GpuDir(gpu) + "/gpu-uuid", d.uuid + "\n", 0644);
  if (!s.ok()) spdlog::warn("MPS: GPU {}: {}", gpu, s.message());
  spdlog::info("MPS: GPU {}: control daemon started for {} (pipes in {})", gpu, d.uuid, d.pipe_dir);
  return Status::Ok();
}

Status MpsDaemons::Quit(int gpu, const Daemon& d) const {
  Result<std::string> answer = Command(gpu, d, "quit");
  if (!answer.ok()) return answer.status();
  // Until it stops answering, so a new daemon may take the pipe directory.
  const auto give_up = SteadyClock::now() + options_.command_deadline;
  while (ServerPids(gpu, d).ok()) {
    if (SteadyClock::now() >= give_up) {
      return Status::Unavailable(
          fmt::format("GPU {}: the MPS daemon still answers after quit", gpu));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  spdlog::info("MPS: GPU {}: control daemon stopped", gpu);
  return Status::Ok();
}

void MpsDaemons::SaveServers(int gpu, const Daemon& d) const {
  std::string text;
  for (const auto& [uid, pid] : d.server_by_uid) text += fmt::format("{} {}\n", uid, pid);
  Status s = WritePrivateFile(GpuDir(gpu) + "/servers", text, 0644);
  if (!s.ok()) spdlog::warn("MPS: GPU {}: {}", gpu, s.message());
}

void MpsDaemons::LoadServers(int gpu, Daemon& d, const std::set<int64_t>& running) const {
  const auto text = ReadSmallFile(GpuDir(gpu) + "/servers");
  if (!text) return;
  for (std::string_view line : Split(*text, '\n')) {
    long long uid = -1;
    long long pid = -1;
    if (std::sscanf(std::string(line).c_str(), "%lld %lld", &uid, &pid) == 2 && uid >= 0 &&
        running.count(pid)) {
      d.server_by_uid[uid] = pid;
    }
  }
}

Status MpsDaemons::Ensure(int gpu, const std::string& gpu_uuid) {
  if (!available_) return Status::FailedPrecondition(note_);
  if (gpu < 0 || !ValidUuid(gpu_uuid)) {
    return Status::InvalidArgument(
        fmt::format("MPS: GPU {} with UUID {}: not a GPU index and UUID", gpu, Quote(gpu_uuid)));
  }
  if (auto it = daemons_.find(gpu); it != daemons_.end()) {
    if (it->second.uuid == gpu_uuid) {
      if (ServerPids(gpu, it->second).ok()) return Status::Ok();
      spdlog::warn("MPS: GPU {}: the control daemon stopped answering; starting it again", gpu);
      return StartDaemon(gpu, it->second);
    }
    Status s = Quit(gpu, it->second);
    if (!s.ok()) spdlog::warn("MPS: {}", s.message());
    daemons_.erase(it);
  }
  std::error_code ec;
  if (std::filesystem::create_directories(options_.root, ec)) chmod(options_.root.c_str(), 0755);
  struct stat st {};
  if (stat(options_.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::FailedPrecondition(fmt::format("MPS: {} is not a directory", options_.root));
  }
  if ((st.st_mode & 022) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return Status::FailedPrecondition(
        fmt::format("MPS: {} may be written by others; refused", options_.root));
  }
  Daemon d;
  d.uuid = gpu_uuid;
  d.pipe_dir = GpuDir(gpu) + "/pipe";
  d.log_dir = GpuDir(gpu) + "/log";
  for (const std::string& dir : {GpuDir(gpu), d.pipe_dir, d.log_dir}) {
    TESSERA_RETURN_IF_ERROR(SafeDirectory(dir).WithPrefix(fmt::format("MPS: GPU {}", gpu)));
  }
  // A daemon an earlier agent left (an empty pipe directory has none).
  if (!EmptyDirectory(d.pipe_dir)) {
    if (Result<std::set<int64_t>> running = ServerPids(gpu, d); running.ok()) {
      const std::string recorded = Trimmed(ReadSmallFile(GpuDir(gpu) + "/gpu-uuid").value_or(""));
      if (recorded == gpu_uuid) {
        LoadServers(gpu, d, *running);
        spdlog::info("MPS: GPU {}: adopted the control daemon in {} ({} servers known)", gpu,
                     d.pipe_dir, d.server_by_uid.size());
        daemons_[gpu] = std::move(d);
        return Status::Ok();
      }
      spdlog::warn("MPS: GPU {}: the daemon in {} serves {}, not {}; replacing it", gpu, d.pipe_dir,
                   Quote(recorded), gpu_uuid);
      TESSERA_RETURN_IF_ERROR(Quit(gpu, d));
    }
  }
  TESSERA_RETURN_IF_ERROR(StartDaemon(gpu, d));
  daemons_[gpu] = std::move(d);
  return Status::Ok();
}

Status MpsDaemons::SetLimits(int gpu, int64_t uid, int thread_percentage, int64_t pinned_mem_mib) {
  if (uid < 0 || thread_percentage < 1 || thread_percentage > 100 || pinned_mem_mib <= 0) {
    return Status::InvalidArgument(fmt::format(
        "MPS: GPU {}: uid {}, {}% of threads, {} MiB pinned: the uid must be >= 0, the percentage "
        "in 1..100 and the memory > 0",
        gpu, uid, thread_percentage, pinned_mem_mib));
  }
  auto it = daemons_.find(gpu);
  if (it == daemons_.end()) {
    return Status::FailedPrecondition(
        fmt::format("MPS: GPU {}: no control daemon runs for it", gpu));
  }
  Daemon& d = it->second;
  TESSERA_ASSIGN_OR_RETURN(const std::set<int64_t> before, ServerPids(gpu, d));
  std::erase_if(d.server_by_uid, [&](const auto& e) { return !before.count(e.second); });
  int64_t pid = -1;
  if (auto known = d.server_by_uid.find(uid); known != d.server_by_uid.end()) {
    pid = known->second;
  } else {
    // One the daemon started on its own, for a client that came first.
    for (int64_t candidate : before) {
      if (ProcessUid(candidate) == uid) pid = candidate;
    }
  }
  const std::string memory = fmt::format("{}M", pinned_mem_mib);
  if (pid >= 0) {
    TESSERA_RETURN_IF_ERROR(
        Command(gpu, d, fmt::format("set_active_thread_percentage {} {}", pid, thread_percentage))
            .status());
    TESSERA_RETURN_IF_ERROR(
        Command(gpu, d, fmt::format("set_device_pinned_mem_limit {} 0 {}", pid, memory)).status());
  } else {
    // The daemon sees one GPU, so its device index is 0.
    TESSERA_RETURN_IF_ERROR(
        Command(gpu, d, fmt::format("set_default_active_thread_percentage {}", thread_percentage))
            .status());
    TESSERA_RETURN_IF_ERROR(
        Command(gpu, d, fmt::format("set_default_device_pinned_mem_limit 0 {}", memory)).status());
    const std::string start = fmt::format("start_server -uid {}", uid);
    TESSERA_ASSIGN_OR_RETURN(const std::string answer, Command(gpu, d, start));
    TESSERA_ASSIGN_OR_RETURN(const std::set<int64_t> after, ServerPids(gpu, d));
    std::vector<int64_t> added;
    std::set_difference(after.begin(), after.end(), before.begin(), before.end(),
                        std::back_inserter(added));
    if (added.size() != 1) {
      return Status::Internal(
          fmt::format("GPU {}: MPS command '{}' started {} servers where one was expected: {}", gpu,
                      start, added.size(), Quote(Trimmed(answer), 300)));
    }
    pid = added.front();
  }
  d.server_by_uid[uid] = pid;
  SaveServers(gpu, d);
  return Status::Ok();
}

std::vector<std::pair<std::string, std::string>> MpsDaemons::ClientEnv(int gpu) const {
  auto it = daemons_.find(gpu);
  if (it == daemons_.end()) return {};
  return {{kPipeVar, it->second.pipe_dir}, {kLogVar, it->second.log_dir}};
}

void MpsDaemons::SweepLeftovers(const std::map<int, std::set<int64_t>>& uids_by_gpu) {
  DIR* dir = opendir(options_.root.c_str());
  if (dir == nullptr) return;
  std::vector<int> gpus;
  while (const dirent* e = readdir(dir)) {
    int gpu = -1;
    char extra = 0;
    if (std::sscanf(e->d_name, "gpu-%d%c", &gpu, &extra) == 1 && gpu >= 0) gpus.push_back(gpu);
  }
  closedir(dir);
  for (int gpu : gpus) {
    if (daemons_.count(gpu) || uids_by_gpu.count(gpu)) continue;
    Daemon d;
    d.pipe_dir = GpuDir(gpu) + "/pipe";
    d.log_dir = GpuDir(gpu) + "/log";
    struct stat st {};
    if (lstat(GpuDir(gpu).c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        lstat(d.pipe_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || EmptyDirectory(d.pipe_dir) ||
        !ServerPids(gpu, d).ok()) {
      continue;
    }
    Status s = Quit(gpu, d);
    if (!s.ok()) spdlog::warn("MPS: a daemon an earlier agent left: {}", s.message());
  }
}

void MpsDaemons::Reconcile(const std::map<int, std::set<int64_t>>& uids_by_gpu) {
  if (!available_) return;
  if (!swept_) SweepLeftovers(uids_by_gpu);
  swept_ = true;
  for (auto it = daemons_.begin(); it != daemons_.end();) {
    const int gpu = it->first;
    Daemon& d = it->second;
    auto want = uids_by_gpu.find(gpu);
    if (want == uids_by_gpu.end()) {
      Status s = Quit(gpu, d);
      if (!s.ok() && ServerPids(gpu, d).ok()) {
        spdlog::warn("MPS: {}", s.message());
        ++it;
        continue;
      }
      unlink((GpuDir(gpu) + "/servers").c_str());
      it = daemons_.erase(it);
      continue;
    }
    bool changed = false;
    for (auto server = d.server_by_uid.begin(); server != d.server_by_uid.end();) {
      if (want->second.count(server->first)) {
        ++server;
        continue;
      }
      // Without -f: the server takes no new client and exits when its clients are done.
      Status s = Command(gpu, d, fmt::format("shutdown_server {}", server->second)).status();
      if (!s.ok()) {
        Result<std::set<int64_t>> running = ServerPids(gpu, d);
        if (!running.ok() || running->count(server->second)) {
          spdlog::warn("MPS: {}", s.message());
          ++server;
          continue;
        }
      }
      server = d.server_by_uid.erase(server);
      changed = true;
    }
    if (changed) SaveServers(gpu, d);
    ++it;
  }
}

}  // namespace tessera::agent
