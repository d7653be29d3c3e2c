// The what-if simulator: the Philly and openb loaders' errors, the mix's syntax, openb's stand-in
// fleet with shares and whole GPUs side by side, a tiny trace checked by hand, conservation (every
// job placed, finished or still waiting; the GPU-seconds the fleet allocated equal the jobs' run
// time), spot preemption with its lost work, reservations on the bill, and gangs for jobs wider
// than a node.
#include <gtest/gtest.h>

#include "catalog/catalog.h"
#include "fleet/fleet_file.h"
#include "testing/testing.h"
#include "whatif/dynamic.h"
#include "whatif/jobs.h"
#include "whatif/openb.h"

namespace tessera::whatif {
namespace {

const catalog::Catalog& Catalog() {
  static const catalog::Catalog c = std::move(catalog::Catalog::LoadEmbedded()).value();
  return c;
}

// `nodes` nodes of `gpus` V100s, all on one NVLink island when `nvlink`.
fleet::Fleet Nodes(int nodes, int gpus, bool nvlink = false) {
  const std::string json = fmt::format(
      R"({{"name": "t", "shapes": [{{"name": "v100", "count": {}, "gpu_model": "V100-16GB",
          "gpus": {}, "vcpus": 96, "memory_gib": 768, "gpu_mode": "exclusive"{}}}]}})",
      nodes, gpus, nvlink ? R"(, "nvlink": "all")" : "");
  return std::move(fleet::ParseFleetJson(Catalog(), json, "test fleet")).value();
}

std::vector<Job> Jobs(const std::string& csv) {
  auto jobs = ParsePhillyJobs("trace.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n" + csv);
  EXPECT_TRUE(jobs.ok()) << jobs.status().message();
  return jobs.ok() ? *jobs : std::vector<Job>{};
}

Outcome Simulate(const fleet::Fleet& fleet, const std::vector<Job>& jobs,
                 const std::string& mix = "on_demand") {
  DynamicOptions o;
  o.mix = std::move(ParseMix(mix)).value();
  auto out = RunDynamic(Catalog(), fleet, jobs, o);
  EXPECT_TRUE(out.ok()) << out.status().message();
  return out.ok() ? *out : Outcome{};
}

TEST(PhillyJobsTest, ReadsJobsInSubmissionOrderAndNamesTheLineOfEveryDefect) {
  const auto jobs = Jobs(
      "2017-10-09 07:01:55,66.0,1,66.0,a\n"
      "2017-10-09 06:13:03,2951.4,4,11805.6,b\n");
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].name, "philly-000002");
  EXPECT_EQ(jobs[0].submit_s, 0);
  EXPECT_EQ(jobs[0].duration_s, 2951);
  EXPECT_EQ(jobs[0].gpus, 4);
  EXPECT_EQ(jobs[1].submit_s, 48 * 60 + 52);
  const std::string header = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  for (const auto& [row, want] : std::vector<std::pair<std::string, std::string>>{
           {"2017-10-09T07:01:55,66,1,66,a", "trace.csv:2: timestamp"},
           {"2017-10-09 07:01:55,-3,1,66,a", "trace.csv:2: duration"},
           {"2017-10-09 07:01:55,66,0,66,a", "trace.csv:2"},
           {"2017-10-09 07:01:55,66,1,66", "trace.csv:2"}}) {
    auto bad = ParsePhillyJobs("trace.csv", header + row + "\n");
    ASSERT_FALSE(bad.ok()) << row;
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status().message();
  }
  EXPECT_FALSE(ParsePhillyJobs("trace.csv", header).ok()) << "a trace without jobs";
  EXPECT_EQ(LoadPhillyJobs("/nonexistent/philly.csv").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(LoadJobs(Catalog(), "/nonexistent/pods.csv").status().code(), StatusCode::kNotFound);
}

constexpr char kOpenbHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

std::vector<Job> OpenbJobs(const std::string& rows) {
  auto jobs = ParseOpenbJobs(Catalog(), "pods.csv", kOpenbHeader + rows);
  EXPECT_TRUE(jobs.ok()) << jobs.status().message();
  return jobs.ok() ? *jobs : std::vector<Job>{};
}

