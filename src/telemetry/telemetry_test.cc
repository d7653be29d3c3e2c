#include <gtest/gtest.h>

#include "common/json.h"
#include "telemetry/history.h"
#include "telemetry/sample.h"
#include "telemetry/series.h"
#include "testing/testing.h"

namespace tessera::telemetry {
namespace {

NodeInfo Node() {
  NodeInfo n;
  n.hostname = "node-1";
  n.driver_version = "550.54.15";
  n.gpus = {{0, "GPU-aaaa", "NVIDIA A100-SXM4-80GB", "00000000:10:00.0", false},
            {1, "GPU-bbbb", "NVIDIA A100-SXM4-80GB", "00000000:18:00.0", true},
            {2, "GPU-cccc", "NVIDIA A100-SXM4-80GB", "00000000:20:00.0", false}};
  return n;
}

Telemetry Sample() {
  Telemetry t;
  GpuSample g0;
  g0.index = 0;
  g0.gpu_util = 37;
  g0.memory_used_mib = 40000;
  g0.memory_total_mib = 80000;
  g0.temperature_c = 61;
  g0.power_w = 250.5;
  g0.sm_clock_mhz = 1410;
  g0.mem_clock_mhz = 1593;
  g0.pcie_tx_kib_s = 2;
  g0.ecc_dbe_total = 1;
  g0.gr_engine_active = 0.37;
  g0.tensor_active = 0.2;
  GpuSample g1 = g0;
  g1.index = 1;
  g1.mig = {MigSample{0, "3g.40gb", -1, 10000, 40000, 0.5, 0.25}};
  GpuSample g2 = g0;
  g2.index = 2;
  t.gpus = {g0, g1, g2};
  t.xids = {{0, 79}};
  return t;
}

const Target* Find(const std::vector<Target>& ts, const std::string& gpu,
                   const std::string& instance) {
  for (const Target& t : ts) {
    const std::string* g = t.label("gpu");
    const std::string* i = t.label("tessera_instance");
    if (g && *g == gpu && (i ? *i : "") == instance) return &t;
  }
  return nullptr;
}

TEST(SeriesTest, TargetsCarryDcgmLabelsAndHolders) {
  std::vector<Holder> holders = {{0, "inst-000001", "acme", 1000, "", 0, -1},
                                 {1, "inst-000002", "beta", 1000, "3g.40gb", 0, -1},
                                 {2, "inst-000003", "acme", 250, "", 0, -1},
                                 {2, "inst-000004", "beta", 500, "", 0, -1}};
  const Telemetry t = Sample();
  std::vector<Target> ts;
  NodeTargets(Node(), &t, holders, true, ts);
  // The node, GPU 0's holder, GPU 1 itself and its MIG instance, GPU 2's two share holders.
  ASSERT_EQ(ts.size(), 6u);
  EXPECT_EQ(ts[0].get(Field::kNodeReady), 1);

  const Target* whole = Find(ts, "0", "inst-000001");
  ASSERT_NE(whole, nullptr);
  std::vector<std::string> names;
  for (const Label& l : whole->labels) names.push_back(l.name);
  EXPECT_EQ(names, (std::vector<std::string>{"gpu", "UUID", "pci_bus_id", "device", "modelName",
                                             "Hostname", "DCGM_FI_DRIVER_VERSION", "tenant",
                                             "tessera_instance"}));
  EXPECT_EQ(*whole->label("device"), "nvidia0");
  EXPECT_EQ(whole->tenant, "acme");
  EXPECT_EQ(whole->get(Field::kGpuUtil), 37);
  EXPECT_EQ(whole->get(Field::kFbFree), 40000);
  EXPECT_EQ(whole->get(Field::kFbUsedPercent), 50);
  EXPECT_EQ(whole->get(Field::kXidErrors), 79);
  EXPECT_EQ(whole->get(Field::kPcieTxBytes), 2048);

  // A MIG instance: its own memory and engine; the GPU's readings on the GPU's series.
  const Target* mig = Find(ts, "1", "inst-000002");
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ(*mig->label("GPU_I_PROFILE"), "3g.40gb");
  EXPECT_EQ(*mig->label("GPU_I_ID"), "0");
  EXPECT_EQ(mig->get(Field::kFbUsed), 10000);
  EXPECT_EQ(mig->get(Field::kGrEngineActive), 0.5);
  EXPECT_FALSE(mig->has(Field::kGpuTemp));
  const Target* gpu1 = Find(ts, "1", "");
  ASSERT_NE(gpu1, nullptr);
  EXPECT_EQ(gpu1->get(Field::kGpuTemp), 61);
  EXPECT_FALSE(gpu1->has(Field::kGpuUtil));  // NVML has no GPU-wide utilization in MIG mode.
  EXPECT_EQ(gpu1->get(Field::kXidErrors), 0);

  // A shared GPU: one series per holder, with its fraction.
  const Target* share = Find(ts, "2", "inst-000003");
  ASSERT_NE(share, nullptr);
  EXPECT_EQ(*share->label("fraction"), "0.25");
  EXPECT_EQ(*Find(ts, "2", "inst-000004")->label("fraction"), "0.5");
}

TEST(SeriesTest, ExpositionIsDcgmExportersFormat) {
  const Telemetry t = Sample();
  std::vector<Target> ts;
  NodeTargets(Node(), &t, {{0, "inst-\"1\"", "ac\\me", 1000, "", 0, -1}}, false, ts);
  std::string out;
  RenderExposition(ts, out);
  EXPECT_NE(out.find("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
                     "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                     "DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-aaaa\",pci_bus_id=\"00000000:10:00."
                     "0\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"node-"
                     "1\",DCGM_FI_DRIVER_VERSION=\"550.54.15\",tenant=\"ac\\\\me\",tessera_"
                     "instance=\"inst-\\\"1\\\"\"} 37\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n"), std::string::npos);
  EXPECT_NE(out.find("DCGM_FI_DEV_POWER_USAGE{"), std::string::npos);
  EXPECT_NE(out.find("tessera_node_ready{Hostname=\"node-1\"} 0\n"), std::string::npos);
  // Every name once, HELP and TYPE before its samples.
  for (size_t f = 0; f < kFieldCount; ++f) {
    // A budget's and an interrupted instance's are series the core adds to the node's
    // (core/state_monitoring.cc).
    if (static_cast<Field>(f) == Field::kBudgetUsedPercent ||
        static_cast<Field>(f) == Field::kInstanceInterrupted) {
      continue;
    }
    const std::string name(Info(static_cast<Field>(f)).name);
    const size_t help = out.find("# HELP " + name + " ");
    ASSERT_NE(help, std::string::npos) << name;
    EXPECT_EQ(out.find("# HELP " + name + " ", help + 1), std::string::npos) << name;
    EXPECT_LT(help, out.find("\n" + name + "{")) << name;
  }

  // promtool, Prometheus's own checker, accepts it (it comes with Debian's prometheus).
  auto problems = testing::PromtoolProblems(out);
  if (!problems) GTEST_SKIP() << "promtool is not installed (scripts/bootstrap.sh installs it)";
  EXPECT_EQ(*problems, "");
}

TEST(SeriesTest, NoTelemetryYetMeansNoValues) {
  std::vector<Target> ts;
  NodeTargets(Node(), nullptr, {}, true, ts);
  std::string out;
  RenderExposition(ts, out);
  EXPECT_EQ(out.find("DCGM_FI_DEV_GPU_TEMP{"), std::string::npos);
  EXPECT_NE(out.find("tessera_node_ready{Hostname=\"node-1\"} 1"), std::string::npos);
}

TEST(SampleTest, RoundTripsAndNamesBadFields) {
  const Telemetry t = Sample();
  auto back = FromJson(ToJson(t));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->gpus.size(), 3u);
  EXPECT_EQ(back->gpus[1].mig.at(0).profile, "3g.40gb");
  EXPECT_EQ(back->gpus[0].gr_engine_active, 0.37);
  EXPECT_EQ(back->xids.at(0).code, 79);

