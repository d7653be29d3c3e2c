// The server against what an attacker or a careless client sends: every case of the hardening
// issue, against the real binary. Raw connections send exactly the bytes a case needs.
#include <fmt/format.h>
#include <sys/resource.h>

#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "server_test_util.h"
#include "testing/raw_http.h"

namespace tessera {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::HttpRequestText;
using testing::RawConnection;
using testing::RunTessera;

class HardeningTest : public ServerTest {
 protected:
  std::unique_ptr<RawConnection> Connect(const std::string& source = "") {
    return RawConnection::Open(server_->port(), source);
  }
  // One raw request on a fresh connection.
  testing::RawResponse Raw(const std::string& text) {
    auto c = Connect();
    EXPECT_TRUE(c && c->Send(text));
    auto r = c->Read(5s);
    EXPECT_TRUE(r) << text.substr(0, 80);
    return r ? *r : testing::RawResponse{};
  }
  static json Body(const testing::RawResponse& r) { return json::parse(r.body, nullptr, false); }
  testing::CommandResult Cli(std::vector<std::string> args, const std::string& token) {
    args.insert(args.end(), {"--url", server_->url(), "--token", token});
    return RunTessera(args);
  }
};

TEST_F(HardeningTest, AnInvalidUtf8PathWithoutATokenIsA400AndTheServerServesOn) {
  for (const char* target : {"/%FF", "/v1/instances/%ff%fe", "/%C0%AF", "/a%00b"}) {
    auto r = Raw(HttpRequestText("GET", target));
    EXPECT_EQ(r.status, 400) << target;
    EXPECT_EQ(Body(r)["error"]["code"], "invalid_argument") << r.body;
  }
  EXPECT_EQ(Get("/healthz", "").status, 200);
}

// A body behind a transfer coding other than chunked has no knowable length: read as "no body",
// its bytes would be served as a second, smuggled request. It is refused and the connection
// closed, so nothing after it is read.
TEST_F(HardeningTest, ATransferCodingOtherThanChunkedIsRefusedAndNothingIsSmuggled) {
  const std::string smuggled = "GET /v1/nodes HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const auto& [coding, status] : std::vector<std::pair<std::string, int>>{
           {"gzip", 400}, {"chunked, gzip", 400}, {"gzip, chunked", 501}}) {
    auto c = Connect();
    ASSERT_TRUE(c);
    const std::string chunk = fmt::format("{:x}\r\n{}\r\n0\r\n\r\n", smuggled.size(), smuggled);
    ASSERT_TRUE(c->Send("POST /v1/tenants HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + coding +
                        "\r\nContent-Type: application/json\r\n\r\n" +
                        (status == 501 ? chunk : smuggled)));
    auto r = c->Read(5s);
    ASSERT_TRUE(r) << coding;
    EXPECT_EQ(r->status, status) << coding << ": " << r->body;
    EXPECT_NE(r->body.find("Transfer-Encoding"), std::string::npos) << r->body;
    EXPECT_TRUE(c->ClosedWithin(5s)) << coding << ": the connection stays open after the refusal";
  }
  EXPECT_EQ(Get("/healthz", "").status, 200);
}

// Methods a client makes up never become series: tessera_api_requests_total labels them
// "other", so 300 of them add one series, not 300.
TEST_F(HardeningTest, MadeUpMethodsAddNoMetricSeries) {
  auto c = Connect();
  ASSERT_TRUE(c);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(c->Send(HttpRequestText(fmt::format("BREW{}", i), "/v1/instances")));
    auto r = c->Read(5s);
    ASSERT_TRUE(r) << i;
    EXPECT_GE(r->status, 400) << i;
  }
  auto metrics = Get("/metrics", kAdminToken);
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.raw.find("BREW"), std::string::npos) << "a made-up method became a label";
  int64_t other = 0;
  std::istringstream lines(metrics.raw);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("tessera_api_requests_total{", 0) == 0 &&
        line.find("method=\"other\"") != std::string::npos) {
      other += std::stoll(line.substr(line.rfind(' ') + 1));
    }
  }
  EXPECT_EQ(other, 300) << metrics.raw.substr(0, 4000);
}

// The value of the unlabelled series `name` in the server's /metrics, or -1.
int64_t MetricValue(const std::string& text, const std::string& name) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stoll(line.substr(name.size() + 1));
  }
  return -1;
}

