#include "agent/gpu_devices.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tessera::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Two H100s; the second (minor 3) in MIG mode with a 3g.40gb at slice 4 and a 1g.10gb at slice 2,
// and a third MIG device the driver would not describe.
Inventory TwoGpus() {
  Inventory inv;
  GpuInfo a;
  a.index = 0;
  a.uuid = "GPU-a";
  a.minor = 0;
  GpuInfo b;
  b.index = 1;
  b.uuid = "GPU-b";
  b.minor = 3;
  b.mig_enabled = true;
  b.mig_devices = {
      {"MIG-x", "3g.40gb", 4, 1, 0}, {"MIG-y", "1g.10gb", 2, 2, 0}, {"MIG-z", "", -1, -1, -1}};
  inv.gpus = {a, b};
  return inv;
}

TEST(ListGpuDevicesTest, EachGpuAndEachDescribedMigDeviceWithItsNodes) {
  const MigMinors minors = ParseMigMinors(
      "gpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\ngpu3/gi2/access 40\ngpu3/gi2/ci0/access 41\n");
  const GpuDeviceList list = ListGpuDevices(TwoGpus(), minors, "/dev");
  EXPECT_THAT(list.keys, ElementsAre("0", "1", "1/3g.40gb@4", "1/1g.10gb@2"));
  ASSERT_EQ(list.devices.size(), 4u);
  EXPECT_EQ(list.devices[1].index, "1");
  EXPECT_THAT(list.devices[1].dev_paths, ElementsAre("/dev/nvidia3"));
  EXPECT_EQ(list.devices[3].index, "1:1");
  EXPECT_EQ(list.devices[3].uuid, "MIG-y");
  EXPECT_THAT(list.devices[3].dev_paths,
              ElementsAre("/dev/nvidia3", "/dev/nvidia-caps/nvidia-cap40",
                          "/dev/nvidia-caps/nvidia-cap41"));
  ASSERT_EQ(list.notes.size(), 1u);
  EXPECT_THAT(list.notes[0], HasSubstr("MIG device 1:2 (MIG-z)"));

  // Without the driver's mig-minors no MIG device can be given to a container, and each is said.
  const GpuDeviceList bare = ListGpuDevices(TwoGpus(), {}, "/dev");
  EXPECT_THAT(bare.keys, ElementsAre("0", "1"));
  EXPECT_EQ(bare.notes.size(), 3u);
  EXPECT_THAT(bare.notes[0], HasSubstr("gpu3/gi1/access"));
}

TEST(CdiDevicesForLoadTest, AGrantGetsItsOwnDevicesOrANamedError) {
  const std::map<std::string, std::string> by_key = {
      {"0", "k=GPU-a"}, {"1", "k=GPU-b"}, {"1/1g.10gb@2", "k=MIG-y"}};
  const auto load = [](const char* text) { return nlohmann::json::parse(text); };
  // Two ranks' loads on one GPU give it once; a MIG slice gets its MIG device, not its GPU.
  EXPECT_THAT(
      CdiDevicesForLoad(load(R"([{"index":0,"milli":500},{"index":0,"milli":500}])"), by_key, true)
          .value(),
      ElementsAre("k=GPU-a"));
  EXPECT_THAT(CdiDevicesForLoad(load(R"([{"index":1,"mig_profile":"1g.10gb","mig_start":2}])"),
                                by_key, true)
                  .value(),
              ElementsAre("k=MIG-y"));
  auto absent = CdiDevicesForLoad(load(R"([{"index":1,"mig_profile":"1g.10gb","mig_start":5}])"),
                                  by_key, true);
  ASSERT_FALSE(absent.ok());
  EXPECT_THAT(absent.status().message(),
              HasSubstr("GPU 1 has no MIG device 1g.10gb at start slice 5"));
  EXPECT_FALSE(CdiDevicesForLoad(load(R"([{"index":7}])"), by_key, true).ok());
  // Simulated GPUs: what has no device is passed over.
  EXPECT_THAT(CdiDevicesForLoad(load(R"([{"index":7}])"), by_key, false).value(), IsEmpty());
  EXPECT_THAT(CdiDevicesForLoad(load(R"({"index":0})"), by_key, true).value(), IsEmpty());
}

}  // namespace
}  // namespace tessera::agent
