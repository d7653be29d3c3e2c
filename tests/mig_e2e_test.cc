// End-to-end tests of MIG devices made on demand: a real `tessera server`, a real `tessera agent
// --backend nvml` on the fake NVML library (src/testing/fake_nvml.cc: the driver's MIG rules,
// its state kept in a file as the driver keeps it across processes), and real workloads.
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class MigAgentTest : public ServerTest {
 protected:
  void SetUp() override {
    StartServer({"--node-timeout", "4s", "--outage-bound", "0s"}, /*with_fleet=*/false);
    tenant_ = NewTenant("acme", 16);
  }

  // One A100 80GB in MIG mode; `devices` are MIG devices an operator made before the agent ran.
  // Its UUID is the test's own: the fake derives its MIG UUIDs from it, and a workload another
  // test left running must not look like a user of this test's devices.
  static json OneA100(const json& devices = json::array(), const json& extra = json::object()) {
    static int tests = 0;
    json gpu = {{"name", "NVIDIA A100-SXM4-80GB"},
                {"uuid", fmt::format("GPU-a1000000-0000-0000-{:04x}-{:012x}", ++tests, getpid())},
                {"memory_mib", 81920},
                {"mig", true},
                {"mig_model", "A100-80GB"},
                {"mig_devices", devices}};
    json config = {{"driver_version", "550.90.07"}, {"gpus", {gpu}}};
    config.update(extra);
    return config;
  }

  // Adds the node and starts its agent on the fake driver configured by `config`.
  void Join(const json& config, const std::vector<std::string>& extra = {}) {
    auto r = Post("/v1/nodes", kAdminToken, {{"name", "mig-01"}});
    ASSERT_EQ(r.status, 201) << r.raw;
    token_ = r.body.value("token", "");
    config_ = dir_.Write("nvml.json", config.dump());
    StartAgent(extra);
    ASSERT_TRUE(WaitFor([&] { return NodeState() == "ready"; }, 10s))
        << "the agent did not join: " << ReadFile(dir_.File("agent.log"));
  }

  void StartAgent(const std::vector<std::string>& extra = {}) {
    const std::string token_file =
        testing::WritePrivateFile(dir_.File("node.token"), token_ + "\n");
    std::vector<std::string> args = {testing::TesseraBinary(),
                                     "agent",
                                     "--server",
                                     server_->url(),
                                     "--token-file",
                                     token_file,
                                     "--backend",
                                     "nvml",
                                     "--work-dir",
                                     dir_.File("work"),
                                     "--cgroup-root",
                                     "none",
                                     "--workload-uids",
                                     "none",
                                     "--heartbeat-ms",
                                     "200"};
    args.insert(args.end(), extra.begin(), extra.end());
    agent_ = std::make_unique<testing::ChildProcess>(
        args, dir_.File("agent.log"),
        std::vector<std::pair<std::string, std::string>>{
            {"LD_LIBRARY_PATH", TESSERA_FAKE_NVML_DIR},
            {"TESSERA_FAKE_NVML_CONFIG", config_},
            {"TESSERA_FAKE_NVML_STATE", dir_.File("nvml-state.json")}});
  }

  std::string NodeState() {
    for (const auto& n : Get("/v1/nodes", kAdminToken).body.value("nodes", json::array())) {
      if (n.value("id", "") == "mig-01") return n.value("state", "");
    }
    return "";
  }

  // The GPU instances the fake driver holds now: [{"start", "profile_id", "uuid"}], a GPU
  // instance without a compute instance (half-made) with an empty "uuid".
  json DriverInstances() {
    json out = json::array();
    const json state = json::parse(ReadFile(dir_.File("nvml-state.json")), nullptr, false);
    if (!state.is_object()) return out;
    for (const json& gpu : state.value("gpus", json::array())) {
      for (const json& gi : gpu.value("gpu_instances", json::array())) {
        if (gi.value("compute_instances", json::array()).empty()) {
          out.push_back({{"start", gi.value("start", -1)},
                         {"profile_id", gi.value("profile_id", -1)},
                         {"uuid", ""}});
        }
        for (const json& ci : gi.value("compute_instances", json::array())) {
          out.push_back({{"start", gi.value("start", -1)},
                         {"profile_id", gi.value("profile_id", -1)},
                         {"uuid", ci.value("uuid", "")}});
        }
      }
    }
    return out;
  }

  std::string Slice(const std::string& profile, const std::string& command) {
    json body = {{"billing", "on_demand"}, {"gpu_model", "A100-80GB"},
                 {"mig_profile", profile}, {"vcpus", 1},
                 {"memory_mib", 1024},     {"restart", false},
                 {"command", command}};
    auto r = Post("/v1/instances", tenant_, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", "");
  }

  json Instance(const std::string& id) { return Get("/v1/instances/" + id, tenant_).body; }

  // A file the workload writes what it saw into.
  std::string Evidence(const std::string& name) {
    const std::string dir = dir_.File("evidence");
    std::filesystem::create_directories(dir);
    return dir + "/" + name;
  }

  std::string tenant_;
  std::string token_;
  std::string config_;
  std::unique_ptr<testing::ChildProcess> agent_;
};

TEST_F(MigAgentTest, ASliceRunsOnTheDeviceNvmlMadeAndItsDeleteDestroysIt) {
  Join(OneA100());
  EXPECT_EQ(DriverInstances().size(), 0u);
  const std::string out = Evidence("seen");
  const std::string id = Slice("3g.40gb", "echo $CUDA_VISIBLE_DEVICES > " + out + "; sleep 60");
  ASSERT_EQ(AwaitState(tenant_, id, "running"), "running") << ReadFile(dir_.File("agent.log"));
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out).empty(); }, 5s));
  const json made = DriverInstances();
  ASSERT_EQ(made.size(), 1u) << made.dump();
  const std::string uuid = made[0].value("uuid", "");
  EXPECT_EQ(uuid.rfind("MIG-", 0), 0u);
  EXPECT_EQ(ReadFile(out), uuid + "\n") << "the workload sees the device the driver made";
  const json inst = Instance(id);
  EXPECT_EQ(made[0].value("start", -1), inst["gpus"][0].value("mig_start", -2))
      << "made at the start slice the server granted";
  EXPECT_EQ(made[0].value("profile_id", -1), 9);  // 3g.40gb on an A100 80GB.
  EXPECT_TRUE(WaitFor([&] { return Instance(id)["gpus"][0].value("uuid", "") == uuid; }, 5s))
      << "the API shows the UUID the driver gave: " << Instance(id).dump();
  std::printf("grant to running for a slice that needed a new MIG device: %.3f s\n",
              inst.value("start_latency_seconds", -1.0));

  auto d = Call("DELETE", "/v1/instances/" + id, tenant_);
  EXPECT_EQ(d.status, 200) << d.raw;
  EXPECT_EQ(AwaitState(tenant_, id, "terminated"), "terminated");
  EXPECT_TRUE(WaitFor([&] { return DriverInstances().empty(); }, 10s))
      << "the device goes with its instance: " << DriverInstances().dump();
}

