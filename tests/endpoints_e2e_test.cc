// End-to-end tests of instances' ports (docs/volumes.md, "Endpoints"): a real server and agent, a
// workload serving HTTP on the host port its agent mapped its port to.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "agent_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

TEST_F(AgentTest, EachPortAnInstanceAsksForIsMappedToAPortOfItsNodeAndShown) {
  Join("gpu-01", "H100-80GB:2", "exclusive", {"--endpoint-ports", "31500-31599"});
  json body = H100(1, "on_demand");
  body["ports"] = json::array({8000, 8888});
  const std::string id =
      Create(body,
             "echo \"$TESSERA_PORT_8000 $TESSERA_PORT_8888\" > ports; echo served > index.html; "
             "exec python3 -m http.server \"$TESSERA_PORT_8000\" --bind 127.0.0.1");
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  const json inst = Instance(id);
  EXPECT_EQ(inst["ports"], json::array({8000, 8888}));
  ASSERT_EQ(inst["endpoints"].size(), 2u) << inst.dump();
  std::map<int, int> host_ports;
  for (const json& e : inst["endpoints"]) {
    EXPECT_FALSE(e.value("node_address", "").empty()) << e.dump();
    const int host_port = e.value("host_port", 0);
    EXPECT_GE(host_port, 31500);
    EXPECT_LE(host_port, 31599);
    host_ports[e.value("port", 0)] = host_port;
  }
  EXPECT_NE(host_ports[8000], host_ports[8888]);
  // The workload was told the same ports, and serves on the first.
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(RunDir("gpu-01", id) + "/ports").empty(); }, 5s));
  EXPECT_EQ(ReadFile(RunDir("gpu-01", id) + "/ports"),
            fmt::format("{} {}\n", host_ports[8000], host_ports[8888]));
  httplib::Client client("127.0.0.1", host_ports[8000]);
  client.set_connection_timeout(1);
  std::string served;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = client.Get("/index.html");
        served = r ? r->body : "";
        return r && r->status == 200;
      },
      10s));
  EXPECT_EQ(served, "served\n");
  // A second instance gets other host ports; a bad port is refused naming it.
  json other = H100(1, "on_demand");
  other["ports"] = json::array({8000});
  const std::string second = Create(other, "sleep 30");
  ASSERT_TRUE(WaitState(second, "running")) << Instance(second).dump();
  const int second_port = Instance(second)["endpoints"][0].value("host_port", 0);
  EXPECT_NE(second_port, host_ports[8000]);
  EXPECT_NE(second_port, host_ports[8888]);
  json bad = H100(1, "on_demand");
  bad["ports"] = json::array({8000, 70000});
  auto refused = Post("/v1/instances", tenant_, bad);
  EXPECT_EQ(refused.status, 400);
  EXPECT_NE(refused.raw.find("ports[1]"), std::string::npos) << refused.raw;
  // Ended, it has no endpoints.
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  ASSERT_TRUE(WaitState(id, "terminated")) << Instance(id).dump();
  EXPECT_FALSE(Instance(id).contains("endpoints")) << Instance(id).dump();
}

// A workload that answers what it was sent: GET with the path, the Authorization it got (never
// the caller's token), the prefix and the Host; POST with its body; a WebSocket by echoing one
// text frame.
constexpr const char* kEchoServer = R"(cat > srv.py <<'PY'
import base64, hashlib, http.server, os
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def do_GET(self):
        if self.headers.get('Upgrade', '').lower() == 'websocket':
            key = self.headers['Sec-WebSocket-Key'] + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11'
            accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
            self.send_response(101)
            self.send_header('Upgrade', 'websocket')
            self.send_header('Connection', 'Upgrade')
            self.send_header('Sec-WebSocket-Accept', accept)
            self.end_headers()
            self.wfile.flush()
            head = self.rfile.read(2)
            mask = self.rfile.read(4)
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(self.rfile.read(head[1] & 127)))
            self.wfile.write(bytes([0x81, len(data)]) + data)
            self.wfile.flush()
            self.close_connection = True
            return
        body = '|'.join([self.path, self.headers.get('Authorization', '-'),
                         self.headers.get('X-Forwarded-Prefix', '-'), self.headers['Host']]).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        data = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        self.send_response(200)
        self.send_header('Content-Length', str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', int(os.environ['TESSERA_PORT_8000'])), H).serve_forever()
PY
exec python3 srv.py)";

