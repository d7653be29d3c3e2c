// End-to-end tests of node agents: a real `tessera server` on an empty fleet, real
// `tessera agent --backend sim` processes joined to it, and real workload processes.
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "agent_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

TEST_F(AgentTest, AJoinedNodeRunsItsInstanceAsAProcessThatSeesExactlyItsGpus) {
  Join("gpu-01");
  const std::string id = Create(H100(1, "on_demand"), "echo $CUDA_VISIBLE_DEVICES > out; sleep 30");
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  const json inst = Instance(id);
  ASSERT_EQ(inst["gpus"].size(), 1u);
  EXPECT_TRUE(inst.contains("started_at"));
  EXPECT_LT(inst.value("start_latency_seconds", 99.0), 5.0);
  const std::string out = RunDir("gpu-01", id) + "/out";
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out).empty(); }, 5s));
  EXPECT_EQ(ReadFile(out), inst["gpus"][0].value("uuid", "") + "\n")
      << "the process sees its GPU's UUID, as the agent's inventory reported it, and no other";

  // Delete: stopping, then terminated once the process is gone.
  auto d = Call("DELETE", "/v1/instances/" + id, tenant_);
  EXPECT_EQ(d.status, 200) << d.raw;
  ASSERT_TRUE(WaitState(id, "terminated")) << Instance(id).dump();
}

TEST_F(AgentTest, ASharedGpuInstanceSeesItsGpuAndItsMpsLimits) {
  Join("gpu-shared", "L40S-48GB:1", "shared");
  const json body = QuarterL40S();
  const std::string id = Create(body,
                                "echo \"$CUDA_VISIBLE_DEVICES $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "
                                "$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT\" > out; sleep 30");
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  const std::string uuid = Instance(id)["gpus"][0].value("uuid", "");
  const std::string out = RunDir("gpu-shared", id) + "/out";
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out).empty(); }, 5s));
  EXPECT_EQ(ReadFile(out), fmt::format("{} 25 0=8192M\n", uuid))
      << "MPS names the device by its ordinal among the visible ones";
}

// With NVIDIA's MPS control program (here the fake, which records every command), a share's
// limits are set through its tenant's daemon on that GPU, not only in its environment; the
// daemon goes when the GPU holds no share of the tenant any more.
TEST_F(AgentTest, AShareRunsUnderAnMpsDaemonThatHoldsItsLimits) {
  const std::string control = std::string(TESSERA_FAKE_MPS_DIR) + "/nvidia-cuda-mps-control";
  Join("gpu-mps", "L40S-48GB:1", "shared", {"--mps-control", control});
  const json body = QuarterL40S();
  const std::string out = Evidence("mps-pipe");
  const std::string id = Create(body, "echo $CUDA_MPS_PIPE_DIRECTORY > " + out + "; sleep 60");
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out).empty(); }, 5s));
  std::string pipe = ReadFile(out);
  pipe.pop_back();
  EXPECT_EQ(pipe.rfind(WorkDir("gpu-mps") + "/mps/uid-", 0), 0u) << pipe;
  const std::string log = ReadFile(pipe + "/commands.log");
  const size_t pct = log.find("set_default_active_thread_percentage 25");
  const size_t mem = log.find("set_default_device_pinned_mem_limit 0 8192M");
  const size_t start = log.find("start_server -uid ");
  EXPECT_NE(pct, std::string::npos) << log;
  EXPECT_NE(mem, std::string::npos) << log;
  ASSERT_NE(start, std::string::npos) << log;
  EXPECT_TRUE(pct < start && mem < start) << "the limits are set before its server starts: " << log;
  auto node = Get("/v1/nodes/gpu-mps", kAdminToken).body;
  EXPECT_EQ(node["agent"].value("share_enforcement", ""), "mps") << node.dump();

  EXPECT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  ASSERT_TRUE(WaitState(id, "terminated")) << Instance(id).dump();
  EXPECT_TRUE(WaitFor(
      [&] { return ReadFile(pipe + "/commands.log").find("quit") != std::string::npos; }, 10s))
      << "the daemon of a GPU without shares is stopped: " << ReadFile(pipe + "/commands.log");
}

