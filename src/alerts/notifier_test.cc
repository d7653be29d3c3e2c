#include "alerts/notifier.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "testing/http_server.h"
#include "testing/smtp_sink.h"
#include "testing/testing.h"

namespace tessera::alerts {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using std::chrono::milliseconds;
using testing::SmtpSink;

const Time kStart = FakeClock().Now();  // 2026-01-01T00:00:00Z.

// Polls `done` until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& done, milliseconds timeout = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return done();
}

// A loopback port nothing listens on.
int ClosedPort() { return tessera::testing::FreeTcpPort(); }

// A real HTTP receiver on 127.0.0.1 that records every POST and answers `answer(n)` to the
// n-th (from 1), after `delay` (cut short when the server is torn down).
class HookServer {
 public:
  struct Request {
    std::string path;
    std::string content_type;
    std::string host;
    std::string body;
    std::chrono::steady_clock::time_point at;
  };

  explicit HookServer(
      std::function<int(int)> answer = [](int) { return 200; },
      milliseconds delay = milliseconds(0))
      : answer_(std::move(answer)), delay_(delay) {
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      int n;
      {
        std::unique_lock<std::mutex> lock(mu_);
        requests_.push_back({req.path, req.get_header_value("Content-Type"),
                             req.get_header_value("Host"), req.body,
                             std::chrono::steady_clock::now()});
        n = static_cast<int>(requests_.size());
        released_.wait_for(lock, delay_, [this] { return closing_; });
      }
      res.status = answer_(n);
      res.set_content("answer " + std::to_string(res.status), "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = testing::ServeInBackground(server_);
  }
  ~HookServer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    released_.notify_all();
    server_.stop();
    thread_.join();
  }

  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  int port() const { return port_; }
  std::vector<Request> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  size_t count() const { return requests().size(); }

 private:
  std::function<int(int)> answer_;
  milliseconds delay_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable released_;
  std::vector<Request> requests_;
  bool closing_ = false;
};

AlertMessage Firing() {
  AlertMessage a;
  a.firing = true;
  a.labels = {{"alertname", "GpuTemperatureHigh"},
              {"severity", "critical"},
              {"Hostname", "node-3"},
              {"gpu", "0"}};
  a.annotations = {{"summary", "GPU 0 on node-3 is at 91 C"},
                   {"description", "Above 85 C for 5 minutes."},
                   {"runbook", "https://runbooks.example/gpu-temp"}};
  a.starts_at = kStart + std::chrono::milliseconds(250);
  a.generator_url = "https://tessera.example/v1/alert-rules/rule_1";
  a.fingerprint = "0123456789abcdef";
  return a;
}

AlertMessage Resolved() {
  AlertMessage a = Firing();
  a.firing = false;
  a.ends_at = kStart + std::chrono::minutes(10);
  return a;
}

Receiver Hook(const std::string& url, bool tenant_owned = false) {
  return {Receiver::Kind::kWebhook, url, tenant_owned};
}

Receiver Mail(const std::string& address) {
  Receiver r;
  r.kind = Receiver::Kind::kEmail;
  r.target = address;
  r.tenant_owned = true;
  return r;
}

NotifierOptions FastOptions() {
  NotifierOptions o;
  o.timeout = milliseconds(2000);
  o.backoff = milliseconds(10);
  o.max_attempts = 3;
  o.workers = 4;
  o.allow_private = false;
  o.external_url = "https://tessera.example";
  return o;
}

// FastOptions, sending email through `sink`.
NotifierOptions SmtpOptions(const SmtpSink& sink) {
  NotifierOptions o = FastOptions();
  o.smtp_host = "127.0.0.1";
  o.smtp_port = sink.port();
  return o;
}

std::optional<DeliveryStatus> StatusOf(const Notifier& n, const std::string& key) {
  const std::vector<DeliveryStatus> all = n.Statuses(key);
  if (all.empty()) return std::nullopt;
  return all.front();
}

