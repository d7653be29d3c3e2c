#include "agent/container_exec.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <map>

extern char** environ;

namespace tessera::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The executable for `name`: itself when it holds a slash, else the first match in $PATH. Done
// before fork, because the child may only make async-signal-safe calls.
std::string ResolveExecutable(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    // An empty entry means the current directory.
    const std::string candidate =
        (end > start ? dirs.substr(start, end - start) : std::string(".")) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

std::vector<std::string> MergedEnvironment(const ExecOptions& options) {
  std::map<std::string, std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  for (const auto& [name, value] : options.env) env[name] = value;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// In the child: only async-signal-safe calls from here to execve.
[[noreturn]] void ExecChild(const char* path, char* const* argv, char* const* envp, int out_fd,
                            int err_fd) {
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, nullptr);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(127);
  close_range(3, UINT_MAX, 0);
  execve(path, argv, envp);
  _exit(127);
}

// Appends `data` to `buffer`, keeping only its last `limit` bytes.
void AppendBounded(std::string& buffer, const char* data, size_t n, size_t limit) {
  if (n >= limit) {
    buffer.assign(data + (n - limit), limit);
    return;
  }
  if (buffer.size() + n > limit) buffer = buffer.substr(buffer.size() + n - limit);
  buffer.append(data, n);
}

// Reads once from each ready pipe of `fds`; a closed pipe's entry becomes -1. True when
// something was read.
bool Drain(pollfd (&fds)[2], ExecResult& result, size_t limit) {
  char buf[16384];
  bool any = false;
  for (int i = 0; i < 2; ++i) {
    if (fds[i].fd < 0 || fds[i].revents == 0) continue;
    const ssize_t got = read(fds[i].fd, buf, sizeof buf);
    if (got > 0) {
      AppendBounded(i == 0 ? result.out : result.err, buf, static_cast<size_t>(got), limit);
      any = true;
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      close(fds[i].fd);
      fds[i].fd = -1;
    }
  }
  return any;
}

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Result<ExecResult> RunCommand(const std::vector<std::string>& argv, const ExecOptions& options) {
  if (argv.empty()) return Status::InvalidArgument("RunCommand: empty argv");
  const std::string path = ResolveExecutable(argv[0]);
  if (path.empty()) return Status::NotFound(fmt::format("{}: not found in PATH", argv[0]));
  std::vector<std::string> args = argv;
  std::vector<std::string> env = MergedEnvironment(options);
  std::vector<char*> arg_ptrs = Pointers(args);
  std::vector<char*> env_ptrs = Pointers(env);

  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::Internal(fmt::format("{}: pipe: {}", argv[0], strerror(errno)));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::Internal(fmt::format("{}: pipe: {}", argv[0], strerror(err)));
  }
  const pid_t pid = fork();
  if (pid == 0) ExecChild(path.c_str(), arg_ptrs.data(), env_ptrs.data(), out_pipe[1], err_pipe[1]);
  const int fork_errno = errno;
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Status::Internal(fmt::format("{}: fork: {}", argv[0], strerror(fork_errno)));
  }
  // Also from the parent, so a kill at the deadline cannot miss a child not yet in its group.
  setpgid(pid, pid);

  ExecResult result;
  const auto start = SteadyClock::now();
  auto next_tick = start + options.tick;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int status = 0;
  bool reaped = false;
  while (true) {
    const auto now = SteadyClock::now();
    if (now - start >= options.deadline) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    if (options.on_tick && now >= next_tick) {
      options.on_tick();
      next_tick = now + options.tick;
    }
    auto wait_until = start + options.deadline;
    if (options.on_tick && next_tick < wait_until) wait_until = next_tick;
    // A short wait at most: the child's exit is noticed by waitpid below, not by the pipes
    // closing, because a helper it leaves behind (conmon) may hold them open.
    const int64_t cap_ms = fds[0].fd < 0 && fds[1].fd < 0 ? 5 : 50;
    const auto wait_ms = std::min<int64_t>(
        cap_ms,
        std::chrono::duration_cast<std::chrono::milliseconds>(wait_until - now).count() + 1);
    if (poll(fds, 2, static_cast<int>(wait_ms)) > 0) Drain(fds, result, options.max_output_bytes);
    if (waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      // What it wrote just before exiting is still in the pipes.
      while (poll(fds, 2, 0) > 0 && Drain(fds, result, options.max_output_bytes)) {
      }
      break;
    }
  }
  for (const auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  if (!reaped) {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // Whatever the child left behind in its group (podman's helpers) goes with it at a timeout.
  if (result.timed_out) kill(-pid, SIGKILL);
  result.exit_code = DecodeWaitStatus(status);
  return result;
}

std::optional<std::string> ReadSmallFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[8192];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace tessera::agent
