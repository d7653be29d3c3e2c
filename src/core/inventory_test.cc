// A joined node's inventory read alone against the embedded catalog: the node it describes, each
// malformed field named, and the checks a registration makes against the node already in the
// fleet. The state's tests (agent_hub_test.cc) register inventories through agents.
#include "core/inventory.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using nlohmann::json;

class InventoryTest : public ::testing::Test {
 protected:
  InventoryTest() { node_.name = "gpu-1"; }

  // The error NodeSpecOf gives for `inventory`; "" when it reads.
  std::string Error(const json& inventory) const {
    auto spec = NodeSpecOf(TestCatalog(), node_, inventory);
    return spec.ok() ? "" : spec.status().message();
  }

  AgentNode node_;
};

TEST_F(InventoryTest, ReadsTheNodeWithEachGpusMode) {
  json inv = TestInventory(4, "H100-80GB", "GPU-");
  inv["gpus"][2]["mig_enabled"] = true;
  inv["gpus"][2]["mig_devices"] = {{{"uuid", "MIG-x"}, {"profile", "3g.40gb"}, {"start", 4}}};
  inv["nvlink_islands"] = {{0, 1}, {2, 3}};
  inv["hostname"] = "rack4-gpu1";
  node_.sharing = catalog::SharingMode::kShared;
  node_.gpu_sharing[1] = catalog::SharingMode::kExclusive;
  auto spec = NodeSpecOf(TestCatalog(), node_, inv);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->name, "gpu-1");
  EXPECT_EQ(spec->gpus, 4);
  EXPECT_EQ(spec->gpu_model, "H100-80GB");
  EXPECT_EQ(spec->cpu_milli, 64000);
  EXPECT_EQ(spec->memory_mib, 524288);
  EXPECT_EQ(spec->gpu_uuids, (std::vector<std::string>{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}));
  EXPECT_EQ(spec->gpu_modes, (std::vector<catalog::SharingMode>{
                                 catalog::SharingMode::kShared, catalog::SharingMode::kExclusive,
                                 catalog::SharingMode::kMig, catalog::SharingMode::kShared}))
      << "the operator's mode per GPU, MIG where the inventory says so";
  EXPECT_EQ(spec->nvlink_islands, (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(DescribeNode(*spec), "4 x H100-80GB, 64 vCPUs, 524288 MiB");

  auto cpu_only = NodeSpecOf(TestCatalog(), node_, TestInventory(0));
  ASSERT_TRUE(cpu_only.ok());
  EXPECT_EQ(cpu_only->gpus, 0);
  EXPECT_TRUE(cpu_only->gpu_modes.empty());
  EXPECT_EQ(DescribeNode(*cpu_only), "0 x no GPU, 64 vCPUs, 524288 MiB");
}

TEST_F(InventoryTest, EachMalformedFieldIsNamed) {
  json inv = TestInventory(2);
  inv["gpus"][1]["uuid"] = "u0";
  EXPECT_EQ(Error(inv), "inventory: gpus[1]: field 'uuid': 'u0' is given twice");
  inv = TestInventory(2);
  inv["gpus"][1]["index"] = 0;
  EXPECT_EQ(Error(inv), "inventory: gpus[1]: field 'index': is 0, not 1");
  inv = TestInventory(2);
  inv["gpus"][1]["model"] = "A100-80GB";
  EXPECT_EQ(Error(inv),
            "inventory: gpus[1]: field 'model': 'A100-80GB' differs from gpus[0]'s 'H100-80GB': a "
            "node has one GPU model");
  inv = TestInventory(1, "Z9000");
  EXPECT_NE(Error(inv).find("inventory: gpus[0]: field 'model': unknown GPU model 'Z9000'"),
            std::string::npos)
      << Error(inv);
  inv = TestInventory(1);
  inv["gpus"][0]["uuid"] = std::string(kMaxUuid + 1, 'u');
  EXPECT_EQ(Error(inv),
            "inventory: gpus[0]: field 'uuid': must be 1-96 printable ASCII characters");
  inv = TestInventory(1);
  inv["gpus"][0]["mig_devices"] = {{{"uuid", "MIG-x"}, {"profile", "1g.10gb"}, {"start", 9}}};
  EXPECT_EQ(Error(inv).rfind("inventory: gpus[0].mig_devices[0]: field 'start'", 0), 0u)
      << Error(inv);
  inv = TestInventory(1);
  inv["nvlink_islands"] = {{0, "one"}};
  EXPECT_EQ(Error(inv), "inventory: field 'nvlink_islands': expected lists of GPU indices");
  inv = TestInventory(1);
  inv["hostname"] = "bad\nname";
  EXPECT_EQ(Error(inv).rfind("inventory: field 'hostname': must be at most 253 printable", 0), 0u)
      << Error(inv);
  inv = TestInventory(fleet::kMaxGpusPerNode + 1);
  EXPECT_EQ(Error(inv).rfind("inventory: field 'gpus': ", 0), 0u) << Error(inv);
  inv = TestInventory(1);
  inv["extra"] = 1;
  EXPECT_EQ(Error(inv), "inventory: field 'extra': is not a known field");
  EXPECT_EQ(Error(json::array()), "inventory: expected an object, found array");
}

TEST_F(InventoryTest, SameHardwareComparesSizesModelAndUuids) {
  fleet::Fleet fleet(&TestCatalog());
  auto spec = NodeSpecOf(TestCatalog(), node_, TestInventory(2));
  ASSERT_TRUE(spec.ok());
  auto added = fleet.AddNode(*spec);
  ASSERT_TRUE(added.ok()) << added.status().message();
  const fleet::Node& n = fleet.node(*added);
  EXPECT_TRUE(SameHardware(*spec, n, TestCatalog()));
  fleet::NodeSpec moved = *spec;
  moved.gpu_uuids[1] = "u9";
  EXPECT_FALSE(SameHardware(moved, n, TestCatalog())) << "a GPU swapped for another";
  fleet::NodeSpec smaller = *spec;
  smaller.memory_mib /= 2;
  EXPECT_FALSE(SameHardware(smaller, n, TestCatalog()));
  fleet::NodeSpec other_model = *spec;
  other_model.gpu_model = "A100-80GB";
  EXPECT_FALSE(SameHardware(other_model, n, TestCatalog()));
}

}  // namespace
}  // namespace tessera::core
