// The HTTP layer on a real loopback socket: limits, time-outs, the head stage, the barrier, long
// polls, streams and TLS, driven byte by byte through raw connections.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/http.h"
#include "testing/raw_http.h"
#include "testing/testing.h"

namespace tessera::api {
namespace {

using namespace std::chrono_literals;
using testing::HttpRequestText;
using testing::RawConnection;

// An error answer's code, or "" when the body is not the documented error body.
std::string ErrorCode(const testing::RawResponse& r) {
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("error")) return "";
  return j["error"].value("code", "");
}

class HttpServerTest : public ::testing::Test {
 protected:
  // Starts a server whose requests are answered by `handler` (by default: 200 with the path and
  // the body's size), after `head` decides (by default: accept, 1 MiB).
  void Start(HttpLimits limits = {}, RequestHandler handler = nullptr,
             std::function<HeadDecision(const HttpRequest&)> head = nullptr) {
    if (!handler) {
      handler = [](HttpRequest&& req, Responder r) {
        HttpResponse out;
        out.body = nlohmann::json{{"path", req.parsed.path}, {"bytes", req.body.size()}}.dump();
        r.Send(std::move(out));
      };
    }
    HttpOptions options;
    options.port = 0;
    options.limits = limits;
    options.tls_cert_file = tls_cert_;
    options.tls_key_file = tls_key_;
    server_ = std::make_unique<HttpServer>(options, [handler, head](const HttpRequest& req) {
      HeadDecision d = head ? head(req) : HeadDecision{};
      if (!d.refuse && !d.handler) {
        d.handler = handler;
        if (d.max_body == 0) d.max_body = SIZE_MAX;
      }
      return d;
    });
    ASSERT_TRUE(server_->Bind().ok());
    server_->Start();
  }

  std::unique_ptr<RawConnection> Connect(const std::string& source = "") {
    return RawConnection::Open(server_->port(), source);
  }

  // One request on a new connection, answered within a second.
  std::optional<testing::RawResponse> Once(const std::string& text) {
    auto c = Connect();
    if (!c || !c->Send(text)) return std::nullopt;
    return c->Read(2s);
  }

  // A handler that holds every request's Responder (a long poll), to be answered by Answer.
  RequestHandler Hold() {
    return [this](HttpRequest&&, Responder r) {
      std::lock_guard<std::mutex> lock(held_mu_);
      held_.push_back(r);
    };
  }
  // Answers every held request with `body`, from another thread.
  void AnswerHeld(const std::string& body = "{}") {
    std::thread([&] {
      std::lock_guard<std::mutex> lock(held_mu_);
      for (const Responder& r : held_) r.Send({200, "application/json", body, {}});
      held_.clear();
    }).join();
  }

