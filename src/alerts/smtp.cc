#include "alerts/smtp.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/text.h"

namespace tessera::alerts {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

constexpr size_t kMaxReplyLine = 4096;  // RFC 5321 allows 512; be lenient, but bounded.
constexpr int kMaxReplyLines = 200;

struct Reply {
  int code = 0;
  std::string text;  // The lines' texts, joined with " ".
};

// True when an envelope address could smuggle a second command or break the angle brackets.
bool UnsafeAddress(std::string_view a) {
  for (const char ch : a) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || c == '<' || c == '>' || c == ' ') return true;
  }
  return false;
}

std::string LocalHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  for (char* p = name; *p != '\0'; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (!(std::isalnum(c) || c == '.' || c == '-')) return "localhost";
  }
  return name;
}

// One SMTP conversation over one socket, bounded by one deadline.
class Session {
 public:
  Session(int cancel_fd, SteadyTime deadline) : cancel_fd_(cancel_fd), deadline_(deadline) {}
  ~Session() {
    if (fd_ >= 0) close(fd_);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  Status Connect(const std::string& host, int port) {
    const std::string where = fmt::format("SMTP connect to {}:{}", Quote(host, 255), port);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* list = nullptr;
    const std::string service = std::to_string(port);
    const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &list);
    if (rc != 0 || list == nullptr) {
      return Status::Unavailable(fmt::format("{}: {}", where, gai_strerror(rc)));
    }
    Status last = Status::Unavailable(where + ": no address");
    for (const addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
      last = ConnectOne(ai, where);
      if (last.ok()) break;
      if (Expired() || Cancelled()) break;
    }
    freeaddrinfo(list);
    return last;
  }

  // Reads one reply, which may span lines "250-..." ... "250 ...".
  Status Read(std::string_view step, Reply& reply) {
    reply = Reply{};
    for (int n = 0; n < kMaxReplyLines; ++n) {
      std::string line;
      TESSERA_RETURN_IF_ERROR(ReadLine(step, line));
      if (line.size() < 3 || !std::isdigit(static_cast<unsigned char>(line[0])) ||
          !std::isdigit(static_cast<unsigned char>(line[1])) ||
          !std::isdigit(static_cast<unsigned char>(line[2])) ||
          (line.size() > 3 && line[3] != ' ' && line[3] != '-')) {
        return Status::Unavailable(
            fmt::format("SMTP {}: malformed reply '{}'", step, Quote(line, 200)));
      }
      const int code = std::stoi(line.substr(0, 3));
      if (reply.code != 0 && code != reply.code) {
        return Status::Unavailable(
            fmt::format("SMTP {}: reply codes differ within one reply", step));
      }
      reply.code = code;
      if (line.size() > 4) {
        if (!reply.text.empty()) reply.text += ' ';
        reply.text += line.substr(4);
      }
      if (line.size() == 3 || line[3] == ' ') return Status::Ok();
    }
    return Status::Unavailable(
        fmt::format("SMTP {}: reply longer than {} lines", step, kMaxReplyLines));
  }

  // Sends `command` (CRLF added) and reads the reply; an error unless its code is in
  // [min_code, max_code].
  Status Command(std::string_view step, const std::string& command, int min_code, int max_code,
                 Reply& reply) {
    TESSERA_RETURN_IF_ERROR(Write(step, command + "\r\n"));
    TESSERA_RETURN_IF_ERROR(Read(step, reply));
    return Expect(step, reply, min_code, max_code);
  }

  static Status Expect(std::string_view step, const Reply& reply, int min_code, int max_code) {
    if (reply.code >= min_code && reply.code <= max_code) return Status::Ok();
    std::string message =
        fmt::format("SMTP {}: server replied {} {}", step, reply.code, Quote(reply.text, 300));
    // 5xx is a permanent refusal (RFC 5321 4.2.1); anything else may pass on a later try.
    if (reply.code >= 500) return Status::FailedPrecondition(std::move(message));
    return Status::Unavailable(std::move(message));
  }