TEST(OpenbJobsTest, ReadsTimesQosSharesAndCpuOnlyPodsAndNamesTheLineOfEveryDefect) {
  const auto jobs = OpenbJobs(
      "a,12000,16384,1,1000,,LS,Running,100,1100,105\n"
      "b,3152,5600,1,460,,BE,Pending,200,500,\n"
      "c,2000,1024,0,0,,LS,Succeeded,150,160,150\n");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].name, "a");
  EXPECT_EQ(jobs[0].submit_s, 0);
  EXPECT_EQ(jobs[0].duration_s, 995) << "from its placement to its deletion";
  EXPECT_EQ(jobs[0].vcpus, 12);
  EXPECT_EQ(jobs[0].memory_mib, 16384);
  EXPECT_EQ(jobs[0].gpu_milli, 1000);
  EXPECT_FALSE(jobs[0].best_effort);
  EXPECT_TRUE(jobs[0].checkpoints) << "an LS pod is a service: preempted, it resumes";
  EXPECT_EQ(jobs[1].name, "c");
  EXPECT_EQ(jobs[1].submit_s, 50);
  EXPECT_EQ(jobs[1].gpus, 0) << "a CPU-only pod";
  EXPECT_EQ(jobs[2].name, "b");
  EXPECT_EQ(jobs[2].duration_s, 300) << "never placed in the trace: its whole life";
  EXPECT_EQ(jobs[2].vcpus, 4) << "3152 milli-CPU round up to whole vCPUs";
  EXPECT_EQ(jobs[2].gpu_milli, 460);
  EXPECT_TRUE(jobs[2].best_effort);
  EXPECT_FALSE(jobs[2].checkpoints) << "a BE pod is batch work: preempted, it starts over";
  EXPECT_TRUE(AreOpenbJobs(jobs));

  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {std::string(kOpenbHeader) + "a,1000,1,1,1000,V100M16,LS,Running,0,10,0\n",
            "pods.csv:2: gpu_spec 'V100M16'"},
           {"name,cpu_milli,memory_mib,num_gpu,gpu_milli\na,1000,1,1,1000\n",
            "pods.csv:2: no creation_time"},
           {std::string(kOpenbHeader) + "a,1000,1,1,1000,,LS,Running,50,10,50\n",
            "pods.csv:2: deletion_time 10 is before creation_time 50"},
           {std::string(kOpenbHeader) + "a,1000,1,1,1000,,LS,Running,x,10,0\n", "pods.csv:2"},
           {std::string(kOpenbHeader) + "a,1000,1,1,1000,,LS,Running,0,315360001,0\n",
            "pods.csv:2: deletion_time 315360001 is more than ten years"}}) {
    auto bad = ParseOpenbJobs(Catalog(), "pods.csv", text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(want), std::string::npos) << bad.status().message();
  }
}

// openb's node list for `rows` ("name,cpu_milli,memory_mib,gpus,model" lines), as its stand-in.
std::unique_ptr<StandIn> OpenbFleet(const std::string& rows, const std::vector<Job>& jobs) {
  auto fleet = fleet::ParseOpenbNodeCsv(Catalog(), "sn,cpu_milli,memory_mib,gpu,model\n" + rows,
                                        "nodes.csv");
  EXPECT_TRUE(fleet.ok()) << fleet.status().message();
  auto standin = OpenbStandIn(*fleet, jobs);
  EXPECT_TRUE(standin.ok()) << standin.status().message();
  return standin.ok() ? std::move(*standin) : nullptr;
}

