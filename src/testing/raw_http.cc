#include "testing/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace tessera::testing {

std::unique_ptr<RawConnection> RawConnection::Open(int port, const std::string& source) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return nullptr;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (!source.empty()) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    if (inet_pton(AF_INET, source.c_str(), &local.sin_addr) != 1 ||
        bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) {
      close(fd);
      return nullptr;
    }
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return nullptr;
  }
  return std::unique_ptr<RawConnection>(new RawConnection(fd));
}

RawConnection::~RawConnection() { close(fd_); }

bool RawConnection::Send(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool RawConnection::Fill(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return false;
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
  char buf[16384];
  const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
  if (n <= 0) return false;
  buffer_.append(buf, static_cast<size_t>(n));
  return true;
}

std::optional<RawResponse> RawConnection::Read(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t head_end;
  while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    if (!Fill(deadline)) return std::nullopt;
  }
  RawResponse r;
  const std::string head = buffer_.substr(0, head_end);
  buffer_.erase(0, head_end + 4);
  const size_t sp = head.find(' ');
  if (sp == std::string::npos) return std::nullopt;
  r.status = std::atoi(head.c_str() + sp + 1);
  size_t line = head.find("\r\n");
  while (line != std::string::npos) {
    const size_t next = head.find("\r\n", line + 2);
    const std::string field =
        head.substr(line + 2, next == std::string::npos ? next : next - line - 2);
    const size_t colon = field.find(':');
    if (colon != std::string::npos) {
      std::string name = field.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t v = colon + 1;
      while (v < field.size() && field[v] == ' ') ++v;
      r.headers[name] = field.substr(v);
    }
    line = next;
  }
  if (r.status == 100) return Read(timeout);  // An interim answer: read the final one.
  if (auto it = r.headers.find("content-length"); it != r.headers.end()) {
    const size_t length = std::strtoull(it->second.c_str(), nullptr, 10);
    while (buffer_.size() < length) {
      if (!Fill(deadline)) return std::nullopt;
    }
    r.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
  } else if (r.headers.count("transfer-encoding")) {
    for (;;) {
      size_t eol;
      while ((eol = buffer_.find("\r\n")) == std::string::npos) {
        if (!Fill(deadline)) return std::nullopt;
      }
      const size_t size = std::strtoull(buffer_.c_str(), nullptr, 16);
      while (buffer_.size() < eol + 2 + size + 2) {
        if (!Fill(deadline)) return std::nullopt;
      }
      r.body += buffer_.substr(eol + 2, size);
      buffer_.erase(0, eol + 2 + size + 2);
      if (size == 0) break;
    }
  } else {
    while (Fill(deadline)) {
    }
    r.body = std::move(buffer_);
    buffer_.clear();
  }
  return r;
}

bool RawConnection::ClosedWithin(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return true;
  }
}

std::string HttpRequestText(std::string_view method, std::string_view target,
                            std::string_view token, std::string_view body,
                            std::string_view extra_headers) {
  std::string out;
  out.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  if (!token.empty()) out.append("Authorization: Bearer ").append(token).append("\r\n");
  if (!body.empty()) {
    out.append("Content-Type: application/json\r\nContent-Length: ")
        .append(std::to_string(body.size()))
        .append("\r\n");
  }
  out.append(extra_headers);
  out.append("\r\n").append(body);
  return out;
}

}  // namespace tessera::testing