  Status Write(std::string_view step, std::string_view bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        TESSERA_RETURN_IF_ERROR(Wait(step, POLLOUT));
        continue;
      }
      return Status::Unavailable(fmt::format("SMTP {}: send: {}", step, std::strerror(errno)));
    }
    return Status::Ok();
  }

 private:
  bool Expired() const { return std::chrono::steady_clock::now() >= deadline_; }
  bool Cancelled() const {
    if (cancel_fd_ < 0) return false;
    pollfd p{cancel_fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }

  // Waits until fd_ is ready for `events`, the deadline passes or Cancel is called.
  Status Wait(std::string_view step, short events) {
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline_ - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        return Status::Unavailable(fmt::format("SMTP {}: timed out", step));
      }
      pollfd fds[2] = {{fd_, events, 0}, {cancel_fd_, POLLIN, 0}};
      const int n = poll(fds, cancel_fd_ >= 0 ? 2 : 1, static_cast<int>(left.count()) + 1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return Status::Unavailable(fmt::format("SMTP {}: poll: {}", step, std::strerror(errno)));
      if (cancel_fd_ >= 0 && (fds[1].revents & POLLIN) != 0) {
        return Status::Unavailable(fmt::format("SMTP {}: cancelled", step));
      }
      if (fds[0].revents != 0) return Status::Ok();
    }
  }

  Status ConnectOne(const addrinfo* ai, const std::string& where) {
    if (fd_ >= 0) close(fd_);
    fd_ = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd_ < 0) return Status::Unavailable(fmt::format("{}: {}", where, std::strerror(errno)));
    if (connect(fd_, ai->ai_addr, ai->ai_addrlen) == 0) return Status::Ok();
    if (errno != EINPROGRESS) {
      return Status::Unavailable(fmt::format("{}: {}", where, std::strerror(errno)));
    }
    Status waited = Wait("connect", POLLOUT);
    if (!waited.ok()) return waited.WithPrefix(where);
    int error = 0;
    socklen_t len = sizeof(error);
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
    if (error != 0) return Status::Unavailable(fmt::format("{}: {}", where, std::strerror(error)));
    return Status::Ok();
  }

  Status ReadLine(std::string_view step, std::string& line) {
    while (true) {
      if (TakeLine(buffer_, line)) return Status::Ok();
      if (buffer_.size() > kMaxReplyLine) {
        return Status::Unavailable(fmt::format("SMTP {}: reply line too long", step));
      }
      TESSERA_RETURN_IF_ERROR(Wait(step, POLLIN));
      char chunk[4096];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n > 0) {
        buffer_.append(chunk, static_cast<size_t>(n));
      } else if (n == 0) {
        return Status::Unavailable(fmt::format("SMTP {}: connection closed by the server", step));
      } else if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
        return Status::Unavailable(fmt::format("SMTP {}: recv: {}", step, std::strerror(errno)));
      }
    }
  }

  int cancel_fd_;
  SteadyTime deadline_;
  int fd_ = -1;
  std::string buffer_;
};

Status Converse(Session& s, const SmtpMessage& m) {
  Reply reply;
  TESSERA_RETURN_IF_ERROR(s.Read("greeting", reply));
  TESSERA_RETURN_IF_ERROR(Session::Expect("greeting", reply, 220, 220));

  const std::string me = LocalHostName();
  bool eight_bit = false;
  TESSERA_RETURN_IF_ERROR(s.Write("EHLO", "EHLO " + me + "\r\n"));
  TESSERA_RETURN_IF_ERROR(s.Read("EHLO", reply));
  if (reply.code == 250) {
    eight_bit = reply.text.find("8BITMIME") != std::string::npos;
  } else if (reply.code >= 500) {
    // An old server that knows only HELO.
    TESSERA_RETURN_IF_ERROR(s.Command("HELO", "HELO " + me, 250, 250, reply));
  } else {
    return Session::Expect("EHLO", reply, 250, 250);
  }

  std::string mail = "MAIL FROM:<" + m.from + ">";
  if (eight_bit) mail += " BODY=8BITMIME";
  TESSERA_RETURN_IF_ERROR(s.Command("MAIL FROM", mail, 250, 250, reply));
  for (const std::string& to : m.to) {
    TESSERA_RETURN_IF_ERROR(
        s.Command("RCPT TO:<" + to + ">", "RCPT TO:<" + to + ">", 250, 251, reply));
  }
  TESSERA_RETURN_IF_ERROR(s.Command("DATA", "DATA", 354, 354, reply));
  TESSERA_RETURN_IF_ERROR(s.Write("DATA", SmtpDataForWire(m.data)));
  TESSERA_RETURN_IF_ERROR(s.Read("end of DATA", reply));
  TESSERA_RETURN_IF_ERROR(Session::Expect("end of DATA", reply, 250, 250));
  // The message is accepted; a QUIT that goes wrong changes nothing.
  (void)s.Command("QUIT", "QUIT", 221, 221, reply);
  return Status::Ok();
}

}  // namespace

std::string SmtpDataForWire(const std::string& data) {
  std::string out;
  out.reserve(data.size() + data.size() / 40 + 8);
  bool line_start = true;
  for (size_t i = 0; i < data.size(); ++i) {
    const char c = data[i];
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < data.size() && data[i + 1] == '\n') ++i;
      out += "\r\n";
      line_start = true;
      continue;
    }
    if (line_start && c == '.') out += '.';
    out += c;
    line_start = false;
  }
  if (!line_start) out += "\r\n";
  out += ".\r\n";
  return out;
}

SmtpClient::SmtpClient() : cancel_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

SmtpClient::~SmtpClient() {
  if (cancel_fd_ >= 0) close(cancel_fd_);
}

void SmtpClient::Cancel() {
  cancelled_.store(true);
  if (cancel_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(cancel_fd_, &one, sizeof(one));
  }
}

Status SmtpClient::Send(const std::string& host, int port, const SmtpMessage& message,
                        std::chrono::milliseconds timeout) {
  if (UnsafeAddress(message.from)) {
    return Status::FailedPrecondition(
        fmt::format("SMTP MAIL FROM: '{}' is not a usable address", Quote(message.from)));
  }
  if (message.to.empty()) return Status::FailedPrecondition("SMTP RCPT TO: no recipients");
  for (const std::string& to : message.to) {
    if (to.empty() || UnsafeAddress(to)) {
      return Status::FailedPrecondition(
          fmt::format("SMTP RCPT TO: '{}' is not a usable address", Quote(to)));
    }
  }
  if (cancelled_.load()) return Status::Unavailable("SMTP: cancelled");
  Session session(cancel_fd_, std::chrono::steady_clock::now() + timeout);
  TESSERA_RETURN_IF_ERROR(session.Connect(host, port));
  return Converse(session, message);
}

}  // namespace tessera::alerts
