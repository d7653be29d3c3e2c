// What the agent puts in its reports, through a transport that records them: telemetry at its
// turn, and at once when a GPU's health changes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/sim_backend.h"
#include "agent/workload.h"
#include "catalog/catalog_testing.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

TEST(AgentReportTest, ALostOrFoundGpuIsReportedAtOnceNotAtTheNextTurn) {
  testing::TempDir dir;
  auto backend = SimBackend::Create(catalog::EmbeddedCatalogForTest(), "H100-80GB:2", "n1", 1);
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  SimBackend* gpus = backend->get();
  WorkloadSupervisor::Options o;
  o.work_dir = dir.path() + "/work";
  o.cgroup_root = "none";
  auto workloads = WorkloadSupervisor::Open(o);
  ASSERT_TRUE(workloads.ok()) << workloads.status().message();
  std::vector<json> reports;  // The bodies of the syncs, in order.
  Transport transport = [&](const std::string& path, const std::string& body,
                            milliseconds) -> Result<HttpAnswer> {
    if (path == "/v1/agent/sync") reports.push_back(json::parse(body));
    return HttpAnswer{200, R"({"node": "n1", "generation": 1, "workloads": []})"};
  };
  AgentOptions options;
  options.long_poll = false;
  Agent agent(options, transport, std::move(*backend), std::move(*workloads));
  ASSERT_TRUE(agent.Register().ok());
  auto sync = [&] {
    const Status s = agent.SyncOnce(milliseconds(0));
    EXPECT_TRUE(s.ok()) << s.message();
    return s.ok() && reports.back().contains("telemetry");
  };
  EXPECT_TRUE(sync()) << "the first report carries telemetry";
  EXPECT_FALSE(sync()) << "the next ones wait for their turn";
  ASSERT_TRUE(gpus->LoseGpu(1).ok());
  EXPECT_TRUE(sync()) << "a GPU fallen off the bus is reported at once";
  EXPECT_TRUE(reports.back()["telemetry"]["gpus"][1].value("lost", false));
  EXPECT_FALSE(sync());
  ASSERT_TRUE(gpus->LoseGpu(1, false).ok());  // Found again, with no XID of its own.
  EXPECT_TRUE(sync()) << "a GPU found again is reported at once";
  EXPECT_FALSE(reports.back()["telemetry"]["gpus"][1].value("lost", false));
}

// Rank 0 of a group may end before any report saw it run: its exit still names the port its
// agent reserved, which the members held back for it are waiting for.
TEST(AgentReportTest, AWorkloadThatHeldAPortNamesItInEveryReportItsExitIncluded) {
  testing::TempDir dir;
  auto backend = SimBackend::Create(catalog::EmbeddedCatalogForTest(), "H100-80GB:1", "n1", 1);
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  WorkloadSupervisor::Options o;
  o.work_dir = dir.path() + "/work";
  o.cgroup_root = "none";
  auto workloads = WorkloadSupervisor::Open(o);
  ASSERT_TRUE(workloads.ok()) << workloads.status().message();
  const json desired = {{"node", "n1"},
                        {"generation", 1},
                        {"workloads",
                         {{{"id", "inst-000001"},
                           {"attempt", 0},
                           {"tenant", "tenant-000001"},
                           {"command", "true"},
                           {"env", json::object()},
                           {"action", "run"},
                           {"reserve_port", "MASTER_PORT"},
                           {"gpu_load", json::array()}}}}};
  std::vector<json> entries;  // Every report of the workload, in order.
  Transport transport = [&](const std::string& path, const std::string& body,
                            milliseconds) -> Result<HttpAnswer> {
    if (path == "/v1/agent/sync") {
      const json report = json::parse(body);
      for (const json& w : report["workloads"]) entries.push_back(w);
    }
    return HttpAnswer{200, desired.dump()};
  };
  AgentOptions options;
  options.long_poll = false;
  Agent agent(options, transport, std::move(*backend), std::move(*workloads));
  ASSERT_TRUE(agent.Register().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((entries.empty() || entries.back()["state"] != "exited") &&
         std::chrono::steady_clock::now() < deadline) {
    ASSERT_TRUE(agent.SyncOnce(milliseconds(0)).ok());
    std::this_thread::sleep_for(milliseconds(20));  // `true` exits on its own time.
  }
  ASSERT_FALSE(entries.empty());
  ASSERT_EQ(entries.back()["state"], "exited") << entries.back().dump();
  for (const json& e : entries) {
    EXPECT_GE(e.value("port", 0), 29500) << "a report without the reserved port: " << e.dump();
  }
}

}  // namespace
}  // namespace tessera::agent