TEST_F(HardeningTest, BodiesHeldBackHoldOnlyTheirTenantsShareAndNeverTheAgentsOrTheOperators) {
  // Sixteen tenants each announce sixteen bodies of 1 MiB and send none, all from one address.
  auto announce = [&](const std::string& token) {
    auto c = Connect();
    EXPECT_TRUE(
        c->Send("POST /v1/instances HTTP/1.1\r\nHost: h\r\nContent-Type: "
                "application/json\r\nAuthorization: Bearer " +
                token + "\r\nContent-Length: 1048576\r\n\r\n"));
    return c;
  };
  std::vector<std::string> hogs;
  for (int t = 0; t < 16; ++t) hogs.push_back(NewTenant(fmt::format("hog{}", t), 1));
  const std::string bob = NewTenant("bob", 1);
  auto node = Post("/v1/nodes", kAdminToken, {{"name", "n9"}, {"sharing", "exclusive"}});
  ASSERT_EQ(node.status, 201) << node.raw;
  const std::string node_token = node.body.value("token", "");
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 16; ++i) held.push_back(announce(hogs[0]));
  auto bytes_held = [&] {
    return MetricValue(Get("/metrics", kAdminToken).raw,
                       "tessera_http_request_body_bytes_in_flight");
  };
  for (int i = 0; i < 200 && bytes_held() < (16 << 20); ++i) std::this_thread::sleep_for(10ms);
  // A seventeenth body of the same tenant passes its share: 429, at once.
  auto over = announce(hogs[0]);
  auto r = over->Read(5s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  EXPECT_EQ(Body(*r)["error"]["code"], "too_many_requests");
  EXPECT_NE(r->body.find("share of 16777216 bytes"), std::string::npos) << r->body;
  // Another tenant on the same address is served.
  auto created = Post("/v1/instances", bob, H100(1, "spot"));
  EXPECT_EQ(created.status, 201) << created.raw;
  // The other fifteen fill the tenants' pool of 256 MiB: now a tenant waits (503)...
  for (int t = 1; t < 16; ++t) {
    for (int i = 0; i < 16; ++i) held.push_back(announce(hogs[static_cast<size_t>(t)]));
  }
  for (int i = 0; i < 200 && bytes_held() < (256 << 20); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(Post("/v1/instances", bob, H100(1, "spot")).status, 503);
  // ...but an agent's report and the operator's requests draw on their own pool: read and judged.
  auto report = Post("/v1/agent/register", node_token, {{"protocol", 1}});
  EXPECT_EQ(report.status, 400) << report.raw;
  auto disable =
      Patch("/v1/tenants/" + Get("/v1/tenants", kAdminToken).body["tenants"][0].value("id", ""),
            kAdminToken, {{"disabled", true}});
  EXPECT_EQ(disable.status, 200) << disable.raw;
  auto metrics = Get("/metrics", kAdminToken).raw;
  EXPECT_NE(metrics.find("tessera_http_refused_total{reason=\"caller_share\"} 1"),
            std::string::npos);
}

TEST_F(HardeningTest, RefusedRequestsAddBoundedAuditRowsAtTheirCallersRate) {
  const std::string token = NewTenant("acme", 4);
  const auto started = std::chrono::steady_clock::now();
  auto c = Connect();
  const std::string id(7000, 'z');
  for (int i = 0; i < 250; ++i) {
    ASSERT_TRUE(c->Send(HttpRequestText("DELETE", "/v1/instances/" + id, token)));
    auto r = c->Read(5s);
    ASSERT_TRUE(r) << i;
    ASSERT_EQ(r->status, 404) << i;
  }
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started)
          .count();
  // Acme's rows: its first 100 refusals, then about one a second; each under 2 KB.
  auto audit = Get("/v1/audit?limit=1000", kAdminToken);
  ASSERT_EQ(audit.status, 200) << audit.raw.substr(0, 300);
  int rows = 0;
  for (const json& e : audit.body["entries"]) {
    if (e.value("action", "").rfind("DELETE /v1/instances/", 0) != 0) continue;
    ++rows;
    EXPECT_LT(e.dump().size(), 2000u) << e.dump().substr(0, 200);
  }
  EXPECT_GE(rows, 100);
  EXPECT_LE(rows, 100 + seconds + 1);
  // The rest are counted.
  EXPECT_EQ(
      MetricValue(Get("/metrics", kAdminToken).raw, "tessera_audit_refusals_unrecorded_total"),
      250 - rows);
  // An accepted request is recorded whatever the rate, and says how many were not.
  auto created = Post("/v1/instances", token, H100(1, "spot"));
  ASSERT_EQ(created.status, 201) << created.raw;
  auto last = Get("/v1/audit?limit=1000", kAdminToken).body["entries"].back();
  EXPECT_EQ(last.value("action", ""), "POST /v1/instances");
  EXPECT_NE(last.value("detail", "").find(fmt::format("({} refused requests", 250 - rows)),
            std::string::npos)
      << last.dump();
}