TEST_F(MigAgentTest, TwoSlicesOnOneGpuAreMadeAtTheirGrantedStarts) {
  Join(OneA100());
  const std::string a = Slice("3g.40gb", "sleep 60");
  const std::string b = Slice("3g.40gb", "sleep 60");
  ASSERT_EQ(AwaitState(tenant_, a, "running"), "running") << ReadFile(dir_.File("agent.log"));
  ASSERT_EQ(AwaitState(tenant_, b, "running"), "running") << ReadFile(dir_.File("agent.log"));
  std::set<int> granted = {Instance(a)["gpus"][0].value("mig_start", -1),
                           Instance(b)["gpus"][0].value("mig_start", -1)};
  EXPECT_EQ(granted, (std::set<int>{0, 4}));
  std::set<int> made;
  for (const json& m : DriverInstances()) made.insert(m.value("start", -1));
  EXPECT_EQ(made, granted);
  EXPECT_NE(Instance(a)["gpus"][0].value("uuid", ""), Instance(b)["gpus"][0].value("uuid", ""));
}

TEST_F(MigAgentTest, ARestartedAgentAdoptsTheDevicesItMade) {
  Join(OneA100());
  const std::string id = Slice("2g.20gb", "sleep 120");
  ASSERT_EQ(AwaitState(tenant_, id, "running"), "running") << ReadFile(dir_.File("agent.log"));
  const json before = DriverInstances();
  ASSERT_EQ(before.size(), 1u);
  agent_->Stop(SIGKILL);
  StartAgent();
  // The new run registers, finds its device in its record and keeps it for the instance.
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(Instance(id).value("state", ""), "running") << Instance(id).dump();
  EXPECT_EQ(DriverInstances(), before) << "nothing made again, nothing destroyed";
  auto node = Get("/v1/nodes/mig-01", kAdminToken).body;
  ASSERT_EQ(node["gpus"][0]["mig_devices"].size(), 1u) << node.dump();
  EXPECT_EQ(node["gpus"][0]["mig_devices"][0].value("owner", ""), id)
      << "adopted as the instance's own device: " << node.dump();
  EXPECT_EQ(node["gpus"][0]["mig_devices"][0].value("uuid", ""), before[0].value("uuid", ""));
  auto d = Call("DELETE", "/v1/instances/" + id, tenant_);
  EXPECT_EQ(d.status, 200) << d.raw;
  EXPECT_TRUE(WaitFor([&] { return DriverInstances().empty(); }, 15s))
      << "the adopted device goes with its instance: " << ReadFile(dir_.File("agent.log"));
}