// True once the delivery of `key` was handled for good: sent or failed.
bool Settled(const Notifier& n, const std::string& key) {
  const auto s = StatusOf(n, key);
  return s && s->sent + s->failed > 0;
}

// ---- Payloads ----

TEST(WebhookPayload, IsAlertmanagerVersion4) {
  const json j =
      json::parse(WebhookPayload(Firing(), "webhook:https://h.example/x", "https://t.example"));
  EXPECT_EQ(j["version"], "4");
  EXPECT_EQ(j["groupKey"], "{}:{alertname=\"GpuTemperatureHigh\"}");
  EXPECT_EQ(j["truncatedAlerts"], 0);
  EXPECT_EQ(j["status"], "firing");
  EXPECT_EQ(j["receiver"], "webhook:https://h.example/x");
  EXPECT_EQ(j["groupLabels"], json({{"alertname", "GpuTemperatureHigh"}}));
  EXPECT_EQ(j["commonLabels"]["Hostname"], "node-3");
  EXPECT_EQ(j["commonLabels"].size(), 4u);
  EXPECT_EQ(j["commonAnnotations"]["summary"], "GPU 0 on node-3 is at 91 C");
  EXPECT_EQ(j["externalURL"], "https://t.example");
  ASSERT_EQ(j["alerts"].size(), 1u);
  const json& a = j["alerts"][0];
  EXPECT_EQ(a.size(), 7u);
  EXPECT_EQ(a["status"], "firing");
  EXPECT_EQ(a["labels"], j["commonLabels"]);
  EXPECT_EQ(a["annotations"], j["commonAnnotations"]);
  EXPECT_EQ(a["startsAt"], "2026-01-01T00:00:00.250Z");
  EXPECT_EQ(a["endsAt"], "0001-01-01T00:00:00Z");
  EXPECT_EQ(a["generatorURL"], "https://tessera.example/v1/alert-rules/rule_1");
  EXPECT_EQ(a["fingerprint"], "0123456789abcdef");
  EXPECT_EQ(j.size(), 10u);
}

TEST(WebhookPayload, ResolvedHasEndsAt) {
  const json j = json::parse(WebhookPayload(Resolved(), "webhook:x", ""));
  EXPECT_EQ(j["status"], "resolved");
  EXPECT_EQ(j["alerts"][0]["status"], "resolved");
  EXPECT_EQ(j["alerts"][0]["endsAt"], "2026-01-01T00:10:00.000Z");
}

TEST(WebhookPayload, GroupKeyQuotesTheName) {
  AlertMessage a = Firing();
  a.labels["alertname"] = "say \"hi\"";
  const json j = json::parse(WebhookPayload(a, "r", ""));
  EXPECT_EQ(j["groupKey"], "{}:{alertname=\"say \\\"hi\\\"\"}");
}

TEST(AlertmanagerPayload, FiringEndsAfterTheLeaseResolvedAtItsEnd) {
  const Time now = kStart + std::chrono::minutes(1);
  const json j =
      json::parse(AlertmanagerPayload({Firing(), Resolved()}, now, std::chrono::seconds(240)));
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  for (const json& a : j) {
    EXPECT_EQ(a.size(), 5u);
    EXPECT_EQ(a["labels"]["alertname"], "GpuTemperatureHigh");
    EXPECT_EQ(a["annotations"]["description"], "Above 85 C for 5 minutes.");
    EXPECT_EQ(a["startsAt"], "2026-01-01T00:00:00.250Z");
    EXPECT_EQ(a["generatorURL"], "https://tessera.example/v1/alert-rules/rule_1");
  }
  EXPECT_EQ(j[0]["endsAt"], "2026-01-01T00:05:00.000Z");
  EXPECT_EQ(j[1]["endsAt"], "2026-01-01T00:10:00.000Z");
}

// ---- Validation ----