TEST(OpenbTest, TheStandInKeepsEachNodeAndPricesItsGpusAsTheGivenType) {
  const auto jobs = OpenbJobs(
      "a,18000,65536,1,1000,,LS,Running,0,100,0\n"
      "b,64000,262144,8,1000,,LS,Running,0,100,0\n");
  const auto standin = OpenbFleet("n0,96000,393216,8,G2\nn1,52000,262144,2,T4\n", jobs);
  ASSERT_TRUE(standin);
  const catalog::Catalog& c = standin->catalog;
  const catalog::InstanceType* unit = c.FindInstanceType(kOpenbUnit);
  ASSERT_NE(unit, nullptr);
  EXPECT_EQ(unit->gpu_model, kOpenbModel);
  EXPECT_EQ(unit->gpus, 1);
  EXPECT_EQ(unit->vcpus, 18) << "room for the largest whole 1-GPU pod";
  EXPECT_EQ(unit->memory_mib, 65536);
  EXPECT_EQ(c.FindPrice(kOpenbUnit)->on_demand_per_hour,
            c.FindPrice("gpu.1xt4")->on_demand_per_hour);
  EXPECT_EQ(c.FindPrice(kOpenbUnit)->spot_per_hour, c.FindPrice("gpu.1xt4")->spot_per_hour);
  const fleet::Fleet& f = *standin->fleet;
  ASSERT_EQ(f.nodes().size(), 2u);
  EXPECT_EQ(f.nodes()[1].name, "n1");
  EXPECT_EQ(f.nodes()[1].cpu_milli, 52000);
  EXPECT_EQ(f.nodes()[1].gpus.size(), 2u);
  EXPECT_EQ(c.gpu(f.nodes()[0].model).id, kOpenbModel);
  for (const fleet::Gpu& g : f.nodes()[0].gpus) EXPECT_EQ(g.mode, catalog::SharingMode::kShared);
  auto fleet = fleet::ParseOpenbNodeCsv(
      Catalog(), "sn,cpu_milli,memory_mib,gpu,model\nn0,8000,65536,1,T4\n", "x");
  ASSERT_TRUE(fleet.ok());
  auto bad = OpenbStandIn(*fleet, jobs, "gpu.4xt4");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'gpu.4xt4' is not a priced 1-GPU"), std::string::npos);
}

TEST(OpenbTest, SharesAndWholeGpuPodsTakeTheSameGpusAsInOpenbsCluster) {
  // One node of one GPU. Shares s1 (500 milli, 0-100 s) and s2 (500, from 10 s for 100 s) run
  // side by side on it; the whole-GPU pod w (from 20 s for 50 s) waits until both have left
  // (110 s) and ends at 160. A CPU-only pod c runs at once beside them.
  const auto jobs = OpenbJobs(
      "s1,2000,4096,1,500,,LS,Running,0,100,0\n"
      "s2,2000,4096,1,500,,LS,Running,10,110,10\n"
      "w,4000,8192,1,1000,,LS,Running,20,70,20\n"
      "c,4000,8192,0,0,,LS,Running,20,40,20\n");
  const auto standin = OpenbFleet("n0,16000,65536,1,T4\n", jobs);
  ASSERT_TRUE(standin);
  DynamicOptions o;
  o.whole_gpus_on_shared = true;  // openb's GPUs take shares and whole GPUs alike.
  auto out = RunDynamic(standin->catalog, *standin->fleet, jobs, o);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->finished, 4);
  EXPECT_EQ(out->refused, 0) << out->first_refusal;
  EXPECT_EQ(out->span_s, 160);
  EXPECT_EQ(out->first_start_s, (std::vector<int64_t>{0, 10, 110, 20}));
  EXPECT_DOUBLE_EQ(out->wait_p99_s, 90);
  EXPECT_DOUBLE_EQ(out->allocated_gpu_s, 0.5 * 100 + 0.5 * 100 + 1.0 * 50);
  EXPECT_DOUBLE_EQ(out->allocated_gpu_s, out->job_gpu_s);
  EXPECT_GT(out->bill_micros.at("on_demand"), 0);
}

TEST(OpenbTest, APodNoNodeCanHoldIsRefusedAndTheRestRunReserved) {
  const auto jobs = OpenbJobs(
      "huge,999999999000,1024,1,1000,,LS,Running,0,100,0\n"
      "a,4000,8192,1,1000,,LS,Running,0,100,0\n");
  const auto standin = OpenbFleet("n0,16000,65536,1,T4\n", jobs);
  ASSERT_TRUE(standin);
  EXPECT_EQ(standin->catalog.FindInstanceType(kOpenbUnit)->vcpus, 4)
      << "the unit is sized by the pods a node can hold";
  DynamicOptions o;
  o.whole_gpus_on_shared = true;  // openb's GPUs take shares and whole GPUs alike.
  o.mix = std::move(ParseMix("reserved=100%")).value();
  auto out = RunDynamic(standin->catalog, *standin->fleet, jobs, o);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->refused, 1);
  EXPECT_NE(out->first_refusal.find("huge: field 'vcpus'"), std::string::npos)
      << out->first_refusal;
  EXPECT_EQ(out->finished, 1);
  EXPECT_EQ(out->bill_micros.count("on_demand"), 0u) << "the pod that ran claimed the unit";
}

