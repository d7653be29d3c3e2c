// What the nodes' GPUs read, alone on a fake clock: the series of each node an agent serves,
// labelled with the instance and tenant holding each GPU; an instance's readings over a window,
// for its owner only; a node's GPUs by index; the caller's instances' latest readings. The
// state's tests (state_monitoring_test.cc) carry telemetry through real agents' reports.
#include "core/readings.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using namespace std::chrono_literals;

class ReadingsTest : public ::testing::Test {
 protected:
  ReadingsTest() {
    clock_.Set(Time{} + std::chrono::hours(24 * 365 * 50));
    fleet::NodeSpec spec;
    spec.name = "gpu-1";
    spec.gpus = 2;
    spec.gpu_model = "H100-80GB";
    spec.cpu_milli = 64000;
    spec.memory_mib = 524288;
    spec.gpu_uuids = {"u0", "u1"};
    spec.gpu_modes = {catalog::SharingMode::kExclusive, catalog::SharingMode::kExclusive};
    EXPECT_TRUE(fleet_.AddNode(spec).ok());
    AgentNode node;
    node.name = "gpu-1";
    node.inventory = TestInventory(2);
    node.info = node.SeriesInfo();
    agents_.nodes().emplace("gpu-1", std::move(node));
  }

  // Instance `seq` of `tenant`, running on GPU `gpu` of gpu-1.
  Instance& Run(int64_t seq, const std::string& tenant, int gpu) {
    Instance i = TestInstance(seq, tenant, InstanceState::kRunning);
    i.node = "gpu-1";
    i.gpus = {{"u" + std::to_string(gpu), "H100-80GB", gpu, "", 0, 0}};
    agents_.nodes().at("gpu-1").assigned.insert(i.id.str());
    return instances_.Add(std::move(i));
  }

  // gpu-1's agent reports GPU utilizations `util0` and `util1` now.
  void Report(double util0, double util1) {
    auto t = std::make_shared<telemetry::Telemetry>();
    for (int g = 0; g < 2; ++g) {
      telemetry::GpuSample s;
      s.index = g;
      s.gpu_util = g == 0 ? util0 : util1;
      s.memory_total_mib = 81559;
      t->gpus.push_back(s);
    }
    history_.Record("gpu-1", clock_.Now(), *t);
    AgentNode& node = agents_.nodes().at("gpu-1");
    node.telemetry = t;
    node.telemetry_at = clock_.Now();
  }

  static Tenant TenantOf(const std::string& id) {
    Tenant t;
    t.id = TenantId::Unchecked(id);
    return t;
  }

  FakeClock clock_;
  fleet::Fleet fleet_{&TestCatalog()};
  AgentSupervisor agents_{false};
  InstanceTable instances_;
  telemetry::History history_;
  Readings readings_{&clock_, &fleet_, &agents_, &instances_, &history_};
};

TEST_F(ReadingsTest, NodeSeriesNameWhoHoldsEachGpu) {
  std::vector<telemetry::Target> out;
  readings_.NodeTargets(out);
  ASSERT_EQ(out.size(), 3u) << "the node's own series and one a GPU, before any report";
  EXPECT_EQ(out[0].get(telemetry::Field::kNodeReady), 1);
  Run(1, "tenant-000001", 1);
  Report(10, 95);
  out.clear();
  readings_.NodeTargets(out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].tenant, "");
  EXPECT_EQ(out[1].label("tessera_instance"), nullptr);
  EXPECT_EQ(out[2].tenant, "tenant-000001");
  ASSERT_NE(out[2].label("tessera_instance"), nullptr);
  EXPECT_EQ(*out[2].label("tessera_instance"), "inst-000001");
  EXPECT_EQ(out[2].get(telemetry::Field::kGpuUtil), 95);

  AgentNode unregistered;
  unregistered.name = "gpu-2";
  agents_.nodes().emplace("gpu-2", std::move(unregistered));
  agents_.nodes().at("gpu-1").lost = true;
  out.clear();
  readings_.NodeTargets(out);
  ASSERT_EQ(out.size(), 3u) << "a node whose agent never registered has no series";
  EXPECT_EQ(out[0].get(telemetry::Field::kNodeReady), 0) << "a lost node says so";
}

TEST_F(ReadingsTest, AnInstancesReadingsAreItsOwnersOverTheWindow) {
  const Instance& inst = Run(1, "tenant-000001", 1);
  Report(10, 40);
  clock_.Advance(10s);
  Report(10, 60);
  auto last = readings_.OfInstance(TenantOf("tenant-000001"), inst.id.str(), 5s);
  ASSERT_TRUE(last.ok()) << last.status().message();
  ASSERT_EQ(last->gpus.size(), 1u);
  ASSERT_EQ(last->gpus[0].points.size(), 1u);
  EXPECT_EQ(last->gpus[0].points[0].gpu_util, 60) << "its own GPU, within the window";
  auto all = readings_.OfInstance(TenantOf("tenant-000001"), inst.id.str(), 1h);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->gpus[0].points.size(), 2u);
  const Status other = readings_.OfInstance(TenantOf("tenant-000002"), inst.id.str(), 1h).status();
  EXPECT_EQ(other.code(), StatusCode::kNotFound) << "another tenant's instance is not found";
  EXPECT_EQ(other.message(), "instance 'inst-000001' not found");
  Tenant admin;
  admin.admin = true;
  EXPECT_TRUE(readings_.OfInstance(admin, inst.id.str(), 1h).ok());
}

TEST_F(ReadingsTest, NodeReadingsByGpuAndTheCallersTop) {
  auto before = readings_.OfNode("gpu-1", 1h);
  ASSERT_TRUE(before.ok());
  ASSERT_EQ(before->size(), 2u);
  EXPECT_FALSE((*before)[0].sampled) << "no report yet";
  EXPECT_EQ(readings_.OfNode("gpu-9", 1h).status().code(), StatusCode::kNotFound);

  Run(1, "tenant-000001", 0);
  Run(2, "tenant-000002", 1);
  Report(30, 70);
  auto node = readings_.OfNode("gpu-1", 1h);
  ASSERT_TRUE(node.ok());
  ASSERT_TRUE((*node)[1].sampled && (*node)[1].latest.has_value());
  EXPECT_EQ((*node)[1].latest->gpu_util, 70);
  EXPECT_EQ((*node)[1].points.size(), 1u);

  const auto mine = readings_.Top(TenantOf("tenant-000001"));
  ASSERT_EQ(mine.size(), 1u) << "only the caller's own";
  EXPECT_EQ(mine[0].id, "inst-000001");
  EXPECT_EQ(mine[0].sampled_at, clock_.Now());
  ASSERT_EQ(mine[0].gpus.size(), 1u);
  ASSERT_TRUE(mine[0].gpus[0].latest.has_value());
  EXPECT_EQ(mine[0].gpus[0].latest->gpu_util, 30);
  Tenant admin;
  admin.admin = true;
  EXPECT_EQ(readings_.Top(admin).size(), 2u);
  instances_.Find("inst-000002")->state = InstanceState::kSucceeded;
  EXPECT_EQ(readings_.Top(admin).size(), 1u) << "ended work is not shown";
}

}  // namespace
}  // namespace tessera::core