// Without the control program, a node says its shares are time-sliced, without limits.
TEST_F(AgentTest, WithoutMpsANodeSaysItsSharesAreTimeSliced) {
  Join("gpu-nomps", "L40S-48GB:1", "shared", {"--mps-control", "/nonexistent/mps-control"});
  auto node = Get("/v1/nodes/gpu-nomps", kAdminToken).body;
  EXPECT_TRUE(WaitFor(
      [&] {
        node = Get("/v1/nodes/gpu-nomps", kAdminToken).body;
        return node["agent"].value("share_enforcement_note", "").find("mps-control") !=
               std::string::npos;
      },
      5s))
      << node.dump();
  EXPECT_EQ(node["agent"].value("share_enforcement", ""), "time_sliced");
}

TEST_F(AgentTest, AMigSliceSeesExactlyItsMigDevice) {
  Join("gpu-mig", "A100-40GB:1", "exclusive", {"--sim-mig-gpus", "1"});
  auto node = Get("/v1/nodes", kAdminToken).body["nodes"][0];
  EXPECT_EQ(node["gpus"][0].value("mode", ""), "mig") << "the agent found its GPU in MIG mode";
  json body = {{"billing", "on_demand"},
               {"gpu_model", "A100-40GB"},
               {"mig_profile", "1g.5gb"},
               {"vcpus", 2},
               {"memory_mib", 4096}};
  const std::string id = Create(body, "echo $CUDA_VISIBLE_DEVICES > out; sleep 30");
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  const std::string uuid = Instance(id)["gpus"][0].value("uuid", "");
  EXPECT_EQ(uuid.rfind("MIG-", 0), 0u) << uuid;
  const std::string out = RunDir("gpu-mig", id) + "/out";
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out).empty(); }, 5s));
  EXPECT_EQ(ReadFile(out), uuid + "\n");
}

TEST_F(AgentTest, FaultsInjectedIntoSimulatedGpusShowInTheNodesTelemetry) {
  Join("gpu-01");
  auto gpu_telemetry = [&](const std::string& key, int gpu) {
    const json nodes = Get("/v1/nodes", kAdminToken).body["nodes"];
    const json t = nodes[0]["agent"].value("telemetry", json::object());
    if (key == "xids") return t.value("xids", json::array()).dump();
    return t.value("gpus", json::array()).size() > static_cast<size_t>(gpu)
               ? t["gpus"][gpu][key].dump()
               : std::string();
  };
  auto r = Post("/v1/nodes/gpu-01/faults", kAdminToken, {{"fault", "overheat:1"}});
  EXPECT_EQ(r.status, 202) << r.raw;
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string t = gpu_telemetry("temperature_c", 1);
        return !t.empty() && t != "null" && std::stod(t) > 90;
      },
      6s))
      << gpu_telemetry("temperature_c", 1);
  EXPECT_LT(std::stod(gpu_telemetry("temperature_c", 0)), 90) << "only GPU 1 overheats";
  ASSERT_EQ(Post("/v1/nodes/gpu-01/faults", kAdminToken, {{"fault", "xid:0:79"}}).status, 202);
  EXPECT_TRUE(
      WaitFor([&] { return gpu_telemetry("xids", 0).find("79") != std::string::npos; }, 6s));
  auto bad = Post("/v1/nodes/gpu-01/faults", kAdminToken, {{"fault", "melt:0"}});
  EXPECT_EQ(bad.status, 400) << bad.raw;
  EXPECT_EQ(Post("/v1/nodes/nowhere/faults", kAdminToken, {{"fault", "lost:0"}}).status, 404);
}

