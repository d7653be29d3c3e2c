// The HTTP layer on Boost.Beast and Asio. This is the only translation unit that includes Boost:
// it compiles slowly, and nothing else should pay for it. That is why this file is over 800 lines:
// splitting it would compile Boost's headers once per part.
//
// One Session per connection, its work serialized on its own strand. A request goes:
//   idle (wait for a first byte, idle_timeout) -> head (header_timeout from that byte, size and
//   count limits) -> the application's HeadHandler -> body (body_timeout, the decided limit) ->
//   the handler -> waiting for the Responder (no timer: long polls) -> write (write_timeout)
//   -> idle again, or a lingering close.
// Sessions are owned by the server's registry, so a Responder held by another thread keeps only
// a weak reference, and nothing bound to the io_context outlives it.
#include <fmt/format.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "api/http.h"
#include "common/text.h"

namespace tessera::api {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

HttpResponse ErrorResponse(int status, std::string_view code, std::string_view message) {
  const nlohmann::json body = {{"error", {{"code", code}, {"message", message}}}};
  HttpResponse r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return &v;
  }
  return nullptr;
}

namespace {

// Whether the server still runs. Responders check it, under its lock, before they post work to
// the io_context, so nothing is posted to one that is gone.
struct Liveness {
  std::mutex mu;
  bool alive = true;
};

struct Counters {
  std::atomic<int64_t> open{0}, accepted{0}, refused_total{0}, refused_address{0},
      refused_overloaded{0}, timeouts{0}, too_large{0}, malformed{0}, exceptions{0},
      refused_share{0};
};

// What requests in flight hold, a place each and their bodies' bytes, in two pools (the reserved
// one for agents and the operator), and each caller's share of its pool.
class InFlight {
 public:
  explicit InFlight(const HttpLimits& limits) : limits_(limits) {}

  struct Held {
    size_t requests = 0, bytes = 0;
  };
  enum class Verdict { kOk, kPoolRequests, kPoolBytes, kShareRequests, kShareBytes };

  // Counts a request with `bytes` of body against `key`'s share and its pool, unless that would
  // pass a limit.
  Verdict Take(const std::string& key, bool reserved, size_t bytes) {
    const Held pool_limit = Limit(reserved), share = Share(reserved);
    std::lock_guard<std::mutex> lock(mu_);
    Held& pool = pools_[reserved ? 1 : 0];
    if (pool.requests + 1 > pool_limit.requests) return Verdict::kPoolRequests;
    if (pool.bytes + bytes > pool_limit.bytes) return Verdict::kPoolBytes;
    auto [it, fresh] = by_key_.try_emplace(key);
    Held& mine = it->second;
    const Verdict v = mine.requests + 1 > share.requests ? Verdict::kShareRequests
                      : mine.bytes + bytes > share.bytes ? Verdict::kShareBytes
                                                         : Verdict::kOk;
    if (v != Verdict::kOk) {
      if (fresh) by_key_.erase(it);
      return v;
    }
    ++mine.requests;
    mine.bytes += bytes;
    ++pool.requests;
    pool.bytes += bytes;
    return v;
  }

  // Gives back what Take counted.
  void Give(const std::string& key, bool reserved, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    Held& pool = pools_[reserved ? 1 : 0];
    --pool.requests;
    pool.bytes -= bytes;
    if (auto it = by_key_.find(key); it != by_key_.end()) {
      it->second.bytes -= bytes;
      if (--it->second.requests == 0) by_key_.erase(it);
    }
  }

  Held Limit(bool reserved) const {
    return reserved ? Held{limits_.reserved_in_flight, limits_.reserved_body_bytes_in_flight}
                    : Held{limits_.max_in_flight, limits_.max_body_bytes_in_flight};
  }
  Held Share(bool reserved) const {
    const Held pool = Limit(reserved);
    return {std::min(limits_.max_in_flight_per_caller, pool.requests),
            std::min(limits_.max_body_bytes_per_caller, pool.bytes)};
  }

  Held Total() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {pools_[0].requests + pools_[1].requests, pools_[0].bytes + pools_[1].bytes};
  }

 private:
  const HttpLimits& limits_;
  mutable std::mutex mu_;
  Held pools_[2];                                 // Guarded by mu_.
  std::unordered_map<std::string, Held> by_key_;  // Guarded by mu_; no entry without a request.
};

struct StreamState;

// What a Responder and a stream reach a session through, from any thread.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual net::any_io_executor executor() = 0;
  // These run on the session's strand.
  virtual void Answer(HttpResponse response) = 0;
  virtual void StartStream(int status, std::string content_type) = 0;
  // A stream's chunks and end name their stream: they may arrive before its head (a post from
  // the I/O thread waits in its private queue while another thread's lands at once), and a
  // stream that ended or was cut off must not write into the next response.
  virtual void QueueChunk(const std::shared_ptr<StreamState>& from, std::string chunk) = 0;
  virtual void EndStream(const std::shared_ptr<StreamState>& from) = 0;
  virtual void StartSplice(SpliceTarget target) = 0;
  // A joined pair (Responder::Join): this session's part, then what the other sends it (`written`
  // is called once it is written), and the other's end.
  virtual void StartJoin(std::string head, std::weak_ptr<SessionBase> other,
                         std::chrono::milliseconds idle, std::function<void()> done) = 0;
  virtual void JoinWrite(std::string data, std::function<void()> written) = 0;
  virtual void JoinEnd() = 0;
  virtual void Close() = 0;
  std::atomic<bool> closed{false};
};

// Shared between a stream's writer (any thread) and its session (the strand).
struct StreamState {
  std::atomic<size_t> buffered{0};
  std::atomic<bool> closed{false};
};

// Runs `fn(session)` on the session's strand if the server and the session are still there.
template <typename Fn>
void PostTo(const std::shared_ptr<Liveness>& live, const std::weak_ptr<SessionBase>& weak, Fn fn) {
  std::lock_guard<std::mutex> lock(live->mu);
  if (!live->alive) return;
  if (std::shared_ptr<SessionBase> s = weak.lock()) {
    net::post(s->executor(), [s, fn = std::move(fn)]() mutable { fn(*s); });
  }
}

class StreamImpl final : public HttpStream {
 public:
  StreamImpl(std::shared_ptr<Liveness> live, std::weak_ptr<SessionBase> session,
             std::shared_ptr<StreamState> state, size_t max_buffer)
      : live_(std::move(live)),
        session_(std::move(session)),
        state_(std::move(state)),
        max_buffer_(max_buffer) {}

