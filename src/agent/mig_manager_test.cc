// The MIG manager on the NVML backend over the fake libnvidia-ml.so.1 (src/testing/fake_nvml.cc),
// which keeps the driver's rules: what a run of the agent finds at start-up, what it makes and
// destroys, and what it reports.
#include "agent/mig_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/nvml_backend.h"
#include "catalog/catalog_testing.h"
#include "common/csv.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string FakeLibrary() { return std::string(TESSERA_FAKE_NVML_DIR) + "/libnvidia-ml.so.1"; }

class MigManagerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    manager_.reset();
    backend_.reset();
    unsetenv("TESSERA_FAKE_NVML_CONFIG");
  }

  // One A100 80GB in MIG mode with `devices` (the fake's "mig_devices") made at init, and the
  // manager over it after Load, its record in `record` when given. False when anything failed.
  bool Start(const json& devices, const json& record = nullptr, const json& extra = {},
             bool adopt = false) {
    json gpu = {{"name", "NVIDIA A100-SXM4-80GB"},
                {"uuid", "GPU-a1000000-0000-0000-0000-0000000000aa"},
                {"memory_mib", 81920},
                {"mig", true},
                {"mig_model", "A100-80GB"},
                {"mig_devices", devices}};
    json config = {{"gpus", {gpu}}};
    if (!extra.is_null()) config.update(extra);
    setenv("TESSERA_FAKE_NVML_CONFIG", dir_.Write("nvml.json", config.dump()).c_str(), 1);
    auto backend = OpenNvmlBackend(catalog::EmbeddedCatalogForTest(), FakeLibrary(), true);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    if (!backend.ok()) return false;
    backend_ = std::move(*backend);
    auto inv = backend_->ReadInventory();
    EXPECT_TRUE(inv.ok()) << inv.status().ToString();
    if (!inv.ok()) return false;
    if (!record.is_null()) dir_.Write("mig.json", record.dump());
    manager_ = std::make_unique<MigManager>(*backend_, catalog::EmbeddedCatalogForTest(),
                                            MigManagerOptions{record_, adopt});
    load_ = manager_->Load(*inv);
    return true;
  }

  // The driver's devices on GPU 0, bare GPU instances included.
  std::vector<MigDevice> Driver() {
    auto devices = backend_->ReadMigDevices(0);
    EXPECT_TRUE(devices.ok()) << devices.status().ToString();
    return devices.ok() ? *devices : std::vector<MigDevice>{};
  }

  // The record file as the manager last wrote it.
  json Record() {
    auto text = ReadFile(record_);
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    return text.ok() ? json::parse(*text) : json();
  }

  // The reported layout's entry at `start`, or null.
  json At(int start) {
    for (const json& d : manager_->LayoutJson()) {
      if (d["start"] == start) return d;
    }
    return nullptr;
  }

  testing::TempDir dir_;
  std::string record_ = dir_.File("mig.json");
  std::unique_ptr<GpuBackend> backend_;
  std::unique_ptr<MigManager> manager_;
  Status load_;
};

// A run that died between the driver's two create calls left a GPU instance without its compute
// instance at the placement it had recorded: the next run destroys it. One that died after both
// left a whole device there: it is the instance's.
TEST_F(MigManagerTest, WhatAnEarlierRunWasMakingIsDestroyedWhenHalfMadeAndKeptWhenWhole) {
  json devices = {
      {{"profile_id", 19}, {"start", 3}, {"bare", true}},
      {{"profile_id", 15}, {"start", 4}, {"uuid", "MIG-bbbbbbbb-0000-0000-0000-000000000004"}}};
  json record = {
      {"devices", json::array()},
      {"making",
       {{{"gpu", 0}, {"profile", "1g.10gb"}, {"start", 3}, {"instance", "inst-000001"}},
        {{"gpu", 0}, {"profile", "1g.20gb"}, {"start", 4}, {"instance", "inst-000002"}}}}};
  ASSERT_TRUE(Start(devices, record));
  ASSERT_TRUE(load_.ok()) << load_.ToString();
  std::vector<MigDevice> left = Driver();
  ASSERT_EQ(left.size(), 1u) << "the bare GPU instance at 3 is still there";
  EXPECT_EQ(left[0].start, 4);
  EXPECT_FALSE(left[0].bare);
  EXPECT_TRUE(At(3).is_null()) << manager_->LayoutJson().dump();
  EXPECT_EQ(At(4)["owner"], "inst-000002");
  // The record now names the whole device as the instance's, and nothing is being made.
  const json saved = Record();
  EXPECT_FALSE(saved.contains("making")) << saved.dump();
  EXPECT_EQ(
      saved["devices"],
      json({{{"uuid", "MIG-bbbbbbbb-0000-0000-0000-000000000004"}, {"instance", "inst-000002"}}}));
  // Once that instance has ended, its device goes.
  manager_->Release({});
  EXPECT_TRUE(Driver().empty());
}