TEST(ValidateReceiver, Table) {
  struct Case {
    Receiver::Kind kind;
    std::string target;
    std::string error;  // Empty: valid.
  };
  const auto W = Receiver::Kind::kWebhook;
  const auto E = Receiver::Kind::kEmail;
  const Case cases[] = {
      {W, "http://hooks.example.com/alert", ""},
      {W, "https://hooks.example.com:8443/a/b?token=x#frag", ""},
      {W, "HTTPS://Hooks.Example.com", ""},
      {W, "http://127.0.0.1:9000/hook", ""},  // Refused at send time, for tenants only.
      {W, "http://[2001:db8::1]:8080/", ""},
      {W, "ftp://x", "notify[0].webhook: 'ftp://x' is not an http or https URL"},
      {W, "hooks.example.com/alert", "is not an http or https URL"},
      {W, "file:///etc/passwd", "is not an http or https URL"},
      {W, "http://", "has no host"},
      {W, "http:///path", "has no host"},
      {W, "http://user:pw@example.com/", "must not contain a user name or password"},
      {W, "http://example.com/a b", "contains whitespace or a control character"},
      {W, "http://example.com/\r\nX: y", "contains whitespace or a control character"},
      {W, "http://example.com:0/", "has an invalid port"},
      {W, "http://example.com:65536/", "has an invalid port"},
      {W, "http://example.com:80x/", "has an invalid port"},
      {W, "http://example.com:/", "has an invalid host or port"},
      {W, "http://exa%mple.com/", "has an invalid host or port"},
      {W, "http://[zz::1]/", "has an invalid host or port"},
      {W, "http://example.com/" + std::string(2100, 'a'), "URL is longer than 2048 bytes"},
      {E, "ops@example.com", ""},
      {E, "first.last+alerts@sub.example.co.uk", ""},
      {E, "ops", "notify[0].webhook: 'ops' is not an email address (local@domain)"},
      {E, "@example.com", "is not an email address"},
      {E, "ops@", "is not an email address"},
      {E, "a@b@c", "is not an email address"},
      {E, "ops@example..com", "is not an email address"},
      {E, "ops@example.com\r\nBcc: x@y", "is not an email address"},
      {E, "<ops@example.com>", "is not an email address"},
      {E, "o ps@example.com", "is not an email address"},
  };
  for (const Case& c : cases) {
    const Status s = ValidateReceiver({c.kind, c.target, true}, "notify[0].webhook");
    if (c.error.empty()) {
      EXPECT_TRUE(s.ok()) << c.target << ": " << s.ToString();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.target;
      EXPECT_THAT(s.message(), HasSubstr(c.error)) << c.target;
      EXPECT_THAT(s.message(), ::testing::StartsWith("notify[0].webhook: ")) << c.target;
    }
  }
}

TEST(Receiver, Name) {
  EXPECT_EQ(Hook("http://h/x").Name(), "webhook:http://h/x");
  EXPECT_EQ(Mail("a@b.c").Name(), "email:a@b.c");
}

// ---- Email text ----

TEST(EmailSubject, FromLabelsAndSafeForAHeader) {
  EXPECT_EQ(EmailSubject(Firing()), "[FIRING] GpuTemperatureHigh on node-3 GPU 0");
  EXPECT_EQ(EmailSubject(Resolved()), "[RESOLVED] GpuTemperatureHigh on node-3 GPU 0");
  AlertMessage a = Firing();
  a.labels.erase("gpu");
  a.labels["Hostname"] = "node-3\r\nBcc: victim@example.com";
  EXPECT_EQ(EmailSubject(a), "[FIRING] GpuTemperatureHigh on node-3  Bcc: victim@example.com");
}

