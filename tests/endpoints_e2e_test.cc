// End-to-end tests of instances' ports (docs/volumes.md, "Endpoints"): a real server and agent, a
// workload serving HTTP on the host port its agent mapped its port to.
#include <fmt/format.h>
#include <httplib.h>

#include <chrono>

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

}  // namespace
}  // namespace tessera
