// Tests of the workload supervisor with real processes: what a user of the agent would notice
// (the environment a workload sees, exit codes, stops, the log, the preemption notice, the lease
// fence with the agent gone, adoption after a restart, cgroup limits). They wait for processes
// with short bounded polls, never fixed sleeps, and keep every grace period short.
// Thread-safety: each test uses its own supervisor and work dir from the test's thread.
#include "agent/workload_test_util.h"

namespace tessera::agent {
namespace {

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

TEST_F(WorkloadTest, AWorkDirDeletedUnderARunningWorkloadEndsItsLeaseAtOnce) {
  auto sup = OpenSup();
  sup->RenewLease(milliseconds(60'000));
  ASSERT_TRUE(sup->Start(Spec("orphan", "echo $$ > pid; sleep 60")).ok());
  const pid_t pid = WaitPid(Dir("orphan") + "/pid");
  sup.reset();  // The agent is gone, and then its whole work dir, lease and all.
  std::error_code ec;
  fs::remove_all(tmp_.path() + "/work", ec);
  ASSERT_FALSE(ec) << ec.message();
  // Nothing can renew the lease or adopt the workload: it stops now, not in a minute.
  EXPECT_TRUE(WaitFor([&] { return !Alive(pid); }, milliseconds(3000)));
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
  ASSERT_LT(taken, 65519);
  WorkloadSupervisor::Options o = Opts();
  // Wide enough that ports other processes hold meanwhile (tests running beside this one) leave
  // room for two workloads.
  o.first_port = taken;
  o.last_port = taken + 16;
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
  EXPECT_LE(b, taken + 16);
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

TEST_F(WorkloadTest, AnAgentThatMustIsolateRefusesToRunWithoutUids) {
  auto o = Opts();
  o.refuse_unisolated = true;
  auto sup = OpenSup(o);
  EXPECT_EQ(sup->isolation(), "none");
  Status s = sup->Start(Spec("plain", "true"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("--workload-uids"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera::agent