// A bare GPU instance nobody recorded is an operator's: reported unmanaged, so the server books
// its slices, and never placed over.
TEST_F(MigManagerTest, AnOperatorsBareGpuInstanceIsUnmanagedAndNeverPlacedOver) {
  ASSERT_TRUE(Start({{{"profile_id", 9}, {"start", 0}, {"bare", true}}}));
  ASSERT_TRUE(load_.ok()) << load_.ToString();
  const json d = At(0);
  ASSERT_TRUE(d.is_object()) << manager_->LayoutJson().dump();
  EXPECT_EQ(d["owner"], "unmanaged");
  EXPECT_EQ(d["profile"], "3g.40gb");
  EXPECT_EQ(d["uuid"], "gpu-instance-1");
  Result<MigDevice> over = manager_->Acquire("inst-000001", 0, "1g.10gb", 2);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("which Tessera did not make"));
  ASSERT_EQ(Driver().size(), 1u);
  // Beside it is free: a device is made there.
  Result<MigDevice> beside = manager_->Acquire("inst-000001", 0, "3g.40gb", 4);
  ASSERT_TRUE(beside.ok()) << beside.status().ToString();
  EXPECT_THAT(beside->uuid, ::testing::StartsWith("MIG-"));
}

// The layout is read again at every Rescan: a device an operator makes while the agent runs is
// reported (unmanaged) without waiting for a grant on its GPU, and one destroyed is dropped.
TEST_F(MigManagerTest, ADeviceMadeWhileTheAgentRunsIsReportedAtTheNextRescan) {
  ASSERT_TRUE(Start(json::array()));
  ASSERT_TRUE(load_.ok()) << load_.ToString();
  EXPECT_TRUE(manager_->LayoutJson().empty());
  Result<MigDevice> theirs = backend_->CreateMigDevice(0, "2g.20gb", 2);  // The operator's.
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  EXPECT_TRUE(manager_->LayoutJson().empty()) << "not before the rescan";
  manager_->Rescan();
  EXPECT_EQ(At(2)["owner"], "unmanaged") << manager_->LayoutJson().dump();
  EXPECT_EQ(At(2)["uuid"], theirs->uuid);
  ASSERT_TRUE(backend_->DestroyMigDevice(0, *theirs).ok());
  manager_->Rescan();
  EXPECT_TRUE(manager_->LayoutJson().empty());
}

// A grant whose compute instance the driver refuses, and whose GPU instance then cannot be
// destroyed either, leaves a bare GPU instance: it stays Tessera's (idle, destroyed when a grant
// needs its slices), never an operator's, and the failure is named.
TEST_F(MigManagerTest, AGrantThatLeftABareGpuInstanceKeepsItAsTesserasToDestroyLater) {
  ASSERT_TRUE(
      Start(json::array(), nullptr,
            {{"fail_calls",
              {{"nvmlGpuInstanceCreateComputeInstance", 23}, {"nvmlGpuInstanceDestroy", 23}}}}));
  ASSERT_TRUE(load_.ok()) << load_.ToString();
  Result<MigDevice> made = manager_->Acquire("inst-000001", 0, "1g.10gb", 3);
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(made.status().message(), HasSubstr("nvmlGpuInstanceCreateComputeInstance"));
  EXPECT_THAT(made.status().message(), HasSubstr("destroying its GPU instance failed too"));
  std::vector<MigDevice> left = Driver();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_TRUE(left[0].bare);
  EXPECT_EQ(At(3)["owner"], "") << "idle and Tessera's: " << manager_->LayoutJson().dump();
  EXPECT_FALSE(Record().contains("making"));
}

// A driver that lacks the profile, a GPU out of MIG mode and a corrupt record are each named.
TEST_F(MigManagerTest, FailuresAreNamed) {
  ASSERT_TRUE(Start(json::array(), nullptr,
                    {{"fail_calls", {{"nvmlDeviceGetGpuInstanceProfileInfo", 3}}}}));
  ASSERT_TRUE(load_.ok()) << load_.ToString();
  Result<MigDevice> lacking = manager_->Acquire("inst-000001", 0, "1g.10gb", 0);
  ASSERT_FALSE(lacking.ok());
  EXPECT_THAT(lacking.status().message(), HasSubstr("the driver does not support the profile"));
  Result<MigDevice> off = manager_->Acquire("inst-000001", 1, "1g.10gb", 0);
  EXPECT_THAT(off.status().message(), HasSubstr("GPU 1: the GPU is not in MIG mode"));

  ASSERT_TRUE(Start(json::array(), json({{"devices", "all of them"}})));
  EXPECT_EQ(load_.code(), StatusCode::kDataLoss);
  EXPECT_THAT(load_.message(), HasSubstr(record_));
  ASSERT_TRUE(Start(json::array(), json({{"devices", json::array()}, {"making", {{{"gpu", 0}}}}})));
  EXPECT_THAT(load_.message(), HasSubstr("without its 'gpu' and 'start'"));
}

// With adoption, an operator's devices, whole or bare, become idle ones of Tessera's: a grant
// that needs their slices destroys them (a repartition, counted).
TEST_F(MigManagerTest, AdoptedDevicesAreFreeSlicesThatAGrantRepartitions) {
  ASSERT_TRUE(Start(
      {{{"profile_id", 19}, {"start", 0}}, {{"profile_id", 19}, {"start", 1}, {"bare", true}}},
      nullptr, {}, true));
  ASSERT_TRUE(load_.ok()) << load_.ToString();
  EXPECT_EQ(At(0)["owner"], "");
  EXPECT_EQ(At(1)["owner"], "");
  Result<MigDevice> two = manager_->Acquire("inst-000001", 0, "2g.20gb", 0);
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(manager_->repartitions(), 1);
  std::vector<MigDevice> left = Driver();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].uuid, two->uuid);
  EXPECT_EQ(At(0)["owner"], "inst-000001");
}

}  // namespace
}  // namespace tessera::agent
