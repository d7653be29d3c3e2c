#include "agent/container_cdi.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "agent/container.h"
#include "agent/container_exec.h"
#include "agent/container_test_support.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing_support::RunTool;

constexpr char kNvidiaCtkYaml[] = R"(---
cdiVersion: 0.5.0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
devices:
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
  name: "0"
- containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
    - path: /dev/nvidia-caps/nvidia-cap21
  name: "0:1"
- name: GPU-aaaa
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
kind: nvidia.com/gpu
)";

std::string JsonSpec(const std::string& kind, const std::string& version,
                     const std::vector<std::string>& names) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& n : names) {
    devices.push_back(
        {{"name", n}, {"containerEdits", {{"deviceNodes", {{{"path", "/dev/nvidia" + n}}}}}}});
  }
  return nlohmann::json{{"cdiVersion", version}, {"kind", kind}, {"devices", devices}}.dump();
}

TEST(ScanCdiSpecsTest, KeepsSpecsOfTheKindInAVersionPodmanReads) {
  tessera::testing::TempDir etc;
  tessera::testing::TempDir run;
  etc.Write("nvidia.yaml", kNvidiaCtkYaml);
  etc.Write("other.json", JsonSpec("vendor.example/fpga", "0.5.0", {"0"}));
  etc.Write("README", "not a spec");
  run.Write("broken.json", "{\"kind\": ");
  run.Write("newer.json", JsonSpec("nvidia.com/gpu", "0.6.0", {"0"}));
  run.Write("gpus.json", JsonSpec("nvidia.com/gpu", "0.4.0", {"0", "1"}));
  const std::string ours =
      run.Write("tessera-nvidia-gpu.json", JsonSpec("nvidia.com/gpu", "0.5.0", {"7"}));
  const CdiScan scan =
      ScanCdiSpecs({etc.path(), run.path(), "/nonexistent/cdi"}, "nvidia.com/gpu", ours);
  ASSERT_EQ(scan.usable.size(), 2u);
  EXPECT_EQ(scan.usable[0].path, etc.File("nvidia.yaml"));
  EXPECT_THAT(scan.usable[0].device_names, ElementsAre("0", "0:1", "GPU-aaaa"));
  EXPECT_EQ(scan.usable[1].path, run.File("gpus.json"));
  EXPECT_THAT(scan.usable[1].device_names, ElementsAre("0", "1"));
  EXPECT_THAT(scan.notes, Contains(HasSubstr("broken.json")));
  EXPECT_THAT(scan.notes,
              Contains(HasSubstr("newer.json: cdiVersion \"0.6.0\" is newer than 0.5.0")));
  EXPECT_EQ(scan.notes.size(), 2u) << ::testing::PrintToString(scan.notes);
}

// Stand-in device nodes (regular files do for what BuildGpuCdiSpec checks: that they exist).
class CdiSpecBuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(RunTool({"mkdir", "-p", dev_ + "/nvidia-caps"}).exit_code, 0);
    for (const char* n :
         {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps/nvidia-cap21"}) {
      std::ofstream(dev_ + "/" + n) << "";
    }
    gpus_ = {{"0", "GPU-aaaa", 0, {dev_ + "/nvidia0"}},
             {"1", "GPU-bbbb", 1, {dev_ + "/nvidia1"}},
             {"0:1", "MIG-cccc", 0, {dev_ + "/nvidia0", dev_ + "/nvidia-caps/nvidia-cap21"}},
             {"2", "", 2, {dev_ + "/nvidia2"}}};
    common_ = {dev_ + "/nvidiactl", dev_ + "/nvidia-uvm", dev_ + "/nvidia-uvm-tools"};
  }

  tessera::testing::TempDir dir_;
  std::string dev_ = dir_.path() + "/dev";
  std::vector<GpuDeviceNodes> gpus_;
  std::vector<std::string> common_;
};