TEST_F(AgentTest, AnAgentServesItsNodesSeriesAsDcgmExporterWould) {
  const int port = testing::FreeTcpPort();
  Join("gpu-01", "H100-80GB:2", "exclusive",
       {"--metrics-listen", fmt::format("127.0.0.1:{}", port)});
  httplib::Client agent(fmt::format("http://127.0.0.1:{}", port));
  const std::string id = Create(H100(1, "on_demand"), "sleep 30");
  ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
  const std::string uuid = Instance(id)["gpus"][0].value("uuid", "");
  std::string text;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto r = agent.Get("/metrics");  // No token, as dcgm-exporter: a node-local address.
        text = r && r->status == 200 ? r->body : "";
        return text.find("tessera_instance=\"" + id + "\"") != std::string::npos;
      },
      10s))
      << text;
  auto r = agent.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\""), std::string::npos) << text;
  EXPECT_NE(text.find("UUID=\"" + uuid + "\""), std::string::npos) << text;
  EXPECT_NE(text.find("Hostname=\"gpu-01\""), std::string::npos) << text;
  // The other GPU is idle: its series has no instance.
  EXPECT_NE(text.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""), std::string::npos);
  auto problems = testing::PromtoolProblems(text);
  if (problems) {
    EXPECT_EQ(*problems, "");
  }
}

// A simulated GPU reads what its workload does: a sleep leaves it idle, a busy loop keeps it
// busy, and TESSERA_SIM_LOAD says how busy outright (so an idle demo raises no alert).
TEST_F(AgentTest, ASimulatedGpuReadsWhatItsWorkloadDoes) {
  const int port = testing::FreeTcpPort();
  Join("gpu-01", "H100-80GB:3", "exclusive",
       {"--metrics-listen", fmt::format("127.0.0.1:{}", port)});
  httplib::Client agent(fmt::format("http://127.0.0.1:{}", port));
  const std::string idle = Create(H100(1, "on_demand"), "sleep 60");
  const std::string busy = Create(H100(1, "on_demand"), "while :; do :; done");
  json told = H100(1, "on_demand");
  told["env"] = {{"TESSERA_SIM_LOAD", "40"}};
  const std::string loaded = Create(told, "sleep 60");
  std::map<std::string, int> gpu;
  for (const std::string& id : {idle, busy, loaded}) {
    ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
    gpu[id] = Instance(id)["gpus"][0].value("index", -1);
  }
  // The GPU's utilization and framebuffer in use, from the agent's exposition.
  auto reading = [&](const std::string& text, const std::string& series, const std::string& id) {
    const std::regex line(series + "\\{gpu=\"" + std::to_string(gpu[id]) +
                          "\"[^}]*\\} ([0-9.e+-]+)");
    std::smatch m;
    return std::regex_search(text, m, line) ? std::stod(m[1]) : -1.0;
  };
  std::string text;
  const bool settled = WaitFor(
      [&] {
        auto r = agent.Get("/metrics");
        text = r && r->status == 200 ? r->body : "";
        const double a = reading(text, "DCGM_FI_DEV_GPU_UTIL", idle);
        const double b = reading(text, "DCGM_FI_DEV_GPU_UTIL", busy);
        const double c = reading(text, "DCGM_FI_DEV_GPU_UTIL", loaded);
        return a >= 0 && a <= 5 && b >= 25 && c >= 35 && c <= 45;  // b: a busy core, shared.
      },
      30s, 250ms);
  EXPECT_TRUE(settled) << text;
  EXPECT_LT(reading(text, "DCGM_FI_DEV_FB_USED", idle), 1024) << "an idle GPU holds little memory";
  EXPECT_GT(reading(text, "DCGM_FI_DEV_FB_USED", busy), 15 * 1024);
}

