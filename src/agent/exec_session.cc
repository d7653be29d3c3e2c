#include "agent/exec_session.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "agent/container.h"
#include "agent/workload_shim.h"
#include "common/exec_frames.h"
#include "common/text.h"

extern char** environ;

namespace tessera::agent {

namespace {

using exec::Frame;

// A session's shell: bash where the workload has it, else sh.
constexpr char kShell[] = "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh";
constexpr char kTerm[] = "TERM=xterm-256color";
// Input for the command held while it does not read: past this the stream is not read either,
// so a client that sends faster than the command reads waits on TCP, not on the agent's memory.
constexpr size_t kMaxPendingInput = 256 << 10;

// Process `pid`'s environment, NAME=value each; empty when it cannot be read.
std::vector<std::string> EnvironOf(int pid) {
  std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  for (std::string_view v : Split(all, '\0')) {
    if (!v.empty() && v.find('=') != std::string_view::npos) out.emplace_back(v);
  }
  return out;
}

// The command's process and the agent's ends of its descriptors: under a TTY, `in` and `out` are
// both the terminal's master side and `err` is -1.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
  bool tty = false;

  ~Child() {
    if (out >= 0) close(out);
    if (err >= 0) close(err);
    if (in >= 0 && in != out) close(in);
  }
};

// The variable every process of session `id` starts with (in a container too, where its pid is
// not podman's child): how the agent finds them to end them.
std::string Marker(const std::string& id) { return fmt::format("TESSERA_EXEC_SESSION={}", id); }

// Kills every process on the node that carries session `id`'s marker: what the command started,
// whatever process group or session it moved to, and in a container, where killing `podman exec`
// would leave the command running.
void KillMarked(const std::string& id) {
  const std::string marker = Marker(id);
  for (int round = 0; round < 3; ++round) {  // Again, for what forked meanwhile.
    int killed = 0;
    shim::ForEachProcess([&](pid_t pid) {
      for (const std::string& v : EnvironOf(pid)) {
        if (v == marker) {
          killed += kill(pid, SIGKILL) == 0;
          break;
        }
      }
      return true;
    });
    if (killed == 0) return;
  }
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

Result<std::unique_ptr<Child>> Spawn(const ExecCommand& c, const ExecTarget& t) {
  shim::ShimPlan plan;
  const std::vector<std::string> command =
      c.command.empty() ? std::vector<std::string>{"/bin/sh", "-c", kShell} : c.command;
  if (!t.container.empty()) {
    // podman, as the agent, into the container: its user, directory and environment.
    plan.exec_path = t.podman;
    plan.args = {t.podman, "exec", "--interactive", fmt::format("--env={}", Marker(c.id))};
    if (c.tty) plan.args.insert(plan.args.end(), {"--tty", fmt::format("--env={}", kTerm)});
    // Nothing after the container is podman's to parse (it is not, but say so).
    plan.args.insert(plan.args.end(), {"--", t.container});
    for (char** e = environ; *e; ++e) plan.env.emplace_back(*e);
    plan.dir = std::string(1, '/');
  } else {
    // As the workload: its uid, directory, cgroup, limits and environment.
    plan.exec_path = "/bin/sh";
    plan.args = {"sh", "-c", "exec \"$@\"", "sh"};
    plan.env = EnvironOf(t.pid);
    if (plan.env.empty()) {
      plan.env = {"PATH=/usr/local/bin:/usr/bin:/bin", fmt::format("HOME={}", t.dir),
                  "LANG=C.UTF-8"};
    }
    if (c.tty) {
      std::erase_if(plan.env, [](const std::string& v) { return v.rfind("TERM=", 0) == 0; });
      plan.env.emplace_back(kTerm);
    }
    plan.env.push_back(Marker(c.id));
    plan.dir = t.dir;
    plan.uid = t.uid;
    plan.cgroup_dir = t.cgroup_dir;
    plan.nproc_limit = t.nproc_limit;
  }
  plan.args.insert(plan.args.end(), command.begin(), command.end());
  plan.max_fd = static_cast<int>(std::min<long>(sysconf(_SC_OPEN_MAX), 1 << 16));
  plan.Seal();

  auto child = std::make_unique<Child>();
  child->tty = c.tty;
  int theirs[3] = {-1, -1, -1};
  auto close_theirs = [&theirs] {
    // Under a TTY all three are the terminal's one slave side.
    if (theirs[0] >= 0) close(theirs[0]);
    if (theirs[1] >= 0 && theirs[1] != theirs[0]) close(theirs[1]);
    if (theirs[2] >= 0 && theirs[2] != theirs[0]) close(theirs[2]);
  };
  if (c.tty) {
    winsize size{};
    size.ws_col = static_cast<unsigned short>(c.cols);
    size.ws_row = static_cast<unsigned short>(c.rows);
    int master = -1, slave = -1;
    if (openpty(&master, &slave, nullptr, nullptr, &size) != 0) {
      return Status::Internal(fmt::format("cannot open a terminal: {}", std::strerror(errno)));
    }
    fcntl(master, F_SETFD, FD_CLOEXEC);
    fcntl(slave, F_SETFD, FD_CLOEXEC);
    // The terminal is the workload's own, so a program that opens it again by name may.
    if (plan.uid >= 0 && fchown(slave, static_cast<uid_t>(plan.uid), static_cast<gid_t>(-1)) != 0) {
      spdlog::warn("exec {}: cannot give the terminal to uid {}: {}", c.id, plan.uid,
                   std::strerror(errno));
    }
    child->in = child->out = master;
    theirs[0] = theirs[1] = theirs[2] = slave;
  } else {
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0) return Status::Internal("cannot make a pipe");
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(in[0]);
      close(in[1]);
      return Status::Internal("cannot make a pipe");
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
      for (int fd : {in[0], in[1], out[0], out[1]}) close(fd);
      return Status::Internal("cannot make a pipe");
    }
    child->in = in[1];
    child->out = out[0];
    child->err = err[0];
    theirs[0] = in[0];
    theirs[1] = out[1];
    theirs[2] = err[1];
  }
  const pid_t pid = fork();
  if (pid < 0) {
    close_theirs();
    return Status::Internal(fmt::format("cannot fork: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    // The child: async-signal-safe calls only, as in the shim.
    setsid();
    if (c.tty) ioctl(theirs[0], TIOCSCTTY, 0);
    dup2(theirs[0], 0);
    dup2(theirs[1], 1);
    dup2(theirs[2], 2);
    shim::BecomeWorkload(plan);
  }
  close_theirs();
  child->pid = pid;
  SetNonBlocking(child->out);
  if (child->err >= 0) SetNonBlocking(child->err);
  if (child->in != child->out) SetNonBlocking(child->in);
  return child;
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Sends the last frames, stops sending, and waits (up to 2 s) for the server to close, so the
// frames are read before the connection goes.
void Finish(Tunnel& tunnel, std::string_view message, int code) {
  std::string last;
  if (!message.empty()) last += exec::Encode(Frame::kStderr, message);
  last += exec::Encode(Frame::kExit, std::to_string(code));
  if (!tunnel.Write(last).ok()) return;
  tunnel.CloseWrite();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{tunnel.fd(), POLLIN, 0};
    if (!tunnel.Pending() && poll(&p, 1, 200) <= 0) continue;
    auto more = tunnel.Read();
    if (!more.ok() || more->empty()) return;
  }
}

// Reads what `fd` has now into frames of `type`; false once it is closed (end of file, or EIO
// from a terminal whose other side is gone).
bool Forward(int fd, Frame type, Tunnel& tunnel, bool& sent_ok) {
  char buf[32 << 10];
  for (int round = 0; round < 4; ++round) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      sent_ok =
          sent_ok &&
          tunnel.Write(exec::Encode(type, std::string_view(buf, static_cast<size_t>(n)))).ok();
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    return false;
  }
  return true;
}

// A container workload runs from the moment `podman run` starts; its container exists once podman
// has written its pid file. An exec sent in between waits for it (an image's first start can take
// seconds), up to kContainerStartS.
constexpr int kContainerStartS = 60;
bool AwaitContainer(const std::string& pid_file, const std::atomic<bool>& end) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kContainerStartS);
  while (!end && std::chrono::steady_clock::now() < deadline) {
    if (ReadContainerPid(pid_file)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

Result<int> RunExecSession(const ExecDialer& dialer, const ExecCommand& command,
                           const ExecTarget& target, const std::atomic<bool>& end) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Tunnel> tunnel, dialer(command.id));
  if (!target.container_pid_file.empty() && !AwaitContainer(target.container_pid_file, end)) {
    Finish(*tunnel,
           fmt::format("tessera: the instance's container did not start within {} s\r\n",
                       kContainerStartS),
           126);
    return 126;
  }
  auto spawned = Spawn(command, target);
  if (!spawned.ok()) {
    Finish(*tunnel, fmt::format("tessera: {}\r\n", spawned.status().message()), 126);
    return 126;
  }
  Child& child = **spawned;
  exec::FrameReader reader;
  std::string input;
  bool input_end = false, out_open = true, err_open = child.err >= 0, sent_ok = true;
  std::string why;
  int code = -1;
  auto kill_all = [&child, &command] {
    kill(-child.pid, SIGKILL);
    KillMarked(command.id);
  };
  for (;;) {
    int status = 0;
    if (waitpid(child.pid, &status, WNOHANG) == child.pid) {
      code = ExitCode(status);
      // The workload stopped first (its uid's last processes are killed with it): say so.
      shim::ProcStat st;
      const bool gone = !shim::ReadProcStat(target.pid, &st) || st.state == 'Z' || st.state == 'X';
      if (why.empty() && (end || gone)) {
        why = "tessera: the instance stopped; the command was killed\r\n";
      }
      break;
    }
    if (end && why.empty()) {
      why = "tessera: the instance stopped; the command was killed\r\n";
      kill_all();
    }
    if (!sent_ok) {  // The client is gone: nobody to answer.
      kill_all();
      waitpid(child.pid, &status, 0);
      return Status::Unavailable("the stream to the client broke");
    }
    pollfd fds[4] = {
        {tunnel->fd(), static_cast<short>(input.size() < kMaxPendingInput ? POLLIN : 0), 0},
        {out_open ? child.out : -1, POLLIN, 0},
        {err_open ? child.err : -1, POLLIN, 0},
        {!input.empty() && child.in >= 0 ? child.in : -1, POLLOUT, 0}};
    const bool pending = tunnel->Pending() && input.size() < kMaxPendingInput;
    if (poll(fds, 4, pending ? 0 : 100) < 0 && errno != EINTR) {
      kill_all();
      waitpid(child.pid, &status, 0);
      return Status::Internal(fmt::format("poll: {}", std::strerror(errno)));
    }
    if (pending || (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      auto got = tunnel->Read();
      if (!got.ok() || got->empty()) {
        // The client left (or the server closed the session): the command goes with it.
        kill_all();
        waitpid(child.pid, &status, 0);
        return got.ok() ? Status::Unavailable("the client left") : got.status();
      }
      reader.Feed(*got);
      for (;;) {
        auto frame = reader.Next();
        if (!frame.ok()) {
          kill_all();
          waitpid(child.pid, &status, 0);
          Finish(*tunnel, fmt::format("tessera: {}\r\n", frame.status().message()), 137);
          return frame.status();
        }
        if (!*frame) break;
        const auto& [type, payload] = **frame;
        if (type == Frame::kStdin) {
          input += payload;
        } else if (type == Frame::kStdinEnd) {
          input_end = true;
        } else if (type == Frame::kResize && child.tty) {
          if (auto size = exec::ParseSize(payload)) {
            winsize ws{};
            ws.ws_col = static_cast<unsigned short>(size->first);
            ws.ws_row = static_cast<unsigned short>(size->second);
            ioctl(child.out, TIOCSWINSZ, &ws);
          }
        }
      }
    }
    if (out_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      out_open = Forward(child.out, Frame::kStdout, *tunnel, sent_ok);
    }
    if (err_open && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) {
      err_open = Forward(child.err, Frame::kStderr, *tunnel, sent_ok);
    }
    if (!input.empty() && child.in >= 0) {
      const ssize_t n = write(child.in, input.data(), input.size());
      if (n > 0) {
        input.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        input.clear();  // The command closed its input: what it did not read is dropped.
      }
    }
    if (input_end && input.empty() && !child.tty && child.in >= 0) {
      close(child.in);
      child.in = -1;
    }
  }
  // What the command wrote before it ended, then its exit code.
  if (out_open) Forward(child.out, Frame::kStdout, *tunnel, sent_ok);
  if (err_open) Forward(child.err, Frame::kStderr, *tunnel, sent_ok);
  if (!sent_ok) return Status::Unavailable("the stream to the client broke");
  Finish(*tunnel, why, code);
  return code;
}

ExecSessions::~ExecSessions() {
  for (auto& entry : sessions_) entry.second->end = true;
  for (auto& entry : sessions_) {
    if (entry.second->thread.joinable()) entry.second->thread.join();
  }
}

void ExecSessions::Launch(const std::string& id, const std::string& workload,
                          std::function<void(Session&)> body) {
  seen_.insert(id);
  auto session = std::make_unique<Session>();
  session->workload = workload;
  Session* s = session.get();
  s->thread = std::thread([s, body = std::move(body)] {
    body(*s);
    s->done = true;
  });
  sessions_.emplace(id, std::move(session));
}

void ExecSessions::Start(const ExecCommand& command, const ExecTarget& target) {
  if (sessions_.size() >= kMaxSessions) {
    return Refuse(command.id, fmt::format("this node runs {} exec sessions already; end one first",
                                          kMaxSessions));
  }
  ExecDialer dialer = dialer_;
  Launch(command.id, command.workload, [dialer, command, target](Session& s) {
    auto r = RunExecSession(dialer, command, target, s.end);
    if (r.ok()) {
      spdlog::info("exec {} in {} ended: exit {}", command.id, command.workload, *r);
    } else {
      spdlog::info("exec {} in {} ended: {}", command.id, command.workload, r.status().message());
    }
  });
}

void ExecSessions::Refuse(const std::string& id, const std::string& why) {
  ExecDialer dialer = dialer_;
  Launch(id, "", [dialer, id, why](Session&) {
    auto tunnel = dialer(id);
    if (!tunnel.ok()) {
      spdlog::warn("exec {}: cannot connect to refuse it: {}", id, tunnel.status().message());
      return;
    }
    Finish(**tunnel, fmt::format("tessera: {}\r\n", why), 126);
  });
}

void ExecSessions::Keep(const std::set<std::string>& running, const std::set<std::string>& named) {
  for (auto it = sessions_.begin(); it != sessions_.end();) {
    Session& s = *it->second;
    if (!s.workload.empty() && !running.count(s.workload)) s.end = true;
    if (s.done) {
      s.thread.join();
      it = sessions_.erase(it);
    } else {
      ++it;
    }
  }
  std::erase_if(seen_,
                [&](const std::string& id) { return !named.count(id) && !sessions_.count(id); });
}

size_t ExecSessions::active() const { return sessions_.size(); }

}  // namespace tessera::agent
