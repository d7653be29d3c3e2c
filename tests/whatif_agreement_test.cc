// The what-if simulator and a real server agree: the same small trace, run by `tessera sim --mode
// dynamic` and played against a real `tessera server` (simulated agents running `sleep` as real
// processes, in real time), starts its jobs in the same order, and the same jobs wait.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

constexpr const char* kFleet = R"({"name": "agree", "shapes": [{"name": "v100", "count": 1,
  "gpu_model": "V100-16GB", "gpus": 2, "vcpus": 96, "memory_gib": 768, "gpu_mode": "exclusive"}]})";

struct TraceJob {
  int submit_s, duration_s, gpus;
};
// A (1 GPU, 6 s) at 0; B (2 GPUs, 3 s) at 1 waits for A; C (1 GPU, 1 s) at 2 fits beside A.
constexpr TraceJob kTrace[] = {{0, 6, 1}, {1, 3, 2}, {2, 1, 1}};

// Milliseconds since the epoch of an RFC 3339 UTC time as the API writes it
// ("2026-12-02T09:01:35.123Z" or without the fraction); -1 when it is not one.
int64_t UnixMs(const std::string& t) {
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
    return -1;
  }
  if (t.size() > 20 && t[19] == '.') ms = std::atoi(t.c_str() + 20);
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<int64_t>(timegm(&tm)) * 1000 + ms;
}

class WhatifAgreementTest : public ServerTest {
 protected:
  void SetUp() override {
    fleet_path_ = dir_.Write("fleet.json", kFleet);
    StartServer();
  }
};

TEST_F(WhatifAgreementTest, TheSimulatorAndARealServerStartTheSameJobsInTheSameOrder) {
  // The simulator's view.
  std::string csv = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  for (const TraceJob& j : kTrace) {
    csv += fmt::format("2017-10-09 00:00:{:02},{},{},0,x\n", j.submit_s, j.duration_s, j.gpus);
  }
  const std::string trace = dir_.Write("trace.csv", csv);
  const std::string out = dir_.File("sim");
  auto sim = testing::RunTessera(
      {"sim", "--mode", "dynamic", "--nodes", fleet_path_, "--pods", trace, "--out", out});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  std::ifstream in(out + "/summary.json");
  const json summary = json::parse(in, nullptr, false);
  ASSERT_EQ(summary["finished"], 3) << summary.dump();

  // The server's view: the same jobs, created at their submit times (seconds from now).
  const std::string acme = NewTenant("acme", 8);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> ids;
  for (const TraceJob& j : kTrace) {
    std::this_thread::sleep_until(t0 + std::chrono::seconds(j.submit_s));
    json body = {{"billing", "on_demand"},
                 {"gpu_model", "V100-16GB"},
                 {"gpus", j.gpus},
                 {"vcpus", 8 * j.gpus},
                 {"memory_mib", 16384 * j.gpus},
                 {"command", fmt::format("sleep {}", j.duration_s)}};
    auto r = Post("/v1/instances", acme, body);
    ASSERT_EQ(r.status, 201) << r.raw;
    ids.push_back(r.body["id"]);
  }
  for (const std::string& id : ids) {
    EXPECT_EQ(AwaitState(acme, id, "succeeded", std::chrono::seconds(30)), "succeeded")
        << Get("/v1/instances/" + id, acme).body.dump();
  }
  std::vector<std::pair<int64_t, size_t>> server_order, sim_order;
  std::vector<bool> server_waited, sim_waited;
  for (size_t i = 0; i < ids.size(); ++i) {
    const json inst = Get("/v1/instances/" + ids[i], acme).body;
    const std::string started = inst.value("started_at", "");
    ASSERT_FALSE(started.empty()) << inst.dump();
    server_order.push_back({UnixMs(started), i});
    // Waited: started more than a second after it was created (agents act within milliseconds).
    const int64_t created = UnixMs(inst["created_at"].get<std::string>()), began = UnixMs(started);
    ASSERT_GT(created, 0);
    ASSERT_GT(began, 0);
    server_waited.push_back(began - created > 1000);
  }
  // The simulator's jobs are in submission order too (no two share a second).
  const json& starts = summary["first_start_seconds"];
  ASSERT_EQ(starts.size(), ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    sim_order.push_back({starts[i].get<int64_t>(), i});
    sim_waited.push_back(starts[i].get<int64_t>() > kTrace[i].submit_s);
  }
  std::sort(server_order.begin(), server_order.end());
  std::sort(sim_order.begin(), sim_order.end());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(server_order[i].second, sim_order[i].second) << "start #" << i;
  }
  EXPECT_EQ(server_waited, sim_waited);
  EXPECT_EQ(sim_waited, (std::vector<bool>{false, true, false}))
      << "B waits for A; C fits beside it";
}

}  // namespace
}  // namespace tessera