// Sends `request` to the server over a fresh connection and reads until `until` shows up in what
// came back (or the connection ends, or 5 s pass); returns what came back.
std::string Exchange(int port, const std::string& request, const std::string& until,
                     const std::string& then_send = "", const std::string& then_until = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return "";
  }
  std::string got;
  auto exchange = [&](const std::string& out, const std::string& want) {
    (void)!write(fd, out.data(), out.size());
    char buf[4096];
    while (got.find(want) == std::string::npos) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  };
  exchange(request, until);
  if (!then_send.empty()) exchange(then_send, then_until);
  close(fd);
  return got;
}

TEST_F(AgentTest, AnInstancesPortIsReachedThroughTheServerByItsOwnTenantOnly) {
  Join("gpu-01");
  json body = H100(1, "on_demand");
  body["ports"] = json::array({8000});
  const std::string id = Create(body, kEchoServer);
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  const std::string base = "/v1/instances/" + id + "/ports/8000";
  HttpReply got;
  ASSERT_TRUE(WaitFor(
      [&] {
        got = Get(base + "/some/path?q=1", tenant_);
        return got.status == 200;
      },
      10s))
      << got.status << " " << got.raw;
  const int host_port = Instance(id)["endpoints"][0].value("host_port", 0);
  EXPECT_EQ(got.raw, fmt::format("/some/path?q=1|-|{}|127.0.0.1:{}", base, host_port))
      << "the path and query as sent, no token, the prefix, the endpoint as Host";
  EXPECT_EQ(Get(base, tenant_).raw, fmt::format("/|-|{}|127.0.0.1:{}", base, host_port));
  // A body goes through, and a request that changes something is audited.
  const std::string text = "a body of any type";
  auto echoed = Call("POST", base + "/echo", tenant_, nullptr, "text/plain", &text);
  EXPECT_EQ(echoed.status, 200);
  EXPECT_EQ(echoed.raw, text);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Get("/v1/audit", kAdminToken).raw.find("POST " + base + "/echo") !=
               std::string::npos;
      },
      5s));
  // A WebSocket: the upgrade goes through, then frames both ways.
  const std::string upgrade = fmt::format(
      "GET {}/ws HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nConnection: Upgrade\r\n"
      "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
      "dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
      base, tenant_);
  std::string frame = {static_cast<char>(0x81), static_cast<char>(0x80 | 5), 1, 2, 3, 4};
  for (size_t i = 0; i < 5; ++i) frame += static_cast<char>("hello"[i] ^ (i % 4 + 1));
  const std::string ws = Exchange(server_->port(), upgrade, "\r\n\r\n", frame, "hello");
  EXPECT_NE(ws.find("101 Switching Protocols"), std::string::npos) << ws;
  EXPECT_NE(ws.find("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), std::string::npos) << ws;
  EXPECT_NE(ws.find(std::string("\x81\x05hello")), std::string::npos) << ws;

  // Another tenant, the admin, no token, a port not asked for: refused, the workload untouched.
  const std::string other = NewTenant("globex", 4);
  auto theirs = Get(base + "/some/path", other);
  EXPECT_EQ(theirs.status, 404) << theirs.raw;
  EXPECT_EQ(Get(base + "/", kAdminToken).status, 403);
  EXPECT_EQ(Call("GET", base + "/", "").status, 401);
  EXPECT_EQ(Get("/v1/instances/" + id + "/ports/8001/", tenant_).status, 404);
  EXPECT_EQ(Get("/v1/instances/" + id + "/ports/x/", tenant_).status, 400);
  // Ended, it has no endpoint to reach.
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  ASSERT_TRUE(WaitState(id, "terminated")) << Instance(id).dump();
  EXPECT_EQ(Get(base + "/", tenant_).status, 404);
}

// A member of a group's service: /who answers its rank, /health 200 until a file "sick" appears in
// its directory, then 503.
constexpr const char* kMember = R"(cat > member.py <<'PY'
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == '/health':
            code, body = (503, b'sick') if os.path.exists('sick') else (200, b'ok')
        else:
            code, body = 200, os.environ.get('RANK', '0').encode()
        self.send_response(code)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(('127.0.0.1', int(os.environ['TESSERA_PORT_8000'])), H).serve_forever()
PY
exec python3 member.py)";

class ServiceTest : public AgentTest {
 protected:
  void SetUp() override {
    // A lease that outlasts a busy machine's pauses: these tests are about balancing, not fencing.
    server_flags_ = {"--node-timeout", "4s", "--outage-bound", "60s", "--autoscale-interval", "1s"};
    AgentTest::SetUp();
  }