TEST_F(AgentTest, AGangMeetsAtThePortRankZerosAgentReservedAndNoRankStartsBeforeIt) {
  // Something on the host listens on the first port of the agents' rendezvous range.
  const testing::TcpListener held;
  const int first = held.port();
  ASSERT_GT(first, 0);
  ASSERT_LT(first, 65530);
  const std::vector<std::string> range = {"--rendezvous-ports",
                                          fmt::format("{}-{}", first, first + 3)};
  // n1 advertises a name; n2 is reached where the server saw its calls come from.
  std::vector<std::string> named = range;
  named.insert(named.end(), {"--advertise-address", "localhost"});
  Join("n1", "H100-80GB:1", "exclusive", named);
  Join("n2", "H100-80GB:1", "exclusive", range);
  json member = H100(1, "on_demand");
  // Rank 0 listens on MASTER_PORT; rank 1 dials MASTER_ADDR:MASTER_PORT and says hello.
  member["command"] = R"(echo $MASTER_ADDR:$MASTER_PORT > port; python3 -c '
import os, socket, time
port = int(os.environ["MASTER_PORT"])
if os.environ["RANK"] == "0":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(); c, _ = s.accept()
    open("met", "w").write(c.recv(16).decode())
else:
    for _ in range(200):
        try:
            socket.create_connection((os.environ["MASTER_ADDR"], port)).sendall(b"hello"); break
        except OSError:
            time.sleep(0.1)
'; sleep 30)";
  auto g = Post("/v1/groups", tenant_,
                {{"name", "ddp"},
                 {"size", 2},
                 {"placement", "spread"},
                 {"topology", "any"},
                 {"template", member}});
  ASSERT_EQ(g.status, 201) << g.raw;
  std::vector<std::string> ports;
  std::vector<json> shown;
  for (const json& m : g.body["members"]) {
    const std::string id = m["instance"];
    ASSERT_TRUE(WaitState(id, "running")) << Instance(id).dump();
    shown.push_back(Instance(id));
    const std::string file = RunDir(shown.back()["node"], id) + "/port";
    EXPECT_TRUE(WaitFor([&] { return !ReadFile(file).empty(); }, 10s));
    ports.push_back(ReadFile(file));
  }
  EXPECT_NE(shown[0]["node"], shown[1]["node"]) << "spread put both ranks on one node";
  EXPECT_EQ(ports[0], ports[1]) << "the ranks do not meet at one address";
  const std::string master = shown[0]["node"] == "n1" ? "localhost" : "127.0.0.1";
  EXPECT_EQ(ports[0].substr(0, ports[0].find(':')), master) << "MASTER_ADDR is rank 0's address";
  const std::string met = RunDir(shown[0]["node"], shown[0]["id"]) + "/met";
  EXPECT_TRUE(WaitFor([&] { return ReadFile(met) == "hello"; }, 20s))
      << "rank 1 did not reach rank 0 at MASTER_ADDR:MASTER_PORT";
  auto nodes = Get("/v1/nodes", kAdminToken);
  for (const json& n : nodes.body["nodes"]) {
    EXPECT_EQ(n["agent"]["address"], n["id"] == "n1" ? "localhost" : "127.0.0.1") << n.dump();
  }
  const int port = std::atoi(ports[0].substr(ports[0].find(':') + 1).c_str());
  EXPECT_GT(port, first) << "the agent reserved a port in use";
  EXPECT_LE(port, first + 3);
  EXPECT_GE(shown[1]["started_at"].get<std::string>(), shown[0]["started_at"].get<std::string>())
      << "rank 1 started before rank 0 reserved the port";
}

// A running gang scaled from 2 to 3 is one world again: every rank of the new attempt sees
// WORLD_SIZE=3 (before, the new rank did while the old ones kept 2, and torchrun hung).
TEST_F(AgentTest, AResizedGangThatIsNotElasticRunsAsOneWorldAtItsNewSize) {
  Join("n1", "H100-80GB:4");
  json member = H100(1, "on_demand");
  member["command"] = "echo $RANK/$WORLD_SIZE > world; sleep 60";
  auto g = Post("/v1/groups", tenant_, {{"name", "ddp"}, {"size", 2}, {"template", member}});
  ASSERT_EQ(g.status, 201) << g.raw;
  const std::string id = g.body["id"];
  auto worlds = [&](const json& group) {
    std::vector<std::string> out;
    for (const json& m : group["members"]) {
      const std::string inst = m["instance"];
      if (!WaitState(inst, "running", 20s)) return out;
      const std::string file = RunDir("n1", inst) + "/world";
      WaitFor([&] { return !ReadFile(file).empty(); }, 10s);
      out.push_back(ReadFile(file));
    }
    return out;
  };
  EXPECT_EQ(worlds(g.body), (std::vector<std::string>{"0/2\n", "1/2\n"}));
  const json size = {{"size", 3}};
  auto scaled = Call("PATCH", "/v1/groups/" + id, tenant_, &size);
  ASSERT_EQ(scaled.status, 200) << scaled.raw;
  json after;
  EXPECT_TRUE(WaitFor(
      [&] {
        after = Get("/v1/groups/" + id, tenant_).body;
        return after["state"] == "running" && after["placed"] == 3;
      },
      30s))
      << after.dump();
  EXPECT_EQ(after["restarts"], 1);
  EXPECT_EQ(worlds(after), (std::vector<std::string>{"0/3\n", "1/3\n", "2/3\n"}));
  for (const json& m : g.body["members"]) {
    const json old = Instance(m["instance"]);
    EXPECT_EQ(old["state"], "terminated") << old.dump();
    EXPECT_NE(old["history"].dump().find("its group was resized from 2 to 3"), std::string::npos)
        << old.dump();
  }
}

