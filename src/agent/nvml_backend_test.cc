// The NVML backend against the fake libnvidia-ml.so.1 (src/testing/fake_nvml.cc), loaded through
// the backend's real dlopen path and scripted by a JSON file per test.
#include "agent/nvml_backend.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "catalog/catalog_testing.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string FakeLibrary() { return std::string(TESSERA_FAKE_NVML_DIR) + "/libnvidia-ml.so.1"; }

// Four H100s: 0 and 1 linked directly, 2 and 3 through an NVSwitch, 3 in MIG mode with two
// instances. Telemetry on GPU 0 is fully set; GPU 1 has neither ECC nor PCIe counters.
json FourH100s() {
  json gpus = json::array();
  for (int i = 0; i < 4; ++i) {
    gpus.push_back({{"name", "NVIDIA H100 80GB HBM3"},
                    {"uuid", "GPU-1111111" + std::to_string(i) + "-2222-3333-4444-555555555555"},
                    {"memory_mib", 81559},
                    {"mig", false}});
  }
  gpus[0]["nvlink_peers"] = {1};
  gpus[1]["nvlink_peers"] = {0};
  gpus[2]["nvswitches"] = {"00000000:A0:00.0", "00000000:A1:00.0"};
  gpus[3]["nvswitches"] = {"0000:a1:00.0"};  // The legacy spelling of the same switch.
  gpus[3]["mig"] = true;
  gpus[3]["minor"] = 7;  // /dev/nvidia7: minors need not follow indices.
  gpus[3]["mig_devices"] = {{{"uuid", "MIG-aaaaaaaa-0000-0000-0000-000000000001"},
                             {"profile_id", 9},
                             {"start", 4},
                             {"name", "NVIDIA H100 80GB HBM3 MIG 3g.40gb"}},
                            {{"uuid", "MIG-aaaaaaaa-0000-0000-0000-000000000002"},
                             {"profile_id", 19},
                             {"start", 2},
                             {"name", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"}}};
  gpus[0].update({{"util", 37},
                  {"mem_util", 20},
                  {"temperature", 55},
                  {"power_mw", 300500},
                  {"sm_clock", 1980},
                  {"mem_clock", 2619},
                  {"pcie_tx", 1000},
                  {"pcie_rx", 2000},
                  {"ecc_sbe", 3},
                  {"ecc_dbe", 1},
                  {"memory_used_mib", 1024}});
  gpus[1].update({{"util", 90}, {"ecc_sbe", 7}, {"errors", {{"ecc", 3}, {"pcie", 3}}}});
  return {{"driver_version", "550.90.07"},
          {"gpus", gpus},
          {"xids", {{{"gpu", 2}, {"code", 79}}, {{"gpu", 0}, {"code", 48}}}}};
}

class NvmlBackendTest : public ::testing::Test {
 protected:
  void TearDown() override { unsetenv("TESSERA_FAKE_NVML_CONFIG"); }

  // Points the fake at `config` and opens the backend on it.
  Result<std::unique_ptr<GpuBackend>> Open(const json& config, bool manage_mig = false) {
    setenv("TESSERA_FAKE_NVML_CONFIG", dir_.Write("nvml.json", config.dump()).c_str(), 1);
    return OpenNvmlBackend(catalog::EmbeddedCatalogForTest(), FakeLibrary(), manage_mig);
  }

  // The MIG-managing backend on one A100 80GB (in MIG mode when `mig`), its inventory read.
  std::unique_ptr<GpuBackend> OpenA100(bool mig, const json& extra = json::object()) {
    json gpu = {{"name", "NVIDIA A100-SXM4-80GB"},
                {"uuid", "GPU-a1000000-0000-0000-0000-00000000000a"},
                {"memory_mib", 81920},
                {"mig", mig},
                {"mig_model", "A100-80GB"}};
    gpu.update(extra);
    auto backend = Open({{"gpus", {gpu}}}, true);
    EXPECT_TRUE(backend.ok()) << backend.status().ToString();
    if (!backend.ok()) return nullptr;
    EXPECT_TRUE((*backend)->ReadInventory().ok());
    return std::move(*backend);
  }

  testing::TempDir dir_;
};

TEST_F(NvmlBackendTest, Inventory) {
  auto backend = Open(FourH100s());
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  Result<Inventory> inv = (*backend)->ReadInventory();
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->backend, "nvml");
  EXPECT_EQ(inv->driver_version, "550.90.07");
  ASSERT_EQ(inv->gpus.size(), 4u);
  const GpuInfo& g0 = inv->gpus[0];
  EXPECT_EQ(g0.index, 0);
  EXPECT_EQ(g0.uuid, "GPU-11111110-2222-3333-4444-555555555555");
  EXPECT_EQ(g0.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g0.model, "H100-80GB");
  EXPECT_EQ(g0.memory_mib, 81559);
  EXPECT_EQ(g0.pci_bus_id, "00000000:10:00.0");
  EXPECT_FALSE(g0.mig_enabled);
  EXPECT_TRUE(g0.mig_devices.empty());
  EXPECT_EQ(g0.nvlink_peers, std::vector<int>{1});
  EXPECT_EQ(inv->gpus[2].nvlink_peers, std::vector<int>{3});  // Through the switch.
  EXPECT_EQ(inv->nvlink_islands, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));

  const GpuInfo& g3 = inv->gpus[3];
  EXPECT_TRUE(g3.mig_enabled);
  ASSERT_EQ(g3.mig_devices.size(), 2u);
  EXPECT_EQ(g3.mig_devices[0].uuid, "MIG-aaaaaaaa-0000-0000-0000-000000000001");
  EXPECT_EQ(g3.mig_devices[0].profile, "3g.40gb");
  EXPECT_EQ(g3.mig_devices[0].start, 4);
  EXPECT_EQ(g3.mig_devices[1].profile, "1g.10gb");
  EXPECT_EQ(g3.mig_devices[1].start, 2);
  // The ids that, with the GPU's minor, name a MIG device's /dev/nvidia-caps nodes.
  EXPECT_EQ(g0.minor, 0);
  EXPECT_EQ(g3.minor, 7);
  EXPECT_EQ(g3.mig_devices[0].gpu_instance, 1);
  EXPECT_EQ(g3.mig_devices[1].gpu_instance, 2);
  EXPECT_EQ(g3.mig_devices[1].compute_instance, 0);

  int64_t cpu_milli = 0, memory_mib = 0;
  ReadHostResources(cpu_milli, memory_mib);
  EXPECT_EQ(inv->cpu_milli, cpu_milli);
  EXPECT_EQ(inv->memory_mib, memory_mib);
}

TEST_F(NvmlBackendTest, MigProfilesFromNamesWithoutTheMonitorCapability) {
  json config = FourH100s();
  config["mig_no_permission"] = true;
  auto backend = Open(config);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  Result<Inventory> inv = (*backend)->ReadInventory();
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  const GpuInfo& g3 = inv->gpus[3];
  ASSERT_EQ(g3.mig_devices.size(), 2u);
  EXPECT_EQ(g3.mig_devices[0].profile, "3g.40gb");
  EXPECT_EQ(g3.mig_devices[0].start, -1);  // Unknown, not a made-up 0.
  EXPECT_EQ(g3.mig_devices[1].profile, "1g.10gb");
}

TEST_F(NvmlBackendTest, Telemetry) {
  auto backend = Open(FourH100s());
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  Result<Telemetry> t = (*backend)->Sample();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->gpus.size(), 4u);
  const GpuSample& s = t->gpus[0];
  EXPECT_EQ(s.index, 0);
  EXPECT_EQ(s.gpu_util, 37);
  EXPECT_EQ(s.mem_copy_util, 20);
  EXPECT_EQ(s.memory_used_mib, 1024);
  EXPECT_EQ(s.memory_total_mib, 81559);
  EXPECT_EQ(s.temperature_c, 55);
  EXPECT_DOUBLE_EQ(s.power_w, 300.5);
  EXPECT_EQ(s.sm_clock_mhz, 1980);
  EXPECT_EQ(s.mem_clock_mhz, 2619);
  EXPECT_EQ(s.pcie_tx_kib_s, 1000);
  EXPECT_EQ(s.pcie_rx_kib_s, 2000);
  EXPECT_EQ(s.ecc_sbe_total, 3);
  EXPECT_EQ(s.ecc_dbe_total, 1);
  EXPECT_FALSE(s.lost);
  // Not supported: left 0, not an error.
  EXPECT_EQ(t->gpus[1].gpu_util, 90);
  EXPECT_EQ(t->gpus[1].ecc_sbe_total, 0);
  EXPECT_EQ(t->gpus[1].pcie_rx_kib_s, 0);
  EXPECT_EQ(t->gpus[3].gpu_util, 0);  // MIG mode: NVML has no utilization.
}

