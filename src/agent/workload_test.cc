// Tests of the workload supervisor with real processes: what a user of the agent would notice
// (the environment a workload sees, exit codes, stops, the log, the preemption notice, the lease
// fence with the agent gone, adoption after a restart, cgroup limits). They wait for processes
// with short bounded polls, never fixed sleeps, and keep every grace period short.
// Thread-safety: each test uses its own supervisor and work dir from the test's thread.
#include "agent/workload.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "agent/container_test_support.h"
#include "agent/workload_uids.h"
#include "common/clock.h"
#include "common/json.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

std::string ReadOr(const std::string& path, const std::string& fallback = "") {
  std::ifstream in(path);
  if (!in) return fallback;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `pred` every 10 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& pred, milliseconds timeout = milliseconds(5000)) {
  const auto end = Steady::now() + timeout;
  while (Steady::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return pred();
}

// True while `pid` is a process that has not ended (a zombie counts as ended).
bool Alive(pid_t pid) {
  const std::string stat = ReadOr("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z' &&
         stat[paren + 2] != 'X';
}

// The pid a workload wrote to `file` in its directory (`echo $$ > pid`), once it is there.
pid_t WaitPid(const std::string& path) {
  std::string text;
  WaitFor([&] {
    text = ReadOr(path);
    return !text.empty() && text.back() == '\n';
  });
  return text.empty() ? -1 : std::stoi(text);
}

std::optional<WorkloadStatus> Find(WorkloadSupervisor& sup, const std::string& id) {
  for (WorkloadStatus& s : sup.Poll()) {
    if (s.id == id) return s;
  }
  return std::nullopt;
}

WorkloadStatus WaitExited(WorkloadSupervisor& sup, const std::string& id,
                          milliseconds timeout = milliseconds(5000)) {
  std::optional<WorkloadStatus> st;
  WaitFor(
      [&] {
        st = Find(sup, id);
        return st && st->phase == WorkloadPhase::kExited;
      },
      timeout);
  EXPECT_TRUE(st.has_value()) << id << " is unknown";
  if (!st) return {};
  EXPECT_EQ(st->phase, WorkloadPhase::kExited) << id << " did not exit in time";
  return *st;
}

WorkloadSpec Spec(std::string id, std::string command) {
  WorkloadSpec s;
  s.id = std::move(id);
  s.command = std::move(command);
  return s;
}

std::string Seq(int n) {
  std::string out;
  for (int i = 1; i <= n; ++i) out += std::to_string(i) + "\n";
  return out;
}

class WorkloadTest : public ::testing::Test {
 protected:
  WorkloadSupervisor::Options Opts() const {
    WorkloadSupervisor::Options o;
    o.work_dir = tmp_.path() + "/work";
    o.cgroup_root = "none";
    o.lease_kill_grace = milliseconds(200);
    return o;
  }
  std::unique_ptr<WorkloadSupervisor> OpenSup(const WorkloadSupervisor::Options& o) {
    auto sup = WorkloadSupervisor::Open(o);
    EXPECT_TRUE(sup.ok()) << sup.status().ToString();
    return sup.ok() ? std::move(sup).value() : nullptr;
  }
  std::unique_ptr<WorkloadSupervisor> OpenSup() { return OpenSup(Opts()); }
  // Whatever a test left running (a failed assertion, say) is stopped, so no process outlives
  // the test.
  void TearDown() override {
    if (!fs::exists(tmp_.path() + "/work")) return;
    auto sup = OpenSup();
    ASSERT_TRUE(sup);
    for (const WorkloadStatus& st : sup->Poll()) {
      if (st.phase == WorkloadPhase::kRunning) {
        EXPECT_TRUE(sup->Stop(st.id, milliseconds(0)).ok());
      }
    }
    EXPECT_TRUE(WaitFor([&] {
      for (const WorkloadStatus& st : sup->Poll()) {
        if (st.phase == WorkloadPhase::kRunning) return false;
      }
      return true;
    })) << "a workload outlived its test";
  }
  std::string Dir(const std::string& id) const { return tmp_.path() + "/work/" + id; }
  std::string Control(const std::string& id) const { return tmp_.path() + "/work/.control/" + id; }

  ::tessera::testing::TempDir tmp_;
};

TEST_F(WorkloadTest, RunsInACleanEnvironmentInItsOwnDirectoryAndGroup) {
  ASSERT_EQ(setenv("TESSERA_TEST_LEAK", "leaked", 1), 0);
  auto sup = OpenSup();
  WorkloadSpec spec = Spec("inst-000042",
                           "echo \"$CUDA_VISIBLE_DEVICES|$HOME|$LANG|$TESSERA_PREEMPT_NOTICE|"
                           "${TESSERA_TEST_LEAK:-unset}|$(pwd)\" > out; "
                           "[ \"$(cut -d' ' -f5 /proc/$$/stat)\" = \"$$\" ] && echo own > group");
  spec.env = {{"CUDA_VISIBLE_DEVICES", "0,1"}, {"LANG", "en_US.UTF-8"}};
  ASSERT_TRUE(sup->Start(spec).ok());
  const WorkloadStatus st = WaitExited(*sup, "inst-000042");
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_EQ(st.reason, "exited");
  EXPECT_FALSE(st.lost);
  EXPECT_GT(st.started_at_unix_ms, 0);
  const std::string dir = Dir("inst-000042");
  EXPECT_EQ(ReadOr(dir + "/out"), "0,1|" + dir + "|en_US.UTF-8|" + dir +
                                      "/preempt-notice.json|unset|" + fs::canonical(dir).string() +
                                      "\n");
  EXPECT_EQ(ReadOr(dir + "/group"), "own\n");
  unsetenv("TESSERA_TEST_LEAK");
}

TEST_F(WorkloadTest, AWorkloadsOwnFilesDoNotDisturbTheSupervisor) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("messy",
                              "for f in log exit state stop pids; do echo mine > $f; done; "
                              "echo out; exit 6"))
                  .ok());
  const WorkloadStatus st = WaitExited(*sup, "messy");
  EXPECT_EQ(st.exit_code, 6);
  EXPECT_EQ(st.reason, "exited");
  int64_t next = 0;
  auto log = sup->ReadLog("messy", 0, 1 << 20, &next);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(*log, "out\n");
  EXPECT_EQ(ReadOr(Dir("messy") + "/log"), "mine\n");
}