TEST_F(AgentTest, ExitCodesEndInstancesAndTheirLogsComeBack) {
  Join("gpu-01");
  const std::string ok = Create(H100(1, "on_demand"), "echo hello from tessera; exit 0");
  const std::string bad = Create(H100(1, "on_demand"), "echo about to fail >&2; exit 3");
  ASSERT_TRUE(WaitState(ok, "succeeded")) << Instance(ok).dump();
  ASSERT_TRUE(WaitState(bad, "failed")) << Instance(bad).dump();
  EXPECT_EQ(Instance(ok).value("exit_code", -1), 0);
  EXPECT_EQ(Instance(bad).value("exit_code", -1), 3);
  auto log = Call("GET", "/v1/instances/" + ok + "/logs?tail=10", tenant_);
  EXPECT_EQ(log.status, 200);
  EXPECT_EQ(log.raw, "hello from tessera\n");
  EXPECT_EQ(Call("GET", "/v1/instances/" + bad + "/logs", tenant_).raw, "about to fail\n");
  // The CLI prints it too.
  auto cli =
      testing::RunTessera({"instances", "logs", ok, "--url", server_->url(), "--token", tenant_});
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_EQ(cli.out, "hello from tessera\n");
  // Another tenant sees nothing of it.
  const std::string other = NewTenant("other", 1);
  EXPECT_EQ(Call("GET", "/v1/instances/" + ok + "/logs", other).status, 404);
}

TEST_F(AgentTest, TokensActOnlyWhereTheyMay) {
  const std::string node = Join("gpu-01");
  EXPECT_EQ(Get("/v1/tenants", node).status, 403) << "a node token is not a tenant's";
  EXPECT_EQ(Get("/v1/instances", node).status, 403);
  const json sync = {{"protocol", 1}, {"agent_id", "x"}, {"seq", 1}, {"generation", 0}};
  EXPECT_EQ(Post("/v1/agent/sync", tenant_, sync).status, 403) << "tenants cannot act as nodes";
  EXPECT_EQ(Post("/v1/agent/sync", kAdminToken, sync).status, 403);
  auto superseded = Post("/v1/agent/sync", node, sync);
  EXPECT_EQ(superseded.status, 409) << "another agent run holds the node: " << superseded.raw;
  auto malformed = Post("/v1/agent/sync", node, {{"protocol", 1}, {"agent_id", 7}});
  EXPECT_EQ(malformed.status, 400);
  EXPECT_NE(malformed.raw.find("agent_id"), std::string::npos) << malformed.raw;
  auto version = Post("/v1/agent/sync", node, {{"protocol", 9}});
  EXPECT_EQ(version.status, 400);
  EXPECT_NE(version.raw.find("protocol"), std::string::npos) << version.raw;
  // An unknown GPU model is refused, naming it.
  auto r = Post("/v1/nodes", kAdminToken, {{"name", "odd"}});
  auto reg = Post("/v1/agent/register", r.body.value("token", ""),
                  {{"protocol", 1},
                   {"agent_id", "a"},
                   {"inventory",
                    {{"cpu_milli", 8000},
                     {"memory_mib", 8192},
                     {"gpus", {{{"index", 0}, {"uuid", "GPU-1"}, {"model", "Z9000"}}}}}}});
  EXPECT_EQ(reg.status, 400);
  EXPECT_NE(reg.raw.find("Z9000"), std::string::npos) << reg.raw;
}

