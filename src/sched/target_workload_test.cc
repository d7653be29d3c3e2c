#include "sched/target_workload.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/csv.h"
#include "fleet/fleet_file.h"
#include "sched/sched_testing.h"
#include "testing/testing.h"

namespace tessera::sched {
namespace {

using testing::Bit;
using testing::TheCatalog;

std::vector<PodShape> Repeat(PodShape p, int n) {
  return std::vector<PodShape>(static_cast<size_t>(n), p);
}

std::vector<PodShape> Concat(std::initializer_list<std::vector<PodShape>> parts) {
  std::vector<PodShape> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(WorkloadTest, KeepsClassesUntilTheThresholdIsCrossed) {
  // Counts 5, 3, 1, 1 of 10. Equal counts go in descending key order: cpu 4000 before 2000.
  const std::vector<PodShape> pods = Concat({
      Repeat({.cpu_milli = 1000}, 5),
      Repeat({.cpu_milli = 2000, .gpu_milli = 500, .gpu_count = 1}, 3),
      Repeat({.cpu_milli = 2000,
              .gpu_milli = 1000,
              .gpu_count = 1,
              .gpu_spec = "T4",
              .allowed_models = Bit("T4")},
             1),
      Repeat({.cpu_milli = 4000, .gpu_milli = 1000, .gpu_count = 2}, 1),
  });
  // 95% of 10 is 9.5: the running count 5, 8, 9 is below it, so the fourth class is kept too.
  TypicalWorkload all = BuildTypicalWorkload(pods);
  ASSERT_EQ(all.workload.size(), 4u);
  EXPECT_EQ(all.distinct, 4u);
  EXPECT_DOUBLE_EQ(all.coverage, 1.0);
  EXPECT_EQ(all.workload[0].cpu_milli, 1000);
  EXPECT_EQ(all.workload[1].gpu_milli, 500);
  EXPECT_EQ(all.workload[2].cpu_milli, 4000);
  EXPECT_EQ(all.workload[2].gpu_count, 2);
  EXPECT_EQ(all.workload[3].allowed_models, Bit("T4"));
  EXPECT_DOUBLE_EQ(all.workload[0].weight, 0.5);
  EXPECT_DOUBLE_EQ(all.workload[3].weight, 0.1);

  // At 80% (8 pods) the running count reaches 8 with the second class and stops there; the two
  // kept classes are renormalised to 5/8 and 3/8.
  TypicalWorkload top = BuildTypicalWorkload(pods, 80);
  ASSERT_EQ(top.workload.size(), 2u);
  EXPECT_DOUBLE_EQ(top.coverage, 0.8);
  EXPECT_DOUBLE_EQ(top.workload[0].weight, 5.0 / 8);
  EXPECT_DOUBLE_EQ(top.workload[1].weight, 3.0 / 8);
}

TEST(WorkloadTest, SpecStringIsPartOfTheKey) {
  const PodShape base{.cpu_milli = 8000, .gpu_milli = 1000, .gpu_count = 1};
  PodShape a = base, b = base, c = base, d = base;
  a.gpu_spec = "V100M16|V100M32";
  b.gpu_spec = "V100M32";
  b.allowed_models = Bit("V100M32");
  c.gpu_spec = "V100M16||V100M32";         // Empty pieces are dropped: the same class as a.
  d.gpu_spec = "V100M16|V100M32|V100M32";  // Repeats are kept: a class of its own.
  const TypicalWorkload w = BuildTypicalWorkload(std::vector<PodShape>{a, b, c, d}, 100);
  ASSERT_EQ(w.workload.size(), 3u);
  EXPECT_EQ(w.distinct, 3u);
  EXPECT_DOUBLE_EQ(w.workload[0].weight, 0.5);  // a and c.
  // b and d tie at one pod: descending spec string, "V100M32" > "V100M16|V100M32|V100M32".
  EXPECT_EQ(w.workload[1].allowed_models, Bit("V100M32"));
  EXPECT_EQ(w.workload[1].weight, 0.25);
}

TEST(WorkloadTest, EmptyTraceGivesEmptyWorkload) {
  const TypicalWorkload w = BuildTypicalWorkload(std::vector<PodShape>{});
  EXPECT_TRUE(w.workload.empty());
  EXPECT_EQ(w.coverage, 0);
}

TEST(WorkloadTest, ParsesGpuSpecThroughTheCatalog) {
  EXPECT_EQ(*ParseGpuSpec(TheCatalog(), ""), 0u);
  EXPECT_EQ(*ParseGpuSpec(TheCatalog(), "T4"), Bit("T4"));
  EXPECT_EQ(*ParseGpuSpec(TheCatalog(), "|V100M16|V100M32|V100M32|"),
            Bit("V100M16") | Bit("V100M32"));
  EXPECT_EQ(*ParseGpuSpec(TheCatalog(), "V100-32GB"), Bit("V100M32"));  // Id or alias.
  const Result<ModelMask> bad = ParseGpuSpec(TheCatalog(), "T4|X100");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(bad.status().message(),
            "gpu_spec 'T4|X100': unknown GPU model 'X100' (not in the catalog)");
}

// The pods of an openb pod list, read directly.
struct OpenbPods {
  std::vector<std::string> specs;
  std::vector<PodShape> shapes;
};

OpenbPods ReadPods(const std::string& path) {
  OpenbPods out;
  Result<CsvReader> csv = CsvReader::Open(path);
  EXPECT_TRUE(csv.ok()) << csv.status().ToString();
  if (!csv.ok()) return out;
  EXPECT_TRUE(csv->ReadHeader({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
                              {"gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time",
                               "scheduled_time"})
                  .ok());
  std::vector<PodShape> shapes;
  while (csv->Next()) {
    out.specs.emplace_back(csv->Field("gpu_spec"));
    PodShape p{.cpu_milli = *csv->Int("cpu_milli"),
               .gpu_milli = static_cast<int>(*csv->Int("gpu_milli")),
               .gpu_count = static_cast<int>(*csv->Int("num_gpu"))};
    p.allowed_models = *ParseGpuSpec(TheCatalog(), out.specs.back());
    out.shapes.push_back(p);
  }
  EXPECT_TRUE(csv->status().ok()) << csv->status().ToString();
  for (size_t i = 0; i < out.shapes.size(); ++i) out.shapes[i].gpu_spec = out.specs[i];
  return out;
}

// Class counts from the FGD authors' run logs (fgd-details.md §4).
TEST(WorkloadTest, OpenbTracesGiveTheLoggedTypicalPods) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  struct Case {
    const char* trace;
    size_t classes;
  };
  for (const Case& c : {Case{"default", 35}, Case{"gpushare100", 21}, Case{"gpuspec33", 127},
                        Case{"multigpu50", 43}}) {
    const OpenbPods pods = ReadPods(datasets + "/openb/openb_pod_list_" + c.trace + ".csv");
    const TypicalWorkload w = BuildTypicalWorkload(pods.shapes);
    EXPECT_EQ(w.workload.size(), c.classes) << c.trace;
    double sum = 0;
    for (const WorkloadClass& k : w.workload) sum += k.weight;
    EXPECT_NEAR(sum, 1.0, 1e-12) << c.trace;
    if (std::string(c.trace) == "default") {
      EXPECT_NEAR(w.coverage, 0.9526, 0.00005);
    }
  }
}

// The FGD log's fragmentation of the empty openb cluster against the default trace's typical
// pods: 866232.6 milli-GPU.
TEST(WorkloadTest, EmptyOpenbClusterFragmentationMatchesTheLog) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  const OpenbPods pods = ReadPods(datasets + "/openb/openb_pod_list_default.csv");
  Result<fleet::Fleet> fleet =
      fleet::LoadFleetFile(TheCatalog(), datasets + "/openb/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(fleet.ok()) << fleet.status().ToString();
  Options options{
      .policy = "fgd", .seed = 42, .target = BuildTypicalWorkload(pods.shapes).workload};
  auto s = Scheduler::Create(&*fleet, options);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_NEAR((*s)->FragmentationMilli(), 866232.6, 0.05);
}

}  // namespace
}  // namespace tessera::sched