TEST_F(WorkloadTest, ReportsExitCodesAndSignals) {
  auto sup = OpenSup();
  const std::vector<std::pair<std::string, int>> cases = {
      {"exit 0", 0}, {"exit 3", 3}, {"kill -9 $$", 137}, {"kill -TERM $$", 143}};
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(sup->Start(Spec("code-" + std::to_string(i), cases[i].first)).ok());
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const WorkloadStatus st = WaitExited(*sup, "code-" + std::to_string(i));
    EXPECT_EQ(st.exit_code, cases[i].second) << cases[i].first;
    EXPECT_EQ(st.reason, "exited") << cases[i].first;
  }
}

TEST_F(WorkloadTest, StopKillsAProcessThatIgnoresTermAfterTheGrace) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("stubborn", "trap '' TERM; echo $$ > pid; sleep 60")).ok());
  const pid_t pid = WaitPid(Dir("stubborn") + "/pid");
  ASSERT_GT(pid, 0);
  const auto t0 = Steady::now();
  ASSERT_TRUE(sup->Stop("stubborn", milliseconds(300)).ok());
  auto st = Find(*sup, "stubborn");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->phase, WorkloadPhase::kRunning);
  EXPECT_TRUE(st->stopping);
  const WorkloadStatus done = WaitExited(*sup, "stubborn");
  EXPECT_GE(Steady::now() - t0, milliseconds(290));
  EXPECT_EQ(done.exit_code, 128 + SIGKILL);
  EXPECT_EQ(done.reason, "killed after grace");
  EXPECT_FALSE(Alive(pid));
}

TEST_F(WorkloadTest, StopEndsTheWholeProcessGroup) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("family", "sleep 60 & echo $! > child; echo $$ > pid; wait")).ok());
  const pid_t child = WaitPid(Dir("family") + "/child");
  ASSERT_GT(WaitPid(Dir("family") + "/pid"), 0);
  ASSERT_TRUE(Alive(child));
  ASSERT_TRUE(sup->Stop("family", milliseconds(2000)).ok());
  const WorkloadStatus st = WaitExited(*sup, "family");
  EXPECT_EQ(st.exit_code, 128 + SIGTERM);
  EXPECT_EQ(st.reason, "stopped");
  EXPECT_FALSE(Alive(child));
  // Stopping what has ended is not an error.
  EXPECT_TRUE(sup->Stop("family", milliseconds(0)).ok());
}

TEST_F(WorkloadTest, AnExitLeavesNoProcessOfTheGroupBehind) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("leaver", "sleep 60 & echo $! > child; exit 4")).ok());
  const WorkloadStatus st = WaitExited(*sup, "leaver");
  EXPECT_EQ(st.exit_code, 4);
  EXPECT_EQ(st.reason, "exited");
  EXPECT_FALSE(Alive(std::stoi(ReadOr(Dir("leaver") + "/child", "0"))));
}

TEST_F(WorkloadTest, CapturesStdoutAndStderr) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("talk", "echo hello; echo oops >&2")).ok());
  WaitExited(*sup, "talk");
  int64_t next = -1;
  auto log = sup->ReadLog("talk", 0, 1 << 20, &next);
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(*log, "hello\noops\n");
  EXPECT_EQ(next, 11);
  // Past the end: nothing, at the end.
  log = sup->ReadLog("talk", 1000, 10, &next);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(*log, "");
  EXPECT_EQ(next, 11);
}

TEST_F(WorkloadTest, LogIsBoundedDropsTheOldestAndKeepsOffsets) {
  auto o = Opts();
  o.log_limit_bytes = 4096;
  auto sup = OpenSup(o);
  ASSERT_TRUE(sup->Start(Spec("chatty", "seq 1 5000; echo done >&2")).ok());
  EXPECT_EQ(WaitExited(*sup, "chatty").exit_code, 0);
  const std::string all = Seq(5000) + "done\n";
  const auto total = static_cast<int64_t>(all.size());

  int64_t next = -1;
  auto kept = sup->ReadLog("chatty", 0, 1 << 20, &next);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(next, total);
  EXPECT_LE(kept->size(), 4096u);
  EXPECT_GT(kept->size(), 2048u);
  EXPECT_EQ(*kept, all.substr(all.size() - kept->size()));

  // Small reads across the segment boundary join up to the same bytes.
  std::string joined;
  int64_t off = 0;
  for (int i = 0; i < 100 && off < total; ++i) {
    auto part = sup->ReadLog("chatty", off, 500, &next);
    ASSERT_TRUE(part.ok());
    joined += *part;
    off = next;
  }
  EXPECT_EQ(joined, *kept);
  auto tail = sup->ReadLog("chatty", total - 100, 1 << 20, &next);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(*tail, all.substr(all.size() - 100));

  // On disk: segments within the limit, and `log` is the newest one.
  uintmax_t on_disk = 0;
  for (const auto& f : fs::directory_iterator(Control("chatty"))) {
    const std::string name = f.path().filename().string();
    if (name.rfind("log.", 0) == 0 && name.size() == 24) on_disk += f.file_size();
  }
  EXPECT_LE(on_disk, 4096u);
  const std::string newest = ReadOr(Control("chatty") + "/log");
  EXPECT_EQ(newest, all.substr(all.size() - newest.size()));
}

TEST_F(WorkloadTest, AFloodOfOutputNeitherGrowsTheLogNorDelaysAStop) {
  auto o = Opts();
  o.log_limit_bytes = 64 << 10;
  auto sup = OpenSup(o);
  ASSERT_TRUE(sup->Start(Spec("flood", "yes tessera")).ok());
  ASSERT_TRUE(WaitFor([&] {
    int64_t next = 0;
    auto log = sup->ReadLog("flood", 0, 16, &next);
    return log.ok() && next > 0 && next >= (1 << 20);  // A megabyte went through.
  }));
  const auto t0 = Steady::now();
  ASSERT_TRUE(sup->Stop("flood", milliseconds(1000)).ok());
  const WorkloadStatus st = WaitExited(*sup, "flood");
  EXPECT_LT(Steady::now() - t0, milliseconds(1000));  // TERM came at once, not after the grace.
  EXPECT_EQ(st.reason, "stopped");
  uintmax_t on_disk = 0;
  for (const auto& f : fs::directory_iterator(Control("flood"))) {
    const std::string name = f.path().filename().string();
    if (name.rfind("log.", 0) == 0 && name.size() == 24) on_disk += f.file_size();
  }
  EXPECT_LE(on_disk, 64u << 10);
}