TEST(AlertEmail, HeadersAndReadableBody) {
  AlertMessage a = Resolved();
  a.labels["Hostname"] = "node-3\r\nBcc: victim@example.com";
  const std::string m = AlertEmail(a, "alerts@tessera.example", "ops@example.com", kStart);
  const size_t blank = m.find("\r\n\r\n");
  ASSERT_NE(blank, std::string::npos);
  const std::string head = m.substr(0, blank + 2);
  const std::string body = m.substr(blank + 4);
  EXPECT_THAT(head, HasSubstr("From: alerts@tessera.example\r\n"));
  EXPECT_THAT(head, HasSubstr("To: ops@example.com\r\n"));
  EXPECT_THAT(head, HasSubstr("Subject: [RESOLVED] GpuTemperatureHigh on node-3  Bcc: "));
  EXPECT_THAT(head, Not(HasSubstr("\r\nBcc:")));
  EXPECT_THAT(head, HasSubstr("Date: Thu, 01 Jan 2026 00:00:00 +0000\r\n"));
  EXPECT_THAT(head, HasSubstr("Message-ID: <tessera."));
  EXPECT_THAT(head, HasSubstr("@tessera.example>\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Type: text/plain; charset=utf-8\r\n"));
  // Summary, then description, then the other annotations; labels; times; the link.
  const size_t summary = body.find("Summary: GPU 0 on node-3 is at 91 C\r\n");
  const size_t description = body.find("Description: Above 85 C for 5 minutes.\r\n");
  const size_t runbook = body.find("runbook: https://runbooks.example/gpu-temp\r\n");
  ASSERT_NE(summary, std::string::npos) << body;
  ASSERT_NE(description, std::string::npos) << body;
  ASSERT_NE(runbook, std::string::npos) << body;
  EXPECT_LT(summary, description);
  EXPECT_LT(description, runbook);
  EXPECT_THAT(body, HasSubstr("  severity = critical\r\n"));
  EXPECT_THAT(body, HasSubstr("Started: 2026-01-01T00:00:00.250Z\r\n"));
  EXPECT_THAT(body, HasSubstr("Ended:   2026-01-01T00:10:00.000Z\r\n"));
  EXPECT_THAT(body, HasSubstr("https://tessera.example/v1/alert-rules/rule_1"));
  EXPECT_THAT(AlertEmail(Firing(), "a@b.c", "d@e.f", kStart), Not(HasSubstr("Ended:")));
  // No bare LF and no line over SMTP's limit, even for a huge annotation.
  a.annotations["description"] = std::string(5000, 'x') + "\nnext";
  const std::string big = AlertEmail(a, "a@b.c", "d@e.f", kStart);
  size_t start = 0;
  for (size_t eol = big.find('\n'); eol != std::string::npos; eol = big.find('\n', start)) {
    ASSERT_GT(eol, 0u);
    EXPECT_EQ(big[eol - 1], '\r');
    EXPECT_LE(eol - start, 999u);
    start = eol + 1;
  }
}

TEST(AlertEmail, NonAsciiSubjectIsEncoded) {
  AlertMessage a = Firing();
  a.labels["Hostname"] = "nœud-3";
  const std::string m = AlertEmail(a, "a@b.c", "d@e.f", kStart);
  EXPECT_THAT(m, HasSubstr("Subject: =?UTF-8?B?"));
}

// ---- Delivery ----

TEST(Notifier, WebhookGetsTheVersion4Payload) {
  HookServer hook;
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  const Receiver r = Hook(hook.url());
  n.Send({"rule_1/0123456789abcdef", r, Firing()});
  ASSERT_TRUE(Eventually([&] { return hook.count() == 1; }));
  const HookServer::Request req = hook.requests()[0];
  EXPECT_EQ(req.path, "/hook");
  EXPECT_EQ(req.content_type, "application/json");
  const json j = json::parse(req.body);
  EXPECT_EQ(j, json::parse(WebhookPayload(Firing(), r.Name(), "https://tessera.example")));
  EXPECT_EQ(j["receiver"], "webhook:" + hook.url());
  EXPECT_EQ(j["status"], "firing");

  ASSERT_TRUE(Eventually([&] { return Settled(n, "rule_1/0123456789abcdef"); }));
  DeliveryStatus s = *StatusOf(n, "rule_1/0123456789abcdef");
  EXPECT_EQ(s.receiver, r.Name());
  EXPECT_EQ(s.sent, 1);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.attempts, 1);
  EXPECT_EQ(s.last_sent_at, clock.Now());
  EXPECT_EQ(s.last_error, "");

  n.Send({"rule_1/0123456789abcdef", r, Resolved()});
  ASSERT_TRUE(Eventually([&] { return hook.count() == 2; }));
  const json resolved = json::parse(hook.requests()[1].body);
  EXPECT_EQ(resolved["status"], "resolved");
  EXPECT_EQ(resolved["alerts"][0]["endsAt"], "2026-01-01T00:10:00.000Z");
  ASSERT_TRUE(Eventually([&] { return StatusOf(n, "rule_1/0123456789abcdef")->sent == 2; }));
  EXPECT_EQ(n.counters().sent["webhook"], 2);
  EXPECT_EQ(n.counters().queued, 0);
}