TEST(OpenbTest, TheDefaultTraceRunsWithDeparturesAndEveryPodIsAccountedFor) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  auto jobs = LoadJobs(Catalog(), datasets + "/openb/openb_pod_list_default.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().message();
  ASSERT_EQ(jobs->size(), 8152u);
  auto fleet = fleet::LoadFleetFile(Catalog(), datasets + "/openb/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(fleet.ok());
  auto standin = OpenbStandIn(*fleet, *jobs);
  ASSERT_TRUE(standin.ok()) << standin.status().message();
  DynamicOptions o;
  o.whole_gpus_on_shared = true;  // openb's GPUs take shares and whole GPUs alike.
  o.mix = std::move(ParseMix("spot=BE")).value();
  auto out = RunDynamic((*standin)->catalog, *(*standin)->fleet, *jobs, o);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->refused, 0) << out->first_refusal;
  EXPECT_EQ(out->finished, 8152) << "every pod fits openb's fleet, so every one ends";
  EXPECT_NEAR(out->allocated_gpu_s, out->job_gpu_s, 1e-6 * out->job_gpu_s);
  EXPECT_GT(out->bill_micros.at("spot"), 0) << "the BE pods ran as spot";
}

TEST(MixTest, ParsesReservedShareAndSpotClassOrNamesThePart) {
  auto m = ParseMix("reserved=40%,spot=BE");
  ASSERT_TRUE(m.ok());
  EXPECT_DOUBLE_EQ(m->reserved, 0.4);
  EXPECT_EQ(m->spot, Mix::Spot::kBestEffort);
  EXPECT_EQ(ParseMix("on_demand")->reserved, 0);
  for (const char* bad : {"reserved=140%", "spot=some", "cheap", "reserved=x"}) {
    auto r = ParseMix(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--mix"), std::string::npos);
  }
}

TEST(DynamicTest, ATinyTraceRunsAsWorkedOutByHand) {
  // One node of 2 GPUs. A (1 GPU, 100 s) at 0; B (2 GPUs, 50 s) at 10 waits for A;
  // C (1 GPU, 30 s) at 20 fits beside A at once. A ends at 100, C at 50; B starts at 100 (when
  // both GPUs are free) and ends at 150.
  const auto jobs = Jobs(
      "2017-10-09 00:00:00,100,1,100,x\n"
      "2017-10-09 00:00:10,50,2,100,x\n"
      "2017-10-09 00:00:20,30,1,30,x\n");
  const Outcome o = Simulate(Nodes(1, 2), jobs);
  EXPECT_EQ(o.finished, 3);
  EXPECT_EQ(o.waiting, 0);
  EXPECT_EQ(o.span_s, 150);
  // Waits: A 0, C 0, B 90; completion times: A 100, C 30, B 140.
  EXPECT_DOUBLE_EQ(o.wait_p50_s, 0);
  EXPECT_DOUBLE_EQ(o.wait_p99_s, 90);
  EXPECT_DOUBLE_EQ(o.jct_p50_s, 100);
  EXPECT_DOUBLE_EQ(o.jct_p99_s, 140);
  EXPECT_DOUBLE_EQ(o.allocated_gpu_s, 100 + 100 + 30);
  // On-demand V100 to the second, with the one-minute minimum for C: 230 GPU-seconds... in
  // micro-USD, as the ledger wrote them; nothing else is billed.
  ASSERT_EQ(o.bill_micros.size(), 1u);
  EXPECT_GT(o.bill_micros.at("on_demand"), 0);
}

// One node of 2 GPUs; A (1 GPU, 100 s) and B (2 GPUs, 50 s) are submitted in the same second.
// Placed as they come, A runs and B waits for it; with the server's batch window of 2
// ("guarded-fgd-batch2"), which the two fill, the larger B runs first and A waits for it. A
// window of 8 that they do not fill closes at the trace's next second: the same, 1 s later.
TEST(DynamicTest, TheServersBatchWindowPlacesTheLargerOfTwoJobsSubmittedTogetherFirst) {
  const auto jobs = Jobs(
      "2017-10-09 00:00:00,100,1,100,x\n"
      "2017-10-09 00:00:00,50,2,100,x\n");
  const Outcome plain = Simulate(Nodes(1, 2), jobs);
  EXPECT_EQ(plain.span_s, 150);
  EXPECT_DOUBLE_EQ(plain.wait_p99_s, 100);  // B waits for A.
  DynamicOptions o;
  o.policy = "guarded-fgd-batch2";
  auto batched = RunDynamic(Catalog(), Nodes(1, 2), jobs, o);
  ASSERT_TRUE(batched.ok()) << batched.status().message();
  EXPECT_EQ(batched->policy, "guarded-fgd-batch2");
  EXPECT_EQ(batched->finished, 2);
  EXPECT_EQ(batched->span_s, 150);            // B from 0 to 50 s, then A.
  EXPECT_DOUBLE_EQ(batched->wait_p50_s, 0);   // B.
  EXPECT_DOUBLE_EQ(batched->wait_p99_s, 50);  // A waits for B.
  o.policy = "guarded-fgd-batch8";
  auto late = RunDynamic(Catalog(), Nodes(1, 2), jobs, o);
  ASSERT_TRUE(late.ok()) << late.status().message();
  EXPECT_EQ(late->span_s, 151);
  EXPECT_DOUBLE_EQ(late->wait_p50_s, 1);
  EXPECT_DOUBLE_EQ(late->wait_p99_s, 51);
}

// One node of two GPUs. f (700) leaves at 10 s beside a (300), b (500) runs on the other GPU, and
// w (800) comes at 20 s: it fits nowhere until a leaves at 1,001 s. With "guarded-fgd-repack" the
// core moves a, a migratable share, to b's GPU: with the server's notice (120 s) w starts at
// 140 s, and without notice at once; a's run so far is lost (it is batch work) and a restarts.
TEST(OpenbTest, RepackingMovesAShareSoThatAWaitingPodStartsAndCountsTheWorkItLost) {
  const auto jobs = OpenbJobs(
      "f,2000,4096,1,700,,BE,Running,0,10,0\n"
      "a,2000,4096,1,300,,BE,Running,1,1001,1\n"
      "b,2000,4096,1,500,,LS,Running,2,1002,2\n"
      "w,2000,4096,1,800,,LS,Running,20,120,20\n");
  const auto standin = OpenbFleet("n0,16000,65536,2,T4\n", jobs);
  ASSERT_TRUE(standin);
  DynamicOptions o;
  o.whole_gpus_on_shared = true;
  auto plain = RunDynamic(standin->catalog, *standin->fleet, jobs, o);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->first_start_s, (std::vector<int64_t>{0, 1, 2, 1001}));
  EXPECT_EQ(plain->moves, 0);
  o.policy = "guarded-fgd-repack";
  auto moved = RunDynamic(standin->catalog, *standin->fleet, jobs, o);
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  EXPECT_EQ(moved->policy, "guarded-fgd-repack");
  EXPECT_EQ(moved->finished, 4);
  EXPECT_EQ(moved->moves, 1);
  EXPECT_EQ(moved->preemptions, 0);
  EXPECT_EQ(moved->first_start_s, (std::vector<int64_t>{0, 1, 2, 140}));
  // a ran from 1 s to the end of its notice at 140 s on 0.3 GPU, and starts over.
  EXPECT_NEAR(moved->moved_gpu_hours_lost, 0.3 * 139 / 3600, 1e-9);
  EXPECT_DOUBLE_EQ(moved->wasted_gpu_hours, moved->moved_gpu_hours_lost);
  // Its new place is held from the move (20 s) until it restarts there (140 s).
  EXPECT_NEAR(moved->allocated_gpu_s, moved->job_gpu_s + 0.3 * 120, 1e-9);
  o.spot_notice_s = 0;
  auto at_once = RunDynamic(standin->catalog, *standin->fleet, jobs, o);
  ASSERT_TRUE(at_once.ok()) << at_once.status().message();
  EXPECT_EQ(at_once->moves, 1);
  EXPECT_EQ(at_once->first_start_s, (std::vector<int64_t>{0, 1, 2, 20}));
}