TEST_F(HardeningTest, AnonymousWritesLeaveNoAuditRowsAndTheAuditLogStaysReadable) {
  const std::string token = NewTenant("acme", 4);
  const std::string bad_body = "{\"billing\": \"spot\xff\xfe\", \"instance_type\": \"x\"}";
  EXPECT_EQ(Raw(HttpRequestText("POST", "/v1/instances/%ff", "", bad_body)).status, 400);
  EXPECT_EQ(Raw(HttpRequestText("DELETE", "/v1/instances/%ff%fe")).status, 400);
  EXPECT_EQ(Raw(HttpRequestText("POST", "/v1/instances", "", bad_body)).status, 401);
  EXPECT_EQ(Raw(HttpRequestText("DELETE", "/v1/instances/inst-000001", "tsr_nope")).status, 401);
  // A tenant's invalid UTF-8 is refused naming the body, and its audit row reads back fine.
  auto tenant_bad = Raw(HttpRequestText("POST", "/v1/instances", token, bad_body));
  EXPECT_EQ(tenant_bad.status, 400);
  EXPECT_NE(tenant_bad.body.find("body: malformed JSON"), std::string::npos) << tenant_bad.body;
  for (int restart = 0; restart < 2; ++restart) {
    auto audit = Get("/v1/audit", kAdminToken);
    ASSERT_EQ(audit.status, 200) << audit.raw;
    ASSERT_EQ(audit.body["entries"].size(), 2u) << audit.raw;
    EXPECT_EQ(audit.body["entries"][1]["status"], 400);
    for (const auto& e : audit.body["entries"]) EXPECT_NE(e["actor"], "anonymous");
    ASSERT_EQ(server_->Stop(SIGTERM), 0);
    StartServer();
  }
  auto metrics = Get("/metrics", kAdminToken);
  EXPECT_NE(metrics.raw.find("tessera_http_refused_total{reason=\"malformed\"}"),
            std::string::npos);
}