  bool Write(std::string chunk) override {
    if (state_->closed || chunk.empty()) return !state_->closed;
    if (state_->buffered.fetch_add(chunk.size()) + chunk.size() > max_buffer_) {
      // The client reads slower than we write: cut it off rather than buffer without bound.
      state_->closed = true;
      PostTo(live_, session_, [](SessionBase& s) { s.Close(); });
      return false;
    }
    PostTo(live_, session_, [state = state_, c = std::move(chunk)](SessionBase& s) mutable {
      s.QueueChunk(state, std::move(c));
    });
    return true;
  }

  void Close() override {
    if (state_->closed.exchange(true)) return;
    PostTo(live_, session_, [state = state_](SessionBase& s) { s.EndStream(state); });
  }

  size_t Buffered() const override { return state_->buffered; }

 private:
  std::shared_ptr<Liveness> live_;
  std::weak_ptr<SessionBase> session_;
  std::shared_ptr<StreamState> state_;
  size_t max_buffer_;
};

// A server TLS context from `o`: the certificate chain and key (checked to match), TLS 1.3 and up
// unless `tls_min_version` is "1.2", and with a client CA, client certificates requested (not
// required) and verified against it. Errors name the flag and file.
Result<std::shared_ptr<ssl::context>> MakeTlsContext(const HttpOptions& o) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  int min = 0;
  if (o.tls_min_version == "1.3") {
    min = TLS1_3_VERSION;
  } else if (o.tls_min_version == "1.2") {
    min = TLS1_2_VERSION;
  } else {
    return Status::InvalidArgument(
        fmt::format("--tls-min-version: '{}' is not 1.2 or 1.3", Quote(o.tls_min_version, 16)));
  }
  SSL_CTX_set_min_proto_version(ctx->native_handle(), min);
  beast::error_code ec;
  ctx->use_certificate_chain_file(o.tls_cert_file, ec);
  if (ec) {
    return Status::InvalidArgument(fmt::format("--tls-cert {}: cannot load the certificate: {}",
                                               o.tls_cert_file, ec.message()));
  }
  ctx->use_private_key_file(o.tls_key_file, ssl::context::pem, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("--tls-key {}: cannot load the private key: {}", o.tls_key_file, ec.message()));
  }
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return Status::InvalidArgument(
        fmt::format("--tls-key {} does not match --tls-cert {}", o.tls_key_file, o.tls_cert_file));
  }
  if (!o.client_ca_file.empty()) {
    ctx->load_verify_file(o.client_ca_file, ec);
    if (ec) {
      return Status::InvalidArgument(
          fmt::format("--client-ca {}: cannot load it: {}", o.client_ca_file, ec.message()));
    }
    // Asked for, verified when given, never required at the handshake: tenants and the CLI
    // present none; the API requires one on the agent routes.
    ctx->set_verify_mode(ssl::verify_peer);
    // A certificate that does not verify is not refused at the handshake either: the request
    // then carries no names (PeerNames checks the verdict), and the API answers why.
    ctx->set_verify_callback([](bool, ssl::verify_context&) { return true; });
  }
  return ctx;
}

// The subject CN and DNS alternative names of the certificate `ssl`'s peer presented, when it
// verified against the client CA; empty otherwise.
std::vector<std::string> PeerNames(SSL* ssl) {
  std::vector<std::string> names;
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return names;
  if (SSL_get_verify_result(ssl) == X509_V_OK) {
    char cn[256] = {};
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn) - 1) >
        0) {
      names.emplace_back(cn);
    }
    auto* sans =
        static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
    for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(sans, i);
      if (n->type != GEN_DNS) continue;
      const unsigned char* data = ASN1_STRING_get0_data(n->d.dNSName);
      names.emplace_back(reinterpret_cast<const char*>(data),
                         static_cast<size_t>(ASN1_STRING_length(n->d.dNSName)));
    }
    if (sans) GENERAL_NAMES_free(sans);
  }
  X509_free(cert);
  return names;
}

}  // namespace

struct Responder::Shared {
  std::shared_ptr<Liveness> live;
  std::weak_ptr<SessionBase> session;
  std::shared_ptr<StreamState> stream_state;
  size_t max_stream_buffer = 0;
  std::atomic<bool> answered{false};
  std::function<void(HttpResponse)> local;  // In-process requests: where the answer goes.

  ~Shared() {
    if (answered) return;
    if (local) {
      local(ErrorResponse(500, "internal", "the server did not answer this request"));
      return;
    }
    PostTo(live, session, [](SessionBase& s) {
      s.Answer(ErrorResponse(500, "internal", "the server did not answer this request"));
    });
  }
};

Responder Responder::Local(std::function<void(HttpResponse)> deliver) {
  auto shared = std::make_shared<Shared>();
  shared->local = std::move(deliver);
  return Responder(std::move(shared));
}

void Responder::Send(HttpResponse response) const {
  if (shared_->answered.exchange(true)) return;
  if (shared_->local) return shared_->local(std::move(response));
  PostTo(shared_->live, shared_->session,
         [r = std::move(response)](SessionBase& s) mutable { s.Answer(std::move(r)); });
}

void Responder::SendLater(std::function<HttpResponse()> make) const {
  if (shared_->answered.exchange(true)) return;
  if (shared_->local) return shared_->local(make());
  PostTo(shared_->live, shared_->session, [make = std::move(make)](SessionBase& s) {
    HttpResponse r;
    try {
      r = make();
    } catch (const std::exception& e) {
      spdlog::error("exception rendering a response: {}", EscapeForTerminal(e.what()));
      r = ErrorResponse(500, "internal", "an internal error occurred; it has been logged");
    }
    s.Answer(std::move(r));
  });
}

std::shared_ptr<HttpStream> Responder::Stream(int status, std::string content_type) const {
  if (shared_->local || shared_->answered.exchange(true)) return nullptr;
  PostTo(shared_->live, shared_->session,
         [status, t = std::move(content_type)](SessionBase& s) mutable {
           s.StartStream(status, std::move(t));
         });
  return std::make_shared<StreamImpl>(shared_->live, shared_->session, shared_->stream_state,
                                      shared_->max_stream_buffer);
}

void Responder::Splice(SpliceTarget target) const {
  if (shared_->local) {
    return Send(ErrorResponse(502, "bad_gateway", "a call made in process cannot be proxied"));
  }
  if (shared_->answered.exchange(true)) return;
  PostTo(shared_->live, shared_->session,
         [t = std::move(target)](SessionBase& s) mutable { s.StartSplice(std::move(t)); });
}