TEST(Notifier, RetriesUntilTheReceiverRecovers) {
  HookServer hook([](int n) { return n <= 2 ? 500 : 200; });
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  n.Send({"k", Hook(hook.url()), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  const DeliveryStatus s = *StatusOf(n, "k");
  EXPECT_EQ(s.sent, 1);
  EXPECT_EQ(s.failed, 0);
  EXPECT_EQ(s.attempts, 3);
  EXPECT_EQ(s.last_error, "");
  EXPECT_EQ(hook.count(), 3u);
  // Backoff: 10 ms, then 20 ms.
  const auto requests = hook.requests();
  EXPECT_GE(requests[1].at - requests[0].at, milliseconds(10));
  EXPECT_GE(requests[2].at - requests[1].at, milliseconds(20));
}

TEST(Notifier, DownReceiverFailsAfterMaxAttempts) {
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  const int port = ClosedPort();
  n.Send({"k", Hook("http://127.0.0.1:" + std::to_string(port) + "/x"), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  const DeliveryStatus s = *StatusOf(n, "k");
  EXPECT_EQ(s.sent, 0);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.attempts, 3);
  EXPECT_THAT(s.last_error, HasSubstr("POST http://127.0.0.1:" + std::to_string(port)));
  EXPECT_FALSE(s.last_sent_at.has_value());
  EXPECT_EQ(n.counters().failed["webhook"], 1);
}

TEST(Notifier, ClientErrorsAreNotRetriedButTooManyRequestsIs) {
  HookServer gone([](int) { return 404; });
  HookServer busy([](int n) { return n == 1 ? 429 : 200; });
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  n.Send({"gone", Hook(gone.url()), Firing()});
  n.Send({"busy", Hook(busy.url()), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "gone") && Settled(n, "busy"); }));
  const DeliveryStatus g = *StatusOf(n, "gone");
  EXPECT_EQ(g.failed, 1);
  EXPECT_EQ(g.attempts, 1);
  EXPECT_THAT(g.last_error, HasSubstr("answered 404"));
  EXPECT_EQ(gone.count(), 1u);
  const DeliveryStatus b = *StatusOf(n, "busy");
  EXPECT_EQ(b.sent, 1);
  EXPECT_EQ(b.attempts, 2);
}

TEST(Notifier, SlowReceiverDoesNotDelayAHealthyOne) {
  HookServer slow([](int) { return 200; }, milliseconds(10'000));
  HookServer healthy;
  FakeClock clock;
  NotifierOptions o = FastOptions();
  o.timeout = milliseconds(1500);
  o.max_attempts = 1;
  Notifier n(o, &clock);
  const auto start = std::chrono::steady_clock::now();
  n.Send({"slow", Hook(slow.url()), Firing()});
  ASSERT_TRUE(Eventually([&] { return slow.count() == 1; }));
  n.Send({"healthy", Hook(healthy.url()), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "healthy"); }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  EXPECT_FALSE(Settled(n, "slow"));  // Still waiting for its answer.
  ASSERT_TRUE(Eventually([&] { return Settled(n, "slow"); }));
  EXPECT_EQ(StatusOf(n, "slow")->failed, 1);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1400));
}

TEST(Notifier, BackingOffReceiverDoesNotHoldTheOnlyWorker) {
  HookServer healthy;
  FakeClock clock;
  NotifierOptions o = FastOptions();
  o.workers = 1;
  o.max_attempts = 5;
  o.backoff = milliseconds(300);  // The retries span 300 + 600 + 1200 + 2400 ms.
  Notifier n(o, &clock);
  n.Send({"down", Hook("http://127.0.0.1:" + std::to_string(ClosedPort()) + "/"), Firing()});
  ASSERT_TRUE(Eventually([&] { return StatusOf(n, "down")->last_error != ""; }));
  const auto start = std::chrono::steady_clock::now();
  n.Send({"healthy", Hook(healthy.url()), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "healthy"); }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(250));
  EXPECT_EQ(StatusOf(n, "down")->failed, 0);  // Still backing off.
  EXPECT_EQ(n.counters().queued, 1);
}

