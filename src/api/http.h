// The event-driven HTTP/1.1 server under the API: a few I/O threads serve every connection
// (idle, slow, long-polling or streaming) without a thread each. Limits apply before anything
// else sees a request: connections in all and per client address, request-line, header and body
// sizes, the time to send the headers and the body, and the requests in flight. A request is
// handed over in two steps: its head first, so the application can refuse it (a bad token, a
// wrong media type) before the body is read, then the whole request with a Responder that may
// answer at once, later (a long poll) or as a stream of chunks. Every error this layer answers
// itself has the API's documented body {"error": {"code", "message"}}.
// The implementation (Boost.Beast on Asio, with OpenSSL for TLS) is confined to http_server.cc;
// docs/http.md says why that library and what each limit is.
// Thread-safety: HttpServer's methods may be called from any thread; handlers run on the I/O
// threads and must not block; a Responder and an HttpStream may be used from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/target.h"
#include "common/result.h"

namespace tessera::api {

struct HttpLimits {
  size_t max_request_line = 8 << 10;   // Method, target and version: 414 beyond.
  size_t max_header_bytes = 16 << 10;  // Request line and header fields together: 431 beyond.
  size_t max_header_count = 64;        // Header fields: 431 beyond.
  size_t max_body_bytes = 1 << 20;     // Unless the head handler sets less: 413 beyond.
  std::chrono::milliseconds idle_timeout{60'000};    // Waiting for a request to start.
  std::chrono::milliseconds header_timeout{10'000};  // From its first byte to its last header.
  std::chrono::milliseconds body_timeout{30'000};    // For the whole body: 408 beyond.
  std::chrono::milliseconds write_timeout{30'000};   // For one response (or one stream chunk).
  size_t max_connections = 16'384;             // Open at once; more are answered 503 and closed.
  size_t max_connections_per_address = 1'024;  // From one client address: 429 beyond.
  size_t max_in_flight = 4'096;  // Requests handed to handlers, not yet answered: 503 beyond.
  size_t max_body_bytes_in_flight = 256 << 20;  // Their bodies, announced or read: 503 beyond.
  // What one caller (HeadDecision::budget_key) may hold of those: 429 beyond. So a caller that
  // announces bodies and sends nothing, or floods requests, holds its share, not the server.
  size_t max_in_flight_per_caller = 1'024;
  size_t max_body_bytes_per_caller = 16 << 20;
  // HeadDecision::reserved requests (the agents' long polls, the operator's) are counted in a
  // pool of their own, which the others never draw on; the per-caller shares apply there too.
  size_t reserved_in_flight = 16'384;
  size_t reserved_body_bytes_in_flight = 64 << 20;
  // Once a body has begun: after body_rate_grace it must keep arriving at min_body_rate bytes a
  // second on average (408 below), as well as end within body_timeout. 0 turns the rate off.
  size_t min_body_rate = 16 << 10;
  std::chrono::milliseconds body_rate_grace{5'000};
  size_t max_stream_buffer = 1 << 20;  // Unsent bytes of a stream before it is cut off.
};

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 picks a free port.
  int threads = 2;  // I/O threads.
  HttpLimits limits;
  std::string tls_cert_file;  // PEM; TLS when set (with tls_key_file).
  std::string tls_key_file;
  // The oldest TLS version served: "1.3" (the default) or "1.2".
  std::string tls_min_version = "1.3";
  // PEM of the authority whose certificates clients may present (mutual TLS); a certificate it
  // signed is verified at the handshake and its names reach the request (client_names). A client
  // without one is still served: which routes require one is the API's to say.
  std::string client_ca_file;
};

// The peer of a call made inside the server (its simulated agents): no address.
inline constexpr std::string_view kInProcessPeer = "in-process";

// One request. At the head stage `body` is empty.
struct HttpRequest {
  std::string method;                                        // As sent: "GET", "POST", ...
  std::string target;                                        // As sent; valid UTF-8 (it parsed).
  Target parsed;                                             // Decoded path and query.
  std::vector<std::pair<std::string, std::string>> headers;  // Names lower-case; values UTF-8.
  std::string body;
  bool has_body = false;  // A body follows the head (known at the head stage).
  std::string peer;       // The client's address, e.g. "127.0.0.1", or kInProcessPeer.
  // The names (subject CN, then DNS subject alternative names) of the certificate the client
  // presented, verified against HttpOptions::client_ca_file; empty when it presented none.
  std::vector<std::string> client_names;

  // The value of header `name` (lower-case), or nullptr when absent.
  const std::string* Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Extra fields, e.g. Retry-After.
};

// The answer the API gives for every error: {"error": {"code": code, "message": message}}, with
// anything that is not valid UTF-8 in the message replaced, so building it never fails.
HttpResponse ErrorResponse(int status, std::string_view code, std::string_view message);

class HttpStream;

// A connection handed over to a TCP peer (the proxy to an instance's port, docs/volumes.md):
// `head` (the request as forwarded, its body included) goes to host:port, and from then on bytes
// flow both ways untouched, each way as they come (a WebSocket, a stream of events), until either
// side closes or nothing moves for `idle_timeout`. The connection serves nothing else after. A
// peer that cannot be reached within `connect_timeout` is answered 502 bad_gateway.
struct SpliceTarget {
  std::string host;
  int port = 0;
  std::string head;
  std::chrono::milliseconds connect_timeout{5'000};
  std::chrono::milliseconds idle_timeout{3'600'000};
  // Called once when the splice ends, on an I/O thread: whether the peer was reached.
  std::function<void(bool reached)> done;
};

// The right, and the duty, to answer one request. Copies share it; the first Send (or Stream)
// wins and later ones do nothing. When the last copy goes without an answer, the client gets a
// 500, so a handler that forgets to answer never leaves a connection hanging.
class Responder {
 public:
  struct Shared;
  explicit Responder(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  // A responder for a request made in process (no connection): the answer goes to `deliver`, on
  // the thread that sends it. Streams are not supported (Stream returns nullptr).
  static Responder Local(std::function<void(HttpResponse)> deliver);

  // Sends the whole response. May be called from any thread.
  void Send(HttpResponse response) const;
  // Sends what `make` returns, calling it on the connection's I/O thread: so a caller on a busy
  // thread (the core) hands over a result without rendering it there. An exception from `make`
  // is answered 500.
  void SendLater(std::function<HttpResponse()> make) const;
  // Starts a chunked response with `status` and `content_type`; the stream sends what is
  // written to it. Returns nullptr when the request was answered already.
  std::shared_ptr<HttpStream> Stream(int status, std::string content_type) const;
  // Answers by handing the connection over to a TCP peer (SpliceTarget). In process (a Local
  // responder) it is answered 502.
  void Splice(SpliceTarget target) const;
  // Answers two requests by joining their connections (an exec's client and the agent that runs
  // it, docs/volumes.md): each is sent its `head` (a 101 Switching Protocols), then what either
  // sends goes to the other, a read at a time (the next read waits until the other side has
  // written the last), so neither side buffers more than one read. When either closes, or nothing
  // moves for `idle`, the other is sent what it was owed, stops sending, and closes within 2 s.
  // `done` is called once, on an I/O thread, when `a`'s connection ends. A Local responder, or
  // one that was answered already, ends the other with a 502.
  static void Join(const Responder& a, std::string head_a, const Responder& b, std::string head_b,
                   std::chrono::milliseconds idle, std::function<void()> done);
  // True once the connection is gone (the client left, or the server stops); an answer is then
  // dropped. Long polls check it to stop waiting early.
  bool Abandoned() const;

 private:
  std::shared_ptr<Shared> shared_;
};

// A response sent in chunks (server-sent events, a log tail). Writes are queued in order; a
// client that reads slower than the stream writes, past HttpLimits::max_stream_buffer unsent
// bytes, is cut off and Write returns false from then on (explicit back-pressure).
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // Queues `chunk`; false when the stream is closed (by Close, the client or a cut-off).
  virtual bool Write(std::string chunk) = 0;
  // Ends the response; the connection then serves its next request.
  virtual void Close() = 0;
  // Unsent bytes queued.
  virtual size_t Buffered() const = 0;
};

using RequestHandler = std::function<void(HttpRequest&&, Responder)>;

// What the application decides once a request's head has been read. Either `refuse` is set and
// is answered without reading the body (the connection then closes if a body was announced), or
// `handler` runs once a body of at most `max_body` bytes has arrived.
struct HeadDecision {
  std::optional<HttpResponse> refuse;
  size_t max_body = 0;
  RequestHandler handler;
  // Whose share of the requests and bodies in flight the request counts against: the
  // authenticated principal. Empty: the client's address.
  std::string budget_key;
  // The request counts against the reserved pool (HttpLimits::reserved_in_flight and
  // reserved_body_bytes_in_flight).
  bool reserved = false;
};
// Runs on an I/O thread for every request whose head passed the limits and whose target parsed.
// Must not block. Whatever it throws is answered 500 (and logged); the server keeps serving.
using HeadHandler = std::function<HeadDecision(const HttpRequest& head)>;

// Counters of the HTTP layer, for /metrics.
struct HttpStats {
  int64_t connections_open = 0;
  int64_t connections_accepted = 0;
  int64_t refused_total_limit = 0;    // Connections over max_connections.
  int64_t refused_address_limit = 0;  // Connections over max_connections_per_address.
  int64_t refused_overloaded = 0;     // Requests over a pool's requests or bytes in flight.
  int64_t timeouts = 0;               // Headers, bodies or writes too slow; idle closes excluded.
  int64_t too_large = 0;              // 413, 414 and 431 answers.
  int64_t malformed = 0;              // 400 answers of this layer (bad HTTP, bad target).
  int64_t handler_exceptions = 0;     // Exceptions caught at the barrier.
  int64_t in_flight = 0;
  int64_t body_bytes_in_flight = 0;  // Announced or read, in both pools.
  int64_t refused_share = 0;         // Requests whose caller held its share of either.
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, HeadHandler on_head);
  ~HttpServer();  // Stops and joins the I/O threads.
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens. Fails, naming the address, when it is in use or not an address, or when
  // the TLS certificate or key cannot be loaded. Nothing is accepted before Start.
  Status Bind();
  // The bound port (after Bind).
  int port() const;
  bool tls() const;
  // Reads the TLS certificate and key (and client CA) again from their files: connections made
  // from now on are served with them; those open keep theirs. On an error (named) nothing
  // changes. FailedPrecondition on a server without TLS.
  Status ReloadTls();
  // Starts the I/O threads: connections are accepted and served from now on.
  void Start();
  // Stops accepting, closes every connection and joins the threads. Idempotent.
  void Stop();

  HttpStats Stats() const;

  struct Impl;  // Defined in http_server.cc, and reached by its sessions.

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::api