void Responder::Join(const Responder& a, std::string head_a, const Responder& b, std::string head_b,
                     std::chrono::milliseconds idle, std::function<void()> done) {
  const bool a_local = a.shared_->local != nullptr, b_local = b.shared_->local != nullptr;
  const bool a_free = !a_local && !a.shared_->answered.exchange(true);
  const bool b_free = !b_local && !b.shared_->answered.exchange(true);
  if (!a_free || !b_free) {
    const char* why = a_local || b_local ? "a call made in process cannot be joined"
                                         : "the other side of this connection is gone";
    auto refuse = [why](const Responder& r, bool taken) {
      if (!taken) return r.Send(ErrorResponse(502, "bad_gateway", why));
      PostTo(r.shared_->live, r.shared_->session,
             [why](SessionBase& s) { s.Answer(ErrorResponse(502, "bad_gateway", why)); });
    };
    refuse(a, a_free);
    refuse(b, b_free);
    if (done) done();
    return;
  }
  PostTo(a.shared_->live, a.shared_->session,
         [h = std::move(head_a), other = b.shared_->session, idle, d = std::move(done)](
             SessionBase& s) mutable { s.StartJoin(std::move(h), other, idle, std::move(d)); });
  PostTo(b.shared_->live, b.shared_->session,
         [h = std::move(head_b), other = a.shared_->session, idle](SessionBase& s) mutable {
           s.StartJoin(std::move(h), other, idle, nullptr);
         });
}

bool Responder::Abandoned() const {
  std::shared_ptr<SessionBase> s = shared_->session.lock();
  return !s || s->closed;
}

struct HttpServer::Impl {
  HttpOptions options;
  HeadHandler on_head;
  // Declared first, destroyed last: everything below may hold objects bound to them. One
  // io_context per I/O thread, each connection on one of them for its whole life, so serving a
  // request never hands work from one thread to another (each hand-off is a wake-up, which on a
  // busy machine costs more than the work).
  std::vector<std::unique_ptr<net::io_context>> contexts;
  size_t next_context = 0;
  // The TLS context new connections are served with; ReloadTls swaps it. Each session holds the
  // one it began with for its whole life.
  std::shared_ptr<ssl::context> tls;  // Guarded by tls_mu after Start.
  std::mutex tls_mu;
  tcp::acceptor acceptor;
  net::steady_timer accept_pause;
  std::vector<std::thread> threads;
  std::shared_ptr<Liveness> live = std::make_shared<Liveness>();
  Counters counters;
  InFlight in_flight{options.limits};

  std::mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<SessionBase>> sessions;  // Guarded by mu.
  std::unordered_map<std::string, size_t> per_address;                  // Guarded by mu.
  uint64_t next_session = 1;                                            // Guarded by mu.
  bool started = false;
  bool stopped = false;

  Impl(HttpOptions o, HeadHandler h)
      : options(std::move(o)),
        on_head(std::move(h)),
        contexts(MakeContexts(std::max(1, options.threads))),
        acceptor(*contexts.front()),
        accept_pause(acceptor.get_executor()) {}

  static std::vector<std::unique_ptr<net::io_context>> MakeContexts(int n) {
    std::vector<std::unique_ptr<net::io_context>> out;
    for (int i = 0; i < n; ++i) out.push_back(std::make_unique<net::io_context>(1));
    return out;
  }
  void Accept();
  void OnAccept(beast::error_code ec, tcp::socket socket);
  void Refuse(tcp::socket socket, int status, std::string_view code, std::string message);
  void Forget(uint64_t id, const std::string& address);
};

namespace {

template <typename Stream>
class Session final : public SessionBase {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  Session(HttpServer::Impl* server, uint64_t id, std::string address, Stream stream)
      : server_(server),
        limits_(server->options.limits),
        id_(id),
        address_(std::move(address)),
        stream_(std::move(stream)),
        deadline_(stream_.get_executor()) {}

  net::any_io_executor executor() override { return stream_.get_executor(); }

  // The TLS context the stream was made with: kept as long as the session, whatever ReloadTls
  // does meanwhile.
  void HoldContext(std::shared_ptr<ssl::context> context) { context_ = std::move(context); }

  void Run() {
    if constexpr (kTls) {
      Arm(limits_.header_timeout);
      stream_.async_handshake(ssl::stream_base::server, [self = Self()](beast::error_code ec) {
        if (ec) return self->Close();
        self->client_names_ = PeerNames(self->stream_.native_handle());
        self->Idle();
      });
    } else {
      Idle();
    }
  }

  void Answer(HttpResponse response) override {
    if (!awaiting_) return;
    Settle();
    Write(std::move(response));
  }

  void StartStream(int status, std::string content_type) override {
    if (!awaiting_) return;
    Settle();
    streaming_ = true;
    stream_head_.emplace(static_cast<http::status>(status), 11);
    stream_head_->set(http::field::content_type, content_type);
    stream_head_->set(http::field::cache_control, "no-cache");
    stream_head_->keep_alive(keep_alive_);
    stream_head_->chunked(true);
    serializer_.emplace(*stream_head_);
    writing_ = true;
    Arm(limits_.write_timeout);
    http::async_write_header(stream_, *serializer_, [self = Self()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->Close();
      self->WriteNextChunk();
    });
  }

  void QueueChunk(const std::shared_ptr<StreamState>& from, std::string chunk) override {
    if (!OfCurrentStream(from)) return;
    chunks_.push_back(std::move(chunk));
    if (streaming_ && !writing_) WriteNextChunk();  // Else the head's write goes on to it.
  }

  void EndStream(const std::shared_ptr<StreamState>& from) override {
    if (!OfCurrentStream(from)) return;
    ending_ = true;
    if (streaming_ && !writing_) WriteNextChunk();
  }

