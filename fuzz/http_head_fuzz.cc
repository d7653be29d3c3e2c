// Fuzzes the real HTTP server (src/api/http_server.cc) with what a client sends: each input is
// written as it is to a fresh loopback connection of one HttpServer that accepts every head and
// answers 200, then the client stops sending and reads until the server closes. The promises:
//   - the server survives every input and ends every connection (nothing hangs);
//   - what it sends is a sequence of well-formed HTTP/1.1 answers, each with a Content-Length: a
//     200 for every request it dispatched, in order, and at most one error, last, with the API's
//     error body ({"error": {"code", "message"}});
//   - no request is smuggled: a request the handler sees has no two Authorization, Host or
//     Content-Type fields, and no Transfer-Encoding other than one `chunked` (nor beside a
//     Content-Length). When the first head carries any of those, the connection's answer is a
//     refusal and nothing at all was handed to the application; a first request with one
//     Content-Length N is dispatched with N bytes of body;
//   - no request stays counted in flight, and no exception reaches the barrier.
// The server is started once; inputs run one connection at a time, so counters taken before and
// after a connection belong to it alone.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http.h"
#include "common/json.h"
#include "common/text.h"
#include "fuzz/fuzz_util.h"

namespace tessera::fuzz {
namespace {

constexpr size_t kMaxBody = 1024;

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// What the application sees of every request, wherever it came in a connection: checked on the
// server's I/O thread, where a broken promise aborts with the input that caused it.
void CheckDispatched(const api::HttpRequest& req) {
  Check(!req.method.empty(), "a request without a method was dispatched");
  int te = 0, cl = 0;
  for (const auto& [name, value] : req.headers) {
    for (const char c : name) {
      Check(!std::isupper(static_cast<unsigned char>(c)), "a header name not in lower case");
    }
    Check(IsValidUtf8(value), "a header value that is not UTF-8 was dispatched");
    if (name == "transfer-encoding") {
      ++te;
      Check(IEquals(Trim(value), "chunked"), "a request with a coding besides chunked went on");
    }
    if (name == "content-length") ++cl;
  }
  Check(te <= 1 && (te == 0 || cl == 0), "a request of two lengths was dispatched");
  for (const std::string_view single : {"authorization", "host", "content-type"}) {
    int n = 0;
    for (const auto& h : req.headers) n += h.first == single;
    Check(n <= 1, "a request with a single field given twice was dispatched");
  }
  Check(req.body.size() <= kMaxBody, "a body over the limit was dispatched");
}

// One server for the whole run, never destroyed: its threads outlive every input.
struct Harness {
  std::atomic<int64_t> heads{0};
  std::atomic<int64_t> dispatched{0};
  std::unique_ptr<api::HttpServer> server;

  Harness() {
    spdlog::set_level(spdlog::level::off);
    api::HttpOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.threads = 1;
    o.limits.max_request_line = 512;
    o.limits.max_header_bytes = 1024;
    o.limits.max_header_count = 16;
    o.limits.max_body_bytes = kMaxBody;
    o.limits.idle_timeout = std::chrono::milliseconds(200);
    o.limits.header_timeout = std::chrono::milliseconds(200);
    o.limits.body_timeout = std::chrono::milliseconds(200);
    o.limits.write_timeout = std::chrono::milliseconds(1000);
    server = std::make_unique<api::HttpServer>(o, [this](const api::HttpRequest&) {
      ++heads;
      api::HeadDecision d;
      d.max_body = kMaxBody;
      d.handler = [this](api::HttpRequest&& req, api::Responder r) {
        CheckDispatched(req);
        api::HttpResponse out;
        out.content_type = "text/plain";
        out.body = "n=" + std::to_string(++dispatched) + " body=" + std::to_string(req.body.size());
        r.Send(std::move(out));
      };
      return d;
    });
    Check(server->Bind().ok(), "the server cannot listen on loopback");
    server->Start();
  }
};

Harness& TheHarness() {
  static Harness* h = new Harness();
  return *h;
}

// Connects to the server on loopback. A signal (libFuzzer's timer) may interrupt the call; the
// connection then completes on its own.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  Check(fd >= 0, "no socket");
  timeval tv{5, 0};  // Far above the server's own timeouts: a wait this long is a hang.
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    Check(errno == EINTR, "the server no longer accepts connections");
    pollfd p{fd, POLLOUT, 0};
    while (poll(&p, 1, 5000) < 0) Check(errno == EINTR, "poll failed");
    int error = 0;
    socklen_t len = sizeof error;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
    Check(error == 0, "the server no longer accepts connections");
  }
  return fd;
}