TEST_F(HardeningTest, ThousandsOfIdleAndSlowConnectionsDoNotSlowService) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  ASSERT_GE(limit.rlim_cur, 4000u) << "the test needs 2,200 descriptors";
  const std::string token = NewTenant("acme", 1000);
  // 2,000 idle connections, 250 from each of eight loopback addresses (under the per-address
  // limit), and 200 slow ones that trickle their head a byte at a time.
  std::vector<std::unique_ptr<RawConnection>> idle, slow;
  for (int i = 0; i < 2000; ++i) {
    idle.push_back(Connect(fmt::format("127.0.0.{}", 2 + i % 8)));
    ASSERT_TRUE(idle.back()) << "connection " << i;
  }
  for (int i = 0; i < 200; ++i) {
    slow.push_back(Connect(fmt::format("127.0.1.{}", 2 + i % 4)));
    ASSERT_TRUE(slow.back() && slow.back()->Send("POST /v1/instances HTTP/1.1\r\nHo"));
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    for (int round = 0; !done && round < 200; ++round) {
      for (auto& c : slow) c->Send("s");
      std::this_thread::sleep_for(20ms);
    }
  });
  // The server holds them all.
  int held = 0;
  for (int i = 0; i < 500 && held < 2200; ++i) {
    auto m = Get("/metrics", kAdminToken);
    std::smatch open;
    if (std::regex_search(m.raw, open, std::regex("tessera_http_connections (\\d+)"))) {
      held = std::stoi(open[1]);
    }
    if (held < 2200) std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(held, 2200) << "the server holds the 2,000 idle and 200 slow connections";
  httplib::Client client(server_->url());
  const httplib::Headers auth = {{"Authorization", "Bearer " + token}};
  const std::string share = R"({"billing":"spot","instance_type":"shared.l40s.half"})";
  std::vector<double> health_ms, create_ms;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto h = client.Get("/healthz");
    health_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(h && h->status == 200);
    t0 = std::chrono::steady_clock::now();
    auto c = client.Post("/v1/instances", auth, share, "application/json");
    create_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(c && c->status == 201) << (c ? c->body : httplib::to_string(c.error()));
  }
  done = true;
  trickle.join();
  std::cout << "healthz ms:";
  for (double ms : health_ms) std::cout << " " << ms;
  std::cout << "; create ms:";
  for (double ms : create_ms) std::cout << " " << ms;
  std::cout << "\n";
  for (double ms : health_ms) EXPECT_LT(ms, 100) << "GET /healthz with 2,200 connections open";
  for (double ms : create_ms) EXPECT_LT(ms, 100) << "an authenticated create";
  // The idle connections are still open and still served.
  ASSERT_TRUE(idle[1234]->Send(HttpRequestText("GET", "/healthz")));
  auto r = idle[1234]->Read(5s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HardeningTest, TheTokenIsCheckedBeforeTheBodyIsReadAndBodiesAreBoundedAt1MiB) {
  const std::string token = NewTenant("acme", 4);
  // The head announces 4 MiB; the answer comes without a byte of the body sent.
  auto anon = Connect();
  ASSERT_TRUE(
      anon->Send("POST /v1/instances HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                 "Content-Length: 4194304\r\n\r\n"));
  auto r = anon->Read(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->headers["www-authenticate"], "Bearer realm=\"tessera\"");
  auto big = Connect();
  ASSERT_TRUE(
      big->Send("POST /v1/instances HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                "Authorization: Bearer " +
                token + "\r\nContent-Length: 1048577\r\n\r\n"));
  auto b = big->Read(2s);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 413);
  EXPECT_EQ(Body(*b)["error"]["message"], "the body is 1048577 bytes; the limit is 1048576");
  // A body of exactly 1 MiB is read and judged on its content.
  const std::string name = std::string(1048576 - 50, 'n');
  const std::string body = R"({"billing":"spot","name":")" + name + "\"}";
  auto whole = Raw(HttpRequestText("POST", "/v1/instances", token,
                                   body + std::string(1048576 - body.size(), ' ')));
  EXPECT_EQ(whole.status, 400);
  EXPECT_NE(whole.body.find("field 'name'"), std::string::npos);
}

TEST_F(HardeningTest, ASecondServerOnTheSamePortExitsNonZeroNamingTheAddress) {
  auto second = RunTessera({"server", "--listen", fmt::format("127.0.0.1:{}", server_->port()),
                            "--data", dir_.File("other"), "--fleet", fleet_path_});
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find(fmt::format("cannot listen on 127.0.0.1:{}: the address is in use",
                                        server_->port())),
            std::string::npos)
      << second.err;
  EXPECT_EQ(Get("/healthz", "").status, 200) << "the first server keeps its port";
}