  void StartSplice(SpliceTarget t) override {
    if (!awaiting_ || closed) return;
    Settle();
    keep_alive_ = false;
    splice_idle_ = t.idle_timeout;
    splice_done_ = std::move(t.done);
    splice_out_ = std::move(t.head);
    // What the client sent beyond the request (a WebSocket's first frames) goes after it.
    splice_out_ += beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    resolver_.emplace(stream_.get_executor());
    Arm(t.connect_timeout);
    resolver_->async_resolve(t.host, std::to_string(t.port),
                             [self = Self(), where = fmt::format("{}:{}", t.host, t.port)](
                                 beast::error_code ec, const tcp::resolver::results_type& found) {
                               if (ec) return self->SpliceFailed(where, ec);
                               self->peer_.emplace(self->stream_.get_executor());
                               net::async_connect(
                                   *self->peer_, found,
                                   [self, where](beast::error_code e, const tcp::endpoint&) {
                                     if (e) return self->SpliceFailed(where, e);
                                     self->splice_reached_ = true;
                                     self->SendHead();
                                   });
                             });
  }

  void StartJoin(std::string head, std::weak_ptr<SessionBase> other, std::chrono::milliseconds idle,
                 std::function<void()> done) override {
    join_other_ = std::move(other);
    join_done_ = std::move(done);
    if (!awaiting_ || closed) return Close();
    Settle();
    keep_alive_ = false;
    splice_idle_ = idle;
    // The head goes before what the other side may have sent already: its StartJoin can run
    // first, and its client can answer its head before this one is posted.
    join_queue_.emplace_front(std::move(head), nullptr);
    join_started_ = true;
    WriteJoined();
    Arm(join_ended_ ? std::chrono::milliseconds(2000) : idle);
    // What the client sent beyond the request goes first.
    std::string early = beast::buffers_to_string(buffer_.data());
    buffer_.consume(buffer_.size());
    if (early.empty()) return ReadJoined();
    SendJoined(std::move(early));
  }

  void JoinWrite(std::string data, std::function<void()> written) override {
    if (closed) return;
    join_queue_.emplace_back(std::move(data), std::move(written));
    if (join_started_) WriteJoined();  // Else StartJoin writes it after the head.
  }

  void JoinEnd() override {
    if (closed || join_ended_) return;
    join_ended_ = true;
    if (!join_started_) return;  // StartJoin sends what it owes, then stops.
    Arm(std::chrono::seconds(2));
    WriteJoined();
  }

  void Close() override {
    if (closed.exchange(true)) return;
    PostTo(server_->live, join_other_, [](SessionBase& o) { o.JoinEnd(); });
    if (auto done = std::exchange(join_done_, nullptr)) done();
    if (stream_state_) stream_state_->closed = true;
    Settle();
    beast::error_code ignored;
    Disarm();
    Lowest().close(ignored);
    if (peer_) peer_->close(ignored);
    if (resolver_) resolver_->cancel();
    if (auto done = std::exchange(splice_done_, nullptr)) done(splice_reached_);
    server_->Forget(id_, address_);
  }

 private:
  // The request in flight is answered or abandoned: it no longer counts against the limits.
  void Settle() {
    if (!awaiting_) return;
    awaiting_ = false;
    server_->in_flight.Give(caller_, reserved_, reserved_body_);
    reserved_body_ = 0;
  }

  // Whether `from` is the stream of the request in flight, started or about to start.
  bool OfCurrentStream(const std::shared_ptr<StreamState>& from) const {
    return !closed && from == stream_state_ && (streaming_ || awaiting_);
  }

  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  tcp::socket& Lowest() { return beast::get_lowest_layer(stream_); }

  // Starts the one deadline of whatever the session waits for now. When it passes, the socket's
  // operations are cancelled (they complete with operation_aborted) and timed_out_ tells why;
  // the socket stays open, so a 408 can still be written.
  void Arm(std::chrono::milliseconds after) {
    timed_out_ = false;
    const uint64_t generation = ++deadline_generation_;
    deadline_.expires_after(after);
    deadline_.async_wait([self = Self(), generation](beast::error_code ec) {
      if (ec || generation != self->deadline_generation_ || self->closed) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->Lowest().cancel(ignored);
      // A splice waits on its peer too: connecting, or for the peer's next bytes.
      if (self->resolver_) self->resolver_->cancel();
      if (self->peer_) self->peer_->cancel(ignored);
    });
  }
  void Disarm() {
    ++deadline_generation_;
    deadline_.cancel();
  }

  // Waits for the first byte of the next request (or uses what is buffered already).
  void Idle() {
    if (closed) return;
    if (buffer_.size() > 0) return ReadHead();
    if (buffer_.capacity() > 16 << 10) buffer_.shrink_to_fit();
    Arm(limits_.idle_timeout);
    stream_.async_read_some(buffer_.prepare(1024), [self = Self()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();  // Idle or gone: close quietly.
      self->buffer_.commit(n);
      self->ReadHead();
    });
  }

