// `tessera instances exec ID -- CMD...` and `tessera instances shell ID` (docs/volumes.md, "A
// shell"): a command, or a shell under a terminal, inside a running instance, through the server
// to the instance's agent. Input goes to the command, its output comes back as it is written
// (byte for byte: it is the tenant's own command, as with ssh or kubectl exec), and the exit code
// is the command's.
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <iostream>

#include "cli/cli.h"
#include "cli/client.h"
#include "common/exec_frames.h"
#include "common/text.h"
#include "common/tunnel.h"

namespace tessera::cli {

namespace {

using exec::Frame;
using nlohmann::json;

int winch_pipe[2] = {-1, -1};

void OnWinch(int) {
  const int saved = errno;
  const char c = 'w';
  (void)!write(winch_pipe[1], &c, 1);
  errno = saved;
}

// The local terminal in raw mode (every key goes to the remote one) until this goes.
class RawTerminal {
 public:
  RawTerminal() {
    if (tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    cfmakeraw(&raw);
    active_ = tcsetattr(0, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(0, TCSANOW, &saved_);
  }
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

std::pair<int, int> TerminalSize() {
  winsize ws{};
  if (ioctl(0, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    return {std::min<int>(ws.ws_col, 1000), std::min<int>(ws.ws_row, 1000)};
  }
  return {80, 24};
}

bool WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

int Fail(const std::string& message) {
  std::cerr << "tessera: " << EscapeForTerminal(message) << "\n";
  return kExitFailure;
}

// Runs the session and returns the command's exit code (kExitFailure when it never ran).
int RunSession(const ClientFlags& f, const std::string& id, const std::vector<std::string>& command,
               bool tty) {
  if (tty && !isatty(0)) {
    return Fail("a terminal session needs a terminal on stdin (run exec without -t to pipe)");
  }
  const auto [cols, rows] = TerminalSize();
  TunnelRequest request;
  request.urls = f.url.empty() ? EnvOr("TESSERA_URL", "http://127.0.0.1:8080") : f.url;
  request.token = f.token.empty() ? EnvOr("TESSERA_TOKEN", "") : f.token;
  request.ca_file = f.ca.empty() ? EnvOr("TESSERA_CA", "") : f.ca;
  request.path = fmt::format("/v1/instances/{}/exec", Encode(id));
  request.protocol = exec::kProtocol;
  request.body = json{{"command", command}, {"tty", tty}, {"cols", cols}, {"rows", rows}}.dump();
  auto tunnel = Tunnel::Open(request);
  if (!tunnel.ok()) return Fail(tunnel.status().message());
  Tunnel& t = **tunnel;

  std::optional<RawTerminal> raw;
  if (tty) {
    if (pipe2(winch_pipe, O_CLOEXEC | O_NONBLOCK) == 0) {
      struct sigaction sa {};
      sa.sa_handler = OnWinch;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction(SIGWINCH, &sa, nullptr);
    }
    raw.emplace();
  }
  signal(SIGPIPE, SIG_IGN);
  exec::FrameReader reader;
  bool stdin_open = true;
  for (;;) {
    pollfd fds[3] = {
        {stdin_open ? 0 : -1, POLLIN, 0}, {t.fd(), POLLIN, 0}, {winch_pipe[0], POLLIN, 0}};
    if (!t.Pending() && poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      raw.reset();
      return Fail(fmt::format("poll: {}", std::strerror(errno)));
    }
    if (t.Pending() || (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      auto got = t.Read();
      if (!got.ok() || got->empty()) {
        raw.reset();
        return Fail(got.ok() ? "the session ended before the command did (the server or the "
                               "node's agent went away)"
                             : got.status().message());
      }
      reader.Feed(*got);
      for (;;) {
        auto frame = reader.Next();
        if (!frame.ok()) {
          raw.reset();
          return Fail(frame.status().message());
        }
        if (!*frame) break;
        const auto& [type, payload] = **frame;
        if (type == Frame::kStdout) WriteAll(1, payload);
        if (type == Frame::kStderr) WriteAll(2, payload);
        if (type == Frame::kExit) {
          raw.reset();
          const int code = std::atoi(payload.c_str());
          return code < 0 || code > 255 ? kExitFailure : code;
        }
      }
    }
    if (stdin_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      char buf[16 << 10];
      const ssize_t n = read(0, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        stdin_open = false;
        if (!t.Write(exec::Encode(Frame::kStdinEnd, "")).ok()) {
          raw.reset();
          return Fail("the session ended: cannot send to the server");
        }
      } else if (!t.Write(
                       exec::Encode(Frame::kStdin, std::string_view(buf, static_cast<size_t>(n))))
                      .ok()) {
        raw.reset();
        return Fail("the session ended: cannot send to the server");
      }
    }
    if (fds[2].revents & POLLIN) {
      char drop[64];
      while (read(winch_pipe[0], drop, sizeof drop) > 0) {
      }
      const auto [c, r] = TerminalSize();
      (void)t.Write(exec::Encode(Frame::kResize, fmt::format("{} {}", c, r)));
    }
  }
}

}  // namespace

void AddExecCommands(CLI::App* instances, Context& ctx) {
  auto f = std::make_shared<ClientFlags>();
  auto id = std::make_shared<std::string>();
  auto command = std::make_shared<std::vector<std::string>>();
  auto tty = std::make_shared<bool>(false);
  CLI::App* run = instances->add_subcommand(
      "exec",
      "Run a command in a running instance: tessera instances exec ID -- CMD [ARGS...]; "
      "exits with the command's exit code");
  AddCommon(run, *f);
  run->add_option("id", *id, "Instance id or name")->required();
  run->add_option("command", *command, "The command and its arguments (after --)")->required();
  run->add_flag("-t,--tty", *tty, "Run it under a terminal (stdin must be one)");
  run->callback([f, id, command, tty, &ctx] {
    const auto found = ResolveInstance(*f, *id);
    ctx.exit_code = found ? RunSession(*f, *found, *command, *tty) : kExitFailure;
  });
  CLI::App* shell = instances->add_subcommand(
      "shell", "Open a shell in a running instance (bash where it has one, else sh)");
  AddCommon(shell, *f);
  shell->add_option("id", *id, "Instance id or name")->required();
  shell->callback([f, id, &ctx] {
    const auto found = ResolveInstance(*f, *id);
    ctx.exit_code = found ? RunSession(*f, *found, {}, true) : kExitFailure;
  });
}

}  // namespace tessera::cli