TEST_F(MigAgentTest, AnOperatorsDeviceIsNeverPlacedOver) {
  // An operator's 3g.40gb at slice 0: Tessera's 3g.40gb goes to slice 4, and a third waits.
  Join(OneA100({{{"uuid", "MIG-0e000000-0000-0000-0000-000000000001"},
                 {"profile_id", 9},
                 {"start", 0},
                 {"name", "NVIDIA A100-SXM4-80GB MIG 3g.40gb"}}}));
  const std::string a = Slice("3g.40gb", "sleep 60");
  ASSERT_EQ(AwaitState(tenant_, a, "running"), "running") << ReadFile(dir_.File("agent.log"));
  EXPECT_EQ(Instance(a)["gpus"][0].value("mig_start", -1), 4);
  const std::string b = Slice("3g.40gb", "sleep 60");
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Instance(b).value("state", ""), "pending") << Instance(b).dump();
  const json made = DriverInstances();
  ASSERT_EQ(made.size(), 2u);
  EXPECT_EQ(made[0].value("uuid", ""), "MIG-0e000000-0000-0000-0000-000000000001")
      << "the operator's device is untouched";
  // Deleting Tessera's slice leaves the operator's device where it is.
  EXPECT_EQ(Call("DELETE", "/v1/instances/" + a, tenant_).status, 200);
  EXPECT_EQ(Call("DELETE", "/v1/instances/" + b, tenant_).status, 200);
  EXPECT_TRUE(WaitFor([&] { return DriverInstances().size() == 1; }, 10s));
  EXPECT_EQ(DriverInstances()[0].value("uuid", ""), "MIG-0e000000-0000-0000-0000-000000000001");
}

// An operator makes MIG devices with nvidia-smi while the agent runs, one whole and one a bare GPU
// instance (no compute instance): the agent reads its layout again at its next telemetry turn,
// the server books both as unmanaged, and nothing is placed over them.
TEST_F(MigAgentTest, DevicesAnOperatorMakesWhileTheAgentRunsAreNeverPlacedOver) {
  Join(OneA100());
  auto smi = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {std::string(TESSERA_FAKE_NVML_DIR) + "/nvidia-smi"};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::ChildProcess run(argv, dir_.File("nvidia-smi.log"),
                              {{"TESSERA_FAKE_NVML_CONFIG", config_},
                               {"TESSERA_FAKE_NVML_STATE", dir_.File("nvml-state.json")}});
    return run.Stop(0);
  };
  ASSERT_EQ(smi({"mig", "-i", "0", "-cgi", "9:0", "-C"}), 0)
      << ReadFile(dir_.File("nvidia-smi.log"));
  ASSERT_EQ(smi({"mig", "-i", "0", "-cgi", "19:4"}), 0) << ReadFile(dir_.File("nvidia-smi.log"));
  auto devices = [&] {
    return Get("/v1/nodes/mig-01", kAdminToken).body["gpus"][0]["mig_devices"];
  };
  ASSERT_TRUE(WaitFor([&] { return devices().size() == 2; }, 5s)) << devices().dump();
  for (const json& d : devices()) EXPECT_EQ(d.value("owner", ""), "unmanaged") << d.dump();
  // 4g.40gb has one placement, at 0: taken. 3g.40gb at 4 would cover the bare 1g.10gb at 4.
  const std::string four = Slice("4g.40gb", "sleep 60");
  const std::string three = Slice("3g.40gb", "sleep 60");
  const std::string one = Slice("1g.10gb", "sleep 60");
  ASSERT_EQ(AwaitState(tenant_, one, "running"), "running") << ReadFile(dir_.File("agent.log"));
  const int at = Instance(one)["gpus"][0].value("mig_start", -1);
  EXPECT_TRUE(at == 5 || at == 6) << "beside the operator's devices: " << Instance(one).dump();
  EXPECT_EQ(Instance(four).value("state", ""), "pending") << Instance(four).dump();
  EXPECT_EQ(Instance(three).value("state", ""), "pending") << Instance(three).dump();
  EXPECT_EQ(DriverInstances().size(), 3u) << DriverInstances().dump();
}