  void ReadHead() {
    head_parser_.emplace();
    head_parser_->header_limit(static_cast<std::uint32_t>(limits_.max_header_bytes));
    head_parser_->body_limit(boost::none);  // Decided once the head is read, not by the parser.
    Arm(limits_.header_timeout);
    http::async_read_header(stream_, buffer_, *head_parser_,
                            [self = Self()](beast::error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(beast::error_code ec) {
    keep_alive_ = true;
    if (ec) return OnReadError(ec, /*in_head=*/true);
    const auto& msg = head_parser_->get();
    keep_alive_ = msg.keep_alive();
    const bool body_follows = !head_parser_->is_done();
    if (msg.target().size() + msg.method_string().size() + 10 > limits_.max_request_line) {
      ++server_->counters.too_large;
      return Fail(414, "uri_too_long",
                  fmt::format("the request line is over {} bytes", limits_.max_request_line));
    }
    HttpRequest head;
    head.method = std::string(msg.method_string());
    head.target = std::string(msg.target());
    head.peer = address_;
    head.client_names = client_names_;
    head.has_body = body_follows;
    size_t count = 0;
    for (const auto& field : msg) {
      if (++count > limits_.max_header_count) {
        ++server_->counters.too_large;
        return Fail(431, "header_fields_too_large",
                    fmt::format("more than {} header fields", limits_.max_header_count));
      }
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (!IsValidUtf8(field.value())) {
        ++server_->counters.malformed;
        return Fail(400, "invalid_argument",
                    fmt::format("header '{}' is not valid UTF-8", EscapeForTerminal(name)));
      }
      // A field that must be single (RFC 9110 5.3; 9112 3.2 for Host) is refused when repeated:
      // "first wins" here and "last wins" in a proxy in front would be two requests in one.
      for (std::string_view single : {"authorization", "host", "content-type"}) {
        if (name != single || !head.Header(single)) continue;
        ++server_->counters.malformed;
        return Fail(400, "invalid_argument",
                    fmt::format("header '{}' appears more than once; send it once", name));
      }
      head.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    // RFC 9112 6.1: a request whose last transfer coding is not chunked has no knowable length
    // (400, and the connection closes); chunked under another coding we do not implement (501).
    // Read as "no body", the rest would be taken for the next request: a smuggled one.
    if (auto te = msg.find(http::field::transfer_encoding); te != msg.end()) {
      const std::string codings = EscapeForTerminal(std::string(te->value()));
      if (!msg.chunked()) {
        ++server_->counters.malformed;
        return Fail(400, "invalid_argument",
                    fmt::format("Transfer-Encoding '{}' does not end in chunked: the body's length "
                                "cannot be known; send it chunked or with Content-Length",
                                codings));
      }
      if (!beast::iequals(beast::string_view(te->value()), "chunked")) {
        ++server_->counters.malformed;
        return Fail(501, "not_implemented",
                    fmt::format("Transfer-Encoding '{}': only chunked is implemented", codings));
      }
    }
    auto target = ParseTarget(head.target);
    if (!target.ok()) {
      ++server_->counters.malformed;
      return Fail(400, "invalid_argument", target.status().message());
    }
    head.parsed = std::move(*target);
    HeadDecision decision;
    try {
      decision = server_->on_head(head);
    } catch (const std::exception& e) {
      decision.refuse = Barrier(head, e.what());
    } catch (...) {
      decision.refuse = Barrier(head, "unknown exception");
    }
    if (decision.refuse) {
      if (body_follows) keep_alive_ = false;  // The body is not read; the connection ends.
      return Write(std::move(*decision.refuse));
    }
    const size_t max_body = std::min(decision.max_body, limits_.max_body_bytes);
    const auto length = head_parser_->content_length();
    if (length && *length > max_body) {
      ++server_->counters.too_large;
      return Fail(413, "payload_too_large",
                  fmt::format("the body is {} bytes; the limit is {}", *length, max_body));
    }
    // Requests in flight and their bodies held in memory are bounded, in all and per caller,
    // before a byte of the body is read: a body counts at its announced length, a chunked one at
    // its limit.
    const size_t reserve = body_follows ? (length ? static_cast<size_t>(*length) : max_body) : 0;
    caller_ = decision.budget_key.empty() ? "address " + address_ : decision.budget_key;
    reserved_ = decision.reserved;
    switch (server_->in_flight.Take(caller_, reserved_, reserve)) {
      case InFlight::Verdict::kOk:
        break;
      case InFlight::Verdict::kPoolRequests:
        return Overloaded(body_follows, "too many requests in flight; retry");
      case InFlight::Verdict::kPoolBytes:
        return Overloaded(body_follows, "too many request bodies in flight; retry");
      case InFlight::Verdict::kShareRequests:
        ++server_->counters.refused_share;
        return Busy(429, "too_many_requests", body_follows,
                    fmt::format("this caller has {} requests in flight, its share; wait for "
                                "their answers, then retry",
                                server_->in_flight.Share(reserved_).requests));
      case InFlight::Verdict::kShareBytes:
        ++server_->counters.refused_share;
        return Busy(429, "too_many_requests", body_follows,
                    fmt::format("this caller's request bodies in flight would pass its share of "
                                "{} bytes; send those bodies or close their connections, then "
                                "retry",
                                server_->in_flight.Share(reserved_).bytes));
    }
    reserved_body_ = reserve;
    awaiting_ = true;
    max_body_ = max_body;
    handler_ = std::move(decision.handler);
    request_ = std::move(head);
    if (!body_follows) return Dispatch();
    const bool expect_continue = IEquals(msg[http::field::expect], "100-continue");
    body_parser_.emplace(std::move(*head_parser_));
    head_parser_.reset();
    body_parser_->body_limit(max_body);
    if (!expect_continue) return ReadBody();
    // The client waits for our word before it sends the body: give it now that the head passed.
    continue_.emplace(http::status::continue_, 11);
    Arm(limits_.write_timeout);
    http::async_write(stream_, *continue_, [self = Self()](beast::error_code e, size_t) {
      self->continue_.reset();
      if (e) return self->Close();
      self->ReadBody();
    });
  }

  void ReadBody() {
    body_started_ = std::chrono::steady_clock::now();
    body_read_ = 0;
    ReadMoreBody();
  }

  // Reads the body piece by piece, each piece under the deadline its progress allows: the whole
  // body within body_timeout, and after body_rate_grace at least min_body_rate bytes a second on
  // average. So a caller cannot hold its share of the body budget by sending nothing.
  void ReadMoreBody() {
    using std::chrono::milliseconds;
    milliseconds allowed = limits_.body_timeout;
    if (limits_.min_body_rate > 0) {
      allowed = std::min(allowed, limits_.body_rate_grace +
                                      milliseconds(body_read_ * 1000 / limits_.min_body_rate));
    }
    const auto left =
        std::chrono::ceil<milliseconds>(body_started_ + allowed - std::chrono::steady_clock::now());
    if (left <= milliseconds(0)) {
      timed_out_ = true;
      return OnReadError(beast::error::timeout, /*in_head=*/false);
    }
    Arm(left);
    http::async_read_some(stream_, buffer_, *body_parser_,
                          [self = Self()](beast::error_code ec, size_t n) {
                            if (ec) return self->OnReadError(ec, /*in_head=*/false);
                            self->body_read_ += n;
                            if (!self->body_parser_->is_done()) return self->ReadMoreBody();
                            self->Disarm();
                            self->request_.body = self->body_parser_->release().body();
                            self->body_parser_.reset();
                            self->Dispatch();
                          });
  }

  void Dispatch() {
    head_parser_.reset();
    Disarm();  // The handler may hold the request as long as it likes.
    auto shared = std::make_shared<Responder::Shared>();
    shared->live = server_->live;
    shared->session = weak_from_this();
    stream_state_ = std::make_shared<StreamState>();
    shared->stream_state = stream_state_;
    shared->max_stream_buffer = limits_.max_stream_buffer;
    Responder responder(std::move(shared));
    RequestHandler handler = std::move(handler_);
    HttpRequest what;  // For the log line, should the handler throw.
    what.method = request_.method;
    what.target = request_.target;
    try {
      handler(std::move(request_), responder);
    } catch (const std::exception& e) {
      responder.Send(Barrier(what, e.what()));
    } catch (...) {
      responder.Send(Barrier(what, "unknown exception"));
    }
  }

  // The answer to an exception that reached this layer: logged, counted, a documented 500.
  HttpResponse Barrier(const HttpRequest& req, std::string_view what) {
    ++server_->counters.exceptions;
    spdlog::error("exception serving {} {} from {}: {}", req.method, EscapeForTerminal(req.target),
                  address_, EscapeForTerminal(what));
    return ErrorResponse(500, "internal", "an internal error occurred; it has been logged");
  }

  void OnReadError(beast::error_code ec, bool in_head) {
    if (timed_out_) ec = beast::error::timeout;
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted ||
        ec == ssl::error::stream_truncated) {
      return Close();
    }
    keep_alive_ = false;
    if (ec == beast::error::timeout) {
      ++server_->counters.timeouts;
      std::string message;
      if (in_head) {
        message = fmt::format("the request head took over {} ms", limits_.header_timeout.count());
      } else if (std::chrono::steady_clock::now() - body_started_ < limits_.body_timeout) {
        message = fmt::format(
            "the body arrived slower than {} bytes a second ({} bytes in {} ms); send it faster",
            limits_.min_body_rate, body_read_,
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                  body_started_)
                .count());
      } else {
        message = fmt::format("the body took over {} ms", limits_.body_timeout.count());
      }
      return Fail(408, "request_timeout", message);
    }
    if (ec == http::error::header_limit) {
      ++server_->counters.too_large;
      // The parser has the request line once it knows the method; before that, without a line
      // end in what was read, the request line alone is over the limit. Else a header field is.
      const auto data = buffer_.data();
      const std::string_view seen(static_cast<const char*>(data.data()), data.size());
      if (head_parser_->get().method_string().empty() &&
          seen.find("\r\n") == std::string_view::npos) {
        return Fail(414, "uri_too_long",
                    fmt::format("the request line is over {} bytes", limits_.max_header_bytes));
      }
      return Fail(431, "header_fields_too_large",
                  fmt::format("the request head is over {} bytes", limits_.max_header_bytes));
    }
    if (ec == http::error::body_limit) {
      ++server_->counters.too_large;
      return Fail(413, "payload_too_large",
                  fmt::format("the body is over the limit of {} bytes", max_body_));
    }
    ++server_->counters.malformed;
    Fail(400, "bad_request", fmt::format("malformed HTTP request: {}", ec.message()));
  }

  // Refuses a request the server has no room for now: 503 with Retry-After. A body it will not
  // read ends the connection.
  void Overloaded(bool body_follows, std::string_view message) {
    ++server_->counters.refused_overloaded;
    Busy(503, "overloaded", body_follows, message);
  }
  // The same with another status (429 for a caller over its own share).
  void Busy(int status, std::string_view code, bool body_follows, std::string_view message) {
    if (body_follows) keep_alive_ = false;
    HttpResponse busy = ErrorResponse(status, code, message);
    busy.headers.emplace_back("Retry-After", "1");
    Write(std::move(busy));
  }

  // The splice's peer could not be reached: the client hears 502, as nothing went to it yet.
  void SpliceFailed(const std::string& where, beast::error_code ec) {
    if (closed) return;
    const bool late = timed_out_;
    timed_out_ = false;
    Write(ErrorResponse(
        502, "bad_gateway",
        fmt::format("cannot reach {}: {}", where, late ? std::string("timed out") : ec.message())));
  }

  void SendHead() {
    net::async_write(*peer_, net::buffer(splice_out_),
                     [self = Self()](beast::error_code ec, size_t) {
                       if (ec) return self->Close();
                       self->splice_out_.clear();
                       self->splice_out_.shrink_to_fit();
                       self->Arm(self->splice_idle_);
                       self->PumpUp();
                       self->PumpDown();
                     });
  }

  // Client to peer. The client's end of sending shuts the peer's receiving side, and the answer
  // still flows back.
  void PumpUp() {
    stream_.async_read_some(net::buffer(up_), [self = Self()](beast::error_code ec, size_t n) {
      if (ec) {
        if (ec != net::error::eof || self->closed) return self->Close();
        beast::error_code ignored;
        self->peer_->shutdown(tcp::socket::shutdown_send, ignored);
        return;
      }
      self->Arm(self->splice_idle_);
      net::async_write(*self->peer_, net::buffer(self->up_.data(), n),
                       [self](beast::error_code e, size_t) {
                         if (e) return self->Close();
                         self->PumpUp();
                       });
    });
  }

  // A joined pair: reads from this client go to the other session, one at a time.
  void ReadJoined() {
    if (closed) return;
    stream_.async_read_some(net::buffer(up_), [self = Self()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();
      self->Arm(self->join_ended_ ? std::chrono::milliseconds(2000) : self->splice_idle_);
      if (self->join_ended_) return self->ReadJoined();  // Nobody to hear it: dropped.
      self->SendJoined(std::string(self->up_.data(), n));
    });
  }

  void SendJoined(std::string data) {
    std::shared_ptr<SessionBase> other = join_other_.lock();
    if (!other || other->closed) return Close();
    std::weak_ptr<SessionBase> me = Self();
    PostTo(server_->live, join_other_,
           [data = std::move(data), me, live = server_->live](SessionBase& o) mutable {
             o.JoinWrite(std::move(data), [me, live] {
               PostTo(live, me, [](SessionBase& s) { static_cast<Session&>(s).ReadJoined(); });
             });
           });
  }

  // Writes what the other session sent, in order; once it ended and all is written, stops
  // sending and waits (up to 2 s) for the client to close.
  void WriteJoined() {
    if (closed || join_writing_) return;
    if (join_queue_.empty()) {
      if (join_ended_ && !join_shut_) {
        join_shut_ = true;
        beast::error_code ignored;
        Lowest().shutdown(tcp::socket::shutdown_send, ignored);
      }
      return;
    }
    join_writing_ = true;
    net::async_write(stream_, net::buffer(join_queue_.front().first),
                     [self = Self()](beast::error_code ec, size_t) {
                       self->join_writing_ = false;
                       if (ec) return self->Close();
                       auto written = std::move(self->join_queue_.front().second);
                       self->join_queue_.pop_front();
                       if (!self->join_ended_) self->Arm(self->splice_idle_);
                       if (written) written();
                       self->WriteJoined();
                     });
  }

  // Peer to client. Once the peer is done, so is the connection.
  void PumpDown() {
    peer_->async_read_some(net::buffer(down_), [self = Self()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();
      self->Arm(self->splice_idle_);
      net::async_write(self->stream_, net::buffer(self->down_.data(), n),
                       [self](beast::error_code e, size_t) {
                         if (e) return self->Close();
                         self->PumpDown();
                       });
    });
  }

  // Answers an error of this layer and ends the connection.
  void Fail(int status, std::string_view code, std::string message) {
    Settle();
    keep_alive_ = false;
    Write(ErrorResponse(status, code, message));
  }

  void Write(HttpResponse r) {
    if (closed) return;
    response_.emplace(static_cast<http::status>(r.status), 11);
    response_->set(http::field::content_type, r.content_type);
    for (auto& [k, v] : r.headers) response_->set(k, v);
    response_->body() = std::move(r.body);
    response_->keep_alive(keep_alive_);
    response_->prepare_payload();
    Arm(limits_.write_timeout);
    http::async_write(stream_, *response_, [self = Self()](beast::error_code ec, size_t) {
      self->response_.reset();
      if (ec) {
        if (self->timed_out_) ++self->server_->counters.timeouts;
        return self->Close();
      }
      self->AfterResponse();
    });
  }

  void WriteNextChunk() {
    if (closed) return;
    if (chunks_.empty()) {
      if (!ending_) return;
      writing_ = true;
      Arm(limits_.write_timeout);
      net::async_write(stream_, http::make_chunk_last(),
                       [self = Self()](beast::error_code ec, size_t) {
                         self->writing_ = false;
                         if (ec) return self->Close();
                         self->streaming_ = self->ending_ = false;
                         self->serializer_.reset();
                         self->stream_head_.reset();
                         self->AfterResponse();
                       });
      return;
    }
    writing_ = true;
    Arm(limits_.write_timeout);
    net::async_write(stream_, http::make_chunk(net::buffer(chunks_.front())),
                     [self = Self()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       self->stream_state_->buffered -= self->chunks_.front().size();
                       self->chunks_.pop_front();
                       if (ec) {
                         if (self->timed_out_) ++self->server_->counters.timeouts;
                         return self->Close();
                       }
                       self->WriteNextChunk();
                     });
  }

  void AfterResponse() {
    if (keep_alive_) return Idle();
    Linger();
  }

  // Ends the connection after an answer that left the request's body unread: stop sending, then
  // read and drop what the client still sends for a moment, so it reads our answer rather than
  // a reset.
  void Linger() {
    if constexpr (kTls) {
      Arm(std::chrono::seconds(2));
      stream_.async_shutdown([self = Self()](beast::error_code) { self->Close(); });
    } else {
      beast::error_code ignored;
      Lowest().shutdown(tcp::socket::shutdown_send, ignored);
      Arm(std::chrono::seconds(2));
      Drain();
    }
  }

  void Drain() {
    if (lingered_ > (8u << 20)) return Close();
    stream_.async_read_some(net::buffer(scratch_), [self = Self()](beast::error_code ec, size_t n) {
      if (ec) return self->Close();
      self->lingered_ += n;
      self->Drain();
    });
  }

  HttpServer::Impl* server_;
  const HttpLimits& limits_;
  uint64_t id_;
  std::string address_;
  std::shared_ptr<ssl::context> context_;  // TLS only; outlives the stream made with it.
  Stream stream_;
  net::steady_timer deadline_;
  uint64_t deadline_generation_ = 0;
  bool timed_out_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> head_parser_;
  std::optional<http::request_parser<http::string_body>> body_parser_;
  std::optional<http::response<http::empty_body>> continue_;
  std::optional<http::response<http::string_body>> response_;
  bool keep_alive_ = true;
  bool awaiting_ = false;  // A handler holds the request and owes an answer.
  size_t max_body_ = 0;
  size_t reserved_body_ = 0;  // Counted in the server's InFlight while awaiting_,
  std::string caller_;        // against this caller's share
  bool reserved_ = false;     // and this pool.
  std::chrono::steady_clock::time_point body_started_;
  size_t body_read_ = 0;
  RequestHandler handler_;
  HttpRequest request_;
  std::vector<std::string> client_names_;  // Of the client's verified certificate, if any.
  // A chunked response in progress.
  bool streaming_ = false, writing_ = false, ending_ = false;
  std::shared_ptr<StreamState> stream_state_;
  std::optional<http::response<http::empty_body>> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::deque<std::string> chunks_;
  std::array<char, 4096> scratch_{};
  size_t lingered_ = 0;
  // A splice (StartSplice): its peer, and a buffer each way.
  std::optional<tcp::resolver> resolver_;
  std::optional<tcp::socket> peer_;
  std::string splice_out_;
  std::chrono::milliseconds splice_idle_{0};
  std::function<void(bool)> splice_done_;
  bool splice_reached_ = false;
  // A joined pair (StartJoin): the other session, what it sent that is not written yet (with
  // whom to tell once it is), and whether it ended.
  std::weak_ptr<SessionBase> join_other_;
  std::function<void()> join_done_;
  std::deque<std::pair<std::string, std::function<void()>>> join_queue_;
  bool join_started_ = false, join_writing_ = false, join_ended_ = false, join_shut_ = false;
  std::array<char, 16 << 10> up_{}, down_{};
};

}  // namespace

void HttpServer::Impl::Accept() {
  net::io_context& home = *contexts[next_context++ % contexts.size()];
  acceptor.async_accept(
      home, [this](beast::error_code ec, tcp::socket socket) { OnAccept(ec, std::move(socket)); });
}

void HttpServer::Impl::OnAccept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {
    // Out of descriptors (EMFILE, ENFILE) or a connection that died in the queue: pause a moment
    // rather than spin, then accept again.
    spdlog::warn("accepting a connection failed: {}", ec.message());
    accept_pause.expires_after(std::chrono::milliseconds(50));
    accept_pause.async_wait([this](beast::error_code e) {
      if (!e) Accept();
    });
    return;
  }
  ++counters.accepted;
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  const auto endpoint = socket.remote_endpoint(ignored);
  const std::string address = ignored ? "unknown" : endpoint.address().to_string();
  uint64_t id = 0;
  bool total = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (sessions.size() >= options.limits.max_connections) {
      ++counters.refused_total;
      total = true;
    } else if (per_address[address] >= options.limits.max_connections_per_address) {
      ++counters.refused_address;
    } else {
      id = next_session++;
      ++per_address[address];
    }
  }
  if (id == 0) {
    Refuse(std::move(socket), total ? 503 : 429, total ? "overloaded" : "too_many_connections",
           total ? fmt::format("the server holds its limit of {} connections",
                               options.limits.max_connections)
                 : fmt::format("{} holds the limit of {} connections per client address", address,
                               options.limits.max_connections_per_address));
    return Accept();
  }
  // Registered before it runs, so the count never trails what the session already served.
  std::shared_ptr<SessionBase> session;
  std::function<void()> run;
  std::shared_ptr<ssl::context> context;
  {
    std::lock_guard<std::mutex> lock(tls_mu);
    context = tls;
  }
  if (context) {
    auto s = std::make_shared<Session<beast::ssl_stream<tcp::socket>>>(
        this, id, address, beast::ssl_stream<tcp::socket>(std::move(socket), *context));
    s->HoldContext(std::move(context));
    session = s;
    run = [s] { s->Run(); };
  } else {
    auto s = std::make_shared<Session<tcp::socket>>(this, id, address, std::move(socket));
    session = s;
    run = [s] { s->Run(); };
  }
  const net::any_io_executor executor = session->executor();
  {
    std::lock_guard<std::mutex> lock(mu);
    sessions[id] = std::move(session);
    ++counters.open;
  }
  net::dispatch(executor, std::move(run));
  Accept();
}