  // A group of `size` members of one H100 each serving kMember on port 8000 as its service.
  std::string MakeGroup(int size, const json& extra = json::object()) {
    json g = {{"name", "web"},
              {"size", size},
              {"placement", "spread"},
              {"service", {{"port", 8000}, {"health_path", "/health"}}},
              {"template", H100(1, "on_demand")}};
    g["template"]["ports"] = json::array({8000});
    g["template"]["command"] = kMember;
    g.update(extra);
    auto r = Post("/v1/groups", tenant_, g);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", "");
  }

  // Which rank answered each of `n` requests to the group's service (-1: not 200).
  std::map<int, int> Spread(const std::string& group, int n, int threads = 4) {
    std::mutex mu;
    std::map<int, int> by_rank;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        httplib::Client c(server_->url());
        for (int i = t; i < n; i += threads) {
          auto r = c.Get("/v1/groups/" + group + "/service/who",
                         {{"Authorization", "Bearer " + tenant_}});
          const int rank = r && r->status == 200 ? std::atoi(r->body.c_str()) : -1;
          std::lock_guard lock(mu);
          ++by_rank[rank];
        }
      });
    }
    for (auto& w : workers) w.join();
    return by_rank;
  }
};

TEST_F(ServiceTest, AGroupsServiceSpreadsRequestsOverItsHealthyMembersOnly) {
  Join("gpu-01", "H100-80GB:8");
  const std::string group = MakeGroup(4);
  const json shown = Get("/v1/groups/" + group, tenant_).body;
  EXPECT_EQ(shown["service"].value("path", ""), "/v1/groups/" + group + "/service/") << shown;
  // Every member running and healthy: all four answer.
  ASSERT_TRUE(WaitFor([&] { return Spread(group, 40).size() == 4; }, 20s))
      << Spread(group, 40).size();
  const auto spread = Spread(group, 1000);
  ASSERT_EQ(spread.count(-1), 0u) << "every request answered";
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_GE(spread.count(rank) ? spread.at(rank) : 0, 150) << "rank " << rank;
  }
  // Rank 2 turns unhealthy: within its next checks it gets nothing more.
  const json g = Get("/v1/groups/" + group, tenant_).body;
  std::string rank2;
  for (const json& m : g["members"]) {
    if (m.value("rank", -1) == 2) rank2 = m.value("instance", "");
  }
  std::ofstream(RunDir("gpu-01", rank2) + "/sick") << "";
  ASSERT_TRUE(WaitFor([&] { return Spread(group, 20).count(2) == 0; }, 10s));
  const auto without = Spread(group, 200);
  EXPECT_EQ(without.count(2), 0u);
  EXPECT_EQ(without.count(-1), 0u);
  // Counted in /metrics, per group.
  const std::string metrics = Call("GET", "/metrics", kAdminToken).raw;
  EXPECT_NE(
      metrics.find(fmt::format("tessera_group_service_requests_total{{group=\"{}\"}}", group)),
      std::string::npos);
  // Another tenant reaches nothing.
  EXPECT_EQ(Get("/v1/groups/" + group + "/service/who", NewTenant("globex", 1)).status, 404);
}

TEST_F(ServiceTest, RequestsPerSecondDriveAScaleOut) {
  Join("gpu-01", "H100-80GB:8");
  const std::string group =
      MakeGroup(1, {{"autoscale", {{"min", 1}, {"max", 3}, {"metric", "rps"}, {"target", 5}}}});
  ASSERT_TRUE(WaitFor(
      [&] {
        std::this_thread::sleep_for(200ms);
        return Spread(group, 1, 1).count(0) == 1;
      },
      20s))
      << Get("/v1/groups/" + group, tenant_).raw << "\n"
      << Get("/v1/groups/" + group + "/service/who", tenant_).raw;
  // About 20 requests a second against a target of 5 a member: it grows to its max, 3.
  const auto until = std::chrono::steady_clock::now() + 15s;
  bool grown = false;
  while (!grown && std::chrono::steady_clock::now() < until) {
    Spread(group, 4, 1);
    std::this_thread::sleep_for(200ms);
    grown = Get("/v1/groups/" + group, tenant_).body.value("size", 0) == 3;
  }
  EXPECT_TRUE(grown) << Get("/v1/groups/" + group, tenant_).raw;
}

}  // namespace
}  // namespace tessera