TEST(DynamicTest, EveryJobIsAccountedForAndTheFleetsGpuSecondsAreTheJobsRunTime) {
  std::string csv;
  for (int i = 0; i < 300; ++i) {
    csv += fmt::format("2017-10-09 00:{:02}:{:02},{},{},0,x\n", (i * 7) / 60 % 60, (i * 7) % 60,
                       60 + (i * 37) % 900, (i % 11 == 0) ? 4 : (i % 29 == 0 ? 16 : 1));
  }
  const auto jobs = Jobs(csv);
  const Outcome o = Simulate(Nodes(3, 8), jobs);
  EXPECT_EQ(o.finished + o.running + o.waiting + o.refused, o.jobs);
  EXPECT_EQ(o.finished, o.jobs) << "every job fits the fleet, so every one ends";
  EXPECT_DOUBLE_EQ(o.allocated_gpu_s, o.job_gpu_s);
  double demand = 0;
  for (const Job& j : jobs) demand += static_cast<double>(j.gpus * j.duration_s);
  EXPECT_DOUBLE_EQ(o.job_gpu_s, demand) << "nothing was preempted, so nothing ran twice";
}

TEST(DynamicTest, SpotJobsArePreemptedWithTheirNoticeByOnDemandWorkAndStartOver) {
  // Spot fills the node; on-demand work arriving later preempts it.
  std::string csv =
      "2017-10-09 00:00:00,1000,2,0,x\n"  // Spot (all), 2 GPUs, would end at 1000.
      "2017-10-09 00:01:40,100,2,0,x\n";  // At 100: 2 GPUs more; the node has 2.
  auto jobs = Jobs(csv);
  jobs[0].best_effort = true;
  // The default notice, 120 s: the spot job runs on to 220, the on-demand one waits for it and
  // runs 220-320, and the spot job starts over at 320.
  const Outcome o = Simulate(Nodes(1, 2), jobs, "spot=BE");
  EXPECT_EQ(o.finished, 2);
  EXPECT_EQ(o.preemptions, 1);
  EXPECT_EQ(o.first_start_s, (std::vector<int64_t>{0, 220}));
  EXPECT_DOUBLE_EQ(o.wasted_gpu_hours, 2.0 * 220 / 3600)
      << "the spot job's first 220 s, its notice included, are lost";
  EXPECT_EQ(o.span_s, 220 + 100 + 1000) << "it starts over once the on-demand job has ended";
  EXPECT_GT(o.bill_micros.at("spot"), 0);
  EXPECT_GT(o.bill_micros.at("on_demand"), 0);
  EXPECT_DOUBLE_EQ(o.allocated_gpu_s, o.job_gpu_s);
  // Without a notice the victim stops at once.
  DynamicOptions now;
  now.mix = std::move(ParseMix("spot=BE")).value();
  now.spot_notice_s = 0;
  auto at_once = RunDynamic(Catalog(), Nodes(1, 2), jobs, now);
  ASSERT_TRUE(at_once.ok());
  EXPECT_EQ(at_once->first_start_s, (std::vector<int64_t>{0, 100}));
  EXPECT_DOUBLE_EQ(at_once->wasted_gpu_hours, 2.0 * 100 / 3600);
  EXPECT_EQ(at_once->span_s, 100 + 100 + 1000);
}