void HttpServer::Impl::Refuse(tcp::socket socket, int status, std::string_view code,
                              std::string message) {
  spdlog::warn("refused a connection: {}", message);
  {
    std::lock_guard<std::mutex> lock(tls_mu);
    if (tls) return;  // No plain-text answer on a TLS port; closing says enough.
  }
  const HttpResponse r = ErrorResponse(status, code, message);
  auto text = std::make_shared<std::string>(fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      status, status == 429 ? "Too Many Requests" : "Service Unavailable", r.body.size(), r.body));
  auto sock = std::make_shared<tcp::socket>(std::move(socket));
  net::async_write(*sock, net::buffer(*text), [sock, text](beast::error_code, size_t) {
    beast::error_code ignored;
    sock->shutdown(tcp::socket::shutdown_both, ignored);
    sock->close(ignored);
  });
}

void HttpServer::Impl::Forget(uint64_t id, const std::string& address) {
  std::shared_ptr<SessionBase> keep;  // Released after the lock: it may be the last reference.
  std::lock_guard<std::mutex> lock(mu);
  auto it = sessions.find(id);
  if (it == sessions.end()) return;
  keep = std::move(it->second);
  sessions.erase(it);
  --counters.open;
  if (auto a = per_address.find(address); a != per_address.end() && --a->second == 0) {
    per_address.erase(a);
  }
}