TEST_F(MigAgentTest, AnIdleGpuIsRepartitionedForARequestThatFitNowhere) {
  // Seven 1g.10gb devices, taken over as free slices (--mig-adopt): a 7g.80gb fits none of them,
  // so the agent destroys them and makes it.
  json devices = json::array();
  for (int s = 0; s < 7; ++s) {
    devices.push_back({{"uuid", fmt::format("MIG-1a000000-0000-0000-0000-00000000000{}", s)},
                       {"profile_id", 19},
                       {"start", s},
                       {"name", "NVIDIA A100-SXM4-80GB MIG 1g.10gb"}});
  }
  Join(OneA100(devices), {"--mig-adopt"});
  ASSERT_EQ(Get("/v1/nodes/mig-01", kAdminToken).body["gpus"][0]["mig_devices"].size(), 7u);
  const std::string id = Slice("7g.80gb", "sleep 60");
  ASSERT_EQ(AwaitState(tenant_, id, "running"), "running") << ReadFile(dir_.File("agent.log"));
  const json made = DriverInstances();
  ASSERT_EQ(made.size(), 1u) << made.dump();
  EXPECT_EQ(made[0].value("profile_id", -1), 0);  // 7g.80gb.
  EXPECT_TRUE(WaitFor(
      [&] {
        return Get("/metrics", kAdminToken)
                   .raw.find("tessera_mig_repartitions_total{node=\"mig-01\"} 1") !=
               std::string::npos;
      },
      5s))
      << "a repartition is counted";
}

TEST_F(MigAgentTest, AHalfMadeDeviceIsDestroyedAndTheInstanceSaysWhy) {
  Join(OneA100(json::array(), {{"fail_calls", {{"nvmlGpuInstanceCreateComputeInstance", 23}}}}));
  const std::string id = Slice("1g.10gb", "sleep 60");
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string s = Instance(id).value("state", "");
        return s == "failed" || s == "terminated";
      },
      10s))
      << Instance(id).dump();
  const std::string reason = Instance(id).value("reason", "");
  EXPECT_NE(reason.find("nvmlGpuInstanceCreateComputeInstance"), std::string::npos) << reason;
  EXPECT_NE(reason.find("destroyed again"), std::string::npos) << reason;
  EXPECT_TRUE(DriverInstances().empty()) << "no GPU instance without its compute instance";
}

// A workload leaves a process behind that still uses its device when its instance ends: the
// device stays (the driver refuses to destroy it), its slices stay booked so nothing is placed
// over it, and it goes once that process does.
TEST_F(MigAgentTest, ADeviceAnOrphanStillUsesIsNotPlacedOverAndGoesWithIt) {
  Join(OneA100());
  const std::string pid_file = Evidence("orphan.pid");
  const std::string id =
      Slice("3g.40gb", "setsid sh -c 'echo $$ > " + pid_file + "; exec sleep 300' & sleep 60");
  ASSERT_EQ(AwaitState(tenant_, id, "running"), "running") << ReadFile(dir_.File("agent.log"));
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(pid_file).empty(); }, 5s));
  const int orphan = std::stoi(ReadFile(pid_file));
  EXPECT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  EXPECT_EQ(AwaitState(tenant_, id, "terminated"), "terminated");
  const std::string whole = Slice("7g.80gb", "sleep 60");
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Instance(whole).value("state", ""), "pending")
      << "the lingering device's slices are not granted: " << Instance(whole).dump();
  EXPECT_EQ(DriverInstances().size(), 1u);
  kill(orphan, SIGKILL);
  EXPECT_EQ(AwaitState(tenant_, whole, "running", 15s), "running")
      << ReadFile(dir_.File("agent.log"));
  ASSERT_EQ(DriverInstances().size(), 1u);
  EXPECT_EQ(DriverInstances()[0].value("profile_id", -1), 0);
}