TEST_F(CdiSpecBuildTest, EachGpuGetsItsOwnNodesAndAbsentOnesAreSaid) {
  const std::string lib = dir_.Write("libcuda.so.535.1", "");
  const CdiSpecBuild build =
      BuildGpuCdiSpec("nvidia.com/gpu", gpus_, common_, {lib, dir_.File("libabsent.so.1")}, dev_);
  EXPECT_THAT(build.device_names, ElementsAre("0", "GPU-aaaa", "1", "GPU-bbbb", "0:1", "MIG-cccc"));
  EXPECT_THAT(build.skipped, Contains(HasSubstr("nvidia2: absent on the host (GPU 2)")));
  EXPECT_THAT(build.skipped, Contains("GPU 2: none of its device nodes exist"));
  EXPECT_THAT(build.skipped, Contains(dev_ + "/nvidia-uvm-tools: absent on the host"));
  EXPECT_THAT(build.skipped, Contains(HasSubstr("libabsent.so.1: absent on the host")));

  const nlohmann::json spec = nlohmann::json::parse(build.json);
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "nvidia.com/gpu");
  std::map<std::string, std::vector<std::string>> paths;  // device -> container paths
  for (const auto& d : spec["devices"]) {
    for (const auto& n : d["containerEdits"]["deviceNodes"]) {
      paths[d["name"]].push_back(n["path"]);
    }
  }
  EXPECT_THAT(paths["0"], ElementsAre("/dev/nvidia0"));
  EXPECT_THAT(paths["GPU-bbbb"], ElementsAre("/dev/nvidia1"));
  EXPECT_THAT(paths["0:1"], ElementsAre("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"));
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["deviceNodes"][0]["hostPath"], dev_ + "/nvidia0");
  const auto& common = spec["containerEdits"]["deviceNodes"];
  ASSERT_EQ(common.size(), 2u);
  EXPECT_EQ(common[0]["path"], "/dev/nvidiactl");
  EXPECT_EQ(common[1]["path"], "/dev/nvidia-uvm");
  const auto& mounts = spec["containerEdits"]["mounts"];
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0]["containerPath"], lib);
}

TEST_F(CdiSpecBuildTest, EnsureWritesOursOnlyWhenTheNodeHasNone) {
  tessera::testing::TempDir cdi;
  GpuCdiOptions options;
  options.spec_dirs = {cdi.path()};
  options.write_path = cdi.path() + "/run/tessera-nvidia-gpu.json";
  options.dev_root = dev_;
  options.common_nodes = common_;
  auto mine = EnsureGpuCdiSpec(gpus_, options);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  EXPECT_TRUE(mine->written);
  EXPECT_EQ(mine->spec_path, options.write_path);
  struct stat st {};
  ASSERT_EQ(stat(options.write_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(CdiDeviceFor(*mine, options.kind, gpus_[1]).value(), "nvidia.com/gpu=GPU-bbbb");
  GpuDeviceNodes no_uuid = gpus_[1];
  no_uuid.uuid.clear();
  EXPECT_EQ(CdiDeviceFor(*mine, options.kind, no_uuid).value(), "nvidia.com/gpu=1");
  auto missing = CdiDeviceFor(*mine, options.kind, gpus_[3]);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("GPU 2"));

  // Once NVIDIA's toolkit has written a spec, it is used and ours goes (two would clash).
  options.spec_dirs = {cdi.path(), cdi.path() + "/run"};
  cdi.Write("nvidia.yaml", kNvidiaCtkYaml);
  auto theirs = EnsureGpuCdiSpec(gpus_, options);
  ASSERT_TRUE(theirs.ok());
  EXPECT_FALSE(theirs->written);
  EXPECT_EQ(theirs->spec_path, cdi.File("nvidia.yaml"));
  EXPECT_NE(stat(options.write_path.c_str(), &st), 0);
  EXPECT_EQ(CdiDeviceFor(*theirs, options.kind, gpus_[0]).value(), "nvidia.com/gpu=GPU-aaaa");
  EXPECT_EQ(CdiDeviceFor(*theirs, options.kind, gpus_[1]).status().code(), StatusCode::kNotFound);
}

// The driver's list of MIG capability minors, as an A100 node with two MIG devices has it.
constexpr char kMigMinors[] = R"(config 1
monitor 2
gpu0/gi1/access 12
gpu0/gi1/ci0/access 13
gpu0/gi2/access 21
gpu0/gi2/ci0/access 22
gpu1/gi1/access 111
not a line
gpu1/gi1/ci0/access x
)";

TEST(MigMinorsTest, NamesEachMigDevicesCapabilityNodes) {
  const MigMinors minors = ParseMigMinors(kMigMinors);
  EXPECT_EQ(minors.at("gpu0/gi2/ci0/access"), 22);
  EXPECT_EQ(minors.count("config"), 0u);  // Not a MIG device's: no container gets it.
  EXPECT_EQ(minors.count("gpu1/gi1/ci0/access"), 0u);
  EXPECT_THAT(MigDevicePaths(minors, 0, 2, 0, "/dev").value(),
              ElementsAre("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21",
                          "/dev/nvidia-caps/nvidia-cap22"));
  auto missing = MigDevicePaths(minors, 1, 1, 0, "/dev");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("gpu1/gi1/ci0/access"));
}