TEST_F(NvmlBackendTest, XidEventsArriveOnce) {
  auto backend = Open(FourH100s());
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  Result<Telemetry> t = (*backend)->Sample();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->xids.size(), 2u);
  EXPECT_EQ(t->xids[0].gpu, 2);
  EXPECT_EQ(t->xids[0].code, 79);
  EXPECT_EQ(t->xids[1].gpu, 0);
  EXPECT_EQ(t->xids[1].code, 48);
  t = (*backend)->Sample();
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->xids.empty());
}

TEST_F(NvmlBackendTest, ALostGpuIsMarkedLostInSamplesAndFailsInventory) {
  json config = FourH100s();
  config["lost_gpu"] = 1;
  auto backend = Open(config);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  Result<Telemetry> t = (*backend)->Sample();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->gpus[1].lost);
  EXPECT_EQ(t->gpus[1].gpu_util, 0);
  EXPECT_FALSE(t->gpus[0].lost);
  EXPECT_EQ(t->gpus[0].gpu_util, 37);
  Result<Inventory> inv = (*backend)->ReadInventory();
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(inv.status().message(), HasSubstr("GPU 1: nvmlDeviceGetName: GPU is lost"));
}

TEST_F(NvmlBackendTest, AnUnexpectedNvmlErrorNamesTheGpuAndTheCall) {
  json config = FourH100s();
  config["gpus"][2]["errors"] = {{"temperature", 999}};
  auto backend = Open(config);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  Result<Telemetry> t = (*backend)->Sample();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "GPU 2: nvmlDeviceGetTemperature: Unknown Error (NVML error 999)");
}