TEST(Notifier, TenantWebhookToLoopbackIsRefused) {
  HookServer hook;
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  n.Send({"k", Hook(hook.url(), /*tenant_owned=*/true), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  const DeliveryStatus s = *StatusOf(n, "k");
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.attempts, 1);  // Not retried.
  EXPECT_THAT(s.last_error, HasSubstr("127.0.0.1"));
  EXPECT_THAT(s.last_error, HasSubstr("loopback"));
  const NotifierCounters c = n.counters();
  EXPECT_EQ(c.refused.at("webhook"), 1);
  EXPECT_EQ(c.failed.count("webhook"), 0u);
  EXPECT_EQ(hook.count(), 0u);  // Never connected to.

  // By name too: localhost is loopback whichever address it resolves to first.
  n.Send({"named", Hook("http://localhost:" + std::to_string(hook.port()) + "/", true), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "named"); }));
  EXPECT_THAT(StatusOf(n, "named")->last_error, HasSubstr("host 'localhost' resolves to"));

  // IPv6 literals, the IPv4-mapped form of loopback among them.
  for (const std::string host : {"[::1]", "[::ffff:127.0.0.1]"}) {
    n.Send(
        {host, Hook("http://" + host + ":" + std::to_string(hook.port()) + "/", true), Firing()});
    ASSERT_TRUE(Eventually([&] { return Settled(n, host); }));
    EXPECT_THAT(StatusOf(n, host)->last_error, HasSubstr("a loopback address: refused"));
  }
  EXPECT_EQ(n.counters().refused.at("webhook"), 4);
  EXPECT_EQ(hook.count(), 0u);
}