TEST(DynamicTest, AVictimThatFinishesInItsNoticeSucceedsAndOneNotYetStartedGoesAtOnce) {
  // The spot job would end at 150, inside its notice (100-220): it succeeds then, and the
  // on-demand job starts at 150.
  auto jobs = Jobs(
      "2017-10-09 00:00:00,150,2,0,x\n"
      "2017-10-09 00:01:40,100,2,0,x\n");
  jobs[0].best_effort = true;
  const Outcome o = Simulate(Nodes(1, 2), jobs, "spot=BE");
  EXPECT_EQ(o.finished, 2);
  EXPECT_EQ(o.preemptions, 0);
  EXPECT_EQ(o.first_start_s, (std::vector<int64_t>{0, 150}));
  EXPECT_EQ(o.span_s, 250);
  EXPECT_DOUBLE_EQ(o.wasted_gpu_hours, 0);
  // Both submitted in the same second, the spot job first: it is placed, then preempted before
  // its workload started, so it goes at once (no notice) and starts over after the other.
  auto same = Jobs(
      "2017-10-09 00:00:00,1000,2,0,x\n"
      "2017-10-09 00:00:00,100,2,0,x\n");
  same[0].best_effort = true;
  const Outcome s = Simulate(Nodes(1, 2), same, "spot=BE");
  EXPECT_EQ(s.finished, 2);
  EXPECT_EQ(s.first_start_s, (std::vector<int64_t>{100, 0}));
  EXPECT_EQ(s.span_s, 1100);
  EXPECT_DOUBLE_EQ(s.allocated_gpu_s, s.job_gpu_s);
}