TEST_F(WorkloadTest, PreemptionNoticeComesBeforeTheStop) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("spot",
                              "trap 'exit 0' TERM; "
                              "while [ ! -f \"$TESSERA_PREEMPT_NOTICE\" ]; do sleep 0.02; done; "
                              "cat \"$TESSERA_PREEMPT_NOTICE\" > seen; "
                              "while true; do sleep 0.02; done"))
                  .ok());
  const auto now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const int64_t deadline = now_ms + 600;
  const auto t0 = Steady::now();
  ASSERT_TRUE(sup->Preempt("spot", deadline, "spot capacity reclaimed", milliseconds(300)).ok());
  ASSERT_TRUE(WaitFor([&] { return !ReadOr(Dir("spot") + "/seen").empty(); }));
  auto running = Find(*sup, "spot");
  ASSERT_TRUE(running);
  EXPECT_EQ(running->phase, WorkloadPhase::kRunning);
  EXPECT_TRUE(running->stopping);
  auto notice = ParseJson(ReadOr(Dir("spot") + "/seen"), "seen");
  ASSERT_TRUE(notice.ok()) << notice.status().ToString();
  EXPECT_EQ((*notice)["deadline"], FormatRfc3339(Time(milliseconds(deadline))));
  EXPECT_EQ((*notice)["reason"], "spot capacity reclaimed");

  const WorkloadStatus st = WaitExited(*sup, "spot");
  EXPECT_GE(Steady::now() - t0, milliseconds(550));
  EXPECT_EQ(st.exit_code, 0);  // Its TERM trap ran: it was given the chance to save work.
  EXPECT_EQ(st.reason, "preempted");
}

TEST_F(WorkloadTest, LeaseLapseStopsWorkloadsEvenWhenTheAgentIsGone) {
  auto sup = OpenSup();
  sup->RenewLease(milliseconds(60'000));
  ASSERT_TRUE(sup->Start(Spec("polite", "echo $$ > pid; sleep 60")).ok());
  ASSERT_TRUE(sup->Start(Spec("stubborn", "trap '' TERM; echo $$ > pid; sleep 60")).ok());
  const pid_t polite = WaitPid(Dir("polite") + "/pid");
  const pid_t stubborn = WaitPid(Dir("stubborn") + "/pid");
  sup->RenewLease(milliseconds(300));  // The last renewal.
  sup.reset();  // The agent dies: nothing renews the lease, nothing of ours signals.
  EXPECT_TRUE(Alive(polite));
  EXPECT_TRUE(Alive(stubborn));
  EXPECT_TRUE(WaitFor([&] { return !Alive(polite) && !Alive(stubborn); }, milliseconds(3000)));

  // The next agent learns what happened.
  sup = OpenSup();
  const WorkloadStatus p = WaitExited(*sup, "polite");
  EXPECT_EQ(p.reason, "lease expired");
  EXPECT_EQ(p.exit_code, 128 + SIGTERM);
  const WorkloadStatus s = WaitExited(*sup, "stubborn");
  EXPECT_EQ(s.reason, "lease expired");
  EXPECT_EQ(s.exit_code, 128 + SIGKILL);
}

TEST_F(WorkloadTest, ARenewedLeaseKeepsWorkloadsRunning) {
  auto sup = OpenSup();
  sup->RenewLease(milliseconds(500));
  ASSERT_TRUE(sup->Start(Spec("steady", "echo $$ > pid; sleep 60")).ok());
  const pid_t pid = WaitPid(Dir("steady") + "/pid");
  for (int i = 0; i < 8; ++i) {  // Renewed well before each deadline, for longer than one lease.
    std::this_thread::sleep_for(milliseconds(100));
    sup->RenewLease(milliseconds(500));
  }
  EXPECT_TRUE(Alive(pid));
  EXPECT_EQ(Find(*sup, "steady")->phase, WorkloadPhase::kRunning);
  EXPECT_EQ(WaitExited(*sup, "steady").reason, "lease expired");
}

TEST_F(WorkloadTest, ARestartedAgentAdoptsRunningWorkloads) {
  auto sup = OpenSup();
  ASSERT_TRUE(
      sup->Start(Spec("long", "echo $$ > pid; while [ ! -f go ]; do sleep 0.02; done; exit 7"))
          .ok());
  ASSERT_TRUE(sup->Start(Spec("short", "exit 5")).ok());
  const pid_t pid = WaitPid(Dir("long") + "/pid");
  sup.reset();
  ASSERT_TRUE(WaitFor([&] { return fs::exists(Control("short") + "/exit"); }));

  sup = OpenSup();
  auto st = Find(*sup, "long");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->phase, WorkloadPhase::kRunning);
  EXPECT_FALSE(st->lost);
  EXPECT_TRUE(Alive(pid));
  const WorkloadStatus short_st = WaitExited(*sup, "short");  // It ended while no agent ran.
  EXPECT_EQ(short_st.exit_code, 5);
  EXPECT_FALSE(short_st.lost);
  // Never started twice.
  EXPECT_EQ(sup->Start(Spec("long", "true")).code(), StatusCode::kAlreadyExists);

  std::ofstream(Dir("long") + "/go").put('\n');
  const WorkloadStatus done = WaitExited(*sup, "long");
  EXPECT_EQ(done.exit_code, 7);
  EXPECT_EQ(done.reason, "exited");
}

TEST_F(WorkloadTest, AWorkloadWhoseShimDiedIsKilledAndReportedLost) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("orphan", "echo $$ > pid; sleep 60")).ok());
  const pid_t pid = WaitPid(Dir("orphan") + "/pid");
  auto pids = ParseJson(ReadOr(Control("orphan") + "/pids"), "pids");
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  const pid_t shim = (*pids)["shim_pid"].get<pid_t>();
  sup.reset();
  ASSERT_EQ(kill(shim, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] { return !Alive(shim); }));
  ASSERT_TRUE(Alive(pid));  // Unsupervised now: nothing would fence it.

  sup = OpenSup();
  const WorkloadStatus st = WaitExited(*sup, "orphan");
  EXPECT_TRUE(st.lost);
  EXPECT_EQ(st.reason, "agent restarted");
  EXPECT_EQ(st.exit_code, -1);
  EXPECT_FALSE(Alive(pid));
}

