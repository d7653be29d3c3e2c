// The fake libnvidia-ml.so.1's MIG calls (src/testing/fake_nvml.cc): the driver's rules for
// creating and destroying instances, the processes that keep them, the state that outlives a
// process, and the fake nvidia-smi that resets a GPU. Each test loads a private copy of the
// library, so it has state of its own as a process would, whatever else this binary loaded.
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "agent/nvml_api.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

namespace nv = nvml;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr nv::nvmlReturn_t kOk = nv::NVML_SUCCESS;

std::string FakeDir() { return TESSERA_FAKE_NVML_DIR; }

// A GPU UUID no other test, here or in another process, uses: the fake decides what a process
// uses by the UUIDs in its environment.
std::string NewGpuUuid() {
  static int serial = 0;
  char out[64];
  std::snprintf(out, sizeof(out), "GPU-%08x-0000-4000-8000-%012x", static_cast<unsigned>(getpid()),
                static_cast<unsigned>(++serial));
  return out;
}

json A100(const std::string& uuid, bool mig = true) {
  return {{"name", "NVIDIA A100-SXM4-80GB"},
          {"uuid", uuid},
          {"memory_mib", 81920},
          {"mig", mig},
          {"mig_model", "A100-80GB"}};
}

// The fake's functions, from one copy of the library.
struct FakeNvml {
  void* lib = nullptr;
  int inits = 0;
  nv::nvmlInit_fn init = nullptr;
  nv::nvmlShutdown_fn shutdown = nullptr;
  nv::nvmlDeviceGetHandleByIndex_fn gpu = nullptr;
  nv::nvmlDeviceGetString_fn uuid = nullptr;
  nv::nvmlDeviceGetString_fn name = nullptr;
  nv::nvmlDeviceGetMigMode_fn get_mode = nullptr;
  nv::nvmlDeviceSetMigMode_fn set_mode = nullptr;
  nv::nvmlDeviceGetUint_fn max_mig = nullptr;
  nv::nvmlDeviceGetMigDeviceHandleByIndex_fn mig_device = nullptr;
  nv::nvmlDeviceGetUint_fn gi_id = nullptr;
  nv::nvmlDeviceGetUint_fn ci_id = nullptr;
  nv::nvmlDeviceGetGpuInstanceProfileInfo_fn gi_profile = nullptr;
  nv::nvmlDeviceCreateGpuInstanceWithPlacement_fn create_gi = nullptr;
  nv::nvmlReturn_t (*create_gi_anywhere)(nv::nvmlDevice_t, unsigned int,
                                         nv::nvmlGpuInstance_t*) = nullptr;
  nv::nvmlDeviceGetGpuInstanceById_fn gi_by_id = nullptr;
  nv::nvmlGpuInstanceGetInfo_fn gi_info = nullptr;
  nv::nvmlGpuInstanceDestroy_fn destroy_gi = nullptr;
  nv::nvmlGpuInstanceGetComputeInstanceProfileInfo_fn ci_profile = nullptr;
  nv::nvmlGpuInstanceCreateComputeInstance_fn create_ci = nullptr;
  nv::nvmlGpuInstanceGetComputeInstanceById_fn ci_by_id = nullptr;
  nv::nvmlComputeInstanceDestroy_fn destroy_ci = nullptr;
  nv::nvmlDeviceGetComputeRunningProcesses_fn processes = nullptr;
  nv::nvmlReturn_t (*reset)(unsigned int) = nullptr;
  nv::nvmlDeviceGetGpuInstances_fn gpu_instances = nullptr;
  nv::nvmlDeviceGetGpuInstancePossiblePlacements_fn placements = nullptr;

  FakeNvml() = default;
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;
  ~FakeNvml() {
    for (; inits > 0; --inits) shutdown();
    if (lib != nullptr) dlclose(lib);
  }