TEST(DynamicTest, AGangGivesItsSpotVictimsTheirNoticeToo) {
  // Two spot jobs fill two nodes of 8; at 100 an on-demand job of 16 GPUs (a gang of two 8-GPU
  // members) preempts both, which run on to 220; the gang runs 220-820.
  auto jobs = Jobs(
      "2017-10-09 00:00:00,1000,8,0,x\n"
      "2017-10-09 00:00:00,1000,8,0,x\n"
      "2017-10-09 00:01:40,600,16,0,x\n");
  jobs[0].best_effort = jobs[1].best_effort = true;
  const Outcome o = Simulate(Nodes(2, 8), jobs, "spot=BE");
  EXPECT_EQ(o.finished, 3);
  EXPECT_EQ(o.preemptions, 2);
  EXPECT_EQ(o.first_start_s[2], 220);
  EXPECT_DOUBLE_EQ(o.wasted_gpu_hours, 2 * 8.0 * 220 / 3600);
  EXPECT_DOUBLE_EQ(o.allocated_gpu_s, o.job_gpu_s);
}

TEST(DynamicTest, TheProviderReclaimsSpotRunsAtTheGivenRateAndTheyStartOver) {
  std::string csv;
  for (int i = 0; i < 50; ++i) csv += "2017-10-09 00:00:00,86400,1,0,x\n";  // A day each.
  const auto jobs = Jobs(csv);
  DynamicOptions o;
  o.mix = std::move(ParseMix("spot=all")).value();
  o.spot_reclaims_per_month = 0.5;  // Half a month's runs: about 2% of one-day runs.
  auto out = RunDynamic(Catalog(), Nodes(8, 8), jobs, o);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->finished, 50);
  EXPECT_EQ(out->reclaims, out->preemptions) << "nothing else preempts them";
  if (out->reclaims > 0) {
    EXPECT_GT(out->wasted_gpu_hours, 0);
  }
  o.spot_reclaims_per_month = 0.999;  // Nearly every run of a month is cut: most days too.
  auto often = RunDynamic(Catalog(), Nodes(8, 8), jobs, o);
  ASSERT_TRUE(often.ok());
  EXPECT_EQ(often->finished, 50);
  EXPECT_GT(often->reclaims, out->reclaims);
  EXPECT_GT(often->span_s, 86400) << "reclaimed runs start over";
  EXPECT_DOUBLE_EQ(often->allocated_gpu_s, often->job_gpu_s);
}

TEST(DynamicTest, AReservationIsPaidForOverTheSpanAndTakesTheSingleGpuJobs) {
  const auto jobs = Jobs(
      "2017-10-09 00:00:00,3600,1,0,x\n"
      "2017-10-09 00:00:00,3600,1,0,x\n"
      "2017-10-09 00:00:00,3600,2,0,x\n");
  const Outcome o = Simulate(Nodes(1, 8), jobs, "reserved=25%");
  EXPECT_EQ(o.reserved_units, 2);
  EXPECT_EQ(o.finished, 3);
  ASSERT_TRUE(o.bill_micros.count("reserved"));
  const Outcome od = Simulate(Nodes(1, 8), jobs);
  EXPECT_LT(o.bill_micros.at("on_demand"), od.bill_micros.at("on_demand"))
      << "the single-GPU jobs ran on the reservation";
  EXPECT_LT(o.total_micros(), od.total_micros()) << "a fully used reservation costs less";
}