  auto bad = [](const std::string& text) {
    auto j = ParseJson(text, "test");
    EXPECT_TRUE(j.ok());
    auto r = FromJson(*j);
    EXPECT_FALSE(r.ok()) << text;
    return r.ok() ? std::string() : r.status().message();
  };
  EXPECT_NE(bad(R"({"gpus":[{"index":0,"power_w":-1}]})").find("gpus[0]: field 'power_w'"),
            std::string::npos);
  EXPECT_NE(bad(R"({"gpus":[{"index":0},{"index":0}]})").find("given twice"), std::string::npos);
  EXPECT_NE(bad(R"({"gpus":[{"index":0,"gpu_util":"high"}]})").find("gpu_util"), std::string::npos);
  EXPECT_NE(bad(R"({"gpus":[{"index":0,"mig":[{"start":0,"gr_engine_active":2}]}]})")
                .find("gr_engine_active"),
            std::string::npos);
  EXPECT_NE(bad(R"({"gpus":[],"xids":[{"gpu":0}]})").find("code"), std::string::npos);
  EXPECT_NE(bad(R"({"gpus":[], "extra":1})").find("extra"), std::string::npos);
  EXPECT_NE(bad(R"([1,2])").find("expected an object"), std::string::npos);
}

TEST(HistoryTest, KeepsTheLastHourPerDevice) {
  History h(std::chrono::hours(1), 1000);
  Time t0(std::chrono::seconds(1'767'225'600));
  Telemetry t = Sample();
  for (int i = 0; i < 400; ++i) {  // 400 reports 10 s apart: 66 minutes.
    t.gpus[0].gpu_util = i % 100;
    h.Record("node-1", t0 + std::chrono::seconds(10 * i), t);
  }
  const Time now = t0 + std::chrono::seconds(3990);
  auto all = h.Points("node-1", 0, -1, now - std::chrono::hours(2));
  EXPECT_EQ(all.size(), 361u);  // The last hour, both ends included.
  auto recent = h.Points("node-1", 0, -1, now - std::chrono::minutes(15));
  ASSERT_EQ(recent.size(), 91u);
  EXPECT_EQ(recent.back().gpu_util, 99);
  EXPECT_EQ(recent.back().temperature_c, 61);
  auto mig = h.Points("node-1", 1, 0, now - std::chrono::minutes(1));
  ASSERT_FALSE(mig.empty());
  EXPECT_EQ(mig.back().gpu_util, 50);  // The MIG instance's engine, in percent.
  EXPECT_EQ(mig.back().fb_used_mib, 10000);
  EXPECT_TRUE(h.Points("node-2", 0, -1, t0).empty());
  h.Forget("node-1");
  EXPECT_EQ(h.devices(), 0u);
}

}  // namespace
}  // namespace tessera::telemetry
