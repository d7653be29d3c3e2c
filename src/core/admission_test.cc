// Admission alone, on a fleet built in the test: what a request becomes (its shape and price),
// the field named when no node could ever host it (400), a shape only another GPU mode could host
// (409) until an operator switches a GPU, the verdict cache forgotten when the fleet changes, and
// the reason a pending instance waits. The state's tests (instance_service_test.cc) admit through
// creates.
#include "core/admission.h"

#include <gtest/gtest.h>

#include "core/core_test_util.h"

namespace tessera::core {
namespace {

class AdmissionTest : public ::testing::Test {
 protected:
  AdmissionTest() : fleet_(&TestCatalog()), admission_(&TestCatalog(), &fleet_) {
    fleet::NodeSpec spec;
    spec.name = "h100-1";
    spec.gpu_model = "H100-80GB";
    spec.gpus = 2;
    spec.cpu_milli = 64000;
    spec.memory_mib = 262144;
    EXPECT_TRUE(fleet_.AddNode(spec).ok());
    spec.name = "a100-1";
    spec.gpu_model = "A100-80GB";
    spec.gpus = 1;
    EXPECT_TRUE(fleet_.AddNode(spec).ok());
  }

  static CreateInstanceRequest Custom(const std::string& model, int gpus) {
    CreateInstanceRequest r;
    r.shape.gpu_model = model;
    r.shape.gpus = gpus;
    r.shape.vcpus = 4;
    r.shape.memory_mib = 4096;
    return r;
  }

  fleet::Fleet fleet_;
  Admission admission_;
};

TEST_F(AdmissionTest, AnInstanceTypeBecomesItsShapeAtItsPrice) {
  CreateInstanceRequest r;
  r.instance_type = "gpu.1xh100";
  auto admitted = admission_.Admit(r);
  ASSERT_TRUE(admitted.ok()) << admitted.status().message();
  EXPECT_EQ(admitted->shape.gpu_model, "H100-80GB");
  EXPECT_EQ(admitted->shape.gpus, 1);
  EXPECT_EQ(admitted->price_per_hour, TestCatalog().FindPrice("gpu.1xh100")->on_demand_per_hour);
  r.billing = Billing::kSpot;
  EXPECT_EQ(admission_.Admit(r)->price_per_hour,
            TestCatalog().FindPrice("gpu.1xh100")->spot_per_hour);
  r.instance_type = "gpu.9xnothing";
  EXPECT_EQ(admission_.Admit(r).status().message(),
            "field 'instance_type': unknown instance type 'gpu.9xnothing'");
}

TEST_F(AdmissionTest, AShapeNoNodeCouldEverHostIsRefusedNamingItsField) {
  auto three = admission_.Admit(Custom("H100-80GB", 3));
  EXPECT_EQ(three.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(three.status().message(),
            "field 'gpus': the largest H100-80GB node has 2 GPUs; 3 asked");
  auto none = admission_.Admit(Custom("L40S-48GB", 1));
  EXPECT_EQ(none.status().message(), "field 'gpu_model': the fleet has no L40S-48GB GPUs");
  CreateInstanceRequest big = Custom("H100-80GB", 1);
  big.shape.vcpus = 96;
  EXPECT_EQ(admission_.Admit(big).status().message(),
            "field 'vcpus': no H100-80GB node that could host the GPUs has 96 vCPUs (the most is "
            "64)");
}

// A MIG slice on a fleet whose A100 is whole: 409 until an operator switches the GPU, and the
// cached verdict is forgotten when the fleet changes.
TEST_F(AdmissionTest, AShapeOnlyAnotherModeCouldHostWaitsForTheOperatorsSwitch) {
  CreateInstanceRequest slice = Custom("A100-80GB", 0);
  slice.shape.mode = catalog::SharingMode::kMig;
  slice.shape.mig_profile = "1g.10gb";
  const Status before = admission_.Admit(slice).status();
  EXPECT_EQ(before.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(before.message().find("no A100-80GB GPU is in mig mode now"), std::string::npos)
      << before.message();
  ASSERT_TRUE(fleet_.SetGpuMode(*fleet_.Find("a100-1"), 0, catalog::SharingMode::kMig).ok());
  EXPECT_EQ(admission_.Admit(slice).status().code(), StatusCode::kFailedPrecondition)
      << "the verdict is cached until the fleet is said to have changed";
  admission_.FleetChanged();
  EXPECT_TRUE(admission_.Admit(slice).ok());
}

TEST_F(AdmissionTest, APendingInstanceSaysWhatItWaitsForAsTheFleetIsNow) {
  Instance inst;
  inst.billing = Billing::kOnDemand;
  inst.shape = Custom("H100-80GB", 2).shape;
  EXPECT_EQ(admission_.PendingReason(inst, 3),
            "waiting for 2 x H100-80GB with 4 vCPUs and 4096 MiB on one node; the best node has "
            "2 free; 3 spot instance(s) preemptible");
  inst.billing = Billing::kSpot;
  EXPECT_EQ(admission_.PendingReason(inst, 3).find("preemptible"), std::string::npos)
      << "spot work preempts nothing";
  ASSERT_TRUE(fleet_.SetNodeState(*fleet_.Find("h100-1"), fleet::NodeState::kDraining).ok());
  EXPECT_EQ(admission_.PendingReason(inst, 0),
            "waiting for 2 x H100-80GB with 4 vCPUs and 4096 MiB on one node; no ready H100-80GB "
            "node has those vCPUs and memory free; 1 such node(s) draining or down");
}

}  // namespace
}  // namespace tessera::core