  std::string tls_cert_, tls_key_;
  std::unique_ptr<HttpServer> server_;
  std::mutex held_mu_;
  std::vector<Responder> held_;
};

TEST_F(HttpServerTest, AnswersAndKeepsTheConnectionAlive) {
  Start();
  auto c = Connect();
  ASSERT_TRUE(c);
  for (const char* path : {"/a", "/b/c"}) {
    ASSERT_TRUE(c->Send(HttpRequestText("GET", path)));
    auto r = c->Read(2s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(nlohmann::json::parse(r->body)["path"], path);
  }
  // Two requests in one write are answered in order.
  ASSERT_TRUE(c->Send(HttpRequestText("GET", "/one") + HttpRequestText("POST", "/two", "", "{}")));
  auto one = c->Read(2s), two = c->Read(2s);
  ASSERT_TRUE(one && two);
  EXPECT_EQ(nlohmann::json::parse(one->body)["path"], "/one");
  EXPECT_EQ(nlohmann::json::parse(two->body)["bytes"], 2);
  EXPECT_EQ(server_->Stats().connections_open, 1);
}

TEST_F(HttpServerTest, TheHeadIsDecidedBeforeAnyOfTheBodyIsRead) {
  Start({}, nullptr, [](const HttpRequest& head) {
    HeadDecision d;
    if (!head.Header("authorization")) d.refuse = ErrorResponse(401, "unauthenticated", "no");
    return d;
  });
  // The client announces 4 MiB and waits for our word; it gets the refusal, not a 100.
  auto c = Connect();
  ASSERT_TRUE(c->Send(
      "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4194304\r\nExpect: 100-continue\r\n\r\n"));
  auto r = c->Read(1s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->headers["connection"], "close");
  // Without Expect: the answer comes as soon as the head is read, body or not.
  auto d = Connect();
  ASSERT_TRUE(d->Send("POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 4194304\r\n\r\n"));
  auto r2 = d->Read(1s);
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 401);
  // With a token, an announced body gets 100 Continue and then its answer.
  auto e = Connect();
  ASSERT_TRUE(
      e->Send("POST /x HTTP/1.1\r\nHost: h\r\nAuthorization: x\r\nContent-Length: 2\r\n"
              "Expect: 100-continue\r\n\r\n"));
  auto cont = e->Read(1s);  // Read skips the interim 100 only once the body is there.
  EXPECT_FALSE(cont) << "no final answer before the body is sent";
  ASSERT_TRUE(e->Send("{}"));
  auto ok = e->Read(1s);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpServerTest, OversizedRequestsGetTheDocumentedErrors) {
  HttpLimits limits;
  limits.max_body_bytes = 1000;
  Start(limits);
  struct Case {
    std::string name, text;
    int status;
    std::string code;
  };
  const std::string many_headers = [] {
    std::string h;
    for (int i = 0; i < 70; ++i) h += "X-H" + std::to_string(i) + ": v\r\n";
    return h;
  }();
  const std::vector<Case> cases = {
      {"request line", "GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n", 414,
       "uri_too_long"},
      {"request line over the head limit",
       "GET /" + std::string(20000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n", 414, "uri_too_long"},
      {"head", HttpRequestText("GET", "/", "", "", "X-Big: " + std::string(17000, 'b') + "\r\n"),
       431, "header_fields_too_large"},
      {"one header field far over the head limit",
       HttpRequestText("GET", "/", "", "", "X-Big: " + std::string(60000, 'b') + "\r\n"), 431,
       "header_fields_too_large"},
      {"header count", HttpRequestText("GET", "/", "", "", many_headers), 431,
       "header_fields_too_large"},
      {"HTTP/2.0 over HTTP/1.1's syntax", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 400, "bad_request"},
      {"announced body", HttpRequestText("POST", "/", "", std::string(1001, 'x')), 413,
       "payload_too_large"},
      {"chunked body",
       "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n" +
           std::string(1001, 'x') + "\r\n0\r\n\r\n",
       413, "payload_too_large"},
      {"not HTTP", "HELLO\r\n\r\n", 400, "bad_request"},
  };
  for (const Case& c : cases) {
    auto r = Once(c.text);
    ASSERT_TRUE(r) << c.name;
    EXPECT_EQ(r->status, c.status) << c.name << ": " << r->body;
    EXPECT_EQ(ErrorCode(*r), c.code) << c.name << ": " << r->body;
  }
  EXPECT_EQ(Once(HttpRequestText("POST", "/", "", std::string(1000, 'x')))->status, 200);
  EXPECT_GE(server_->Stats().too_large, 7);
  // A field that must be single, sent twice, is refused: the first and the last could be taken
  // by two different readers.
  for (const char* twice : {"Authorization: Bearer a\r\nAuthorization: Bearer b\r\n",
                            "Host: other\r\n", "Content-Type: text/plain\r\n"}) {
    auto r = Once(HttpRequestText("POST", "/", "", "{}", twice));
    ASSERT_TRUE(r) << twice;
    EXPECT_EQ(r->status, 400) << twice << r->body;
    EXPECT_NE(r->body.find("more than once"), std::string::npos) << r->body;
  }
  // HTTP/1.0 is answered (curl --http1.0, load balancers' health checks), and then closes.
  auto old = Once("GET / HTTP/1.0\r\n\r\n");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->status, 200);
}

TEST_F(HttpServerTest, SlowHeadsAndBodiesTimeOutAndIdleConnectionsClose) {
  HttpLimits limits;
  limits.header_timeout = 300ms;
  limits.body_timeout = 300ms;
  limits.idle_timeout = 300ms;
  Start(limits);
  auto slow_head = Connect();
  ASSERT_TRUE(slow_head->Send("GET / HTTP/1.1\r\nHost: h\r\n"));
  auto r = slow_head->Read(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_EQ(ErrorCode(*r), "request_timeout");
  auto slow_body = Connect();
  ASSERT_TRUE(slow_body->Send(
      "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\nContent-Type: a/b\r\n\r\n12345"));
  auto b = slow_body->Read(3s);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 408);
  auto idle = Connect();
  EXPECT_TRUE(idle->ClosedWithin(3s)) << "an idle connection is closed after idle_timeout";
  EXPECT_GE(server_->Stats().timeouts, 2);
}

TEST_F(HttpServerTest, ConnectionsPerAddressAndInAllAreBounded) {
  HttpLimits limits;
  limits.max_connections_per_address = 3;
  limits.max_connections = 5;
  Start(limits);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 3; ++i) held.push_back(Connect("127.0.0.2"));
  // Make sure the server has accepted them before the fourth arrives.
  ASSERT_TRUE(held[2]->Send(HttpRequestText("GET", "/")));
  ASSERT_TRUE(held[2]->Read(2s));
  auto fourth = Connect("127.0.0.2");
  auto r = fourth->Read(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(ErrorCode(*r), "too_many_connections");
  // Another address is served; closing one frees a place for its address.
  auto other = Connect("127.0.0.3");
  ASSERT_TRUE(other->Send(HttpRequestText("GET", "/")));
  EXPECT_EQ(other->Read(2s)->status, 200);
  held.pop_back();
  std::unique_ptr<RawConnection> again;
  for (int i = 0; i < 100 && !again; ++i) {
    auto c = Connect("127.0.0.2");
    c->Send(HttpRequestText("GET", "/"));
    auto a = c->Read(2s);
    if (a && a->status == 200) again = std::move(c);
  }
  EXPECT_TRUE(again) << "the address's count was released when its connection closed";
  // Five in all: the sixth connection is refused with 503.
  held.push_back(std::move(again));
  held.push_back(Connect("127.0.0.4"));
  ASSERT_TRUE(held.back()->Send(HttpRequestText("GET", "/")));
  ASSERT_TRUE(held.back()->Read(2s));
  auto sixth = Connect("127.0.0.5");
  auto s = sixth->Read(2s);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 503);
  // At least the fourth connection; retries above may have been refused too before the count
  // was released.
  EXPECT_GE(server_->Stats().refused_address_limit, 1);
  EXPECT_EQ(server_->Stats().refused_total_limit, 1);
}

TEST_F(HttpServerTest, RequestsInFlightAreBoundedAndLongPollsAnswerLater) {
  HttpLimits limits;
  limits.max_in_flight = 2;
  Start(limits, Hold());
  auto a = Connect(), b = Connect(), c = Connect();
  ASSERT_TRUE(a->Send(HttpRequestText("GET", "/wait")));
  ASSERT_TRUE(b->Send(HttpRequestText("GET", "/wait")));
  for (int i = 0; i < 200 && server_->Stats().in_flight < 2; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(c->Send(HttpRequestText("GET", "/more")));
  auto busy = c->Read(2s);
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503);
  EXPECT_EQ(busy->headers["retry-after"], "1");
  EXPECT_FALSE(a->Read(100ms)) << "a long poll is not answered until its handler says so";
  AnswerHeld("{\"done\":true}");
  EXPECT_EQ(a->Read(2s)->body, "{\"done\":true}");
  EXPECT_EQ(b->Read(2s)->body, "{\"done\":true}");
  EXPECT_EQ(server_->Stats().in_flight, 0);
}

TEST_F(HttpServerTest, BodiesHeldInMemoryAreBoundedInAll) {
  HttpLimits limits;
  limits.max_body_bytes_in_flight = 3000;
  Start(limits, Hold());
  auto a = Connect(), b = Connect();
  ASSERT_TRUE(a->Send(HttpRequestText("POST", "/hold", "", std::string(2000, 'a'))));
  for (int i = 0; i < 200 && server_->Stats().in_flight < 1; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(b->Send(HttpRequestText("POST", "/more", "", std::string(2000, 'b'))));
  auto busy = b->Read(2s);
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 503) << "2,000 + 2,000 bytes of bodies would pass the 3,000 allowed";
  AnswerHeld();
  EXPECT_EQ(a->Read(2s)->status, 200);
  auto c = Connect();
  ASSERT_TRUE(c->Send(HttpRequestText("POST", "/again", "", std::string(2000, 'c'))));
  for (int i = 0; i < 200 && server_->Stats().in_flight < 1; ++i) std::this_thread::sleep_for(5ms);
  AnswerHeld();
  EXPECT_EQ(c->Read(2s)->status, 200) << "the first body's bytes were released with its answer";
}

// The head of a POST announcing `length` bytes from caller `who` (an agent when `agent`).
std::string AnnouncedBody(const std::string& who, size_t length, bool agent = false) {
  return fmt::format(
      "POST /{} HTTP/1.1\r\nHost: h\r\nX-Who: {}\r\n{}Content-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n",
      who, who, agent ? "X-Agent: 1\r\n" : "", length);
}

TEST_F(HttpServerTest, ACallerHoldsOnlyItsShareOfTheBodyBudgetAndAgentsHaveAPoolOfTheirOwn) {
  HttpLimits limits;
  limits.max_body_bytes_in_flight = 8000;
  limits.max_body_bytes_per_caller = 2000;
  limits.reserved_body_bytes_in_flight = 4000;
  limits.min_body_rate = 0;  // Here the holders may wait; the rate has its own test.
  Start(limits, nullptr, [](const HttpRequest& head) {
    HeadDecision d;
    if (const std::string* who = head.Header("x-who")) d.budget_key = *who;
    d.reserved = head.Header("x-agent") != nullptr;
    return d;
  });
  auto wait_for_bytes = [&](int64_t bytes) {
    for (int i = 0; i < 400 && server_->Stats().body_bytes_in_flight < bytes; ++i) {
      std::this_thread::sleep_for(5ms);
    }
    return server_->Stats().body_bytes_in_flight;
  };
  // Caller a announces eight bodies of 1,000 bytes and sends none: it holds its 2,000, no more.
  std::vector<std::unique_ptr<RawConnection>> holders;
  for (int i = 0; i < 2; ++i) {
    holders.push_back(Connect());
    ASSERT_TRUE(holders.back()->Send(AnnouncedBody("a", 1000)));
  }
  ASSERT_EQ(wait_for_bytes(2000), 2000);
  for (int i = 0; i < 6; ++i) {
    auto c = Connect();
    ASSERT_TRUE(c->Send(AnnouncedBody("a", 1000)));
    auto r = c->Read(2s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429);
    EXPECT_EQ(ErrorCode(*r), "too_many_requests");
    EXPECT_EQ(r->headers["retry-after"], "1");
    EXPECT_NE(r->body.find("share of 2000 bytes"), std::string::npos) << r->body;
  }
  // Another caller is served meanwhile.
  auto b = Connect();
  ASSERT_TRUE(b->Send(AnnouncedBody("b", 1000) + std::string(1000, 'b')));
  auto served = b->Read(2s);
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
  // Callers c, d and e take the rest of the pool: the next caller is refused, 503...
  for (const char* who : {"c", "c", "d", "d", "e", "e"}) {
    holders.push_back(Connect());
    ASSERT_TRUE(holders.back()->Send(AnnouncedBody(who, 1000)));
  }
  ASSERT_EQ(wait_for_bytes(8000), 8000);
  auto f = Connect();
  ASSERT_TRUE(f->Send(AnnouncedBody("f", 1000) + std::string(1000, 'f')));
  auto full = f->Read(2s);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 503);
  EXPECT_EQ(ErrorCode(*full), "overloaded");
  // ...but an agent's body draws on its own pool.
  auto agent = Connect();
  ASSERT_TRUE(agent->Send(AnnouncedBody("node-1", 1000, true) + std::string(1000, 'n')));
  auto synced = agent->Read(2s);
  ASSERT_TRUE(synced);
  EXPECT_EQ(synced->status, 200);
  // Closing the holders gives every byte back.
  holders.clear();
  for (int i = 0; i < 400 && server_->Stats().body_bytes_in_flight > 0; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(server_->Stats().body_bytes_in_flight, 0);
}

TEST_F(HttpServerTest, ACallerHoldsOnlyItsShareOfTheRequestsInFlightAndAgentsHaveTheirOwn) {
  HttpLimits limits;
  limits.max_in_flight = 4;
  limits.max_in_flight_per_caller = 2;
  limits.reserved_in_flight = 2;
  Start(limits, Hold(), [](const HttpRequest& head) {
    HeadDecision d;
    if (const std::string* who = head.Header("x-who")) d.budget_key = *who;
    d.reserved = head.Header("x-agent") != nullptr;
    return d;
  });
  auto wait = [](const std::string& who, bool agent = false) {
    return HttpRequestText("GET", "/wait", "", "",
                           "X-Who: " + who + "\r\n" + (agent ? "X-Agent: 1\r\n" : ""));
  };
  auto held_in_flight = [&](int64_t n) {
    for (int i = 0; i < 400 && server_->Stats().in_flight < n; ++i) {
      std::this_thread::sleep_for(5ms);
    }
    return server_->Stats().in_flight;
  };
  std::vector<std::unique_ptr<RawConnection>> held;
  for (const char* who : {"a", "a"}) {
    held.push_back(Connect());
    ASSERT_TRUE(held.back()->Send(wait(who)));
  }
  ASSERT_EQ(held_in_flight(2), 2);
  auto third = Connect();
  ASSERT_TRUE(third->Send(wait("a")));
  auto r = third->Read(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("2 requests in flight, its share"), std::string::npos) << r->body;
  // Caller b takes the rest of the pool; then c waits (503), but an agent does not.
  for (const char* who : {"b", "b"}) {
    held.push_back(Connect());
    ASSERT_TRUE(held.back()->Send(wait(who)));
  }
  ASSERT_EQ(held_in_flight(4), 4);
  auto c = Connect();
  ASSERT_TRUE(c->Send(wait("c")));
  auto full = c->Read(2s);
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 503);
  held.push_back(Connect());
  ASSERT_TRUE(held.back()->Send(wait("node-1", true)));
  EXPECT_EQ(held_in_flight(5), 5) << "the agent's long poll is held in its own pool";
  AnswerHeld();
  for (auto& h : held) {
    auto answer = h->Read(2s);
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, 200);
  }
  EXPECT_EQ(server_->Stats().in_flight, 0);
  EXPECT_EQ(server_->Stats().refused_share, 1);
}