TEST_F(AgentTest, AKilledAgentsNodeIsLostItsWorkMovesAndTheOldCopyStops) {
  std::string first_node;
  const std::string id = BeatOnOneOfTwoNodes(first_node);
  ASSERT_FALSE(HasFailure());
  agents_[first_node]->Kill(SIGKILL);
  ASSERT_TRUE(WaitFor([&] { return NodeState(first_node) == "not_ready"; }, 10s));
  ASSERT_TRUE(RunsElsewhere(id, first_node)) << Instance(id).dump();
  EXPECT_EQ(Instance(id).value("restarts", 0), 1);
  // The copy on the lost node was fenced by its lease: its heartbeat file no longer changes.
  const std::string beat = RunDir(first_node, id) + "/beat";
  const std::string before = ReadFile(beat);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(ReadFile(beat), before) << "the old copy still runs";
}

// `tessera nodes remove --force` on a node whose agent runs work: the work moves to another node,
// the old copy stops (its agent is told before the node goes), and the node leaves the fleet.
TEST_F(AgentTest, ARemovedNodesWorkMovesAndItsOldCopyStopsBeforeTheNodeLeaves) {
  std::string first_node;
  const std::string id = BeatOnOneOfTwoNodes(first_node);
  ASSERT_FALSE(HasFailure());
  const std::string beat = RunDir(first_node, id) + "/beat";
  const std::string running = ReadFile(beat);
  ASSERT_TRUE(WaitFor([&] { return ReadFile(beat) != running; }, 5s)) << "it never ran";
  auto refused = testing::RunTessera(
      {"nodes", "remove", first_node, "--url", server_->url(), "--token", kAdminToken});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("runs 1 instance(s) (" + id + ")"), std::string::npos) << refused.err;
  auto removing = testing::RunTessera(
      {"nodes", "remove", first_node, "--force", "--url", server_->url(), "--token", kAdminToken});
  EXPECT_EQ(removing.exit_code, 0) << removing.err;
  EXPECT_EQ(removing.out.rfind(first_node + ": removing", 0), 0u) << removing.out;
  ASSERT_TRUE(RunsElsewhere(id, first_node)) << Instance(id).dump();
  ASSERT_TRUE(WaitFor([&] { return NodeState(first_node).empty(); }, 10s))
      << "the node is still listed: " << NodeState(first_node);
  // Its old copy was stopped by its own agent, told before the node went.
  std::string before;
  EXPECT_TRUE(WaitFor(
      [&] {
        before = ReadFile(beat);
        std::this_thread::sleep_for(300ms);
        return ReadFile(beat) == before;
      },
      15s))
      << "the old copy still runs";
  EXPECT_EQ(Get("/v1/nodes/" + first_node, kAdminToken).status, 404);
}

TEST_F(AgentTest, ARestartedAgentAdoptsItsWorkAndNeverStartsItTwice) {
  Join("gpu-01");
  const std::string id = Create(H100(1, "on_demand"), "echo $$ >> pids; sleep 30");
  ASSERT_TRUE(WaitState(id, "running"));
  agents_["gpu-01"]->Kill(SIGKILL);
  StartAgent("gpu-01");
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(Instance(id).value("state", ""), "running") << Instance(id).dump();
  const std::string pids = ReadFile(RunDir("gpu-01", id) + "/pids");
  EXPECT_EQ(std::count(pids.begin(), pids.end(), '\n'), 1) << pids;
  // Its exit still reaches the server through the new agent run.
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  EXPECT_TRUE(WaitState(id, "terminated")) << Instance(id).dump();
}