HttpServer::HttpServer(HttpOptions options, HeadHandler on_head)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(on_head))) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Bind() {
  Impl& s = *impl_;
  const std::string where = fmt::format("{}:{}", s.options.host, s.options.port);
  if (!s.options.tls_cert_file.empty() || !s.options.tls_key_file.empty() ||
      !s.options.client_ca_file.empty()) {
    if (s.options.tls_cert_file.empty() || s.options.tls_key_file.empty()) {
      return Status::InvalidArgument("TLS needs both --tls-cert and --tls-key");
    }
    TESSERA_ASSIGN_OR_RETURN(s.tls, MakeTlsContext(s.options));
  }
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(s.options.host, ec);
  if (ec) {
    return Status::InvalidArgument(
        fmt::format("cannot listen on {}: '{}' is not an IP address", where, s.options.host));
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(s.options.port));
  s.acceptor.open(endpoint.protocol(), ec);
  // SO_REUSEADDR only lets a restarted server take its port while old connections linger in
  // TIME_WAIT; unlike SO_REUSEPORT it never lets two servers share a port.
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    if (ec == net::error::address_in_use) {
      return Status::Unavailable(fmt::format(
          "cannot listen on {}: the address is in use (is another server running?)", where));
    }
    return Status::Unavailable(fmt::format("cannot listen on {}: {}", where, ec.message()));
  }
  s.options.port = s.acceptor.local_endpoint().port();
  return Status::Ok();
}

