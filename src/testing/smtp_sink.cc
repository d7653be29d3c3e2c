#include "testing/smtp_sink.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <utility>

#include "common/text.h"

namespace tessera::testing {
namespace {

constexpr size_t kMaxLine = 64 * 1024;
constexpr size_t kMaxData = 16 * 1024 * 1024;

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && Upper(s.substr(0, prefix.size())) == Upper(prefix);
}

// The address inside "<...>" after a MAIL FROM: or RCPT TO: verb (parameters ignored).
std::string PathArgument(std::string_view rest) {
  const size_t open = rest.find('<');
  const size_t close = rest.find('>', open == std::string_view::npos ? 0 : open);
  if (open == std::string_view::npos || close == std::string_view::npos) {
    const size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos) return "";
    const size_t end = rest.find(' ', start);
    return std::string(rest.substr(start, end == std::string_view::npos ? end : end - start));
  }
  return std::string(rest.substr(open + 1, close - open - 1));
}

// One client connection: line reads and replies that give up as soon as the sink stops.
class Connection {
 public:
  Connection(int fd, int stop_fd) : fd_(fd), stop_fd_(stop_fd) {}
  ~Connection() { close(fd_); }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // False on close, error, an over-long line or stop.
  bool ReadLine(std::string& line) {
    while (true) {
      if (TakeLine(buffer_, line)) return true;
      if (buffer_.size() > kMaxLine) return false;
      if (!WaitFor(POLLIN, -1)) return false;
      char chunk[8192];
      const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
      if (n == 0) return false;
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        return false;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  // Sends `reply` and CRLF after `delay`; false when the sink stops first or the send fails.
  bool Reply(const std::string& reply, std::chrono::milliseconds delay) {
    if (delay.count() > 0 && Stopping(static_cast<int>(delay.count()))) return false;
    const std::string bytes = reply + "\r\n";
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  // True when the sink stops within `timeout_ms`.
  bool Stopping(int timeout_ms) {
    pollfd p{stop_fd_, POLLIN, 0};
    return poll(&p, 1, timeout_ms) > 0;
  }

  // True once fd_ has `events`; false when the sink stops first.
  bool WaitFor(short events, int timeout_ms) {
    while (true) {
      pollfd fds[2] = {{fd_, events, 0}, {stop_fd_, POLLIN, 0}};
      const int n = poll(fds, 2, timeout_ms);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || (fds[1].revents & POLLIN) != 0) return false;
      return true;
    }
  }

  int fd_;
  int stop_fd_;
  std::string buffer_;
};

}  // namespace

std::string SmtpSink::Message::Header(std::string_view name) const {
  const std::string want = Upper(name) + ":";
  size_t pos = 0;
  while (pos < data.size()) {
    size_t eol = data.find("\r\n", pos);
    if (eol == std::string::npos) eol = data.size();
    const std::string_view line(data.data() + pos, eol - pos);
    if (line.empty()) return "";  // End of the headers.
    if (StartsWithNoCase(line, want)) {
      std::string value(line.substr(want.size()));
      // Folded continuation lines start with white space.
      size_t next = eol + 2;
      while (next < data.size() && (data[next] == ' ' || data[next] == '\t')) {
        size_t end = data.find("\r\n", next);
        if (end == std::string::npos) end = data.size();
        value += data.substr(next, end - next);
        next = end + 2;
      }
      const size_t start = value.find_first_not_of(" \t");
      return start == std::string::npos ? "" : value.substr(start);
    }
    pos = eol + 2;
  }
  return "";
}

std::string SmtpSink::Message::Body() const {
  const size_t blank = data.find("\r\n\r\n");
  return blank == std::string::npos ? "" : data.substr(blank + 4);
}

SmtpSink::SmtpSink(int port) : stop_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || stop_fd_ < 0) return;
  const int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd_, 64) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return;
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

SmtpSink::~SmtpSink() {
  if (stop_fd_ >= 0) {
    const uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
  }
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> servers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    servers.swap(servers_);
  }
  for (std::thread& t : servers) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
}

