#include "common/tunnel.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/server_list.h"
#include "common/text.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

struct Url {
  bool tls = false;
  std::string host;
  std::string port;
};

Result<Url> ParseUrl(std::string_view url) {
  Url u;
  std::string_view rest;
  if (url.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return Status::InvalidArgument(
        fmt::format("'{}' is not an http:// or https:// URL", Quote(url)));
  }
  rest = rest.substr(0, rest.find('/'));
  std::string_view host = rest, port = u.tls ? "443" : "80";
  if (!rest.empty() && rest.front() == '[') {  // [::1]:8080
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("'{}': an unclosed '['", Quote(url)));
    }
    host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty() || port.empty()) {
    return Status::InvalidArgument(fmt::format("'{}' names no host and port", Quote(url)));
  }
  u.host = host;
  u.port = port;
  return u;
}

int MsLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// Waits until `fd` is ready for `events`, or the deadline; false at the deadline.
bool WaitFor(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = poll(&p, 1, MsLeft(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

Result<int> Connect(const Url& u, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(u.host.c_str(), u.port.c_str(), &hints, &found); rc != 0) {
    return Status::Unavailable(fmt::format("cannot resolve {}: {}", u.host, gai_strerror(rc)));
  }
  std::string why = "no address";
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        err = ETIMEDOUT;
        if (WaitFor(fd, POLLOUT, deadline)) {
          socklen_t len = sizeof err;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    if (err != 0) {
      why = std::strerror(err);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0)
    return Status::Unavailable(fmt::format("cannot reach {}:{}: {}", u.host, u.port, why));
  // Blocking from here: reads and writes wait as long as the stream does.
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // Keystrokes go at once.
  return fd;
}

std::string SslError(std::string_view what) {
  const unsigned long e = ERR_get_error();
  char buf[256] = {};
  if (e != 0) ERR_error_string_n(e, buf, sizeof buf);
  return fmt::format("{}: {}", what, e != 0 ? buf : "the connection ended");
}

// The error an answer other than 101 stands for: its JSON error message and status.
Status AnswerError(int status, std::string_view head, std::string_view body) {
  std::string message(body);
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    message = j["error"].value("message", message);
  }
  if (message.empty()) message = std::string(head.substr(0, head.find('\r')));
  const std::string text = fmt::format("{} (HTTP {})", message, status);
  switch (status) {
    case 400:
      return Status::InvalidArgument(text);
    case 401:
      return Status::Unauthenticated(text);
    case 403:
      return Status::PermissionDenied(text);
    case 404:
      return Status::NotFound(text);
    case 409:
      return Status::FailedPrecondition(text);
    default:
      return Status::Unavailable(text);
  }
}

}  // namespace

std::string ConnectProblem(std::string_view url, std::chrono::milliseconds timeout) {
  auto u = ParseUrl(url);
  if (!u.ok()) return u.status().message();
  auto fd = Connect(*u, Clock::now() + timeout);
  if (!fd.ok()) {
    // "cannot reach HOST:PORT: why": the caller names the server already.
    const std::string& m = fd.status().message();
    const size_t colon = m.rfind(": ");
    return m.rfind("cannot reach ", 0) == 0 && colon != std::string::npos ? m.substr(colon + 2) : m;
  }
  close(*fd);
  return "";
}

Tunnel::~Tunnel() {
  if (ssl_) SSL_free(ssl_);
  if (ctx_) SSL_CTX_free(ctx_);
  if (fd_ >= 0) close(fd_);
}

bool Tunnel::Pending() const { return !early_.empty() || (ssl_ && SSL_pending(ssl_) > 0); }

Result<std::string> Tunnel::Read() {
  if (!early_.empty()) return std::exchange(early_, "");
  char buf[16 << 10];
  for (;;) {
    if (ssl_) {
      const int n = SSL_read(ssl_, buf, sizeof buf);
      if (n > 0) return std::string(buf, static_cast<size_t>(n));
      const int e = SSL_get_error(ssl_, n);
      // A server that closes without close_notify ends the stream as well as one that sends it.
      if (e == SSL_ERROR_ZERO_RETURN || e == SSL_ERROR_SYSCALL || e == SSL_ERROR_SSL) {
        ERR_clear_error();
        return std::string();
      }
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) continue;
      return Status::Unavailable(SslError("reading from the server"));
    }
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n >= 0) return std::string(buf, static_cast<size_t>(n));
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return std::string();
    return Status::Unavailable(fmt::format("reading from the server: {}", std::strerror(errno)));
  }
}

Status Tunnel::Write(std::string_view data) {
  while (!data.empty()) {
    ssize_t n = 0;
    if (ssl_) {
      n = SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 20)));
      if (n <= 0) {
        const int e = SSL_get_error(ssl_, static_cast<int>(n));
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) continue;
        return Status::Unavailable(SslError("writing to the server"));
      }
    } else {
      n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::Unavailable(fmt::format("writing to the server: {}", std::strerror(errno)));
      }
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

void Tunnel::CloseWrite() {
  // Over TLS a close_notify, which ends the server's reading as end of file does; what the server
  // still sends can be read after it (TLS 1.3 closes each way on its own).
  if (ssl_) {
    SSL_shutdown(ssl_);
  } else {
    shutdown(fd_, SHUT_WR);
  }
}