TEST_F(AgentTest, ASpotVictimGetsItsNoticeBeforeItStopsAndThePreemptorStartsAfter) {
  Join("gpu-01");
  // The victim keeps its evidence outside its workload directory, which goes when it ends.
  const std::string notice_copy = Evidence("got-notice"), noticed_at = Evidence("noticed");
  const std::string spot =
      Create(H100(2, "spot"),
             fmt::format("while [ ! -f \"$TESSERA_PREEMPT_NOTICE\" ]; do sleep 0.05; done; "
                         "cat \"$TESSERA_PREEMPT_NOTICE\" > {}; date +%s%N > {}; sleep 60",
                         notice_copy, noticed_at));
  ASSERT_TRUE(WaitState(spot, "running"));
  const std::string started_at = Evidence("started");
  const std::string od =
      Create(H100(2, "on_demand"), fmt::format("date +%s%N > {}; sleep 30", started_at));
  ASSERT_TRUE(WaitState(spot, "preempting", 5s)) << Instance(spot).dump();
  EXPECT_TRUE(Instance(spot).contains("preempt_at"));
  EXPECT_EQ(Instance(od).value("state", ""), "pending");
  EXPECT_NE(Instance(od).value("reason", "").find("notice"), std::string::npos)
      << "the preemptor says why it waits: " << Instance(od).dump();
  ASSERT_TRUE(WaitState(od, "running", 15s)) << Instance(od).dump();
  const json victim = Instance(spot);
  EXPECT_TRUE(victim.value("state", "") == "pending" || victim.value("state", "") == "preempted")
      << victim.dump();
  const std::string notice = ReadFile(notice_copy);
  EXPECT_NE(notice.find("deadline"), std::string::npos) << notice;
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(started_at).empty(); }, 5s));
  const std::string noticed = ReadFile(noticed_at);
  const std::string started = ReadFile(started_at);
  ASSERT_FALSE(noticed.empty());
  ASSERT_FALSE(started.empty());
  EXPECT_LT(std::stoll(noticed), std::stoll(started)) << "notice first, then the preemptor";
}

TEST_F(AgentTest, AKilledServerKeepsWhatItAcknowledgedAndItsAgentsCarryOn) {
  Join("gpu-01");
  const std::string id = Create(H100(1, "on_demand"), "sleep 30");
  ASSERT_TRUE(WaitState(id, "running"));
  server_->Stop(SIGKILL);
  // Same data, a new port: the agent is pointed at it by a restart of its own.
  StartServer(server_flags_, /*with_fleet=*/false);
  agents_["gpu-01"]->Kill(SIGKILL);
  StartAgent("gpu-01");
  ASSERT_TRUE(WaitFor([&] { return NodeState("gpu-01") == "ready"; }, 10s));
  EXPECT_EQ(Instance(id).value("state", ""), "running") << Instance(id).dump();
  const std::string pids = RunDir("gpu-01", id);
  EXPECT_TRUE(std::filesystem::exists(pids));
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  EXPECT_TRUE(WaitState(id, "terminated")) << Instance(id).dump();
}

// The default outage bound (5 minutes): an idle node, a stopped server and a restarted one stop
// no workload.
class OutageTest : public AgentTest {
 protected:
  OutageTest() { server_flags_ = {"--node-timeout", "4s"}; }

  // Whether the workload's heartbeat file changes within 2 s.
  bool Beating(const std::string& node, const std::string& id) {
    const std::string before = ReadFile(RunDir(node, id) + "/beat");
    return WaitFor([&] { return ReadFile(RunDir(node, id) + "/beat") != before; }, 2s);
  }

  // Whether the node stays ready for all of `d`, asked every 250 ms.
  bool StaysReady(const std::string& node, std::chrono::milliseconds d) {
    bool ready = true;
    WaitFor([&] { return !(ready = NodeState(node) == "ready"); }, d, 250ms);
    return ready;
  }

  static constexpr const char* kBeat =
      "echo $$ > pid; while true; do date +%s%N > beat; sleep 0.2; done";
};