// Runs `command` in a container of `image` as a workload uid, with the CDI device `device`.
ExecResult RunWithDevice(const std::string& image, const std::string& command,
                         const std::string& device, ContainerUserMode mode) {
  tessera::testing::TempDir ctl;
  ContainerSpec spec;
  spec.name = testing_support::UniqueName("cdi");
  spec.image = image;
  spec.command = command;
  spec.user_mode = mode;
  spec.uid = spec.gid = 1999000902;
  spec.network = ContainerNetwork::kNone;
  spec.cdi_devices = {device};
  const ContainerControlFiles files = ControlFilesIn(ctl.path() + "/ctl");
  auto run = BuildPodmanRun(spec, DetectContainerHost(), files);
  if (!run.ok()) return {-1, false, "", run.status().ToString()};
  if (Status s = PrepareContainerRun(*run, files); !s.ok()) return {-1, false, "", s.ToString()};
  return RunTool(run->argv);
}

// Writes a CDI spec for two GPUs whose nodes are in `dev` (appearing in the container under
// /dev as they are under `dev_root` on the host), then runs a container for each GPU in turn
// and checks that `list_dir` inside it holds that GPU's node and nvidiactl, never the other's.
void CheckEachContainerSeesOnlyItsGpu(const std::string& dev, const std::string& dev_root,
                                      const std::string& list_dir, ContainerUserMode mode) {
  const int major = testing_support::MakeStandInGpuNodes(dev, 2);
  ASSERT_GT(major, 0) << dev << ": " << strerror(errno);
  const std::vector<GpuDeviceNodes> gpus = {{"0", "GPU-test-0", 0, {dev + "/nvidia0"}},
                                            {"1", "GPU-test-1", 1, {dev + "/nvidia1"}}};
  GpuCdiOptions options;
  // A kind of this run's own, so that no real spec and no other run's can clash with it.
  options.kind = fmt::format("test{}.tessera.example/gpu", getpid());
  options.spec_dirs = {};
  options.write_path = fmt::format("/var/run/cdi/tessera-test-{}.json", getpid());
  options.dev_root = dev_root;
  options.common_nodes = {dev + "/nvidiactl", dev + "/nvidia-uvm"};
  auto setup = EnsureGpuCdiSpec(gpus, options);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  struct RemoveSpec {
    std::string path;
    ~RemoveSpec() { unlink(path.c_str()); }
  } remove_spec{options.write_path};
  EXPECT_THAT(setup->notes, Contains(HasSubstr("nvidia-uvm: absent on the host")));

  testing_support::BusyboxImage image("localhost/" +
                                      testing_support::UniqueName("tessera-cdi-test") + ":1");
  ASSERT_TRUE(image.ok()) << image.error();
  for (size_t want = 0; want < gpus.size(); ++want) {
    const ExecResult r = RunWithDevice(
        image.reference(),
        "ls " + list_dir + "; cat /sys/fs/cgroup/devices/devices.list 2>/dev/null; true",
        CdiDeviceFor(*setup, options.kind, gpus[want]).value(), mode);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::set<std::string> listed;
    std::istringstream out(r.out);
    for (std::string w; out >> w;) listed.insert(w);
    const std::string mine = fmt::format("nvidia{}", want);
    const std::string other = fmt::format("nvidia{}", 1 - want);
    EXPECT_EQ(listed.count(mine), 1u) << r.out;
    EXPECT_EQ(listed.count("nvidiactl"), 1u) << r.out;
    EXPECT_EQ(listed.count(other), 0u) << "the container sees another GPU's node:\n" << r.out;
    EXPECT_EQ(listed.count("nvidia-uvm"), 0u) << r.out;  // Absent on the "host": not made up.
    // Under cgroup v1 the device cgroup's allow list shows the same: its GPU, not the other.
    if (r.out.find(" rwm") != std::string::npos) {
      EXPECT_THAT(r.out, HasSubstr(fmt::format("c {}:{} rwm", major, want)));
      EXPECT_THAT(r.out, Not(HasSubstr(fmt::format("c {}:{} ", major, 1 - want))));
    }
  }
}

std::string CdiTestMissing() {
  const std::string missing = testing_support::PodmanMissing();
  if (!missing.empty()) return missing;
  if (access("/var/run", W_OK) != 0) return "podman reads CDI specs from /var/run/cdi only";
  return "";
}

