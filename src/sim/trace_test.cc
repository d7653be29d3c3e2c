#include "sim/trace.h"

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace tessera::sim {
namespace {

constexpr char kHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto c = catalog::Catalog::LoadEmbedded();
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    catalog_ = std::move(c).value();
  }
  sched::ModelMask Bit(std::string_view model) const {
    return sched::ModelMask{1} << catalog_.FindGpuIndex(model)->value;
  }
  // Loads `body` under kHeader from a file; returns the error message ("" when it loaded).
  std::string LoadError(const std::string& body, std::string* path = nullptr) {
    const std::string p = dir_.Write("pods.csv", kHeader + body);
    if (path) *path = p;
    auto pods = LoadOpenbPods(catalog_, p);
    return pods.ok() ? "" : pods.status().message();
  }

  testing::TempDir dir_;
  catalog::Catalog catalog_;
};

TEST_F(TraceTest, ReadsTheFullFormatKeepingTheRawGpuSpec) {
  const std::string p = dir_.Write(
      "pods.csv", std::string(kHeader) +
                      "openb-pod-0000,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
                      "openb-pod-0001,6000,12288,1,460,V100M16|V100M32|V100M32,BE,Pending,5,9,\n"
                      "openb-pod-0002,88000,327680,0,0,,LS,Running,7,9,7\n"
                      "openb-pod-0003,32000,65536,8,1000,G2,LS,Running,8,9,8\n");
  auto pods = LoadOpenbPods(catalog_, p);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 4u);
  const Pod& share = (*pods)[1];
  EXPECT_EQ(share.name, "openb-pod-0001");
  EXPECT_EQ(share.cpu_milli, 6000);
  EXPECT_EQ(share.memory_mib, 12288);
  EXPECT_EQ(share.num_gpu, 1);
  EXPECT_EQ(share.gpu_milli, 460);
  EXPECT_EQ(share.gpu_spec, "V100M16|V100M32|V100M32");
  EXPECT_EQ(share.allowed_models, Bit("V100M16") | Bit("V100M32"));
  EXPECT_EQ((*pods)[0].allowed_models, 0u);
  EXPECT_EQ((*pods)[2].demand_milli(), 0);
  EXPECT_EQ((*pods)[3].demand_milli(), 8000);
  EXPECT_EQ((*pods)[3].allowed_models, Bit("G2"));
  const sched::Request r = ToRequest(share);
  EXPECT_EQ(r.gpu_count, 1);
  EXPECT_EQ(r.gpu_milli, 460);
  EXPECT_EQ(r.allowed_models, share.allowed_models);
}

TEST_F(TraceTest, ReadsTheFiveColumnMultiGpuFormat) {
  const std::string p = dir_.Write("multigpu.csv",
                                   "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                   "openb-pod-0000,12000,16384,1,1000\n"
                                   "openb-pod-0001,64000,262144,4,1000\n");
  auto pods = LoadOpenbPods(catalog_, p);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 2u);
  EXPECT_EQ((*pods)[1].num_gpu, 4);
  EXPECT_EQ((*pods)[1].gpu_spec, "");
  EXPECT_EQ((*pods)[1].allowed_models, 0u);
}

TEST_F(TraceTest, ABrokenRowIsReportedAsFileLineWhat) {
  struct Case {
    std::string row;
    std::string want;  // After "<path>:3: ".
  };
  const std::vector<Case> cases = {
      {"p,abc,1,1,1000,,LS,Running,0,0,0", "column 'cpu_milli': 'abc' is not an integer"},
      {"p,1000,1,9,1000,,LS,Running,0,0,0", "column 'num_gpu': 9 is out of range [0, 8]"},
      {"p,1000,1,1,1001,,LS,Running,0,0,0", "column 'gpu_milli': 1001 is out of range [0, 1000]"},
      {"p,1000,-5,1,1000,,LS,Running,0,0,0",
       "column 'memory_mib': -5 is out of range [0, 2305843009213693951]"},
      {"p,1000,1,2,500,,LS,Running,0,0,0",
       "num_gpu 2 with gpu_milli 500: a GPU share (gpu_milli < 1000) must ask for one GPU"},
      {"p,1000,1,0,500,,LS,Running,0,0,0",
       "num_gpu 0 with gpu_milli 500: a pod either asks for no GPU (both 0) or for some (both "
       "above 0)"},
      {"p,1000,1,1,1000,T4|H999,LS,Running,0,0,0",
       "gpu_spec 'T4|H999': unknown GPU model 'H999' (not in the catalog)"},
      {",1000,1,1,1000,,LS,Running,0,0,0", "column 'name' is empty"},
      {"p,1000,1,1,1000", "expected 11 fields, found 5"},
  };
  for (const Case& c : cases) {
    std::string path;
    const std::string err = LoadError("ok,1000,1,1,1000,,LS,Running,0,0,0\n" + c.row + "\n", &path);
    EXPECT_EQ(err, path + ":3: " + c.want) << c.row;
  }
}

TEST_F(TraceTest, AWrongHeaderAMissingFileOrNoPodsFailClearly) {
  const std::string bad_header =
      dir_.Write("h.csv", "name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n");
  auto a = LoadOpenbPods(catalog_, bad_header);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), bad_header +
                                      ":1: header lacks column 'gpu_milli' (expected "
                                      "name,cpu_milli,memory_mib,num_gpu,gpu_milli)");
  const std::string extra =
      dir_.Write("e.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,colour\np,1,1,0,0,red\n");
  auto b = LoadOpenbPods(catalog_, extra);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), extra + ":1: unexpected column 'colour' in header");
  auto c = LoadOpenbPods(catalog_, dir_.File("absent.csv"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message(), dir_.File("absent.csv") + ": cannot open file");
  EXPECT_EQ(LoadError(""), dir_.File("pods.csv") + ": the pod list has no pods");
}

TEST_F(TraceTest, DuplicatedSpecNamesAreDistinctTypicalClassesWithTheSameMask) {
  auto pods = ParseOpenbPods(catalog_, "mem",
                             std::string(kHeader) +
                                 "a,1000,1,1,500,V100M16|V100M32,LS,Running,0,0,0\n"
                                 "b,1000,1,1,500,V100M16|V100M32,LS,Running,0,0,0\n"
                                 "c,1000,1,1,500,V100M16|V100M32|V100M32,LS,Running,0,0,0\n");
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  const sched::TypicalWorkload t = TypicalWorkloadOf(*pods);
  ASSERT_EQ(t.workload.size(), 2u);
  EXPECT_NEAR(t.workload[0].weight, 2.0 / 3, 1e-12);
  EXPECT_NEAR(t.workload[1].weight, 1.0 / 3, 1e-12);
  EXPECT_EQ(t.workload[0].allowed_models, t.workload[1].allowed_models);
  EXPECT_EQ(t.workload[0].allowed_models, Bit("V100M16") | Bit("V100M32"));
}

}  // namespace
}  // namespace tessera::sim