TEST_F(HardeningTest, InputRulesNameTheField) {
  const std::string token = NewTenant("acme", 4);
  struct Case {
    std::string path, body, content_type;
    int status;
    std::string needle;
  };
  const std::string admin = kAdminToken;
  const std::vector<Case> cases = {
      {"/v1/tenants", R"({"name":"x","quota":5})", "application/json", 400,
       "field 'quota': expected an object, found integer"},
      {"/v1/tenants", R"({"name":"x","name":"y"})", "application/json", 400,
       "field 'name': appears more than once"},
      {"/v1/instances", R"({"billing":"spot","instance_type":"shared.l40s.half"})",
       "application/jsonx", 415, "Content-Type must be application/json"},
      {"/v1/instances", R"({"billing":"spot","instance_type":"shared.l40s.half"})",
       "application/json; charset=latin1", 415, "Content-Type must be application/json"},
      {"/v1/instances", "\"just a string\"", "application/json", 400,
       "expected an object, found string"},
      {"/v1/instances",
       R"({"billing":"spot","instance_type":"shared.l40s.half","name":")" +
           std::string(1000000, 'n') + "\"}",
       "application/json", 400, "field 'name': must be 1-63"},
      {"/v1/instances",
       R"({"billing":"spot","instance_type":"shared.l40s.half","command":")" +
           std::string(1000000, 'c') + "\"}",
       "application/json", 400, "field 'command': is 1000000 bytes; at most 65536"},
      {"/v1/instances",
       R"({"billing":"spot","instance_type":"shared.l40s.half","name":"a\u0000b"})",
       "application/json", 400, "field 'name'"},
      {"/v1/instances", R"({"billing":"spot","instance_type":"shared.l40s.half","name":"a\nb"})",
       "application/json", 400, "field 'name'"},
      {"/v1/instances",
       R"({"billing":"spot","instance_type":"shared.l40s.half","name":"\u001b[2Jx"})",
       "application/json", 400, "field 'name'"},
      {"/v1/instances",
       R"({"billing":"spot","gpu_model":"H100-80GB","gpus":99999999999999999999,"vcpus":1,"memory_mib":1})",
       "application/json", 400, "field 'gpus': 1e+20 is out of range [1, 16]"},
      {"/v1/instances",
       R"({"billing":"spot","instance_type":"shared.l40s.half","labels":{"team":{"x":1}}})",
       "application/json", 400, "field 'labels.team': expected a string, found object"},
  };
  for (const Case& c : cases) {
    const std::string& who = c.path == "/v1/tenants" ? admin : token;
    auto r = Call("POST", c.path, who, nullptr, c.content_type, &c.body);
    EXPECT_EQ(r.status, c.status) << c.body.substr(0, 80) << " -> " << r.raw.substr(0, 200);
    EXPECT_NE(r.raw.find(c.needle), std::string::npos) << c.body.substr(0, 80) << " -> " << r.raw;
  }
  auto ok = Call("POST", "/v1/instances", token, nullptr, "Application/JSON; charset=\"UTF-8\"",
                 &cases[2].body);
  EXPECT_EQ(ok.status, 201) << "the media type's case and parameters do not matter";
  EXPECT_EQ(Get("/v1/instances/" + std::string(5000, 'x'), token).status, 404);
  EXPECT_EQ(Get("/v1/tenants", kAdminToken).body["tenants"].size(), 1u) << "nothing was created";
}

TEST_F(HardeningTest, TheBearerSchemeIsCaseInsensitive) {
  for (const char* scheme : {"bearer", "BEARER", "Bearer", "bEaReR"}) {
    auto r = Raw("GET /v1/tenants HTTP/1.1\r\nHost: h\r\nAuthorization: " + std::string(scheme) +
                 "  " + kAdminToken + "\r\n\r\n");
    EXPECT_EQ(r.status, 200) << scheme;
  }
  EXPECT_EQ(Raw("GET /v1/tenants HTTP/1.1\r\nHost: h\r\nAuthorization: Basic " +
                std::string(kAdminToken) + "\r\n\r\n")
                .status,
            401);
}

TEST_F(HardeningTest, AWeakAdminTokenStopsTheServerSayingHowToMakeOne) {
  for (const char* weak :
       {"x", "tsr_short", "TSR_0000000000000000000000000000000000000000000000000000000000000001"}) {
    testing::ServerProcess s;
    EXPECT_FALSE(s.Start({"--data", dir_.File("weak"), "--fleet", fleet_path_}, weak)) << weak;
    EXPECT_NE(s.output().find("TESSERA_ADMIN_TOKEN is not a token of full strength"),
              std::string::npos)
        << s.output();
    EXPECT_NE(s.output().find("tessera token new"), std::string::npos);
  }
  auto made = RunTessera({"token", "new"});
  EXPECT_EQ(made.exit_code, 0);
  EXPECT_TRUE(std::regex_match(made.out, std::regex("tsr_[0-9a-f]{64}\n")));
}

TEST_F(HardeningTest, TheCliShowsWhatClientsStoredEscaped) {
  const std::string token = NewTenant("acme", 4);
  auto created = Post("/v1/instances", token,
                      {{"billing", "spot"},
                       {"instance_type", "shared.l40s.half"},
                       {"name", "train"},
                       {"command", "echo \x1b]0;owned\x07\x1b[2J\nrm -rf /"},
                       {"annotations", {{"note", "\x1b[31mred\x1b[0m"}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  auto shown = Cli({"instances", "get", created.body["id"]}, token);
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(shown.out.find('\x1b'), std::string::npos) << shown.out;
  EXPECT_EQ(shown.out.find('\x07'), std::string::npos);
  EXPECT_NE(shown.out.find("echo \\e]0;owned\\x07\\e[2J\\nrm -rf /"), std::string::npos)
      << shown.out;
  EXPECT_NE(shown.out.find("note=\\e[31mred\\e[0m"), std::string::npos) << shown.out;
  auto missing = Cli({"instances", "get", "inst-\x1b[2J"}, token);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err.find('\x1b'), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace tessera