TEST_F(WorkloadTest, ReservesAFreeRendezvousPortForEachRunningWorkload) {
  // Something else on the node listens on the range's first port.
  const ::tessera::testing::TcpListener listener;
  const int taken = listener.port();
  ASSERT_GT(taken, 0);
  ASSERT_LT(taken, 65530);
  WorkloadSupervisor::Options o = Opts();
  o.first_port = taken;
  o.last_port = taken + 3;
  auto sup = OpenSup(o);
  auto start = [&](const std::string& id) {
    WorkloadSpec spec = Spec(id,
                             "echo $MASTER_PORT > port; echo $PET_RDZV_ENDPOINT > endpoint; "
                             "while [ ! -f go ]; do sleep 0.02; done");
    spec.reserve_port = "MASTER_PORT";
    // An elastic gang's rank 0: its endpoint is filled in with the port.
    spec.env.emplace_back("PET_RDZV_ENDPOINT", "10.0.0.7:{port}");
    spec.port_env = {"PET_RDZV_ENDPOINT"};
    return sup->Start(spec);
  };
  ASSERT_TRUE(start("a").ok());
  ASSERT_TRUE(start("b").ok());
  const int a = Find(*sup, "a").value().port, b = Find(*sup, "b").value().port;
  EXPECT_NE(a, taken) << "a port something listens on was handed out";
  EXPECT_GT(a, taken);
  EXPECT_LE(b, taken + 3);
  EXPECT_NE(a, b) << "two running workloads share a reserved port";
  EXPECT_TRUE(WaitFor([&] { return ReadOr(Dir("a") + "/port") == std::to_string(a) + "\n"; }))
      << "the workload does not see its port in MASTER_PORT";
  EXPECT_EQ(ReadOr(Dir("a") + "/endpoint"), fmt::format("10.0.0.7:{}\n", a));
  // A restarted agent still knows which ports its workloads hold.
  sup.reset();
  sup = OpenSup(o);
  EXPECT_EQ(Find(*sup, "b").value().port, b);
  // Once a's workload ended, its port may serve another; b's may not.
  std::ofstream(Dir("a") + "/go").put('\n');
  WaitExited(*sup, "a");
  ASSERT_TRUE(start("c").ok());
  EXPECT_NE(Find(*sup, "c").value().port, b);
  std::ofstream(Dir("b") + "/go").put('\n');
  std::ofstream(Dir("c") + "/go").put('\n');
  // A range with no free port refuses the start, naming the range; nothing is left behind.
  o.work_dir = tmp_.path() + "/work-full";
  o.last_port = taken;
  auto full = OpenSup(o);
  WorkloadSpec spec = Spec("d", "true");
  spec.reserve_port = "MASTER_PORT";
  const Status refused = full->Start(spec);
  EXPECT_EQ(refused.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.message().find(fmt::format("{}-{}", taken, taken)), std::string::npos)
      << refused.message();
  EXPECT_FALSE(Find(*full, "d"));
  // A range that is not one is refused at open.
  o.first_port = 30000;
  o.last_port = 29999;
  EXPECT_EQ(WorkloadSupervisor::Open(o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(WorkloadTest, StartTwiceAndForget) {
  auto sup = OpenSup();
  ASSERT_TRUE(sup->Start(Spec("once", "while [ ! -f go ]; do sleep 0.02; done")).ok());
  const Status again = sup->Start(Spec("once", "true"));
  EXPECT_EQ(again.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.message().find("once"), std::string::npos) << again.message();
  EXPECT_EQ(sup->Forget("once").code(), StatusCode::kFailedPrecondition);
  std::ofstream(Dir("once") + "/go").put('\n');
  WaitExited(*sup, "once");
  ASSERT_TRUE(sup->Forget("once").ok());
  EXPECT_FALSE(fs::exists(Dir("once")));
  EXPECT_FALSE(Find(*sup, "once"));
  ASSERT_TRUE(sup->Start(Spec("once", "exit 2")).ok());
  EXPECT_EQ(WaitExited(*sup, "once").exit_code, 2);
}

TEST_F(WorkloadTest, RejectsBadInput) {
  auto sup = OpenSup();
  const std::vector<std::string> bad_ids = {
      "", "Inst-1", "a/b", "..", ".", "a b", "inst_1", std::string(65, 'a'), "\xc3\xbc"};
  for (const std::string& id : bad_ids) {
    const Status s = sup->Start(Spec(id, "true"));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << id;
    EXPECT_NE(s.message().find("workload id"), std::string::npos) << s.message();
  }
  ASSERT_TRUE(sup->Start(Spec(std::string(64, 'a'), "true")).ok());
  EXPECT_EQ(WaitExited(*sup, std::string(64, 'a')).exit_code, 0);
  EXPECT_EQ(sup->Start(Spec("ok", "")).code(), StatusCode::kInvalidArgument);
  WorkloadSpec bad_env = Spec("env", "true");
  bad_env.env = {{"1X", "v"}};
  EXPECT_EQ(sup->Start(bad_env).code(), StatusCode::kInvalidArgument);
  bad_env.env = {{"TESSERA_PREEMPT_NOTICE", "/tmp/x"}};
  const Status reserved = sup->Start(bad_env);
  EXPECT_EQ(reserved.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(reserved.message().find("TESSERA_PREEMPT_NOTICE"), std::string::npos);
  WorkloadSpec bad_cpu = Spec("cpu", "true");
  bad_cpu.cpu_milli = -1;
  EXPECT_EQ(sup->Start(bad_cpu).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(Dir("env")));

  int64_t next = 0;
  EXPECT_EQ(sup->Stop("nope", milliseconds(0)).code(), StatusCode::kNotFound);
  EXPECT_EQ(sup->ReadLog("nope", 0, 10, &next).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sup->Forget("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(sup->Preempt("nope", 0, "x", milliseconds(0)).code(), StatusCode::kNotFound);

  auto second = WorkloadSupervisor::Open(Opts());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(Opts().work_dir), std::string::npos)
      << second.status().message();

  auto o = Opts();
  o.work_dir = tmp_.Write("a-file", "x");
  auto bad = WorkloadSupervisor::Open(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(o.work_dir), std::string::npos) << bad.status().message();
}

// A full disk is simulated with RLIMIT_FSIZE (no root needed): writes past the limit fail (with
// EFBIG rather than ENOSPC; the shim treats every failed write alike).
TEST_F(WorkloadTest, AFullDiskDropsOutputButNeverBlocksTheWorkload) {
  auto sup = OpenSup();
  rlimit old{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 16384;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const Status started = sup->Start(Spec("flood", "seq 1 20000"));
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
  ASSERT_TRUE(started.ok()) << started.ToString();
  const WorkloadStatus st = WaitExited(*sup, "flood");
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_EQ(st.reason, "exited");
  const std::string all = Seq(20000);
  EXPECT_EQ(st.log_dropped_bytes, static_cast<int64_t>(all.size()) - 16384);
  int64_t next = 0;
  auto kept = sup->ReadLog("flood", 0, 1 << 20, &next);
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(*kept, all.substr(0, 16384));
}

TEST_F(WorkloadTest, LimitsDisabledByConfigurationSaySo) {
  auto sup = OpenSup();
  EXPECT_FALSE(sup->limits_enforced());
  EXPECT_NE(sup->limits_note().find("none"), std::string::npos) << sup->limits_note();
}

TEST_F(WorkloadTest, LimitsDetectedOnThisMachineAreExplained) {
  auto o = Opts();
  o.cgroup_root = "";
  auto sup = OpenSup(o);
  ASSERT_TRUE(sup);
  EXPECT_FALSE(sup->limits_note().empty());
  std::cout << "cgroup limits here: " << (sup->limits_enforced() ? "enforced" : "not enforced")
            << ": " << sup->limits_note() << "\n";
  if (!sup->limits_enforced()) return;
  WorkloadSpec spec = Spec("limited", "cat /proc/self/cgroup > cg");
  spec.cpu_milli = 500;
  spec.memory_mib = 64;
  ASSERT_TRUE(sup->Start(spec).ok());
  EXPECT_EQ(WaitExited(*sup, "limited").exit_code, 0);
  EXPECT_NE(ReadOr(Dir("limited") + "/cg").find("/tessera-workloads/limited"), std::string::npos);
}

// A cgroup root the test makes itself (a plain directory laid out like cgroupfs): the
// supervisor's writes and the workload's joining can be checked, though nothing is enforced.
TEST_F(WorkloadTest, LimitsAreWrittenToTheWorkloadsCgroup) {
  const std::string root = tmp_.path() + "/cg";
  fs::create_directories(root);
  tmp_.Write("cg/cgroup.controllers", "cpuset cpu io memory pids\n");
  tmp_.Write("cg/cgroup.subtree_control", "cpu memory\n");
  auto o = Opts();
  o.cgroup_root = root;
  auto sup = OpenSup(o);
  ASSERT_TRUE(sup);
  EXPECT_TRUE(sup->limits_enforced()) << sup->limits_note();
  EXPECT_NE(sup->limits_note().find(root), std::string::npos);
  WorkloadSpec spec = Spec("boxed", "echo $$ > pid");
  spec.cpu_milli = 1500;
  spec.memory_mib = 256;
  ASSERT_TRUE(sup->Start(spec).ok());
  EXPECT_EQ(WaitExited(*sup, "boxed").exit_code, 0);
  EXPECT_EQ(ReadOr(root + "/boxed/cpu.max"), "150000 100000\n");
  EXPECT_EQ(ReadOr(root + "/boxed/memory.max"), "268435456\n");
  EXPECT_EQ(ReadOr(root + "/boxed/cgroup.procs"), ReadOr(Dir("boxed") + "/pid"));
  ASSERT_TRUE(sup->Start(Spec("unboxed", "true")).ok());
  EXPECT_EQ(WaitExited(*sup, "unboxed").exit_code, 0);
  EXPECT_EQ(ReadOr(root + "/unboxed/cpu.max"), "max 100000\n");
  EXPECT_EQ(ReadOr(root + "/unboxed/memory.max"), "max\n");
}

TEST_F(WorkloadTest, AConfiguredRootThatCannotLimitIsExplained) {
  auto o = Opts();
  o.cgroup_root = tmp_.path() + "/missing";
  auto sup = OpenSup(o);
  EXPECT_FALSE(sup->limits_enforced());
  EXPECT_NE(sup->limits_note().find(o.cgroup_root), std::string::npos) << sup->limits_note();

  sup.reset();  // One supervisor per work dir at a time.
  fs::create_directories(tmp_.path() + "/v1only");
  tmp_.Write("v1only/cgroup.controllers", "hugetlb pids\n");
  o.cgroup_root = tmp_.path() + "/v1only";
  sup = OpenSup(o);
  EXPECT_FALSE(sup->limits_enforced());
  EXPECT_NE(sup->limits_note().find("not both cpu and memory"), std::string::npos)
      << sup->limits_note();
  // Limits asked for and not enforced: the workload still runs.
  WorkloadSpec spec = Spec("free", "true");
  spec.memory_mib = 64;
  ASSERT_TRUE(sup->Start(spec).ok());
  EXPECT_EQ(WaitExited(*sup, "free").exit_code, 0);
}

// Tenants' workloads under uids of their own (needs root, as a real agent does). Each attack is
// made by the tenant's own command; what it managed is written to its log as "<attack>:<result>".
class WorkloadUidTest : public WorkloadTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "switching uids needs root, as the agent has";
    // A range of its own per test: ctest runs these tests side by side, and a uid's processes
    // (its process limit, the sweep of what a tenant left behind) are the whole machine's.
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    first_uid_ =
        1'999'000'000u + 10u * static_cast<uint32_t>(std::hash<std::string>{}(name) % 10'000);
  }
  WorkloadSupervisor::Options UidOpts() const {
    auto o = Opts();
    o.first_uid = first_uid_;
    o.last_uid = first_uid_ + 9;
    return o;
  }
  uint32_t first_uid_ = 0;  // This test's first workload uid.
  WorkloadSpec TenantSpec(std::string id, std::string tenant, std::string command) const {
    WorkloadSpec s = Spec(std::move(id), std::move(command));
    s.tenant = std::move(tenant);
    return s;
  }
  std::string Log(WorkloadSupervisor& sup, const std::string& id) {
    int64_t next = 0;
    auto log = sup.ReadLog(id, 0, 1 << 20, &next);
    return log.ok() ? *log : log.status().ToString();
  }
};

TEST_F(WorkloadUidTest, EachTenantRunsAsAUidOfItsOwnAndCannotReachAnother) {
  auto sup = OpenSup(UidOpts());
  EXPECT_EQ(sup->isolation(), "uid") << sup->isolation_note();
  ASSERT_TRUE(
      sup->Start(TenantSpec("b-1", "bob", "echo secret > secret; echo $$ > pid; sleep 30")).ok());
  const pid_t bob = WaitPid(Dir("b-1") + "/pid");
  ASSERT_GT(bob, 0);
  ASSERT_TRUE(sup->Start(TenantSpec("a-1", "alice",
                                    fmt::format("echo uid:$(id -u); "
                                                "cat ../b-1/secret && echo read:yes; "
                                                "ls .. && echo list:yes; "
                                                "kill -0 {0} && echo signal:yes; "
                                                "cat /proc/{0}/environ && echo environ:yes; "
                                                "echo x > ../b-1/planted && echo write:yes; "
                                                "echo done",
                                                bob)))
                  .ok());
  EXPECT_EQ(WaitExited(*sup, "a-1").exit_code, 0);
  const std::string log = Log(*sup, "a-1");
  struct stat st {};
  ASSERT_EQ(stat(Dir("b-1").c_str(), &st), 0);
  const uid_t bob_uid = st.st_uid;
  EXPECT_GE(bob_uid, first_uid_);
  EXPECT_LE(bob_uid, first_uid_ + 9);
  ASSERT_NE(log.find("uid:"), std::string::npos) << log;
  const uid_t alice_uid = static_cast<uid_t>(std::stoul(log.substr(log.find("uid:") + 4)));
  EXPECT_GE(alice_uid, first_uid_);
  EXPECT_LE(alice_uid, first_uid_ + 9);
  EXPECT_NE(alice_uid, bob_uid);
  for (const char* won : {"read:yes", "list:yes", "signal:yes", "environ:yes", "write:yes"}) {
    EXPECT_EQ(log.find(won), std::string::npos) << won << " in\n" << log;
  }
  EXPECT_NE(log.find("done"), std::string::npos) << log;
  EXPECT_TRUE(Alive(bob));
  // Bob's directory: no one else may enter it.
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  // A second workload of the same tenant shares its uid.
  ASSERT_TRUE(sup->Start(TenantSpec("b-2", "bob",
                                    "id -u; kill -0 $(cat ../b-1/pid 2>/dev/null "
                                    "|| echo 1) 2>/dev/null; echo sig:$?"))
                  .ok());
  EXPECT_EQ(WaitExited(*sup, "b-2").exit_code, 0);
  EXPECT_EQ(Log(*sup, "b-2").substr(0, 10), std::to_string(bob_uid));
}

TEST_F(WorkloadUidTest, AWorkloadCannotForgeItsExitNorExtendTheLease) {
  auto sup = OpenSup(UidOpts());
  sup->RenewLease(milliseconds(60'000));
  ASSERT_TRUE(
      sup->Start(
             TenantSpec("forger", "mallory",
                        "echo '{\"exit_code\":0,\"reason\":\"exited\"}' > ../.control/forger/exit "
                        "&& echo exit:yes; "
                        "echo 'x 99999999999999' > ../agent.lease && echo lease:yes; "
                        "mv ../agent.lease ../old 2>/dev/null && echo move:yes; "
                        "cat ../.control/forger/state && echo state:yes; "
                        "ls ../.control && echo control:yes; "
                        "echo '0 0 stop' > ../.control/forger/stop && echo stop:yes; "
                        "echo tried; sleep 30"))
          .ok());
  ASSERT_TRUE(WaitFor([&] { return Log(*sup, "forger").find("tried") != std::string::npos; }));
  const std::string log = Log(*sup, "forger");
  for (const char* won :
       {"exit:yes", "lease:yes", "move:yes", "state:yes", "control:yes", "stop:yes"}) {
    EXPECT_EQ(log.find(won), std::string::npos) << won << " in\n" << log;
  }
  auto st = Find(*sup, "forger");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->phase, WorkloadPhase::kRunning);
  // The agent goes quiet: the lease it last gave holds, and the fence still works.
  sup->RenewLease(milliseconds(100));
  const WorkloadStatus ended = WaitExited(*sup, "forger");
  EXPECT_EQ(ended.reason, "lease expired");
  EXPECT_NE(ended.exit_code, 0);
}

// What the agent sets up for a workload before starting it (its MPS server's limits) is keyed by
// PlannedUid, so the uid Start then gives must be that one.
TEST_F(WorkloadUidTest, PlannedUidIsTheUidStartGives) {
  auto o = UidOpts();
  o.uid_claims_dir = tmp_.path() + "/claims";  // No other test's claims in the way.
  auto sup = OpenSup(o);
  const int64_t bob = sup->PlannedUid("bob");
  EXPECT_EQ(bob, first_uid_);
  ASSERT_TRUE(sup->Start(TenantSpec("b-1", "bob", "id -u; sleep 30")).ok());
  EXPECT_EQ(sup->PlannedUid("bob"), bob);  // Its running work's.
  const int64_t alice = sup->PlannedUid("alice");
  EXPECT_EQ(alice, first_uid_ + 1);
  ASSERT_TRUE(sup->Start(TenantSpec("a-1", "alice", "id -u")).ok());
  EXPECT_EQ(WaitExited(*sup, "a-1").exit_code, 0);
  EXPECT_EQ(Log(*sup, "a-1"), std::to_string(alice) + "\n");
  EXPECT_TRUE(WaitFor([&] { return Log(*sup, "b-1") == std::to_string(bob) + "\n"; }))
      << Log(*sup, "b-1");
  // Alice's ended work keeps its uid until forgotten: carol gets the next one.
  EXPECT_EQ(sup->PlannedUid("carol"), first_uid_ + 2);
  ASSERT_TRUE(sup->Stop("b-1", milliseconds(100)).ok());
  WaitExited(*sup, "b-1");
}

// A relative path (`make run`'s --data ./tessera-data) is walked from the working directory up;
// its dots once sent the walk round "." for ever, and the server never started its agents.
TEST(FirstUntraversableTest, ARelativePathIsWalkedFromTheWorkingDirectoryUp) {
  testing::TempDir dir;
  ASSERT_EQ(mkdir((dir.path() + "/open").c_str(), 0711), 0);
  ASSERT_EQ(mkdir((dir.path() + "/open/closed").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((dir.path() + "/open/closed/below").c_str(), 0711), 0);
  ASSERT_EQ(chmod(dir.path().c_str(), 0711), 0);
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(chdir((dir.path() + "/open").c_str()), 0);
  const std::string below = FirstUntraversable("./closed/below");
  const std::string here = FirstUntraversable(".");
  const std::string relative = FirstUntraversable("closed");
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_EQ(below, dir.path() + "/open/closed");
  EXPECT_EQ(relative, dir.path() + "/open/closed");
  EXPECT_NE(here, dir.path() + "/open") << "the working directory itself is traversable";
}

TEST(WorkloadPlannedUidTest, MinusOneWithoutWorkloadUids) {
  tessera::testing::TempDir tmp;
  WorkloadSupervisor::Options o;
  o.work_dir = tmp.path() + "/work";
  o.cgroup_root = "none";
  auto sup = WorkloadSupervisor::Open(o);
  ASSERT_TRUE(sup.ok()) << sup.status().ToString();
  EXPECT_EQ((*sup)->PlannedUid("bob"), -1);
}

TEST_F(WorkloadUidTest, ProcessesLeftBehindAreKilledWhenTheTenantsLastWorkloadEnds) {
  auto sup = OpenSup(UidOpts());
  ASSERT_TRUE(
      sup->Start(TenantSpec("daemon", "eve", "setsid sleep 1000 & echo $! > pid; sleep 0.2")).ok());
  const pid_t escaped = WaitPid(Dir("daemon") + "/pid");
  ASSERT_GT(escaped, 0);
  const WorkloadStatus st = WaitExited(*sup, "daemon");
  EXPECT_EQ(st.exit_code, 0);
  EXPECT_TRUE(WaitFor([&] { return !Alive(escaped); })) << "a process outlived its tenant's work";
}

TEST_F(WorkloadUidTest, AForkBombStopsAtTheProcessLimitAndLimitsCannotBeRaised) {
  auto o = UidOpts();
  o.nproc_limit = 20;
  auto sup = OpenSup(o);
  // The bomb runs in a shell of its own (a shell whose fork fails gives up); what follows uses
  // builtins only, since no fork succeeds while the bomb's processes live.
  ASSERT_TRUE(sup->Start(TenantSpec("bomb", "eve",
                                    "sh -c 'i=0; while [ $i -lt 60 ]; do sleep 5 & i=$((i+1)); "
                                    "echo $i > count; done' 2>/dev/null; read n < count; "
                                    "echo started:$n; "
                                    "ulimit -H -p 100000 2>/dev/null && echo raised:yes; "
                                    "ulimit -H -p; exit 0"))
                  .ok());
  EXPECT_EQ(WaitExited(*sup, "bomb", milliseconds(15'000)).exit_code, 0);
  const std::string log = Log(*sup, "bomb");
  const size_t at = log.find("started:");
  ASSERT_NE(at, std::string::npos) << log;
  EXPECT_LT(std::stoi(log.substr(at + 8)), 20) << log;
  EXPECT_EQ(log.find("raised:yes"), std::string::npos) << log;
  EXPECT_NE(log.find("\n20\n"), std::string::npos) << log;
}

TEST_F(WorkloadUidTest, ForgetRemovesAWorkspaceWithoutFollowingItsLinks) {
  tmp_.Write("precious", "keep\n");
  auto sup = OpenSup(UidOpts());
  ASSERT_TRUE(sup->Start(TenantSpec("linker", "eve",
                                    fmt::format("ln -s {0} link; ln -s {0}/precious file; "
                                                "mkdir -p d/e; chmod 000 d; chmod 000 .",
                                                tmp_.path())))
                  .ok());
  EXPECT_EQ(WaitExited(*sup, "linker").exit_code, 0);
  ASSERT_TRUE(sup->Forget("linker").ok());
  EXPECT_FALSE(fs::exists(Dir("linker")));
  EXPECT_EQ(ReadOr(tmp_.path() + "/precious"), "keep\n");
}

TEST_F(WorkloadUidTest, TheNoticeIsPutInPlaceWithoutFollowingTheWorkloadsLinks) {
  tmp_.Write("precious", "keep\n");
  const mode_t old_umask = umask(077);  // The agent's own: the workload must still read it.
  auto sup = OpenSup(UidOpts());
  ASSERT_TRUE(sup->Start(TenantSpec("trap", "eve",
                                    fmt::format("ln -s {0}/precious preempt-notice.json; "
                                                "ln -s {0}/precious preempt-notice.json.tmp; "
                                                "echo ready; sleep 30",
                                                tmp_.path())))
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return Log(*sup, "trap").find("ready") != std::string::npos; }));
  const int64_t now_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  ASSERT_TRUE(sup->Preempt("trap", now_ms + 60'000, "spot", milliseconds(0)).ok());
  EXPECT_EQ(ReadOr(tmp_.path() + "/precious"), "keep\n");
  EXPECT_NE(ReadOr(Dir("trap") + "/preempt-notice.json").find("deadline"), std::string::npos);
  umask(old_umask);
  struct stat st {};
  ASSERT_EQ(stat((Dir("trap") + "/preempt-notice.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0044, 0044u) << "the notice is not readable by the workload's uid";
  ASSERT_TRUE(sup->Stop("trap", milliseconds(0)).ok());
  WaitExited(*sup, "trap");
}

TEST_F(WorkloadUidTest, ARangeThatHoldsAnAccountIsRefusedNamingIt) {
  auto o = Opts();
  o.first_uid = 1;
  o.last_uid = 10;
  auto sup = WorkloadSupervisor::Open(o);
  ASSERT_FALSE(sup.ok());
  EXPECT_NE(sup.status().message().find("/etc/passwd"), std::string::npos)
      << sup.status().message();
  o.first_uid = 0;
  EXPECT_NE(WorkloadSupervisor::Open(o).status().message().find("root"), std::string::npos);
}

TEST_F(WorkloadTest, AnAgentThatMustIsolateRefusesToRunWithoutUids) {
  auto o = Opts();
  o.refuse_unisolated = true;
  auto sup = OpenSup(o);
  EXPECT_EQ(sup->isolation(), "none");
  Status s = sup->Start(Spec("plain", "true"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--workload-uids"), std::string::npos) << s.message();
}

using testing_support::BusyboxImage;
using testing_support::PodmanMissing;
using testing_support::RunTool;
using testing_support::UniqueName;

// Workloads with an image: containers through the real podman and runc, as the agent runs them.
class WorkloadContainerTest : public WorkloadUidTest {
 protected:
  void SetUp() override {
    WorkloadUidTest::SetUp();
    if (IsSkipped()) return;
    if (const std::string why = PodmanMissing(); !why.empty()) GTEST_SKIP() << why;
    image_ = std::make_unique<BusyboxImage>(UniqueName("localhost/tessera-wl"));
    ASSERT_TRUE(image_->ok()) << image_->error();
  }
  WorkloadSpec ImageSpec(std::string id, std::string tenant, std::string command) const {
    WorkloadSpec s = TenantSpec(std::move(id), std::move(tenant), std::move(command));
    s.image = image_->reference();
    return s;
  }
  static bool ContainerExists(const std::string& name) {
    return RunTool({"podman", "container", "exists", name}).exit_code == 0;
  }
  std::unique_ptr<BusyboxImage> image_;
};

TEST_F(WorkloadContainerTest, AContainerRunsAsItsTenantsUidInItsWorkspaceAndReportsItsExit) {
  auto sup = OpenSup(UidOpts());
  WorkloadSpec spec =
      ImageSpec("boxed", "alice",
                "echo uid:$(id -u) home:$HOME pwd:$(pwd) gpus:$CUDA_VISIBLE_DEVICES "
                "notice:$TESSERA_PREEMPT_NOTICE; echo kept > /workspace/kept; "
                "ls / | grep -c control; exit 7");
  spec.env = {{"CUDA_VISIBLE_DEVICES", "GPU-1"}};
  ASSERT_TRUE(sup->Start(spec).ok());
  const WorkloadStatus st = WaitExited(*sup, "boxed", milliseconds(20'000));
  EXPECT_EQ(st.exit_code, 7);
  EXPECT_EQ(st.reason, "exited");
  const std::string log = Log(*sup, "boxed");
  struct stat dir {};
  ASSERT_EQ(stat(Dir("boxed").c_str(), &dir), 0);
  EXPECT_NE(log.find(fmt::format("uid:{} home:/workspace pwd:/workspace gpus:GPU-1 "
                                 "notice:/workspace/preempt-notice.json",
                                 dir.st_uid)),
            std::string::npos)
      << log;
  EXPECT_GE(dir.st_uid, first_uid_);
  EXPECT_EQ(ReadOr(Dir("boxed") + "/kept"), "kept\n");
  EXPECT_NE(log.find("\n0\n"), std::string::npos) << "the agent's files are not in it:\n" << log;
  // podman's --rm clean-up runs after the exit is seen (conmon starts it), so it may lag a moment.
  EXPECT_TRUE(WaitFor([] { return !ContainerExists("tessera-boxed"); }, milliseconds(10'000)));
}

TEST_F(WorkloadContainerTest, AStopEndsTheContainerAndAFenceWithPodmanKilledLeavesNoContainer) {
  auto sup = OpenSup(UidOpts());
  ASSERT_TRUE(sup->Start(ImageSpec("stopped", "bob", "echo up; sleep 1000")).ok());
  ASSERT_TRUE(WaitFor([&] { return Log(*sup, "stopped").find("up") != std::string::npos; },
                      milliseconds(20'000)));
  ASSERT_TRUE(sup->Stop("stopped", milliseconds(5000)).ok());
  const WorkloadStatus stopped = WaitExited(*sup, "stopped", milliseconds(20'000));
  EXPECT_EQ(stopped.reason, "stopped");
  EXPECT_TRUE(WaitFor([] { return !ContainerExists("tessera-stopped"); }, milliseconds(10'000)));

  // A command that ignores SIGTERM, and a lease that lapses: after the grace the shim's SIGKILL
  // ends podman, and the container's init with it.
  ASSERT_TRUE(
      sup->Start(ImageSpec("fenced", "bob", "trap '' TERM; echo up; while true; do sleep 1; done"))
          .ok());
  ASSERT_TRUE(WaitFor([&] { return Log(*sup, "fenced").find("up") != std::string::npos; },
                      milliseconds(20'000)));
  sup->RenewLease(milliseconds(50));
  const WorkloadStatus fenced = WaitExited(*sup, "fenced", milliseconds(20'000));
  EXPECT_EQ(fenced.reason, "lease expired");
  EXPECT_TRUE(WaitFor([&] { return !ContainerExists("tessera-fenced"); }, milliseconds(10'000)))
      << "the container outlived its fence";
}

}  // namespace
}  // namespace tessera::agent
