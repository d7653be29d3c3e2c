// A raw TCP connection to a server on loopback, for tests and benchmarks that must control every
// byte and every pause: slow clients, half-sent requests, oversized heads, idle connections by
// the thousand, connections from several loopback source addresses (127.x.y.z).
// Thread-safety: one RawConnection per thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::testing {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // Names lower-case.
  std::string body;                            // De-chunked.
};

class RawConnection {
 public:
  // Connects to 127.0.0.1:`port`, from `source` when given (any 127.x.y.z). nullptr on failure.
  static std::unique_ptr<RawConnection> Open(int port, const std::string& source = "");
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Sends every byte; false when the connection broke.
  bool Send(std::string_view bytes);
  // Reads one response: status line, headers, and a Content-Length or chunked body (or what
  // comes before the close). nullopt on a close before a status line, or after `timeout`.
  std::optional<RawResponse> Read(std::chrono::milliseconds timeout);
  // True when the server closes the connection (or resets it) within `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout);
  int fd() const { return fd_; }

 private:
  explicit RawConnection(int fd) : fd_(fd) {}
  // Reads more into buffer_; false on close, error or the deadline.
  bool Fill(std::chrono::steady_clock::time_point deadline);

  int fd_;
  std::string buffer_;
};

// "GET /path HTTP/1.1" with Host, an optional bearer token and extra header lines, and a body
// with its Content-Length when not empty.
std::string HttpRequestText(std::string_view method, std::string_view target,
                            std::string_view token = "", std::string_view body = "",
                            std::string_view extra_headers = "");

}  // namespace tessera::testing