void SmtpSink::SetReplyDelay(std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mu_);
  delay_ = delay;
}

void SmtpSink::RefuseAt(Step step, std::string reply) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_at_ = step;
  refusal_ = std::move(reply);
}

std::vector<SmtpSink::Message> SmtpSink::messages() const {
  std::lock_guard<std::mutex> lock(mu_);
  return messages_;
}

bool SmtpSink::WaitForMessages(size_t n, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, timeout, [&] { return messages_.size() >= n; });
}

int SmtpSink::connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return connections_;
}

void SmtpSink::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN) != 0) return;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    ++connections_;
    servers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void SmtpSink::Serve(int fd) {
  Connection conn(fd, stop_fd_);
  // Replies with `ok`, or with the refusal when the sink refuses at `step`; false to hang up.
  auto answer = [&](Step step, const std::string& ok, bool* refused = nullptr) {
    std::chrono::milliseconds delay;
    std::string reply = ok;
    {
      std::lock_guard<std::mutex> lock(mu_);
      delay = delay_;
      if (refuse_at_ == step && step != Step::kNone) reply = refusal_;
    }
    if (refused != nullptr) *refused = reply != ok;
    return conn.Reply(reply, delay);
  };
  bool refused = false;
  if (!answer(Step::kGreeting, "220 127.0.0.1 tessera test SMTP sink ready", &refused) || refused) {
    return;
  }
  Message message;
  bool have_sender = false;
  std::string line;
  while (conn.ReadLine(line)) {
    const std::string verb = Upper(line.substr(0, line.find(' ')));
    bool ok = true;
    if (verb == "EHLO") {
      ok = answer(Step::kHelo, "250-127.0.0.1 greets you\r\n250-8BITMIME\r\n250 SIZE 16777216");
      have_sender = false;
    } else if (verb == "HELO") {
      ok = answer(Step::kHelo, "250 127.0.0.1 greets you");
      have_sender = false;
    } else if (StartsWithNoCase(line, "MAIL FROM:")) {
      ok = answer(Step::kMailFrom, "250 2.1.0 sender ok", &refused);
      if (!refused) {
        message = Message{PathArgument(std::string_view(line).substr(10)), {}, {}};
        have_sender = true;
      }
    } else if (StartsWithNoCase(line, "RCPT TO:")) {
      if (!have_sender) {
        ok = answer(Step::kNone, "503 5.5.1 MAIL FROM first");
      } else {
        ok = answer(Step::kRcptTo, "250 2.1.5 recipient ok", &refused);
        if (!refused) message.recipients.push_back(PathArgument(std::string_view(line).substr(8)));
      }
    } else if (verb == "DATA") {
      if (message.recipients.empty()) {
        ok = answer(Step::kNone, "503 5.5.1 RCPT TO first");
        continue;
      }
      if (!answer(Step::kData, "354 end with <CRLF>.<CRLF>", &refused)) return;
      if (refused) continue;
      std::string data;
      std::string text;
      while (true) {
        if (!conn.ReadLine(text)) return;
        if (text == ".") break;
        if (!text.empty() && text[0] == '.') text.erase(0, 1);
        if (data.size() + text.size() > kMaxData) return;
        data += text;
        data += "\r\n";
      }
      message.data = std::move(data);
      ok = answer(Step::kEndOfData, "250 2.0.0 queued", &refused);
      if (!refused) {
        std::lock_guard<std::mutex> lock(mu_);
        messages_.push_back(message);
        changed_.notify_all();
      }
      message = Message{};
      have_sender = false;
    } else if (verb == "RSET") {
      message = Message{};
      have_sender = false;
      ok = answer(Step::kNone, "250 2.0.0 ok");
    } else if (verb == "NOOP") {
      ok = answer(Step::kNone, "250 2.0.0 ok");
    } else if (verb == "QUIT") {
      answer(Step::kNone, "221 2.0.0 bye");
      return;
    } else {
      ok = answer(Step::kNone, "502 5.5.2 command not recognized");
    }
    if (!ok) return;
  }
}

}  // namespace tessera::testing