TEST(DynamicTest, ReservationsComeInTheUnitsTheJobsFitAndEachJobTakesTheTightest) {
  // Four 1-GPU jobs, then one of 4 GPUs, all for an hour on a node of 8 V100s. Half the
  // GPU-hours want a 1-GPU unit and half a 4-GPU one (gpu.4xv100): reserving all 8 GPUs buys
  // 4 x gpu.1xv100 and 1 x gpu.4xv100. The 1-GPU jobs, first, take the 1-GPU units rather than
  // the 4-GPU one, which the 4-GPU job then claims: nothing runs on-demand.
  const auto jobs = Jobs(
      "2017-10-09 00:00:00,3600,1,0,x\n"
      "2017-10-09 00:00:00,3600,1,0,x\n"
      "2017-10-09 00:00:00,3600,1,0,x\n"
      "2017-10-09 00:00:00,3600,1,0,x\n"
      "2017-10-09 00:00:00,3600,4,0,x\n");
  const Outcome o = Simulate(Nodes(1, 8, /*nvlink=*/true), jobs, "reserved=100%");
  EXPECT_EQ(o.reservations, (std::map<std::string, int64_t>{{"gpu.1xv100", 4}, {"gpu.4xv100", 1}}));
  EXPECT_EQ(o.reserved_units, 5);
  EXPECT_EQ(o.reserved_gpus, 8);
  EXPECT_EQ(o.finished, 5);
  EXPECT_EQ(o.bill_micros.count("on_demand"), 0u) << "every job ran on a unit";
  // Half the fleet: the 4-GPU type's share (2 GPUs) is short of a unit and goes to 1-GPU units.
  const Outcome half = Simulate(Nodes(1, 8, /*nvlink=*/true), jobs, "reserved=50%");
  EXPECT_EQ(half.reservations, (std::map<std::string, int64_t>{{"gpu.1xv100", 4}}));
  EXPECT_GT(half.bill_micros.at("on_demand"), 0) << "the 4-GPU job";
  // Without NVLink no node can host a gpu.4xv100, so only 1-GPU units are bought.
  const Outcome flat = Simulate(Nodes(1, 8), jobs, "reserved=50%");
  EXPECT_EQ(flat.reservations, (std::map<std::string, int64_t>{{"gpu.1xv100", 4}}));
}

TEST(DynamicTest, AJobWiderThanANodeRunsAsAGangOnSeveralNodes) {
  const auto jobs = Jobs("2017-10-09 00:00:00,600,16,0,x\n");
  const Outcome o = Simulate(Nodes(2, 8), jobs);
  EXPECT_EQ(o.finished, 1);
  EXPECT_DOUBLE_EQ(o.jct_p50_s, 600);
  EXPECT_DOUBLE_EQ(o.allocated_gpu_s, 16 * 600);
  const Outcome too_big = Simulate(Nodes(1, 8), jobs);
  EXPECT_EQ(too_big.finished, 0);
  EXPECT_EQ(too_big.waiting + too_big.refused, 1);
}

TEST(SweepTest, TheCheapestMixThatHoldsTheWaitTargetIsFoundAgainstAllOnDemand) {
  // A steady base of 4 single-GPU jobs for 10 hours on a node of 8: a reservation of 4 of
  // them (50%) is fully used, so reserving is cheaper than paying on-demand for the hours.
  std::string csv;
  for (int i = 0; i < 4; ++i) csv += "2017-10-09 00:00:00,36000,1,0,x\n";
  const auto jobs = Jobs(csv);
  DynamicOptions o;
  auto sweep = RunSweep(Catalog(), Nodes(1, 8), jobs, o, 600, 2);
  ASSERT_TRUE(sweep.ok()) << sweep.status().message();
  ASSERT_EQ(sweep->runs.size(), SweepGrid(false).size());
  EXPECT_EQ(sweep->runs[0].mix, "on_demand");
  ASSERT_GE(sweep->best, 0);
  const Outcome& best = sweep->runs[static_cast<size_t>(sweep->best)];
  EXPECT_GT(sweep->saving_pct(), 0);
  for (const Outcome& r : sweep->runs) EXPECT_GE(r.total_micros(), best.total_micros()) << r.mix;
  // Without spot, the fully used reservation (4 of 8 GPUs) is the cheapest.
  const Outcome* cheapest = nullptr;
  for (const Outcome& r : sweep->runs) {
    if (r.mix.find("spot=all") != std::string::npos) continue;
    if (!cheapest || r.total_micros() < cheapest->total_micros()) cheapest = &r;
  }
  EXPECT_EQ(cheapest->mix, "reserved=50%,spot=none");
  // A target no mix can hold: none is chosen.
  const auto crowded = Jobs("2017-10-09 00:00:00,600,8,0,x\n2017-10-09 00:00:00,600,8,0,x\n");
  auto none = RunSweep(Catalog(), Nodes(1, 8), crowded, o, 60, 2);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->best, -1);
  EXPECT_EQ(ToJson(*none)["best"], nullptr);
}

}  // namespace
}  // namespace tessera::whatif