Result<std::unique_ptr<Tunnel>> Tunnel::Open(const TunnelRequest& request) {
  if (request.client_cert.empty() != request.client_key.empty()) {
    return Status::InvalidArgument("give a client certificate and its key together");
  }
  TESSERA_ASSIGN_OR_RETURN(ServerList servers, ServerList::Parse(request.urls, "--url"));
  const size_t n = servers.urls().size();
  Status last = Status::Unavailable("no server answered");
  for (size_t tries = 0; tries < (n > 1 ? 2 * n : 1); ++tries) {
    TESSERA_ASSIGN_OR_RETURN(Url url, ParseUrl(servers.current()));
    const auto deadline = Clock::now() + request.timeout;
    auto fd = Connect(url, deadline);
    if (!fd.ok()) {
      last = fd.status();
      servers.Next();
      continue;
    }
    std::unique_ptr<Tunnel> t(new Tunnel());
    t->fd_ = *fd;
    // Reads and writes of the upgrade wait no longer than the deadline.
    const timeval tv{static_cast<time_t>(MsLeft(deadline) / 1000),
                     static_cast<suseconds_t>(MsLeft(deadline) % 1000 * 1000)};
    setsockopt(t->fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(t->fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (url.tls) {
      t->ctx_ = SSL_CTX_new(TLS_client_method());
      if (!t->ctx_) return Status::Internal(SslError("TLS"));
      SSL_CTX_set_min_proto_version(t->ctx_, TLS1_2_VERSION);
      SSL_CTX_set_verify(t->ctx_, SSL_VERIFY_PEER, nullptr);
      const bool trusted =
          request.ca_file.empty()
              ? SSL_CTX_set_default_verify_paths(t->ctx_) == 1
              : SSL_CTX_load_verify_locations(t->ctx_, request.ca_file.c_str(), nullptr) == 1;
      if (!trusted) {
        return Status::InvalidArgument(
            SslError(fmt::format("cannot load CA '{}'", request.ca_file)));
      }
      if (!request.client_cert.empty() &&
          (SSL_CTX_use_certificate_chain_file(t->ctx_, request.client_cert.c_str()) != 1 ||
           SSL_CTX_use_PrivateKey_file(t->ctx_, request.client_key.c_str(), SSL_FILETYPE_PEM) !=
               1)) {
        return Status::InvalidArgument(SslError(
            fmt::format("cannot load the client certificate '{}' and key", request.client_cert)));
      }
      t->ssl_ = SSL_new(t->ctx_);
      SSL_set_fd(t->ssl_, t->fd_);
      SSL_set_tlsext_host_name(t->ssl_, url.host.c_str());
      SSL_set1_host(t->ssl_, url.host.c_str());
      if (SSL_connect(t->ssl_) != 1) {
        return Status::Unavailable(SslError(
            fmt::format("TLS with {}:{} (is the server's certificate signed by the CA given?)",
                        url.host, url.port)));
      }
    }
    std::string head =
        fmt::format("POST {} HTTP/1.1\r\nHost: {}:{}\r\nConnection: Upgrade\r\nUpgrade: {}\r\n",
                    request.path, url.host, url.port, request.protocol);
    if (!request.token.empty()) head += fmt::format("Authorization: Bearer {}\r\n", request.token);
    if (!request.body.empty()) {
      head += fmt::format("Content-Type: application/json\r\nContent-Length: {}\r\n",
                          request.body.size());
    }
    head += "\r\n";
    head += request.body;
    TESSERA_RETURN_IF_ERROR(t->Write(head));
    // The answer's head; a 101 may be followed at once by the stream's first bytes.
    std::string got;
    size_t end = std::string::npos;
    while ((end = got.find("\r\n\r\n")) == std::string::npos) {
      if (got.size() > (64 << 10)) return Status::Unavailable("the server's answer has no end");
      TESSERA_ASSIGN_OR_RETURN(std::string more, t->Read());
      if (more.empty()) {
        return Status::Unavailable(
            fmt::format("{}:{} closed the connection without an answer", url.host, url.port));
      }
      got += more;
    }
    const std::string answer_head = got.substr(0, end + 2);
    std::string rest = got.substr(end + 4);
    int status = 0;
    if (std::sscanf(answer_head.c_str(), "HTTP/1.%*d %d", &status) != 1) {
      return Status::Unavailable("the server's answer is not HTTP");
    }
    auto header = [&answer_head](std::string_view name) -> std::string {
      for (std::string_view line : Split(answer_head, '\n')) {
        const size_t colon = line.find(':');
        if (colon != std::string_view::npos && IEquals(TrimSpace(line.substr(0, colon)), name)) {
          return std::string(TrimSpace(line.substr(colon + 1, line.size() - colon - 1)));
        }
      }
      return "";
    };
    if (status == 101) {
      const timeval none{0, 0};
      setsockopt(t->fd_, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
      setsockopt(t->fd_, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
      t->early_ = std::move(rest);
      return t;
    }
    // An error answer's body: as long as it says, within the deadline.
    std::string length = header("content-length");
    const size_t want = length.empty() ? 0 : std::strtoull(length.c_str(), nullptr, 10);
    while (rest.size() < std::min<size_t>(want, 1 << 20)) {
      auto more = t->Read();
      if (!more.ok() || more->empty()) break;
      rest += *more;
    }
    if (n > 1 && status == 307) {
      std::string location = header("location");
      if (!servers.Follow(location)) servers.Next();
      last = Status::Unavailable(
          fmt::format("the replicas sent the request to {}", EscapeForTerminal(location)));
      continue;
    }
    if (n > 1 && status == 503 && rest.find("\"no_leader\"") != std::string::npos) {
      last = AnswerError(status, answer_head, rest);
      servers.Next();
      continue;
    }
    return AnswerError(status, answer_head, rest);
  }
  return last;
}

}  // namespace tessera
