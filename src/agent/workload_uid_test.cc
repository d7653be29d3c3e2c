// Tests of the workload supervisor with tenants' workloads under uids of their own and in
// containers (needs root, as a real agent does; skipped otherwise): what each tenant's command can
// and cannot reach, the uid pool, and containers through the real podman and runc.
#include "agent/workload_test_util.h"

namespace tessera::agent {
namespace {

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