// Writes `input` to a new connection, stops sending, and returns all the server sent until it
// closed. Calls interrupted by a signal are retried: a socket with a timeout is not restarted.
std::string Exchange(int port, std::string_view input) {
  const int fd = Connect(port);
  for (size_t sent = 0; sent < input.size();) {
    const ssize_t n = send(fd, input.data() + sent, input.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // The server closed early; what it answered is still there to read.
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      answer.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    Check(errno != EAGAIN, "the server neither answered nor closed within 5 s");
    Check(errno != ECONNRESET, "the server reset the connection: its answer may be lost");
    Check(false, "reading the answer failed");
  }
  close(fd);
  return answer;
}

struct Answer {
  int status = 0;
  std::string body;
};

// Splits what the server sent into answers, checking each is well-formed.
std::vector<Answer> ParseAnswers(std::string_view text) {
  std::vector<Answer> out;
  while (!text.empty()) {
    Check(text.size() >= 13 && text.substr(0, 9) == "HTTP/1.1 " && IsDigit(text[9]) &&
              IsDigit(text[10]) && IsDigit(text[11]) && text[12] == ' ',
          "an answer does not begin with HTTP/1.1 and a status");
    Answer a;
    a.status = std::stoi(std::string(text.substr(9, 3)));
    const size_t end = text.find("\r\n\r\n");
    Check(end != std::string_view::npos, "an answer's head is cut short");
    std::string head(text.substr(0, end + 2));
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    text.remove_prefix(end + 4);
    if (a.status >= 200) {
      const size_t at = head.find("\r\ncontent-length: ");
      Check(at != std::string::npos, "an answer without a Content-Length");
      const size_t length = std::stoul(head.substr(at + 18));
      Check(length <= text.size(), "an answer's body is cut short");
      a.body = std::string(text.substr(0, length));
      text.remove_prefix(length);
    }
    out.push_back(std::move(a));
  }
  return out;
}

// What the first head of the input says that makes it ambiguous, read as a proxy in front would:
// lines up to the first blank one, each "name: value".
struct FirstHead {
  bool ambiguous = false;                  // Two lengths, a coding besides chunked, a field twice.
  std::optional<uint64_t> content_length;  // One, in digits, and no Transfer-Encoding.
};

FirstHead ReadFirstHead(std::string_view input) {
  FirstHead h;
  const size_t end = input.find("\r\n\r\n");
  if (end == std::string_view::npos) return h;
  std::string_view rest = input.substr(0, end + 2);
  rest.remove_prefix(std::min(rest.size(), rest.find("\r\n") + 2));  // The request line.
  int te = 0, singles[3] = {0, 0, 0};
  std::vector<std::string_view> lengths;
  bool te_chunked = false;
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon), value = Trim(line.substr(colon + 1));
    if (IEquals(name, "transfer-encoding")) te_chunked = ++te == 1 && IEquals(value, "chunked");
    if (IEquals(name, "content-length")) lengths.push_back(value);
    singles[0] += IEquals(name, "authorization");
    singles[1] += IEquals(name, "host");
    singles[2] += IEquals(name, "content-type");
  }
  // Lengths in plain digits that differ; "5, 5" and "05" are one length, as RFC 9110 allows.
  std::optional<uint64_t> length;
  bool differ = false;
  for (const std::string_view v : lengths) {
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string_view::npos) {
      length.reset();
      break;
    }
    const uint64_t n = std::stoull(std::string(v));
    differ |= length && *length != n;
    length = n;
  }
  h.ambiguous = (te > 0 && !te_chunked) || (te > 0 && !lengths.empty()) || differ ||
                singles[0] > 1 || singles[1] > 1 || singles[2] > 1;
  if (te == 0 && lengths.size() == 1 && length) h.content_length = length;
  return h;
}

void CheckErrorBody(const Answer& a) {
  auto j = ParseJson(a.body, "answer");
  const bool ok = j.ok() && j->is_object() && j->contains("error") && (*j)["error"].is_object() &&
                  (*j)["error"].contains("code") && (*j)["error"]["code"].is_string() &&
                  (*j)["error"].contains("message") && (*j)["error"]["message"].is_string();
  Check(ok, "an error answer without the API's error body");
}

// The answers to one connection: a 200 for each request dispatched on it, in order (`before` were
// dispatched earlier), 100 Continue between them, and at most one error, last.
void CheckAnswers(const std::vector<Answer>& answers, int64_t before, int64_t dispatched) {
  int64_t ok = 0;
  for (size_t i = 0; i < answers.size(); ++i) {
    const Answer& a = answers[i];
    if (a.status == 100) continue;
    if (a.status == 200) {
      ++ok;
      Check(a.body.rfind("n=" + std::to_string(before + ok) + " ", 0) == 0,
            "a 200 that answers no dispatched request, or out of order");
      continue;
    }
    Check(i + 1 == answers.size(), "the connection went on after an error");
    Check(a.status == 400 || a.status == 408 || a.status == 413 || a.status == 414 ||
              a.status == 431 || a.status == 501,
          "an error this server does not answer");
    CheckErrorBody(a);
  }
  Check(ok == dispatched, "a dispatched request got no 200");
}

// An ambiguous first head is refused before the application sees it; a plain Content-Length is
// the first request's body.
void CheckFirstHead(const FirstHead& first, const std::vector<Answer>& answers, int64_t heads,
                    int64_t dispatched) {
  if (first.ambiguous) {
    Check(heads == 0 && dispatched == 0, "an ambiguous first head reached the application");
    Check(!answers.empty() && answers.back().status >= 400, "an ambiguous head was not refused");
  }
  for (const Answer& a : answers) {
    if (a.status == 100) continue;
    if (first.content_length && a.status == 200) {
      Check(a.body.find(" body=" + std::to_string(*first.content_length)) != std::string::npos,
            "the first request's body is not its Content-Length");
    }
    break;
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::fuzz;
  Harness& h = TheHarness();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const int64_t heads = h.heads, dispatched = h.dispatched;
  const std::vector<Answer> answers = ParseAnswers(Exchange(h.server->port(), input));
  const int64_t new_heads = h.heads - heads, new_dispatched = h.dispatched - dispatched;
  CheckAnswers(answers, dispatched, new_dispatched);
  Check(new_heads >= new_dispatched, "a request was dispatched without its head");
  CheckFirstHead(ReadFirstHead(input), answers, new_heads, new_dispatched);
  const tessera::api::HttpStats stats = h.server->Stats();
  Check(stats.in_flight == 0, "a request stays counted in flight after its connection ended");
  // The previous connection may still be closing on the server's thread; more are left behind.
  Check(stats.connections_open <= 2, "connections stay open after their clients left");
  Check(stats.handler_exceptions == 0, "an exception reached the barrier");
  return 0;
}