TEST(Notifier, TenantWebhookToLoopbackWithAllowPrivateIsDelivered) {
  HookServer hook;
  FakeClock clock;
  NotifierOptions o = FastOptions();
  o.allow_private = true;
  Notifier n(o, &clock);
  n.Send({"k", Hook(hook.url(), true), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  EXPECT_EQ(StatusOf(n, "k")->sent, 1);
  EXPECT_EQ(hook.count(), 1u);
}

TEST(Notifier, OperatorWebhookToLoopbackIsDelivered) {
  HookServer hook;
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  n.Send({"k", Hook(hook.url(), /*tenant_owned=*/false), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  EXPECT_EQ(StatusOf(n, "k")->sent, 1);
  EXPECT_EQ(hook.count(), 1u);
  EXPECT_EQ(hook.requests()[0].host, "127.0.0.1:" + std::to_string(hook.port()));
}

TEST(Notifier, EmailReachesTheSmtpServer) {
  SmtpSink sink;
  FakeClock clock;
  NotifierOptions o = SmtpOptions(sink);
  o.smtp_from = "alerts@tessera.example";
  Notifier n(o, &clock);
  const Receiver r = Mail("ops@example.com");
  n.Send({"k", r, Firing()});
  ASSERT_TRUE(sink.WaitForMessages(1, milliseconds(5000)));
  const SmtpSink::Message m = sink.messages()[0];
  EXPECT_EQ(m.from, "alerts@tessera.example");
  EXPECT_EQ(m.recipients, std::vector<std::string>{"ops@example.com"});
  EXPECT_EQ(m.Header("From"), "alerts@tessera.example");
  EXPECT_EQ(m.Header("To"), "ops@example.com");
  EXPECT_EQ(m.Header("Subject"), "[FIRING] GpuTemperatureHigh on node-3 GPU 0");
  EXPECT_EQ(m.Header("Content-Type"), "text/plain; charset=utf-8");
  EXPECT_THAT(m.Body(), HasSubstr("Summary: GPU 0 on node-3 is at 91 C\r\n"));
  EXPECT_THAT(m.Body(), HasSubstr("https://tessera.example/v1/alert-rules/rule_1"));
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  const DeliveryStatus s = *StatusOf(n, "k");
  EXPECT_EQ(s.receiver, "email:ops@example.com");
  EXPECT_EQ(s.sent, 1);
  EXPECT_EQ(n.counters().sent["email"], 1);
}

// A tenant's rules send email through the operator's relay at a bounded rate: one tenant's flood
// neither floods the relay nor spends another tenant's share, and the operator's own go through.
TEST(Notifier, ATenantsEmailsGoThroughTheRelayAtABoundedRate) {
  SmtpSink sink;
  FakeClock clock;
  NotifierOptions o = SmtpOptions(sink);
  o.tenant_emails_per_hour = 3;
  Notifier n(o, &clock);
  for (int i = 0; i < 10; ++i) {
    n.Send({"flood/" + std::to_string(i), Mail("a@example.com"), Firing(), "tenant-000001"});
  }
  n.Send({"other", Mail("b@example.com"), Firing(), "tenant-000002"});
  n.Send({"ops", Mail("ops@example.com"), Firing(), ""});
  ASSERT_TRUE(sink.WaitForMessages(5, milliseconds(5000)));
  ASSERT_TRUE(Eventually([&] { return n.counters().sent["email"] == 5; }));
  EXPECT_EQ(n.counters().limited["email"], 7) << "three an hour for the flooding tenant";
  EXPECT_EQ(StatusOf(n, "other")->sent, 1) << "another tenant's share is its own";
  EXPECT_EQ(StatusOf(n, "ops")->sent, 1) << "the operator's emails are not limited";
  const DeliveryStatus limited = *StatusOf(n, "flood/9");
  EXPECT_EQ(limited.failed, 1);
  EXPECT_THAT(limited.last_error, HasSubstr("rate of 3 emails an hour is spent"));
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_EQ(sink.messages().size(), 5u) << "nothing more reaches the relay";
}

TEST(Notifier, RefusedRecipientFailsNamingTheStep) {
  SmtpSink sink;
  sink.RefuseAt(SmtpSink::Step::kRcptTo, "550 5.1.1 no such user");
  FakeClock clock;
  NotifierOptions o = SmtpOptions(sink);
  Notifier n(o, &clock);
  n.Send({"k", Mail("nobody@example.com"), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  const DeliveryStatus s = *StatusOf(n, "k");
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.attempts, 1);  // A 5xx refusal is final.
  EXPECT_THAT(s.last_error, HasSubstr("RCPT TO:<nobody@example.com>"));
  EXPECT_THAT(s.last_error, HasSubstr("550 5.1.1 no such user"));
}

TEST(Notifier, EmailWithoutSmtpFailsClearly) {
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  n.Send({"k", Mail("ops@example.com"), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "k"); }));
  const DeliveryStatus s = *StatusOf(n, "k");
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.attempts, 1);
  EXPECT_THAT(s.last_error, HasSubstr("no --smtp configured"));
  EXPECT_EQ(n.counters().failed["email"], 1);
}

TEST(Notifier, AlertmanagerGetsTheV2List) {
  HookServer am;
  FakeClock clock;
  NotifierOptions o = FastOptions();
  o.alertmanager_url = "http://127.0.0.1:" + std::to_string(am.port()) + "/";
  o.alertmanager_lease = std::chrono::seconds(120);
  Notifier n(o, &clock);
  EXPECT_TRUE(n.has_alertmanager());
  n.SendToAlertmanager({Firing(), Resolved()});
  ASSERT_TRUE(Eventually([&] { return am.count() == 1; }));
  const HookServer::Request req = am.requests()[0];
  EXPECT_EQ(req.path, "/api/v2/alerts");
  EXPECT_EQ(req.content_type, "application/json");
  EXPECT_EQ(json::parse(req.body),
            json::parse(AlertmanagerPayload({Firing(), Resolved()}, clock.Now(),
                                            std::chrono::seconds(120))));
  ASSERT_TRUE(Eventually([&] { return n.counters().sent["alertmanager"] == 1; }));
  EXPECT_TRUE(n.Statuses().empty());
}

TEST(Notifier, NoAlertmanagerConfiguredIgnoresTheList) {
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  EXPECT_FALSE(n.has_alertmanager());
  n.SendToAlertmanager({Firing()});
  EXPECT_EQ(n.counters().queued, 0);
  EXPECT_TRUE(n.counters().sent.empty());
}

TEST(Notifier, FullQueueDropsTheOldest) {
  HookServer slow([](int) { return 200; }, milliseconds(10'000));
  HookServer healthy;
  FakeClock clock;
  NotifierOptions o = FastOptions();
  o.workers = 1;
  o.max_queue = 2;
  o.timeout = milliseconds(3000);
  auto n = std::make_unique<Notifier>(o, &clock);
  n->Send({"in-flight", Hook(slow.url()), Firing()});
  ASSERT_TRUE(Eventually([&] { return slow.count() == 1; }));  // The only worker is busy.
  for (const char* key : {"a", "b", "c"}) n->Send({key, Hook(healthy.url()), Firing()});
  const NotifierCounters c = n->counters();
  EXPECT_EQ(c.dropped.at("webhook"), 1);
  EXPECT_EQ(c.queued, 2);
  const DeliveryStatus a = *StatusOf(*n, "a");
  EXPECT_EQ(a.failed, 1);
  EXPECT_THAT(a.last_error, HasSubstr("queue is full"));
  EXPECT_EQ(StatusOf(*n, "b")->failed, 0);
}

TEST(Notifier, StatusesNewestFirstAndByKey) {
  HookServer hook;
  FakeClock clock;
  Notifier n(FastOptions(), &clock);
  n.Send({"first", Hook(hook.url("/1")), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "first"); }));
  n.Send({"second", Hook(hook.url("/2")), Firing()});
  ASSERT_TRUE(Eventually([&] { return Settled(n, "second"); }));
  const std::vector<DeliveryStatus> all = n.Statuses();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].alert_key, "second");
  EXPECT_EQ(all[1].alert_key, "first");
  ASSERT_EQ(n.Statuses("first").size(), 1u);
  EXPECT_EQ(n.Statuses("first")[0].receiver, "webhook:" + hook.url("/1"));
}

TEST(Notifier, DestructorReturnsPromptlyWithASlowReceiverInFlight) {
  HookServer slow([](int) { return 200; }, milliseconds(10'000));
  SmtpSink slow_smtp;
  slow_smtp.SetReplyDelay(milliseconds(10'000));
  FakeClock clock;
  NotifierOptions o = SmtpOptions(slow_smtp);
  o.timeout = milliseconds(5000);
  auto n = std::make_unique<Notifier>(o, &clock);
  n->Send({"hook", Hook(slow.url()), Firing()});
  n->Send({"mail", Mail("ops@example.com"), Firing()});
  ASSERT_TRUE(Eventually([&] { return slow.count() == 1 && slow_smtp.connections() == 1; }));
  const auto start = std::chrono::steady_clock::now();
  n.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
}

}  // namespace
}  // namespace tessera::alerts
