// The fixture of the end-to-end tests with node agents: a real `tessera server` on an empty
// fleet, real `tessera agent --backend sim` processes joined to it, and real workloads.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server_test_util.h"

namespace tessera {

// Every agent test starts a server with short protocol timings, and a tenant "acme".
class AgentTest : public ServerTest {
 protected:
  void SetUp() override {
    StartServer(server_flags_, /*with_fleet=*/false);
    tenant_ = NewTenant("acme", 16);
  }

  // Adds a node and starts its agent; waits until the node is ready.
  std::string Join(const std::string& name, const std::string& gpus = "H100-80GB:2",
                   const std::string& sharing = "exclusive",
                   const std::vector<std::string>& extra = {}) {
    auto r = Post("/v1/nodes", kAdminToken, {{"name", name}, {"sharing", sharing}});
    EXPECT_EQ(r.status, 201) << r.raw;
    tokens_[name] = r.body.value("token", "");
    StartAgent(name, gpus, extra);
    EXPECT_TRUE(WaitFor([&] { return NodeState(name) == "ready"; }, std::chrono::seconds(10)))
        << name << " did not join: " << ReadFile(dir_.File(name + ".log"));
    return tokens_[name];
  }

  void StartAgent(const std::string& name, const std::string& gpus = "H100-80GB:2",
                  const std::vector<std::string>& extra = {}) {
    agents_[name] = std::make_unique<AgentProcess>(server_->url(), tokens_[name], WorkDir(name),
                                                   dir_.File(name + ".log"), gpus, extra);
  }

  std::string WorkDir(const std::string& node) { return dir_.File("work-" + node); }
  // A directory every workload uid may write to (sticky, as /tmp), for evidence that must
  // outlive a workload's own directory.
  std::string Evidence(const std::string& name) {
    const std::string dir = dir_.File("evidence");
    std::filesystem::create_directories(dir);
    chmod(dir.c_str(), 01777);
    return dir + "/" + name;
  }

  std::string NodeState(const std::string& name) {
    auto r = Get("/v1/nodes", kAdminToken);
    for (const auto& n : r.body.value("nodes", nlohmann::json::array())) {
      if (n.value("id", "") == name) return n.value("state", "");
    }
    return "";
  }

  nlohmann::json Instance(const std::string& id) {
    return Get("/v1/instances/" + id, tenant_).body;
  }

  bool WaitState(const std::string& id, const std::string& state,
                 std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    return WaitFor([&] { return Instance(id).value("state", "") == state; }, limit);
  }

  // An instance of two H100s writing the time to `beat` every 0.1 s, running on gpu-01, and
  // gpu-02 joined with room for it; its id, and in `node` the node it runs on.
  std::string BeatOnOneOfTwoNodes(std::string& node) {
    Join("gpu-01");
    const std::string id =
        Create(H100(2, "on_demand"), "while true; do date +%s%N > beat; sleep 0.1; done");
    EXPECT_TRUE(WaitState(id, "running")) << Instance(id).dump();
    node = Instance(id).value("node", "");
    Join(node == "gpu-01" ? "gpu-02" : "gpu-01");  // Room for it elsewhere.
    return id;
  }

  // True once instance `id` runs on a node other than `node`.
  bool RunsElsewhere(const std::string& id, const std::string& node) {
    return WaitFor(
        [&] {
          const nlohmann::json j = Instance(id);
          return j.value("state", "") == "running" && j.value("node", "") != node;
        },
        std::chrono::seconds(10));
  }

  // Creates an instance with `command`; returns its id.
  std::string Create(nlohmann::json body, const std::string& command) {
    body["command"] = command;
    auto r = Post("/v1/instances", tenant_, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", "");
  }

  // The directory a workload runs in on its node.
  std::string RunDir(const std::string& node, const std::string& id, int attempt = 0) {
    return WorkDir(node) + "/" + id + "-a" + std::to_string(attempt);
  }

  // A quarter of an L40S with 8 GiB of its memory.
  static nlohmann::json QuarterL40S() {
    return {{"billing", "on_demand"},
            {"gpu_model", "L40S-48GB"},
            {"milli_gpu", 250},
            {"gpu_memory_mib", 8192},
            {"vcpus", 2},
            {"memory_mib", 4096}};
  }

  // The protocol's timing, short: a silent node's work moves 9 s after its last report.
  std::vector<std::string> server_flags_ = {"--node-timeout", "4s", "--outage-bound", "0s",
                                            "--spot-notice",  "2s"};
  std::string tenant_;
  std::map<std::string, std::string> tokens_;
  std::map<std::string, std::unique_ptr<AgentProcess>> agents_;
};

}  // namespace tessera