TEST_F(NvmlBackendTest, InitFailureSaysWhy) {
  json config = FourH100s();
  config["fail_init"] = true;
  auto backend = Open(config);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(),
              HasSubstr("nvmlInit_v2 failed: Driver Not Loaded (NVML error 9)"));
}

TEST_F(NvmlBackendTest, WithoutTheLibraryTheErrorPointsAtTheSimulator) {
  auto backend =
      OpenNvmlBackend(catalog::EmbeddedCatalogForTest(), "/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(),
              HasSubstr("the NVML backend needs the NVIDIA driver: dlopen "
                        "/nonexistent/libnvidia-ml.so.1: "));
  EXPECT_THAT(backend.status().message(),
              HasSubstr("use --backend sim on a machine without a GPU"));
}

TEST_F(NvmlBackendTest, ALibraryThatIsNotNvmlNamesTheMissingFunction) {
  auto backend = OpenNvmlBackend(catalog::EmbeddedCatalogForTest(), "libm.so.6");
  ASSERT_FALSE(backend.ok());
  EXPECT_THAT(backend.status().message(),
              HasSubstr("libm.so.6 does not export nvmlInit_v2 or nvmlInit"));
}

TEST_F(NvmlBackendTest, AnUnknownGpuModelIsNamed) {
  json config = {
      {"gpus", {{{"name", "NVIDIA GH200 480GB"}, {"uuid", "GPU-x"}, {"memory_mib", 97871}}}}};
  auto backend = Open(config);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  Result<Inventory> inv = (*backend)->ReadInventory();
  ASSERT_FALSE(inv.ok());
  EXPECT_EQ(inv.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(inv.status().message(),
              HasSubstr("GPU 0 GPU-x: no catalog GPU model for GPU 'NVIDIA GH200 480GB' with "
                        "97871 MiB"));
}

// The fake records every function called; the backend may call only NVML's read-only queries
// (reference section 10), and must shut NVML down when it is destroyed.
TEST_F(NvmlBackendTest, OnlyReadOnlyCallsAndShutdownAtTheEnd) {
  // Hold the library ourselves, so its record outlives the backend.
  void* lib = dlopen(FakeLibrary().c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  {
    auto backend = Open(FourH100s());
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    ASSERT_TRUE((*backend)->ReadInventory().ok());
    ASSERT_TRUE((*backend)->Sample().ok());
  }
  auto calls_fn = reinterpret_cast<const char* (*)()>(dlsym(lib, "tesseraFakeNvmlCalls"));
  ASSERT_NE(calls_fn, nullptr);
  std::set<std::string> calls;
  std::istringstream lines(calls_fn());
  for (std::string line; std::getline(lines, line);) calls.insert(line);
  dlclose(lib);

  const std::set<std::string> read_only = {"nvmlInit_v2",
                                           "nvmlShutdown",
                                           "nvmlErrorString",
                                           "nvmlSystemGetDriverVersion",
                                           "nvmlDeviceGetCount_v2",
                                           "nvmlDeviceGetHandleByIndex_v2",
                                           "nvmlDeviceGetName",
                                           "nvmlDeviceGetUUID",
                                           "nvmlDeviceGetPciInfo_v3",
                                           "nvmlDeviceGetMinorNumber",
                                           "nvmlDeviceGetComputeInstanceId",
                                           "nvmlDeviceGetMemoryInfo",
                                           "nvmlDeviceGetUtilizationRates",
                                           "nvmlDeviceGetTemperature",
                                           "nvmlDeviceGetPowerUsage",
                                           "nvmlDeviceGetClockInfo",
                                           "nvmlDeviceGetPcieThroughput",
                                           "nvmlDeviceGetTotalEccErrors",
                                           "nvmlDeviceGetNvLinkState",
                                           "nvmlDeviceGetNvLinkRemotePciInfo_v2",
                                           "nvmlDeviceGetMigMode",
                                           "nvmlDeviceGetMaxMigDeviceCount",
                                           "nvmlDeviceGetMigDeviceHandleByIndex",
                                           "nvmlDeviceGetGpuInstanceId",
                                           "nvmlDeviceGetGpuInstanceById",
                                           "nvmlGpuInstanceGetInfo",
                                           "nvmlEventSetCreate",
                                           "nvmlDeviceGetSupportedEventTypes",
                                           "nvmlDeviceRegisterEvents",
                                           "nvmlEventSetWait_v2",
                                           "nvmlEventSetFree",
                                           "tesseraFakeNvmlCalls"};
  for (const std::string& c : calls) EXPECT_TRUE(read_only.contains(c)) << c << " changes state";
  EXPECT_TRUE(calls.contains("nvmlInit_v2"));
  EXPECT_TRUE(calls.contains("nvmlShutdown"));
  EXPECT_TRUE(calls.contains("nvmlEventSetFree"));
  EXPECT_TRUE(calls.contains("nvmlDeviceGetPciInfo_v3"));  // The newest version first.
}

TEST_F(NvmlBackendTest, MakesAMigDeviceAtItsStartAndDestroysIt) {
  auto backend = OpenA100(true);
  ASSERT_TRUE(backend);
  ASSERT_TRUE(backend->CanChangeMig());
  Result<MigDevice> made = backend->CreateMigDevice(0, "3g.40gb", 4);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_THAT(made->uuid, ::testing::StartsWith("MIG-"));
  EXPECT_EQ(made->profile, "3g.40gb");
  EXPECT_EQ(made->start, 4);
  EXPECT_GE(made->gpu_instance, 1);
  EXPECT_EQ(made->compute_instance, 0);
  auto devices = backend->ReadMigDevices(0);
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_EQ((*devices)[0].uuid, made->uuid);
  EXPECT_EQ((*devices)[0].start, 4);
  ASSERT_TRUE(backend->DestroyMigDevice(0, *made).ok());
  EXPECT_TRUE(backend->ReadMigDevices(0)->empty());
  EXPECT_EQ(backend->DestroyMigDevice(0, *made).code(), StatusCode::kNotFound);
}

TEST_F(NvmlBackendTest, MigFailuresAreNamed) {
  auto backend = OpenA100(true);
  ASSERT_TRUE(backend);
  ASSERT_TRUE(backend->CreateMigDevice(0, "4g.40gb", 0).ok());
  // 3g.40gb@0 lies on the 4g's slices: the driver's INSUFFICIENT_RESOURCES.
  Result<MigDevice> taken = backend->CreateMigDevice(0, "3g.40gb", 0);
  EXPECT_EQ(taken.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(taken.status().message(), HasSubstr("MIG 3g.40gb@0: the placement is taken"));
  Result<MigDevice> unknown = backend->CreateMigDevice(0, "5g.50gb", 0);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(), HasSubstr("'5g.50gb' is not one of the A100-80GB's"));
  backend.reset();  // The fake reads its configuration again at the next first nvmlInit.

  auto plain = OpenA100(false);
  ASSERT_TRUE(plain);
  Result<MigDevice> off = plain->CreateMigDevice(0, "1g.10gb", 0);
  EXPECT_EQ(off.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(off.status().message(), HasSubstr("the GPU is not in MIG mode"));
}

TEST_F(NvmlBackendTest, AGpuInstanceWithoutItsComputeInstanceIsDestroyedAgain) {
  json config = {{"gpus",
                  {{{"name", "NVIDIA A100-SXM4-80GB"},
                    {"uuid", "GPU-a1000000-0000-0000-0000-00000000000b"},
                    {"memory_mib", 81920},
                    {"mig", true},
                    {"mig_model", "A100-80GB"}}}},
                 {"fail_calls", {{"nvmlGpuInstanceCreateComputeInstance", 23}}}};
  auto backend = Open(config, true);
  ASSERT_TRUE(backend.ok()) << backend.status().ToString();
  ASSERT_TRUE((*backend)->ReadInventory().ok());
  Result<MigDevice> made = (*backend)->CreateMigDevice(0, "1g.10gb", 3);
  ASSERT_FALSE(made.ok());
  EXPECT_THAT(made.status().message(), HasSubstr("nvmlGpuInstanceCreateComputeInstance"));
  EXPECT_THAT(made.status().message(), HasSubstr("its GPU instance was destroyed again"));
  EXPECT_TRUE((*backend)->ReadMigDevices(0)->empty());
}

TEST_F(NvmlBackendTest, MigModeChangesNowOrAtTheNextReset) {
  auto now = OpenA100(false);
  ASSERT_TRUE(now);
  Result<std::string> set = now->SetMigMode(0, true);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(*set, "applied");
  now.reset();
  auto later = OpenA100(false, {{"mig_mode_needs_reset", true}});
  ASSERT_TRUE(later);
  set = later->SetMigMode(0, true);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(*set, "pending_reset");
}

TEST_F(NvmlBackendTest, ProcessesOnAGpuAreCountedAndStopAModeChange) {
  auto backend = OpenA100(false);
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->CountProcesses(0).value(), 0);
  testing::ChildProcess user(
      {"/bin/sleep", "30"}, dir_.File("user.log"),
      {{"CUDA_VISIBLE_DEVICES", "GPU-a1000000-0000-0000-0000-00000000000a"}});
  // Counted once it runs `sleep`: before its exec the child still has the test's environment.
  int seen = 0;
  for (int tries = 0; tries < 500 && seen != 1; ++tries) {
    seen = backend->CountProcesses(0).value();
    if (seen != 1) usleep(10'000);
  }
  EXPECT_EQ(seen, 1);
  Result<std::string> set = backend->SetMigMode(0, true);
  EXPECT_EQ(set.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(set.status().message(), HasSubstr("GPU 0 is in use"));
}

TEST_F(NvmlBackendTest, WithoutMigManagementNothingIsChanged) {
  auto backend = Open({{"gpus",
                        {{{"name", "NVIDIA A100-SXM4-80GB"},
                          {"uuid", "GPU-a1000000-0000-0000-0000-00000000000c"},
                          {"memory_mib", 81920},
                          {"mig", true},
                          {"mig_model", "A100-80GB"}}}}});
  ASSERT_TRUE(backend.ok());
  EXPECT_FALSE((*backend)->CanChangeMig());
  Result<MigDevice> made = (*backend)->CreateMigDevice(0, "1g.10gb", 0);
  EXPECT_EQ(made.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(made.status().message(), HasSubstr("--manage-mig false"));
  EXPECT_EQ((*backend)->SetMigMode(0, false).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::agent