TEST_F(OutageTest, AnIdleNodeAndAServerStoppedForAMinuteStopNothing) {
  // The agent would wait 10 s at the server; the server's report period (2 s) governs.
  Join("gpu-01", "H100-80GB:2", "exclusive", {"--heartbeat-ms", "10000"});
  const std::string id = Create(H100(1, "on_demand"), kBeat);
  ASSERT_TRUE(WaitState(id, "running"));
  const std::string pid = ReadFile(RunDir("gpu-01", id) + "/pid");
  EXPECT_TRUE(StaysReady("gpu-01", 60s)) << "an idle node flapped";
  EXPECT_TRUE(Beating("gpu-01", id));
  // Stopped, not killed: its port answers nothing for a minute.
  ASSERT_EQ(kill(server_->pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(60s);
  const bool beating_while_stopped = Beating("gpu-01", id);
  ASSERT_EQ(kill(server_->pid(), SIGCONT), 0);
  EXPECT_TRUE(beating_while_stopped) << "the workload stopped while the server was";
  EXPECT_TRUE(StaysReady("gpu-01", 8s)) << "time the server was stopped counted as silence";
  const json inst = Instance(id);
  EXPECT_EQ(inst.value("state", ""), "running") << inst.dump();
  EXPECT_EQ(inst.value("restarts", -1), 0) << inst.dump();
  EXPECT_EQ(ReadFile(RunDir("gpu-01", id) + "/pid"), pid) << "the same process runs";
  EXPECT_EQ(inst.dump().find("not_ready"), std::string::npos) << inst.dump();
}

TEST_F(OutageTest, AServerDownForHalfAMinuteComesBackAndNothingRestarts) {
  Join("gpu-01");
  const std::string id = Create(H100(1, "on_demand"), kBeat);
  ASSERT_TRUE(WaitState(id, "running"));
  const std::string pid = ReadFile(RunDir("gpu-01", id) + "/pid");
  const int port = server_->port();
  server_->Stop(SIGKILL);
  std::this_thread::sleep_for(30s);
  EXPECT_TRUE(Beating("gpu-01", id)) << "the workload stopped with the server";
  // The same data and address; the agent, never restarted, finds it again.
  server_ = std::make_unique<testing::ServerProcess>();
  server_->SetListenPort(port);
  std::vector<std::string> args = {"--data", dir_.File("data")};
  args.insert(args.end(), server_flags_.begin(), server_flags_.end());
  ASSERT_TRUE(server_->Start(args, kAdminToken)) << server_->output();
  ASSERT_TRUE(WaitFor([&] { return NodeState("gpu-01") == "ready"; }, 10s))
      << ReadFile(dir_.File("gpu-01.log"));
  EXPECT_TRUE(StaysReady("gpu-01", 6s));
  const json inst = Instance(id);
  EXPECT_EQ(inst.value("state", ""), "running") << inst.dump();
  EXPECT_EQ(inst.value("restarts", -1), 0) << inst.dump();
  EXPECT_EQ(ReadFile(RunDir("gpu-01", id) + "/pid"), pid) << "the same process runs";
  EXPECT_TRUE(Beating("gpu-01", id));
}

TEST_F(OutageTest, TimingsThatCannotWorkAreRefusedAtStartNamingTheRule) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--node-timeout", "3s"},
       "--node-timeout 3.0s: must be at least twice the report period (2.0s)"},
      {{"--report-period", "40s"}, "--report-period 40.0s: must be 100ms to 30s"},
      {{"--outage-bound", "8d"}, "--outage-bound 691200.0s: must be 0 to 7 days"},
      {{"--outage-bound", "soon"}, "--outage-bound: 'soon' is not a duration"}};
  for (const auto& [flags, error] : cases) {
    std::vector<std::string> args = {"server", "--listen", "127.0.0.1:0", "--data",
                                     dir_.File("refused")};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = testing::RunTessera(args);
    EXPECT_EQ(r.exit_code, 2) << flags[0];
    EXPECT_NE(r.err.find(error), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir_.File("refused"))) << "nothing was touched";
  }
}

}  // namespace
}  // namespace tessera