  // Loads a copy of the fake, made at `copy`. Empty, or what went wrong.
  std::string Load(const std::string& copy) {
    std::filesystem::copy_file(FakeDir() + "/libnvidia-ml.so.1", copy);
    lib = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return dlerror();
    std::string missing;
    auto find = [&](auto& fn, const char* symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (fn == nullptr) missing += std::string(" ") + symbol;
    };
    find(init, "nvmlInit_v2");
    find(shutdown, "nvmlShutdown");
    find(gpu, "nvmlDeviceGetHandleByIndex_v2");
    find(uuid, "nvmlDeviceGetUUID");
    find(name, "nvmlDeviceGetName");
    find(get_mode, "nvmlDeviceGetMigMode");
    find(set_mode, "nvmlDeviceSetMigMode");
    find(max_mig, "nvmlDeviceGetMaxMigDeviceCount");
    find(mig_device, "nvmlDeviceGetMigDeviceHandleByIndex");
    find(gi_id, "nvmlDeviceGetGpuInstanceId");
    find(ci_id, "nvmlDeviceGetComputeInstanceId");
    find(gi_profile, "nvmlDeviceGetGpuInstanceProfileInfo");
    find(create_gi, "nvmlDeviceCreateGpuInstanceWithPlacement");
    find(create_gi_anywhere, "nvmlDeviceCreateGpuInstance");
    find(gi_by_id, "nvmlDeviceGetGpuInstanceById");
    find(gi_info, "nvmlGpuInstanceGetInfo");
    find(destroy_gi, "nvmlGpuInstanceDestroy");
    find(ci_profile, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
    find(create_ci, "nvmlGpuInstanceCreateComputeInstance");
    find(ci_by_id, "nvmlGpuInstanceGetComputeInstanceById");
    find(destroy_ci, "nvmlComputeInstanceDestroy");
    find(processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    find(reset, "tesseraFakeNvmlResetGpu");
    find(gpu_instances, "nvmlDeviceGetGpuInstances");
    find(placements, "nvmlDeviceGetGpuInstancePossiblePlacements_v2");
    return missing.empty() ? "" : "missing:" + missing;
  }

  nv::nvmlReturn_t Init() {
    const nv::nvmlReturn_t r = init();
    if (r == kOk) ++inits;
    return r;
  }
  void Shutdown() {
    shutdown();
    --inits;
  }

  nv::nvmlDevice_t Gpu(unsigned int index) {
    nv::nvmlDevice_t dev = nullptr;
    EXPECT_EQ(gpu(index, &dev), kOk);
    return dev;
  }
  // The device's UUID, or "error N".
  std::string Uuid(nv::nvmlDevice_t dev) {
    char out[nv::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    const nv::nvmlReturn_t r = uuid(dev, out, sizeof(out));
    return r == kOk ? out : "error " + std::to_string(r);
  }
  std::string Name(nv::nvmlDevice_t dev) {
    char out[nv::NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    const nv::nvmlReturn_t r = name(dev, out, sizeof(out));
    return r == kOk ? out : "error " + std::to_string(r);
  }
  nv::nvmlReturn_t CreateGi(nv::nvmlDevice_t dev, unsigned int profile, unsigned int start,
                            unsigned int size, nv::nvmlGpuInstance_t* gi) {
    const nv::nvmlGpuInstancePlacement_t placement{start, size};
    return create_gi(dev, profile, &placement, gi);
  }
  nv::nvmlGpuInstanceInfo_t Info(nv::nvmlGpuInstance_t gi) {
    nv::nvmlGpuInstanceInfo_t info{};
    EXPECT_EQ(gi_info(gi, &info), kOk);
    return info;
  }
  // "current/pending".
  std::string Mode(nv::nvmlDevice_t dev) {
    unsigned int current = 9, pending = 9;
    EXPECT_EQ(get_mode(dev, &current, &pending), kOk);
    return std::to_string(current) + "/" + std::to_string(pending);
  }
  // The processes on `dev`, asking for the count first as callers do.
  std::vector<nv::nvmlProcessInfo_t> Processes(nv::nvmlDevice_t dev) {
    unsigned int count = 0;
    const nv::nvmlReturn_t r = processes(dev, &count, nullptr);
    std::vector<nv::nvmlProcessInfo_t> out(count);
    if (r == kOk) return out;
    EXPECT_EQ(r, nv::NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT_EQ(processes(dev, &count, out.data()), kOk);
    out.resize(count);
    return out;
  }
  // Waits until the fake sees process `pid` on `dev`, which it does once the child has exec'd
  // with its environment.
  bool WaitForProcess(nv::nvmlDevice_t dev, int pid) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      for (const nv::nvmlProcessInfo_t& p : Processes(dev)) {
        if (static_cast<int>(p.pid) == pid) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
};

class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(nvml_.Load(dir_.File("libnvidia-ml.so.1")), ""); }
  void TearDown() override {
    unsetenv("TESSERA_FAKE_NVML_CONFIG");
    unsetenv("TESSERA_FAKE_NVML_STATE");
  }

  // Points the fake at `config` (and at the state file, `with_state`) and initializes it.
  nv::nvmlReturn_t Init(const json& config, bool with_state = false) {
    setenv("TESSERA_FAKE_NVML_CONFIG", dir_.Write("nvml.json", config.dump()).c_str(), 1);
    if (with_state) setenv("TESSERA_FAKE_NVML_STATE", StatePath().c_str(), 1);
    return nvml_.Init();
  }
  std::string StatePath() const { return dir_.File("state.json"); }

  // Runs the fake nvidia-smi with `args`.
  testing::CommandResult NvidiaSmi(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FakeDir() + "/nvidia-smi"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string out = dir_.File("smi.out"), err = dir_.File("smi.err");
    const pid_t pid = fork();
    if (pid == 0) {
      if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(127);
      testing::ExecArgv(argv);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    testing::CommandResult result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    auto slurp = [](const std::string& path) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      return text.str();
    };
    result.out = slurp(out);
    result.err = slurp(err);
    return result;
  }

  testing::TempDir dir_;
  FakeNvml nvml_;
};

TEST_F(FakeNvmlTest, ACreatedInstanceIsAMigDeviceWithAFreshUuid) {
  ASSERT_EQ(Init({{"gpus", {A100(NewGpuUuid())}}}), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlGpuInstanceProfileInfo_t profile{};
  ASSERT_EQ(nvml_.gi_profile(dev, 0, &profile), kOk);  // NVML_GPU_INSTANCE_PROFILE_1_SLICE
  EXPECT_EQ(profile.id, 19u);
  EXPECT_EQ(profile.sliceCount, 1u);
  EXPECT_EQ(profile.instanceCount, 7u);
  EXPECT_EQ(profile.memorySizeMB, 9856u);

  nv::nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, profile.id, 3, 1, &gi), kOk);
  const nv::nvmlGpuInstanceInfo_t info = nvml_.Info(gi);
  EXPECT_EQ(info.device, dev);
  EXPECT_EQ(info.id, 1u);
  EXPECT_EQ(info.profileId, 19u);
  EXPECT_EQ(info.placement.start, 3u);
  EXPECT_EQ(info.placement.size, 1u);
  nv::nvmlGpuInstance_t found = nullptr;
  ASSERT_EQ(nvml_.gi_by_id(dev, 1, &found), kOk);
  EXPECT_EQ(found, gi);

  nv::nvmlComputeInstanceProfileInfo_t ci_profile{};
  ASSERT_EQ(nvml_.ci_profile(gi, 0, nv::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &ci_profile),
            kOk);
  EXPECT_EQ(ci_profile.id, 0u);
  EXPECT_EQ(ci_profile.sliceCount, 1u);
  EXPECT_EQ(ci_profile.instanceCount, 1u);
  nv::nvmlComputeInstance_t ci = nullptr;
  ASSERT_EQ(nvml_.create_ci(gi, ci_profile.id, &ci), kOk);
  nv::nvmlComputeInstance_t ci_found = nullptr;
  ASSERT_EQ(nvml_.ci_by_id(gi, 0, &ci_found), kOk);
  EXPECT_EQ(ci_found, ci);
  EXPECT_EQ(nvml_.ci_by_id(gi, 1, &ci_found), nv::NVML_ERROR_NOT_FOUND);

  unsigned int max = 0;
  ASSERT_EQ(nvml_.max_mig(dev, &max), kOk);
  EXPECT_EQ(max, 7u);
  nv::nvmlDevice_t mig = nullptr, none = nullptr;
  ASSERT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  EXPECT_EQ(nvml_.mig_device(dev, 1, &none), nv::NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvml_.mig_device(dev, 7, &none), nv::NVML_ERROR_INVALID_ARGUMENT);
  const std::string uuid = nvml_.Uuid(mig);
  EXPECT_THAT(uuid,
              MatchesRegex("MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"));
  EXPECT_EQ(nvml_.Name(mig), "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
  unsigned int id = 9;
  ASSERT_EQ(nvml_.gi_id(mig, &id), kOk);
  EXPECT_EQ(id, 1u);
  ASSERT_EQ(nvml_.ci_id(mig, &id), kOk);
  EXPECT_EQ(id, 0u);

  // Destroyed, the MIG device's handle is stale; made again, it has a new UUID.
  ASSERT_EQ(nvml_.destroy_ci(ci), kOk);
  EXPECT_EQ(nvml_.mig_device(dev, 0, &none), nv::NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvml_.Uuid(mig), "error 2");
  EXPECT_EQ(nvml_.destroy_ci(ci), nv::NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(nvml_.create_ci(gi, 0, &ci), kOk);
  ASSERT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  EXPECT_THAT(nvml_.Uuid(mig), MatchesRegex("MIG-.*"));
  EXPECT_NE(nvml_.Uuid(mig), uuid);
}

TEST_F(FakeNvmlTest, ProfileIndicesFollowNvmlsConstants) {
  json a30 = {{"name", "NVIDIA A30"},
              {"uuid", NewGpuUuid()},
              {"memory_mib", 24576},
              {"mig", true},
              {"mig_model", "A30-24GB"}};
  json no_table = A100(NewGpuUuid());
  no_table.erase("mig_model");
  ASSERT_EQ(Init({{"gpus", {A100(NewGpuUuid(), false), a30, no_table}}}), kOk);
  struct Case {
    int gpu;
    unsigned int index;
    nv::nvmlReturn_t code;
    unsigned int id = 0, slices = 0;
  };
  const Case cases[] = {
      {0, 0x0, kOk, 19, 1},  // 1g.10gb; the mode does not matter.
      {0, 0x1, kOk, 14, 2},
      {0, 0x2, kOk, 9, 3},
      {0, 0x3, kOk, 5, 4},
      {0, 0x4, kOk, 0, 7},
      {0, 0x5, nv::NVML_ERROR_NOT_SUPPORTED},  // 8 slices.
      {0, 0x6, nv::NVML_ERROR_NOT_SUPPORTED},  // 6 slices.
      {0, 0x7, kOk, 20, 1},                    // 1_SLICE_REV1: 1g.10gb+me.
      {0, 0x8, nv::NVML_ERROR_NOT_SUPPORTED},  // 2_SLICE_REV1: no 2g+me on an A100.
      {0, 0x9, kOk, 15, 1},                    // 1_SLICE_REV2: 1g.20gb.
      {0, 0xA, nv::NVML_ERROR_NOT_SUPPORTED},
      {0, 0x11, nv::NVML_ERROR_NOT_SUPPORTED},
      {0, 0x12, nv::NVML_ERROR_INVALID_ARGUMENT},  // Past NVML_GPU_INSTANCE_PROFILE_COUNT.
      {1, 0x3, kOk, 0, 4},                         // 4g.24gb, the whole A30.
      {1, 0x8, kOk, 6, 2},                         // 2g.12gb+me.
      {1, 0x4, nv::NVML_ERROR_NOT_SUPPORTED},
      {2, 0x0, nv::NVML_ERROR_NOT_SUPPORTED},  // MIG without a "mig_model".
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("GPU " + std::to_string(c.gpu) + " index " + std::to_string(c.index));
    nv::nvmlGpuInstanceProfileInfo_t info{};
    ASSERT_EQ(nvml_.gi_profile(nvml_.Gpu(static_cast<unsigned>(c.gpu)), c.index, &info), c.code);
    if (c.code != kOk) continue;
    EXPECT_EQ(info.id, c.id);
    EXPECT_EQ(info.sliceCount, c.slices);
  }
  nv::nvmlGpuInstance_t gi = nullptr;
  EXPECT_EQ(nvml_.CreateGi(nvml_.Gpu(2), 19, 0, 1, &gi), nv::NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(FakeNvmlTest, PlacementsFollowTheTable) {
  ASSERT_EQ(Init({{"gpus", {A100(NewGpuUuid()), A100(NewGpuUuid(), false)}}}), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlGpuInstance_t first = nullptr, gi = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, 9, 0, 4, &first), kOk);  // 3g.40gb on memory slices 0-3.
  EXPECT_EQ(nvml_.CreateGi(dev, 19, 2, 1, &gi), nv::NVML_ERROR_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(nvml_.CreateGi(dev, 9, 2, 4, &gi), nv::NVML_ERROR_INVALID_ARGUMENT);   // Start.
  EXPECT_EQ(nvml_.CreateGi(dev, 9, 4, 2, &gi), nv::NVML_ERROR_INVALID_ARGUMENT);   // Size.
  EXPECT_EQ(nvml_.CreateGi(dev, 77, 0, 1, &gi), nv::NVML_ERROR_INVALID_ARGUMENT);  // Profile.
  ASSERT_EQ(nvml_.CreateGi(dev, 20, 4, 1, &gi), kOk);                              // +me.
  EXPECT_EQ(nvml_.Info(gi).id, 2u);
  EXPECT_EQ(nvml_.CreateGi(dev, 20, 5, 1, &gi), nv::NVML_ERROR_INSUFFICIENT_RESOURCES);
  ASSERT_EQ(nvml_.CreateGi(dev, 19, 5, 1, &gi), kOk);
  EXPECT_EQ(nvml_.Info(gi).id, 3u);

  // Ids are the smallest free; without a placement the lowest free start is taken.
  ASSERT_EQ(nvml_.destroy_gi(first), kOk);
  EXPECT_EQ(nvml_.gi_info(first, nullptr), nv::NVML_ERROR_INVALID_ARGUMENT);  // Stale.
  ASSERT_EQ(nvml_.CreateGi(dev, 19, 1, 1, &gi), kOk);
  EXPECT_EQ(nvml_.Info(gi).id, 1u);
  ASSERT_EQ(nvml_.create_gi_anywhere(dev, 19, &gi), kOk);
  EXPECT_EQ(nvml_.Info(gi).id, 4u);
  EXPECT_EQ(nvml_.Info(gi).placement.start, 0u);
  EXPECT_EQ(nvml_.create_gi_anywhere(dev, 9, &gi), nv::NVML_ERROR_INSUFFICIENT_RESOURCES);

  // MIG off: nothing can be made.
  EXPECT_EQ(nvml_.CreateGi(nvml_.Gpu(1), 19, 0, 1, &gi), nv::NVML_ERROR_NOT_SUPPORTED);
}

// The queries that list what is there: every legal placement of a profile (used or not), and the
// GPU instances of a profile, those without a compute instance included; an operator's
// nvidia-smi makes devices through the same calls, seen by this process.
TEST_F(FakeNvmlTest, PlacementsAndGpuInstancesAreListedAsTheDriverListsThem) {
  ASSERT_EQ(Init({{"gpus", {A100(NewGpuUuid())}}}, /*with_state=*/true), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  unsigned int count = 0;
  ASSERT_EQ(nvml_.placements(dev, 15, nullptr, &count), kOk);  // 1g.20gb: starts 0, 2, 4, 6.
  EXPECT_EQ(count, 4u);
  std::vector<nv::nvmlGpuInstancePlacement_t> all(count);
  ASSERT_EQ(nvml_.placements(dev, 15, all.data(), &count), kOk);
  EXPECT_EQ(all[3].start, 6u);
  EXPECT_EQ(all[3].size, 2u);
  unsigned int small = 2;
  EXPECT_EQ(nvml_.placements(dev, 15, all.data(), &small), nv::NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(small, 4u);
  EXPECT_EQ(nvml_.placements(dev, 77, nullptr, &count), nv::NVML_ERROR_INVALID_ARGUMENT);

  nv::nvmlGpuInstance_t a = nullptr, b = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, 19, 0, 1, &a), kOk);  // Bare: no compute instance.
  ASSERT_EQ(nvml_.CreateGi(dev, 19, 3, 1, &b), kOk);
  std::vector<nv::nvmlGpuInstance_t> found(7);
  count = 7;
  ASSERT_EQ(nvml_.gpu_instances(dev, 19, found.data(), &count), kOk);
  ASSERT_EQ(count, 2u);
  EXPECT_EQ(found[0], a);
  EXPECT_EQ(found[1], b);
  count = 1;
  EXPECT_EQ(nvml_.gpu_instances(dev, 19, found.data(), &count), nv::NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
  count = 7;
  ASSERT_EQ(nvml_.gpu_instances(dev, 9, found.data(), &count), kOk);
  EXPECT_EQ(count, 0u);

  testing::CommandResult smi = NvidiaSmi({"mig", "-i", "0", "-cgi", "9:4", "-C"});
  ASSERT_EQ(smi.exit_code, 0) << smi.err;
  EXPECT_THAT(smi.out, HasSubstr("Successfully created GPU instance ID  3 on GPU  0"));
  EXPECT_THAT(smi.out, HasSubstr("Successfully created compute instance"));
  count = 7;
  ASSERT_EQ(nvml_.gpu_instances(dev, 9, found.data(), &count), kOk);
  ASSERT_EQ(count, 1u) << "this process sees the operator's device";
  EXPECT_EQ(nvml_.Info(found[0]).placement.start, 4u);
  nv::nvmlDevice_t mig = nullptr;
  EXPECT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  smi = NvidiaSmi({"mig", "-i", "0", "-cgi", "9:4", "-C"});
  EXPECT_EQ(smi.exit_code, 255);
  EXPECT_THAT(smi.err, HasSubstr("Insufficient Resources"));
  smi = NvidiaSmi({"mig", "-i", "0", "-cgi", "nine"});
  EXPECT_EQ(smi.exit_code, 2);
  EXPECT_THAT(smi.err, HasSubstr("'nine' is not PROFILE_ID[:START]"));
}

TEST_F(FakeNvmlTest, ComputeInstancesShareTheirGpuInstance) {
  ASSERT_EQ(Init({{"gpus", {A100(NewGpuUuid())}}}), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, 9, 4, 4, &gi), kOk);  // 3g.40gb.
  const unsigned int shared = nv::NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED;
  nv::nvmlComputeInstanceProfileInfo_t info{};
  ASSERT_EQ(nvml_.ci_profile(gi, 0, shared, &info), kOk);
  EXPECT_EQ(info.sliceCount, 1u);
  EXPECT_EQ(info.instanceCount, 3u);
  ASSERT_EQ(nvml_.ci_profile(gi, 2, shared, &info), kOk);
  EXPECT_EQ(info.id, 2u);
  EXPECT_EQ(info.sliceCount, 3u);
  EXPECT_EQ(info.instanceCount, 1u);
  for (unsigned int index : {3u, 4u, 5u, 6u, 7u}) {
    EXPECT_EQ(nvml_.ci_profile(gi, index, shared, &info), nv::NVML_ERROR_NOT_SUPPORTED) << index;
  }
  EXPECT_EQ(nvml_.ci_profile(gi, 8, shared, &info), nv::NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvml_.ci_profile(gi, 0, 1, &info), nv::NVML_ERROR_NOT_SUPPORTED);

  nv::nvmlComputeInstance_t two = nullptr, one = nullptr, ci = nullptr;
  ASSERT_EQ(nvml_.create_ci(gi, 1, &two), kOk);
  EXPECT_EQ(nvml_.create_ci(gi, 1, &ci), nv::NVML_ERROR_INSUFFICIENT_RESOURCES);
  ASSERT_EQ(nvml_.create_ci(gi, 0, &one), kOk);
  EXPECT_EQ(nvml_.create_ci(gi, 0, &ci), nv::NVML_ERROR_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(nvml_.create_ci(gi, 3, &ci), nv::NVML_ERROR_NOT_SUPPORTED);
  nv::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  EXPECT_EQ(nvml_.Name(mig), "NVIDIA A100-SXM4-80GB MIG 2c.3g.40gb");
  ASSERT_EQ(nvml_.mig_device(dev, 1, &mig), kOk);
  unsigned int id = 9;
  ASSERT_EQ(nvml_.ci_id(mig, &id), kOk);
  EXPECT_EQ(id, 1u);

  EXPECT_EQ(nvml_.destroy_gi(gi), nv::NVML_ERROR_IN_USE);
  ASSERT_EQ(nvml_.destroy_ci(two), kOk);
  EXPECT_EQ(nvml_.destroy_gi(gi), nv::NVML_ERROR_IN_USE);
  ASSERT_EQ(nvml_.destroy_ci(one), kOk);
  EXPECT_EQ(nvml_.destroy_gi(gi), kOk);
  EXPECT_EQ(nvml_.destroy_gi(gi), nv::NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(FakeNvmlTest, AProcessOnAMigDeviceKeepsIt) {
  ASSERT_EQ(Init({{"gpus", {A100(NewGpuUuid())}}}), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlGpuInstance_t gi = nullptr;
  nv::nvmlComputeInstance_t ci = nullptr;
  nv::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, 14, 2, 2, &gi), kOk);  // 2g.20gb, GPU instance 1.
  ASSERT_EQ(nvml_.create_ci(gi, 1, &ci), kOk);
  ASSERT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  EXPECT_TRUE(nvml_.Processes(mig).empty());
  {
    testing::ChildProcess sleeper(
        {"/bin/sleep", "30"}, dir_.File("sleep.log"),
        {{"CUDA_VISIBLE_DEVICES", "GPU-00000000-0000-0000-0000-000000000000, " + nvml_.Uuid(mig)}});
    ASSERT_TRUE(nvml_.WaitForProcess(mig, sleeper.pid()));
    const std::vector<nv::nvmlProcessInfo_t> on_mig = nvml_.Processes(mig);
    ASSERT_EQ(on_mig.size(), 1u);
    EXPECT_EQ(on_mig[0].gpuInstanceId, 1u);
    EXPECT_EQ(on_mig[0].computeInstanceId, 0u);
    const std::vector<nv::nvmlProcessInfo_t> on_gpu = nvml_.Processes(dev);
    ASSERT_EQ(on_gpu.size(), 1u);
    EXPECT_EQ(static_cast<int>(on_gpu[0].pid), sleeper.pid());
    EXPECT_EQ(on_gpu[0].gpuInstanceId, 1u);

    EXPECT_EQ(nvml_.destroy_ci(ci), nv::NVML_ERROR_IN_USE);
    EXPECT_EQ(nvml_.reset(0), nv::NVML_ERROR_IN_USE);
    sleeper.Stop(SIGKILL);
  }
  EXPECT_TRUE(nvml_.Processes(dev).empty());
  EXPECT_EQ(nvml_.destroy_ci(ci), kOk);
  EXPECT_EQ(nvml_.destroy_gi(gi), kOk);
}

TEST_F(FakeNvmlTest, MigModeChangesOnlyOnAnIdleGpu) {
  const std::string uuid = NewGpuUuid();
  json plain = A100(NewGpuUuid());
  plain.erase("mig");
  ASSERT_EQ(Init({{"gpus", {A100(uuid, false), plain}}}, /*with_state=*/true), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlReturn_t activation = kOk;
  {
    testing::ChildProcess user({"/bin/sleep", "30"}, dir_.File("sleep.log"),
                               {{"NVIDIA_VISIBLE_DEVICES", uuid}});
    ASSERT_TRUE(nvml_.WaitForProcess(dev, user.pid()));
    EXPECT_EQ(nvml_.Processes(dev).at(0).gpuInstanceId, nv::kNvmlNoInstance);
    EXPECT_EQ(nvml_.set_mode(dev, nv::NVML_DEVICE_MIG_ENABLE, &activation), nv::NVML_ERROR_IN_USE);
    EXPECT_EQ(activation, nv::NVML_ERROR_IN_USE);
    EXPECT_EQ(nvml_.Mode(dev), "0/0");
    const testing::CommandResult smi = NvidiaSmi({"-r", "-i", "0"});
    EXPECT_NE(smi.exit_code, 0);
    EXPECT_THAT(smi.err, HasSubstr("GPU 00000000:10:00.0: In use by another client"));
    user.Stop(SIGKILL);
  }
  ASSERT_EQ(nvml_.set_mode(dev, nv::NVML_DEVICE_MIG_ENABLE, &activation), kOk);
  EXPECT_EQ(activation, kOk);
  EXPECT_EQ(nvml_.Mode(dev), "1/1");
  nv::nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, 19, 0, 1, &gi), kOk);
  EXPECT_EQ(nvml_.set_mode(dev, nv::NVML_DEVICE_MIG_DISABLE, &activation), nv::NVML_ERROR_IN_USE);
  ASSERT_EQ(nvml_.destroy_gi(gi), kOk);
  ASSERT_EQ(nvml_.set_mode(dev, nv::NVML_DEVICE_MIG_DISABLE, &activation), kOk);
  EXPECT_EQ(nvml_.Mode(dev), "0/0");
  EXPECT_EQ(nvml_.set_mode(nvml_.Gpu(1), nv::NVML_DEVICE_MIG_ENABLE, &activation),
            nv::NVML_ERROR_NOT_SUPPORTED);
}

TEST_F(FakeNvmlTest, AModeChangeThatNeedsAResetWaitsForNvidiaSmi) {
  json gpu = A100(NewGpuUuid(), false);
  gpu["mig_mode_needs_reset"] = true;
  ASSERT_EQ(Init({{"gpus", {gpu}}}, /*with_state=*/true), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlReturn_t activation = kOk;
  ASSERT_EQ(nvml_.set_mode(dev, nv::NVML_DEVICE_MIG_ENABLE, &activation), kOk);
  EXPECT_EQ(activation, nv::NVML_ERROR_RESET_REQUIRED);
  EXPECT_EQ(nvml_.Mode(dev), "0/1");
  nv::nvmlGpuInstance_t gi = nullptr;
  EXPECT_EQ(nvml_.CreateGi(dev, 19, 0, 1, &gi), nv::NVML_ERROR_NOT_SUPPORTED);

  testing::CommandResult smi = NvidiaSmi({"-r", "-i", "0"});
  ASSERT_EQ(smi.exit_code, 0) << smi.err;
  EXPECT_EQ(smi.out, "GPU 00000000:10:00.0 was successfully reset.\n");
  // This process sees what the other did, as with the real driver.
  EXPECT_EQ(nvml_.Mode(dev), "1/1");
  ASSERT_EQ(nvml_.CreateGi(dev, 19, 0, 1, &gi), kOk);

  // A reset keeps the mode but not the instances.
  smi = NvidiaSmi({"--id=0", "--gpu-reset"});
  ASSERT_EQ(smi.exit_code, 0) << smi.err;
  EXPECT_EQ(nvml_.Mode(dev), "1/1");
  EXPECT_EQ(nvml_.gi_by_id(dev, 1, &gi), nv::NVML_ERROR_NOT_FOUND);

  smi = NvidiaSmi({"--gpu-reset", "-i", "3"});
  EXPECT_EQ(smi.exit_code, 6);
  EXPECT_THAT(smi.err, HasSubstr("No GPU with index 3: this node has 1 GPUs"));
  smi = NvidiaSmi({"-r", "--bogus"});
  EXPECT_EQ(smi.exit_code, 2);
  EXPECT_THAT(smi.err, HasSubstr("unknown argument '--bogus'"));
  smi = NvidiaSmi({"-r"});
  EXPECT_EQ(smi.exit_code, 2);
  EXPECT_THAT(smi.err, HasSubstr("name the GPU to reset with -i N"));
}

TEST_F(FakeNvmlTest, TheStateOutlivesTheProcess) {
  ASSERT_EQ(Init({{"gpus", {A100(NewGpuUuid())}}}, /*with_state=*/true), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlGpuInstance_t gi = nullptr;
  nv::nvmlComputeInstance_t ci = nullptr;
  nv::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, 9, 4, 4, &gi), kOk);
  ASSERT_EQ(nvml_.create_ci(gi, 2, &ci), kOk);
  ASSERT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  const std::string uuid = nvml_.Uuid(mig);

  // Shut down and initialized again: the config says no instances, the state file one.
  nvml_.Shutdown();
  ASSERT_EQ(nvml_.Init(), kOk);
  dev = nvml_.Gpu(0);
  EXPECT_EQ(nvml_.Uuid(mig), "error 2");  // Handles end with NVML.
  ASSERT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  EXPECT_EQ(nvml_.Uuid(mig), uuid);
  EXPECT_EQ(nvml_.Name(mig), "NVIDIA A100-SXM4-80GB MIG 3g.40gb");
  ASSERT_EQ(nvml_.gi_by_id(dev, 1, &gi), kOk);
  EXPECT_EQ(nvml_.Info(gi).placement.start, 4u);
  EXPECT_EQ(nvml_.Info(gi).placement.size, 4u);

  // Another copy of the library is another process: it sees the same state, and what it changes
  // this one sees at its next call.
  FakeNvml other;
  ASSERT_EQ(other.Load(dir_.File("other-libnvidia-ml.so.1")), "");
  ASSERT_EQ(other.Init(), kOk);
  nv::nvmlDevice_t other_mig = nullptr;
  ASSERT_EQ(other.mig_device(other.Gpu(0), 0, &other_mig), kOk);
  EXPECT_EQ(other.Uuid(other_mig), uuid);
  nv::nvmlGpuInstance_t other_gi = nullptr;
  nv::nvmlComputeInstance_t other_ci = nullptr;
  ASSERT_EQ(other.gi_by_id(other.Gpu(0), 1, &other_gi), kOk);
  ASSERT_EQ(other.ci_by_id(other_gi, 0, &other_ci), kOk);
  ASSERT_EQ(other.destroy_ci(other_ci), kOk);
  EXPECT_EQ(nvml_.mig_device(dev, 0, &mig), nv::NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvml_.Info(gi).id, 1u);  // The GPU instance did not change, nor did its handle.

  // A compute instance made again gets a new UUID, whichever process made the last one.
  ASSERT_EQ(nvml_.create_ci(gi, 2, &ci), kOk);
  ASSERT_EQ(other.mig_device(other.Gpu(0), 0, &other_mig), kOk);
  EXPECT_THAT(other.Uuid(other_mig), MatchesRegex("MIG-.*"));
  EXPECT_NE(other.Uuid(other_mig), uuid);
}

TEST_F(FakeNvmlTest, ABadStateFileFailsInit) {
  std::ofstream(StatePath()) << "{\"uuid_counter\": 1, \"gpus\": [";
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Init({{"gpus", {A100(NewGpuUuid())}}}, /*with_state=*/true), nv::NVML_ERROR_UNKNOWN);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("fake NVML: state file " + StatePath() + ": not a JSON object"));

  // Well-formed, but of another node's GPUs.
  std::ofstream(StatePath()) << json{{"uuid_counter", 1},
                                     {"gpus",
                                      {{{"index", 0},
                                        {"uuid", "GPU-other"},
                                        {"mig_current", true},
                                        {"mig_pending", true},
                                        {"gpu_instances", json::array()}}}}}
                                    .dump();
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(nvml_.Init(), nv::NVML_ERROR_UNKNOWN);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("GPU 0 (GPU-other) is not a MIG GPU of the config"));
}

TEST_F(FakeNvmlTest, ConfiguredMigDevicesAreInstancesWithTheirNamesAndUuids) {
  json gpu = A100(NewGpuUuid());
  gpu["mig_devices"] = {
      {{"uuid", "MIG-aaaaaaaa-0000-0000-0000-000000000001"},
       {"profile_id", 9},
       {"start", 4},
       {"name", "Custom MIG 3g.40gb"}},
      {{"uuid", "MIG-aaaaaaaa-0000-0000-0000-000000000002"}, {"profile_id", 19}, {"start", 2}}};
  ASSERT_EQ(Init({{"gpus", {gpu}}}), kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(nvml_.mig_device(dev, 0, &mig), kOk);
  EXPECT_EQ(nvml_.Uuid(mig), "MIG-aaaaaaaa-0000-0000-0000-000000000001");
  EXPECT_EQ(nvml_.Name(mig), "Custom MIG 3g.40gb");
  ASSERT_EQ(nvml_.mig_device(dev, 1, &mig), kOk);
  EXPECT_EQ(nvml_.Uuid(mig), "MIG-aaaaaaaa-0000-0000-0000-000000000002");
  EXPECT_EQ(nvml_.Name(mig), "NVIDIA A100-SXM4-80GB MIG 1g.10gb");
  unsigned int id = 0;
  ASSERT_EQ(nvml_.gi_id(mig, &id), kOk);
  EXPECT_EQ(id, 2u);
  nv::nvmlGpuInstance_t gi = nullptr;
  ASSERT_EQ(nvml_.gi_by_id(dev, 1, &gi), kOk);
  EXPECT_EQ(nvml_.Info(gi).placement.size, 4u);
  EXPECT_EQ(nvml_.destroy_gi(gi), nv::NVML_ERROR_IN_USE);
  nvml_.Shutdown();

  // A layout the table forbids is a broken config.
  gpu["mig_devices"][1]["start"] = 5;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Init({{"gpus", {gpu}}}), nv::NVML_ERROR_UNKNOWN);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("mig_devices: memory slices overlap: 3g.40gb@4 and 1g.10gb@5"));
}

TEST_F(FakeNvmlTest, FailCallsLeavesAHalfMadeInstance) {
  ASSERT_EQ(Init({{"fail_calls", {{"nvmlGpuInstanceCreateComputeInstance", 23}}},
                  {"gpus", {A100(NewGpuUuid())}}}),
            kOk);
  nv::nvmlDevice_t dev = nvml_.Gpu(0);
  nv::nvmlGpuInstance_t gi = nullptr;
  nv::nvmlComputeInstance_t ci = nullptr;
  nv::nvmlDevice_t mig = nullptr;
  ASSERT_EQ(nvml_.CreateGi(dev, 19, 0, 1, &gi), kOk);
  EXPECT_EQ(nvml_.create_ci(gi, 0, &ci), nv::NVML_ERROR_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(nvml_.create_ci(gi, 0, &ci), nv::NVML_ERROR_INSUFFICIENT_RESOURCES);
  ASSERT_EQ(nvml_.gi_by_id(dev, 1, &gi), kOk);
  EXPECT_EQ(nvml_.mig_device(dev, 0, &mig), nv::NVML_ERROR_NOT_FOUND);
}

}  // namespace
}  // namespace tessera::agent