TEST_F(HttpServerTest, ABodyThatStallsOrTricklesIsCutOffAtTheMinimumRate) {
  HttpLimits limits;
  limits.body_timeout = 30s;
  limits.body_rate_grace = 300ms;
  limits.min_body_rate = 10'000;
  Start(limits);
  const auto started = std::chrono::steady_clock::now();
  // Ten bytes of a 100,000-byte body, then nothing.
  auto stall = Connect();
  ASSERT_TRUE(stall->Send(AnnouncedBody("a", 100'000) + "0123456789"));
  // One byte every 50 ms: never idle, but 20 bytes a second.
  auto trickle = Connect();
  ASSERT_TRUE(trickle->Send(AnnouncedBody("a", 100'000)));
  std::atomic<bool> stop{false};
  std::thread dribble([&] {
    while (!stop && trickle->Send("x")) std::this_thread::sleep_for(50ms);
  });
  // 100,000 bytes in ten pieces over a second: slower than the grace, faster than the rate.
  auto steady = Connect();
  ASSERT_TRUE(steady->Send(AnnouncedBody("b", 100'000)));
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(steady->Send(std::string(10'000, 's')));
    std::this_thread::sleep_for(100ms);
  }
  auto ok = steady->Read(2s);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(nlohmann::json::parse(ok->body)["bytes"], 100'000);
  for (auto* c : {stall.get(), trickle.get()}) {
    auto r = c->Read(3s);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 408);
    EXPECT_NE(r->body.find("slower than 10000 bytes a second"), std::string::npos) << r->body;
  }
  stop = true;
  dribble.join();
  EXPECT_LT(std::chrono::steady_clock::now() - started, 10s)
      << "cut off long before the 30 s body timeout";
  EXPECT_EQ(server_->Stats().body_bytes_in_flight, 0);
}

TEST_F(HttpServerTest, AHandlerThatThrowsOrForgetsToAnswerGets500AndServingGoesOn) {
  Start(
      {},
      [](HttpRequest&& req, Responder r) {
        if (req.parsed.path == "/throw") throw std::runtime_error("boom");
        if (req.parsed.path == "/forget") return;
        r.Send({});
      },
      [](const HttpRequest& head) {
        if (head.parsed.path == "/throw-head") throw std::logic_error("head boom");
        return HeadDecision{};
      });
  for (const char* path : {"/throw", "/forget", "/throw-head"}) {
    auto r = Once(HttpRequestText("GET", path));
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 500) << path;
    EXPECT_EQ(ErrorCode(*r), "internal") << path;
    EXPECT_EQ(r->body.find("boom"), std::string::npos) << "internals stay in the log";
  }
  EXPECT_EQ(Once(HttpRequestText("GET", "/fine"))->status, 200);
  EXPECT_EQ(server_->Stats().handler_exceptions, 2);
}

TEST_F(HttpServerTest, StreamsSendChunksInOrderAndSlowReadersAreCutOff) {
  HttpLimits limits;
  limits.max_stream_buffer = 64 << 10;
  std::shared_ptr<HttpStream> slow_stream;
  std::mutex mu;
  Start(limits, [&](HttpRequest&& req, Responder r) {
    auto s = r.Stream(200, "text/event-stream");
    if (req.parsed.path == "/slow") {
      std::lock_guard<std::mutex> lock(mu);
      slow_stream = s;
      return;
    }
    std::thread([s] {
      for (const char* part : {"data: 1\n\n", "data: 2\n\n", "data: 3\n\n"}) s->Write(part);
      s->Close();
    }).detach();
  });
  auto c = Connect();
  ASSERT_TRUE(c->Send(HttpRequestText("GET", "/events")));
  auto r = c->Read(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->headers["content-type"], "text/event-stream");
  EXPECT_EQ(r->body, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
  ASSERT_TRUE(c->Send(HttpRequestText("GET", "/after")));
  EXPECT_EQ(c->Read(2s)->status, 200) << "the connection serves on after the stream ends";

  // A client that never reads: writes fail once 64 KiB wait unsent (past the socket buffers).
  auto slow = Connect();
  ASSERT_TRUE(slow->Send(HttpRequestText("GET", "/slow")));
  std::shared_ptr<HttpStream> s;
  for (int i = 0; i < 200 && !s; ++i) {
    std::this_thread::sleep_for(5ms);
    std::lock_guard<std::mutex> lock(mu);
    s = slow_stream;
  }
  ASSERT_TRUE(s);
  bool cut = false;
  const std::string chunk(16 << 10, 'x');
  for (int i = 0; i < 4096 && !cut; ++i) cut = !s->Write(chunk);
  EXPECT_TRUE(cut) << "a stream to a reader that never reads must not buffer without bound";
  EXPECT_LE(s->Buffered(), limits.max_stream_buffer + chunk.size());
}

TEST_F(HttpServerTest, TargetsAndHeadersThatAreNotUtf8Get400) {
  Start();
  auto path = Once(HttpRequestText("GET", "/%FF"));
  ASSERT_TRUE(path);
  EXPECT_EQ(path->status, 400);
  EXPECT_NE(path->body.find("the path is not valid UTF-8"), std::string::npos) << path->body;
  auto query = Once(HttpRequestText("GET", "/x?state=%C0%80"));
  EXPECT_EQ(query->status, 400);
  EXPECT_NE(query->body.find("query parameter 'state'"), std::string::npos) << query->body;
  auto header = Once(HttpRequestText("GET", "/", "", "", "X-Name: caf\xe9\r\n"));
  EXPECT_EQ(header->status, 400);
  EXPECT_NE(header->body.find("header 'x-name' is not valid UTF-8"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(header->body, nullptr, false).is_object());
  EXPECT_EQ(Once(HttpRequestText("GET", "/%zz"))->status, 400);
  EXPECT_EQ(Once(HttpRequestText("GET", "/caf%C3%A9"))->status, 200);
}

TEST_F(HttpServerTest, APortInUseFailsToBind) {
  Start();
  HttpOptions options;
  options.port = server_->port();
  HttpServer second(options, [](const HttpRequest&) { return HeadDecision{}; });
  const Status s = second.Bind();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("in use"), std::string::npos) << s.message();
  options.host = "not-an-address";
  HttpServer third(options, [](const HttpRequest&) { return HeadDecision{}; });
  EXPECT_NE(third.Bind().message().find("not an IP address"), std::string::npos);
}

TEST_F(HttpServerTest, ServesTlsWithACertificateTheClientVerifies) {
  testing::TempDir dir;
  ASSERT_TRUE(testing::MakeSelfSignedCert(dir, tls_cert_, tls_key_));
  Start();
  EXPECT_TRUE(server_->tls());
  httplib::SSLClient client("127.0.0.1", server_->port());
  client.set_ca_cert_path(tls_cert_);
  client.enable_server_certificate_verification(true);
  auto r = client.Get("/secure");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(nlohmann::json::parse(r->body)["path"], "/secure");
  httplib::SSLClient unverified("127.0.0.1", server_->port());
  unverified.enable_server_certificate_verification(true);
  EXPECT_FALSE(unverified.Get("/secure")) << "a certificate no known authority signed";
  // Plain HTTP on the TLS port is not answered in clear text.
  auto plain = Connect();
  ASSERT_TRUE(plain->Send(HttpRequestText("GET", "/")));
  EXPECT_FALSE(plain->Read(2s));
}

TEST_F(HttpServerTest, ABrokenTlsKeyFailsToBindNamingTheFile) {
  testing::TempDir dir;
  tls_cert_ = dir.Write("cert.pem", "not a certificate");
  tls_key_ = dir.Write("key.pem", "not a key");
  HttpOptions options;
  options.port = 0;
  options.tls_cert_file = tls_cert_;
  options.tls_key_file = tls_key_;
  HttpServer s(options, [](const HttpRequest&) { return HeadDecision{}; });
  const Status st = s.Bind();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--tls-cert " + tls_cert_), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tessera::api