// An agent that may not make MIG devices runs a slice only on a device that exists, with its
// UUID, and fails one granted where none does, saying so, rather than hand it a UUID CUDA would
// not know.
TEST_F(MigAgentTest, WithoutMigManagementASliceRunsOnlyOnADeviceThatExists) {
  Join(OneA100({{{"uuid", "MIG-7e000000-0000-0000-0000-000000000001"},
                 {"profile_id", 0},
                 {"start", 0},
                 {"name", "NVIDIA A100-SXM4-80GB MIG 7g.80gb"}}}),
       {"--manage-mig", "false"});
  const std::string small = Slice("1g.10gb", "sleep 60");
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string s = Instance(small).value("state", "");
        return s == "failed" || s == "terminated";
      },
      10s))
      << Instance(small).dump();
  EXPECT_NE(Instance(small).value("reason", "").find("no such device, and this agent makes none"),
            std::string::npos)
      << Instance(small).dump();
  const std::string out = Evidence("seen-7g");
  const std::string whole = Slice("7g.80gb", "echo $CUDA_VISIBLE_DEVICES > " + out + "; sleep 60");
  ASSERT_EQ(AwaitState(tenant_, whole, "running"), "running") << ReadFile(dir_.File("agent.log"));
  ASSERT_TRUE(WaitFor([&] { return !ReadFile(out).empty(); }, 5s));
  EXPECT_EQ(ReadFile(out), "MIG-7e000000-0000-0000-0000-000000000001\n");
}

// A GPU into MIG mode on a driver that applies it at the GPU's next reset: the agent waits for
// the operator's leave (pending_reset), then resets it and the GPU serves MIG slices.
TEST_F(MigAgentTest, SetGpuModeWaitsForALeaveToResetThenServesSlices) {
  json config = OneA100();
  config["gpus"][0]["mig"] = false;
  config["gpus"][0]["mig_mode_needs_reset"] = true;
  Join(config, {"--nvidia-smi", std::string(TESSERA_FAKE_NVML_DIR) + "/nvidia-smi"});
  const std::string path = "/v1/nodes/mig-01/gpus/0/mode";
  auto r = Post(path, kAdminToken, {{"mode", "mig"}});
  ASSERT_EQ(r.status, 202) << r.raw;
  auto change = [&] { return Get("/v1/nodes/mig-01", kAdminToken).body["gpus"][0]["mode_change"]; };
  ASSERT_TRUE(WaitFor([&] { return change().value("state", "") == "pending_reset"; }, 10s))
      << change().dump() << ReadFile(dir_.File("agent.log"));
  EXPECT_NE(change().value("reason", "").find("reset"), std::string::npos) << change().dump();
  EXPECT_EQ(Post("/v1/instances", tenant_,
                 {{"billing", "on_demand"},
                  {"gpu_model", "A100-80GB"},
                  {"mig_profile", "1g.10gb"},
                  {"vcpus", 1},
                  {"memory_mib", 1024}})
                .status,
            409)
      << "no GPU is in MIG mode yet";

  r = Post(path, kAdminToken, {{"mode", "mig"}, {"allow_reset", true}});
  ASSERT_EQ(r.status, 202) << r.raw;
  ASSERT_TRUE(WaitFor([&] { return change().value("state", "") == "applied"; }, 10s))
      << change().dump() << ReadFile(dir_.File("agent.log"));
  EXPECT_TRUE(WaitFor(
      [&] {
        return Get("/v1/nodes/mig-01", kAdminToken).body["gpus"][0].value("mode", "") == "mig";
      },
      10s));
  const std::string slice = Slice("1g.10gb", "sleep 60");
  EXPECT_EQ(AwaitState(tenant_, slice, "running"), "running")
      << "a slice runs on a device made after the reset: " << ReadFile(dir_.File("agent.log"));
}

// A process Tessera did not start holds the GPU: the agent refuses the mode change, naming it.
TEST_F(MigAgentTest, SetGpuModeIsRefusedWhileAProcessUsesTheGpu) {
  json config = OneA100();
  config["gpus"][0]["mig"] = false;
  Join(config);
  const std::string uuid = config["gpus"][0].value("uuid", "");
  testing::ChildProcess user({"/bin/sleep", "60"}, dir_.File("user.log"),
                             {{"CUDA_VISIBLE_DEVICES", uuid}});
  auto r = Post("/v1/nodes/mig-01/gpus/0/mode", kAdminToken, {{"mode", "mig"}});
  ASSERT_EQ(r.status, 202) << r.raw;
  json change;
  ASSERT_TRUE(WaitFor(
      [&] {
        change = Get("/v1/nodes/mig-01", kAdminToken).body["gpus"][0]["mode_change"];
        return change.value("state", "") == "refused";
      },
      10s))
      << change.dump();
  EXPECT_NE(change.value("reason", "").find("1 process(es) use GPU 0"), std::string::npos)
      << change.dump();
  EXPECT_EQ(Get("/v1/nodes/mig-01", kAdminToken).body["gpus"][0].value("mode", ""), "exclusive");
}

}  // namespace
}  // namespace tessera