int HttpServer::port() const { return impl_->options.port; }

bool HttpServer::tls() const {
  std::lock_guard<std::mutex> lock(impl_->tls_mu);
  return impl_->tls != nullptr;
}

Status HttpServer::ReloadTls() {
  Impl& s = *impl_;
  if (!tls()) return Status::FailedPrecondition("this server does not serve TLS");
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<ssl::context> fresh, MakeTlsContext(s.options));
  std::lock_guard<std::mutex> lock(s.tls_mu);
  s.tls = std::move(fresh);
  return Status::Ok();
}

void HttpServer::Start() {
  Impl& s = *impl_;
  if (s.started) return;
  s.started = true;
  net::dispatch(s.acceptor.get_executor(), [&s] { s.Accept(); });
  for (int i = 0; i < std::max(1, s.options.threads); ++i) {
    net::io_context* ctx = s.contexts[static_cast<size_t>(i)].get();
    s.threads.emplace_back([ctx] {
      // Runs until Stop, even while it has no connection.
      auto guard = net::make_work_guard(*ctx);
      ctx->run();
    });
  }
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  if (s.started) {
    net::dispatch(s.acceptor.get_executor(), [&s] {
      beast::error_code ignored;
      s.acceptor.close(ignored);
      s.accept_pause.cancel();
    });
    // Requests in flight get a moment to be answered and written.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (s.in_flight.Total().requests > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  {
    std::lock_guard<std::mutex> lock(s.live->mu);
    s.live->alive = false;
  }
  for (auto& ctx : s.contexts) ctx->stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  std::unordered_map<uint64_t, std::shared_ptr<SessionBase>> sessions;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    sessions.swap(s.sessions);
  }
  sessions.clear();  // While the io_context still exists.
}

HttpStats HttpServer::Stats() const {
  const Counters& c = impl_->counters;
  HttpStats h;
  h.connections_open = c.open;
  h.connections_accepted = c.accepted;
  h.refused_total_limit = c.refused_total;
  h.refused_address_limit = c.refused_address;
  h.refused_overloaded = c.refused_overloaded;
  h.timeouts = c.timeouts;
  h.too_large = c.too_large;
  h.malformed = c.malformed;
  h.handler_exceptions = c.exceptions;
  const InFlight::Held held = impl_->in_flight.Total();
  h.in_flight = static_cast<int64_t>(held.requests);
  h.body_bytes_in_flight = static_cast<int64_t>(held.bytes);
  h.refused_share = c.refused_share;
  return h;
}

}  // namespace tessera::api
