#include "agent/sim_backend.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <thread>

#include "catalog/catalog_testing.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<SimBackend> Make(std::string_view gpus, std::string_view node = "node-1",
                                 uint64_t seed = 7, SimHost host = {}) {
  auto b = SimBackend::Create(catalog::EmbeddedCatalogForTest(), gpus, node, seed, host);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

Telemetry SampleOf(SimBackend& b) {
  Result<Telemetry> t = b.Sample();
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : Telemetry{};
}

struct BadSpec {
  std::string spec;
  StatusCode code;
  std::string want;
};

TEST(SimBackendTest, MalformedOrUnknownSpecsNameTheValue) {
  const std::vector<BadSpec> cases = {
      {"H100-80GB", StatusCode::kInvalidArgument, "sim GPUs 'H100-80GB': want MODEL:COUNT"},
      {":8", StatusCode::kInvalidArgument, "sim GPUs ':8': want MODEL:COUNT"},
      {"H100-80GB:", StatusCode::kInvalidArgument, "the count '' is not a whole number"},
      {"H100-80GB:0", StatusCode::kInvalidArgument, "the count '0' is not a whole number from 1"},
      {"H100-80GB:17", StatusCode::kInvalidArgument, "'17' is not a whole number from 1 to 16"},
      {"H100-80GB:8x", StatusCode::kInvalidArgument, "the count '8x'"},
      {"H100-80GB:-1", StatusCode::kInvalidArgument, "the count '-1'"},
      {"H999:8", StatusCode::kNotFound, "sim GPUs 'H999:8': unknown GPU model 'H999'"},
  };
  for (const BadSpec& c : cases) {
    auto b = SimBackend::Create(catalog::EmbeddedCatalogForTest(), c.spec, "n", 1);
    ASSERT_FALSE(b.ok()) << c.spec;
    EXPECT_EQ(b.status().code(), c.code) << c.spec;
    EXPECT_THAT(b.status().message(), HasSubstr(c.want)) << c.spec;
  }
  auto b = SimBackend::Create(catalog::EmbeddedCatalogForTest(), "T4:1", "n", 1, {-1, 0});
  EXPECT_THAT(b.status().message(), HasSubstr("must not be negative"));
}

TEST(SimBackendTest, InventoryOfAnNvlinkNode) {
  auto b = Make("H100-80GB:8");
  Result<Inventory> inv = b->ReadInventory();
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->backend, "sim");
  ASSERT_EQ(inv->gpus.size(), 8u);
  const std::regex uuid("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  std::set<std::string> uuids, buses;
  for (int i = 0; i < 8; ++i) {
    const GpuInfo& g = inv->gpus[static_cast<size_t>(i)];
    EXPECT_EQ(g.index, i);
    EXPECT_EQ(g.model, "H100-80GB");
    EXPECT_EQ(g.memory_mib, 81920);
    EXPECT_FALSE(g.mig_enabled);
    EXPECT_EQ(g.nvlink_peers.size(), 7u);
    EXPECT_TRUE(std::regex_match(g.uuid, uuid)) << g.uuid;
    uuids.insert(g.uuid);
    buses.insert(g.pci_bus_id);
  }
  EXPECT_EQ(uuids.size(), 8u);
  EXPECT_EQ(buses.size(), 8u);
  EXPECT_EQ(inv->nvlink_islands, (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(inv->cpu_milli, 8 * 24'000);
  EXPECT_EQ(inv->memory_mib, 8 * 256 * 1024);
}

TEST(SimBackendTest, PcieModelsHaveNoIslandsAndAliasesResolve) {
  auto b = Make("L40S:4", "node-1", 7, {64'000, 512 * 1024});
  Result<Inventory> inv = b->ReadInventory();
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->nvlink_islands.empty());
  EXPECT_TRUE(inv->gpus[0].nvlink_peers.empty());
  EXPECT_EQ(inv->gpus[0].model, "L40S-48GB");
  EXPECT_EQ(inv->cpu_milli, 64'000);
  EXPECT_EQ(inv->memory_mib, 512 * 1024);
}

TEST(SimBackendTest, UuidsFollowTheNodeNotTheSeed) {
  auto a = Make("A100-80GB-SXM:2", "node-a", 1);
  auto a_again = Make("A100-80GB-SXM:2", "node-a", 99);
  auto other = Make("A100-80GB-SXM:2", "node-b", 1);
  EXPECT_EQ(a->ReadInventory()->gpus[1].uuid, a_again->ReadInventory()->gpus[1].uuid);
  EXPECT_NE(a->ReadInventory()->gpus[1].uuid, other->ReadInventory()->gpus[1].uuid);
  EXPECT_EQ(SimGpuUuid("node-a", 1), a->ReadInventory()->gpus[1].uuid);
}

// The server's agents for a fleet file's nodes give the UUIDs the server gave those GPUs.
TEST(SimBackendTest, GivenUuidsAreReportedAndMustCoverEveryGpu) {
  SimHost host;
  host.gpu_uuids = {"GPU-00000000-0000-5000-8000-000000000001",
                    "GPU-00000000-0000-5000-8000-000000000002"};
  auto b = Make("H100-80GB:2", "node-a", 7, host);
  EXPECT_EQ(b->ReadInventory()->gpus[1].uuid, host.gpu_uuids[1]);
  host.gpu_uuids.pop_back();
  auto short_list =
      SimBackend::Create(catalog::EmbeddedCatalogForTest(), "H100-80GB:2", "node-a", 7, host);
  ASSERT_FALSE(short_list.ok());
  EXPECT_THAT(short_list.status().message(), HasSubstr("1 GPU UUIDs given for 2 GPUs"));
}

TEST(SimBackendTest, AnIdleGpu) {
  auto b = Make("H100-80GB:1");
  GpuSample s = SampleOf(*b).gpus.at(0);
  EXPECT_EQ(s.gpu_util, 0);
  EXPECT_EQ(s.memory_used_mib, 0);
  EXPECT_EQ(s.memory_total_mib, 81920);
  EXPECT_DOUBLE_EQ(s.temperature_c, 30);
  EXPECT_DOUBLE_EQ(s.power_w, 70);  // 10% of the H100's 700 W.
  EXPECT_FALSE(s.lost);
}

TEST(SimBackendTest, ReadingsFollowTheLoad) {
  auto b = Make("H100-80GB:2");
  b->SetLoad(0, 1000);
  b->SetLoad(1, 500);
  Telemetry t = SampleOf(*b);
  const GpuSample& full = t.gpus.at(0);
  const GpuSample& half = t.gpus.at(1);
  EXPECT_GE(full.gpu_util, 98);
  EXPECT_LE(full.gpu_util, 100);
  EXPECT_NEAR(full.temperature_c, 75, 1);
  EXPECT_NEAR(full.power_w, 700, 15);
  EXPECT_EQ(full.memory_used_mib, 73728);  // 90% of 80 GiB.
  EXPECT_NEAR(half.gpu_util, 50, 2);
  EXPECT_NEAR(half.temperature_c, 52.5, 1);
  EXPECT_NEAR(half.power_w, 385, 15);
  EXPECT_GT(full.sm_clock_mhz, half.sm_clock_mhz);
  EXPECT_GT(full.pcie_tx_kib_s, half.pcie_tx_kib_s);
  // Clamped to a whole GPU and to nothing.
  b->SetLoad(0, 5000);
  b->SetLoad(1, -3);
  t = SampleOf(*b);
  EXPECT_LE(t.gpus[0].gpu_util, 100);
  EXPECT_EQ(t.gpus[1].gpu_util, 0);
  b->SetLoad(7, 1000);  // No such GPU: ignored.
}

TEST(SimBackendTest, TheSameSeedRepeatsTheSameReadings) {
  auto run = [](uint64_t seed) {
    auto b = Make("A100-40GB:4", "node-1", seed);
    std::vector<double> utils;
    for (int tick = 0; tick < 20; ++tick) {
      b->SetLoad(tick % 4, 100 * tick % 1000 + 100);
      for (const GpuSample& s : SampleOf(*b).gpus) utils.push_back(s.gpu_util);
    }
    return utils;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(SimBackendTest, InjectedXidsArriveOnce) {
  auto b = Make("H100-80GB:2");
  ASSERT_TRUE(b->InjectXid(1, 48).ok());
  ASSERT_TRUE(b->InjectXid(0, 13).ok());
  Telemetry t = SampleOf(*b);
  ASSERT_EQ(t.xids.size(), 2u);
  EXPECT_EQ(t.xids[0].gpu, 1);
  EXPECT_EQ(t.xids[0].code, 48);
  EXPECT_EQ(t.xids[1].gpu, 0);
  EXPECT_EQ(t.xids[1].code, 13);
  EXPECT_TRUE(SampleOf(*b).xids.empty());
}

TEST(SimBackendTest, AnOverheatingGpuReadsAbove90) {
  auto b = Make("H100-80GB:2");
  ASSERT_TRUE(b->Overheat(1, true).ok());
  Telemetry t = SampleOf(*b);
  EXPECT_GT(t.gpus[1].temperature_c, 90);
  EXPECT_DOUBLE_EQ(t.gpus[0].temperature_c, 30);
  ASSERT_TRUE(b->Overheat(1, false).ok());
  EXPECT_DOUBLE_EQ(SampleOf(*b).gpus[1].temperature_c, 30);
}

TEST(SimBackendTest, ALostGpuReadsLostWithAnXid79) {
  auto b = Make("H100-80GB:2");
  b->SetLoad(0, 800);
  ASSERT_TRUE(b->LoseGpu(0).ok());
  ASSERT_TRUE(b->LoseGpu(0).ok());  // Lost already: no second XID.
  Telemetry t = SampleOf(*b);
  EXPECT_TRUE(t.gpus[0].lost);
  EXPECT_EQ(t.gpus[0].gpu_util, 0);
  EXPECT_EQ(t.gpus[0].power_w, 0);
  EXPECT_FALSE(t.gpus[1].lost);
  ASSERT_EQ(t.xids.size(), 1u);
  EXPECT_EQ(t.xids[0].gpu, 0);
  EXPECT_EQ(t.xids[0].code, 79);
  EXPECT_TRUE(SampleOf(*b).gpus[0].lost);
  // Found again (as after a reset): it answers, and no XID comes of it.
  ASSERT_TRUE(b->InjectFault("found", 0, 0).ok());
  t = SampleOf(*b);
  EXPECT_FALSE(t.gpus[0].lost);
  EXPECT_TRUE(t.xids.empty());
}

TEST(SimBackendTest, FaultsOnAMissingGpuAreRefused) {
  auto b = Make("T4:2");
  Status s = b->InjectXid(2, 79);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("no GPU 2 on this simulated node: it has 2"));
  EXPECT_FALSE(b->Overheat(-1, true).ok());
  EXPECT_FALSE(b->LoseGpu(9).ok());
}

TEST(SimBackendTest, FaultsMayComeFromAnotherThread) {
  auto b = Make("H100-80GB:8");
  constexpr int kXids = 200;
  std::thread admin([&] {
    for (int i = 0; i < kXids; ++i) {
      EXPECT_TRUE(b->InjectXid(i % 8, 31).ok());
      EXPECT_TRUE(b->Overheat(i % 8, i % 2 == 0).ok());
    }
  });
  size_t seen = 0;
  for (int i = 0; i < 200; ++i) seen += SampleOf(*b).xids.size();
  admin.join();
  seen += SampleOf(*b).xids.size();
  EXPECT_EQ(seen, static_cast<size_t>(kXids));
}

}  // namespace
}  // namespace tessera::agent