// Without a user namespace runc makes the nodes itself (mknod), from anywhere on the host: the
// stand-ins live in a temporary directory and appear in the container's /dev.
TEST(ContainerCdiPodmanTest, WithAWorkloadUidTheContainerSeesOnlyItsGpu) {
  const std::string missing = CdiTestMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  tessera::testing::TempDir dir;
  const std::string dev = dir.path() + "/dev";
  CheckEachContainerSeesOnlyItsGpu(dev, dev, "/dev", ContainerUserMode::kHostUid);
}

// In a user namespace runc may not mknod, so it bind-mounts each node from the host path equal
// to its container path (podman 4.3.1 passes the container path, not hostPath): as with real GPUs,
// the stand-ins sit at the same path under the host's /dev.
TEST(ContainerCdiPodmanTest, InAUserNamespaceTheContainerSeesOnlyItsGpu) {
  const std::string missing = CdiTestMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  if (!DetectContainerHost().userns_auto) {
    GTEST_SKIP() << "no \"containers\" range in /etc/subuid: run scripts/bootstrap.sh";
  }
  const std::string dev = fmt::format("/dev/tessera-test-{}", getpid());
  struct RemoveDev {
    std::string path;
    ~RemoveDev() { RunTool({"rm", "-rf", path}); }
  } remove_dev{dev};
  CheckEachContainerSeesOnlyItsGpu(dev, "/dev", dev, ContainerUserMode::kUserNamespace);
}

// A MIG slice's container gets its GPU's node and its own instances' capability nodes, never
// those of the other MIG device on the same GPU (which would let it open that slice).
TEST(ContainerCdiPodmanTest, AMigSliceSeesOnlyItsOwnCapabilityNodes) {
  const std::string missing = CdiTestMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  tessera::testing::TempDir dir;
  const std::string dev = dir.path() + "/dev";
  const int major = testing_support::MakeStandInGpuNodes(dev, 1);
  ASSERT_GT(major, 0) << dev << ": " << strerror(errno);
  ASSERT_EQ(mkdir((dev + "/nvidia-caps").c_str(), 0755), 0);
  for (unsigned cap : {12u, 13u, 21u, 22u}) {
    const std::string path = fmt::format("{}/nvidia-caps/nvidia-cap{}", dev, cap);
    ASSERT_EQ(mknod(path.c_str(), S_IFCHR | 0444, makedev(static_cast<unsigned>(major), cap)), 0);
  }
  const MigMinors minors = ParseMigMinors(kMigMinors);
  const std::vector<GpuDeviceNodes> slices = {
      {"0:0", "MIG-test-0", 0, MigDevicePaths(minors, 0, 1, 0, dev).value()},
      {"0:1", "MIG-test-1", 0, MigDevicePaths(minors, 0, 2, 0, dev).value()}};
  GpuCdiOptions options;
  options.kind = fmt::format("test{}.tessera.example/mig", getpid());
  options.spec_dirs = {};
  options.write_path = fmt::format("/var/run/cdi/tessera-test-mig-{}.json", getpid());
  options.dev_root = dev;
  options.common_nodes = {dev + "/nvidiactl"};
  auto setup = EnsureGpuCdiSpec(slices, options);
  ASSERT_TRUE(setup.ok()) << setup.status().ToString();
  struct RemoveSpec {
    std::string path;
    ~RemoveSpec() { unlink(path.c_str()); }
  } remove_spec{options.write_path};
  testing_support::BusyboxImage image("localhost/" +
                                      testing_support::UniqueName("tessera-cdi-test") + ":1");
  ASSERT_TRUE(image.ok()) << image.error();
  const ExecResult r = RunWithDevice(image.reference(), "ls /dev /dev/nvidia-caps",
                                     CdiDeviceFor(*setup, options.kind, slices[1]).value(),
                                     ContainerUserMode::kHostUid);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::set<std::string> listed;
  std::istringstream out(r.out);
  for (std::string w; out >> w;) listed.insert(w);
  for (const char* mine : {"nvidia0", "nvidiactl", "nvidia-cap21", "nvidia-cap22"}) {
    EXPECT_EQ(listed.count(mine), 1u) << mine << " missing:\n" << r.out;
  }
  for (const char* other : {"nvidia-cap12", "nvidia-cap13"}) {
    EXPECT_EQ(listed.count(other), 0u) << "the container sees the other slice's " << other << ":\n"
                                       << r.out;
  }
}

}  // namespace
}  // namespace tessera::agent
