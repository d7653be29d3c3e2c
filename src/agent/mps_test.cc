// The MPS daemons against a fake nvidia-cuda-mps-control (src/testing/fake_mps_control.cc), which
// records every command it gets in PIPE/commands.log and keeps made-up servers in PIPE/servers.
#include "agent/mps.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace tessera::agent {
namespace {

const std::string kFake = std::string(TESSERA_FAKE_MPS_DIR) + "/nvidia-cuda-mps-control";
constexpr int64_t kAlice = 1999000001;
constexpr int64_t kBob = 1999000002;

std::string ReadOr(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Alive and not a zombie (the fake's daemon is init's child once its starter exits).
bool Alive(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  const std::string stat = ReadOr("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

class MpsDaemonsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    // Whatever a failed test left running.
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(Root(), ec)) {
      const pid_t pid = DaemonPid(entry.path().string() + "/pipe");
      if (pid > 0) kill(pid, SIGKILL);
    }
  }

  std::string Root() const { return tmp_.path() + "/mps"; }
  MpsOptions Options() const {
    MpsOptions o;
    o.control = kFake;
    o.root = Root();
    return o;
  }
  std::string Pipe(int gpu) const { return Root() + "/gpu-" + std::to_string(gpu) + "/pipe"; }
  std::vector<std::string> Commands(int gpu) const {
    return Lines(ReadOr(Pipe(gpu) + "/commands.log"));
  }
  static pid_t DaemonPid(const std::string& pipe) {
    const std::string text = ReadOr(pipe + "/nvidia-cuda-mps-control.pid");
    return text.empty() ? 0 : static_cast<pid_t>(std::stol(text));
  }
  pid_t DaemonPid(int gpu) const { return DaemonPid(Pipe(gpu)); }
  // The fake's servers: uid -> PID.
  std::map<int64_t, int64_t> Servers(int gpu) const {
    std::map<int64_t, int64_t> out;
    std::istringstream in(ReadOr(Pipe(gpu) + "/servers"));
    for (int64_t pid = 0, uid = 0; in >> pid >> uid;) out[uid] = pid;
    return out;
  }
  int64_t Count(int gpu, const std::string& line) const {
    const auto commands = Commands(gpu);
    return std::count(commands.begin(), commands.end(), line);
  }

  testing::TempDir tmp_;
};

TEST_F(MpsDaemonsTest, EnsureStartsOneDaemonWithOnlyItsGpuVisible) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.available()) << mps.note();
  EXPECT_EQ(mps.note(), "");
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  EXPECT_EQ(Count(0, "daemon started CUDA_VISIBLE_DEVICES=GPU-aaaa"), 1);
  const pid_t pid = DaemonPid(0);
  EXPECT_TRUE(Alive(pid));
  // Running: not started again.
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  EXPECT_EQ(DaemonPid(0), pid);
  const auto commands = Commands(0);
  EXPECT_EQ(std::count_if(commands.begin(), commands.end(),
                          [](const std::string& c) { return c.starts_with("daemon started"); }),
            1);
  // Workload uids must reach the daemon's pipes.
  for (const std::string& dir : {Root() + "/gpu-0", Pipe(0), Root() + "/gpu-0/log"}) {
    struct stat st {};
    ASSERT_EQ(lstat(dir.c_str(), &st), 0) << dir;
    EXPECT_EQ(st.st_mode & 07777, 0755u) << dir;
  }
  // A second GPU gets a daemon of its own.
  ASSERT_TRUE(mps.Ensure(1, "GPU-bbbb").ok());
  EXPECT_EQ(Count(1, "daemon started CUDA_VISIBLE_DEVICES=GPU-bbbb"), 1);
  EXPECT_NE(DaemonPid(1), pid);
}

TEST_F(MpsDaemonsTest, SetLimitsStartsANewUidsServerAfterSettingTheDefaults) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  ASSERT_TRUE(mps.SetLimits(0, kAlice, 25, 2048).ok());
  const auto commands = Commands(0);
  const std::vector<std::string> expected = {
      "set_default_active_thread_percentage 25",
      "set_default_device_pinned_mem_limit 0 2048M",
      "start_server -uid 1999000001",
  };
  EXPECT_NE(std::search(commands.begin(), commands.end(), expected.begin(), expected.end()),
            commands.end())
      << ReadOr(Pipe(0) + "/commands.log");
  EXPECT_EQ(Servers(0).count(kAlice), 1u);
}

TEST_F(MpsDaemonsTest, SetLimitsOnARunningServerSetsThemOnItsPid) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  ASSERT_TRUE(mps.SetLimits(0, kAlice, 25, 2048).ok());
  ASSERT_TRUE(mps.SetLimits(0, kBob, 50, 1024).ok());
  const int64_t alice = Servers(0).at(kAlice);
  ASSERT_TRUE(mps.SetLimits(0, kAlice, 75, 4096).ok());
  EXPECT_EQ(Count(0, "set_active_thread_percentage " + std::to_string(alice) + " 75"), 1);
  EXPECT_EQ(Count(0, "set_device_pinned_mem_limit " + std::to_string(alice) + " 0 4096M"), 1);
  EXPECT_EQ(Count(0, "start_server -uid 1999000001"), 1);
  EXPECT_EQ(Count(0, "start_server -uid 1999000002"), 1);
  EXPECT_EQ(Servers(0).size(), 2u);
}

TEST_F(MpsDaemonsTest, SetLimitsRefusesWhatMpsCannotTake) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  EXPECT_EQ(mps.SetLimits(0, kAlice, 0, 2048).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mps.SetLimits(0, kAlice, 101, 2048).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mps.SetLimits(0, kAlice, 50, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mps.SetLimits(0, -1, 50, 2048).code(), StatusCode::kInvalidArgument);
  const Status no_daemon = mps.SetLimits(3, kAlice, 50, 2048);
  EXPECT_EQ(no_daemon.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(no_daemon.message().find("GPU 3"), std::string::npos) << no_daemon.message();
  EXPECT_EQ(mps.Ensure(-1, "GPU-aaaa").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mps.Ensure(1, "GPU-a\nquit").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Servers(0).empty());
}

TEST_F(MpsDaemonsTest, ClientEnvNamesItsGpusPipeAndLogDirectories) {
  MpsDaemons mps(Options());
  EXPECT_TRUE(mps.ClientEnv(0).empty());
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  const auto env = mps.ClientEnv(0);
  using Pair = std::pair<std::string, std::string>;
  EXPECT_NE(std::find(env.begin(), env.end(), Pair("CUDA_MPS_PIPE_DIRECTORY", Pipe(0))), env.end());
  EXPECT_NE(
      std::find(env.begin(), env.end(), Pair("CUDA_MPS_LOG_DIRECTORY", Root() + "/gpu-0/log")),
      env.end());
  EXPECT_TRUE(mps.ClientEnv(1).empty());
}

TEST_F(MpsDaemonsTest, ReconcileQuitsIdleDaemonsAndShutsDownDepartedUidsServers) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  ASSERT_TRUE(mps.Ensure(1, "GPU-bbbb").ok());
  ASSERT_TRUE(mps.SetLimits(0, kAlice, 50, 1024).ok());
  ASSERT_TRUE(mps.SetLimits(0, kBob, 50, 1024).ok());
  const pid_t gpu1 = DaemonPid(1);
  const int64_t bob = Servers(0).at(kBob);
  mps.Reconcile({{0, {kAlice}}});
  EXPECT_EQ(Count(1, "quit"), 1);
  EXPECT_FALSE(Alive(gpu1));
  EXPECT_TRUE(mps.ClientEnv(1).empty());
  EXPECT_EQ(Count(0, "shutdown_server " + std::to_string(bob)), 1);
  EXPECT_EQ(Servers(0).count(kBob), 0u);
  EXPECT_EQ(Servers(0).count(kAlice), 1u);
  EXPECT_TRUE(Alive(DaemonPid(0)));
  // Nothing more to do: nothing more sent.
  const size_t sent = Commands(0).size();
  mps.Reconcile({{0, {kAlice}}});
  EXPECT_EQ(Commands(0).size(), sent);
  // Bob back: a new server for him.
  ASSERT_TRUE(mps.SetLimits(0, kBob, 50, 1024).ok());
  EXPECT_EQ(Count(0, "start_server -uid 1999000002"), 2);
}

TEST_F(MpsDaemonsTest, UnavailableWithoutTheControlProgram) {
  MpsOptions o = Options();
  o.control = tmp_.path() + "/nvidia-cuda-mps-control";
  MpsDaemons by_path(o);
  EXPECT_FALSE(by_path.available());
  EXPECT_NE(by_path.note().find(o.control), std::string::npos) << by_path.note();
  EXPECT_NE(by_path.note().find("time-sliced without memory limits"), std::string::npos);
  const Status s = by_path.Ensure(0, "GPU-aaaa");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), by_path.note());
  EXPECT_TRUE(by_path.ClientEnv(0).empty());

  o.control = "nvidia-cuda-mps-control-that-is-not-there";
  MpsDaemons by_name(o);
  EXPECT_FALSE(by_name.available());
  EXPECT_EQ(by_name.note(),
            "nvidia-cuda-mps-control-that-is-not-there not found in PATH: shares are time-sliced "
            "without memory limits");
}

TEST_F(MpsDaemonsTest, FindsTheControlProgramInPath) {
  const char* old = getenv("PATH");
  const std::string saved = old != nullptr ? old : "";
  setenv("PATH", (std::string("/nonexistent:") + TESSERA_FAKE_MPS_DIR).c_str(), 1);
  MpsOptions o = Options();
  o.control = "nvidia-cuda-mps-control";
  MpsDaemons mps(o);
  setenv("PATH", saved.c_str(), 1);
  EXPECT_TRUE(mps.available()) << mps.note();
  EXPECT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  EXPECT_TRUE(Alive(DaemonPid(0)));
}

TEST_F(MpsDaemonsTest, RefusesASymlinkedGpuDirectory) {
  ASSERT_EQ(mkdir(Root().c_str(), 0755), 0);
  const std::string elsewhere = tmp_.path() + "/elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0755), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), (Root() + "/gpu-0").c_str()), 0);
  MpsDaemons mps(Options());
  const Status s = mps.Ensure(0, "GPU-aaaa");
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("symlink"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("GPU 0"), std::string::npos) << s.message();
  EXPECT_FALSE(std::filesystem::exists(elsewhere + "/pipe"));
  EXPECT_TRUE(mps.ClientEnv(0).empty());
  // A symlinked pipe directory below a real GPU directory is refused as well.
  ASSERT_EQ(mkdir((Root() + "/gpu-1").c_str(), 0755), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), Pipe(1).c_str()), 0);
  EXPECT_EQ(mps.Ensure(1, "GPU-bbbb").code(), StatusCode::kFailedPrecondition);
}

TEST_F(MpsDaemonsTest, ANewAgentAdoptsTheRunningDaemonAndItsServers) {
  MpsOptions o = Options();
  o.stop_at_exit = false;  // As an agent whose workloads outlive it.
  int64_t alice = 0;
  {
    MpsDaemons first(o);
    ASSERT_TRUE(first.Ensure(0, "GPU-aaaa").ok());
    ASSERT_TRUE(first.SetLimits(0, kAlice, 25, 2048).ok());
    alice = Servers(0).at(kAlice);
  }
  const pid_t pid = DaemonPid(0);
  ASSERT_TRUE(Alive(pid));
  MpsDaemons second(Options());
  ASSERT_TRUE(second.Ensure(0, "GPU-aaaa").ok());
  EXPECT_EQ(DaemonPid(0), pid);
  EXPECT_EQ(Count(0, "daemon started CUDA_VISIBLE_DEVICES=GPU-aaaa"), 1);
  EXPECT_EQ(second.ClientEnv(0).size(), 2u);
  // Alice's server is known: its limits change on it, no second server is asked for.
  ASSERT_TRUE(second.SetLimits(0, kAlice, 50, 4096).ok());
  EXPECT_EQ(Count(0, "set_active_thread_percentage " + std::to_string(alice) + " 50"), 1);
  EXPECT_EQ(Count(0, "start_server -uid 1999000001"), 1);
}

TEST_F(MpsDaemonsTest, ADaemonLeftForAnotherGpuIsReplaced) {
  MpsOptions o = Options();
  o.stop_at_exit = false;
  {
    MpsDaemons first(o);
    ASSERT_TRUE(first.Ensure(0, "GPU-aaaa").ok());
  }
  const pid_t old = DaemonPid(0);
  MpsDaemons second(Options());
  ASSERT_TRUE(second.Ensure(0, "GPU-cccc").ok());
  EXPECT_FALSE(Alive(old));
  EXPECT_EQ(Count(0, "daemon started CUDA_VISIBLE_DEVICES=GPU-cccc"), 1);
  EXPECT_TRUE(Alive(DaemonPid(0)));
}

TEST_F(MpsDaemonsTest, TheFirstReconcileStopsDaemonsAnEarlierAgentLeft) {
  MpsOptions o = Options();
  o.stop_at_exit = false;
  {
    MpsDaemons first(o);
    ASSERT_TRUE(first.Ensure(2, "GPU-aaaa").ok());
  }
  const pid_t left = DaemonPid(2);
  ASSERT_TRUE(Alive(left));
  MpsDaemons second(Options());
  second.Reconcile({});
  EXPECT_FALSE(Alive(left));
  EXPECT_EQ(Count(2, "quit"), 1);
}

TEST_F(MpsDaemonsTest, TheDestructorStopsOnlyTheDaemonsItStarted) {
  pid_t pid = 0;
  {
    MpsDaemons mps(Options());
    ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
    pid = DaemonPid(0);
    ASSERT_TRUE(Alive(pid));
  }
  EXPECT_FALSE(Alive(pid));
  MpsOptions keep = Options();
  keep.stop_at_exit = false;
  {
    MpsDaemons mps(keep);
    ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
    pid = DaemonPid(0);
  }
  EXPECT_TRUE(Alive(pid));
  {
    MpsDaemons adopter(Options());  // Adopts it, so does not stop it.
    ASSERT_TRUE(adopter.Ensure(0, "GPU-aaaa").ok());
  }
  EXPECT_TRUE(Alive(pid));
}

TEST_F(MpsDaemonsTest, AWedgedControlProgramMeetsItsDeadline) {
  const std::string wedged = tmp_.Write("wedged", "#!/bin/sh\nexec sleep 100\n");
  ASSERT_EQ(chmod(wedged.c_str(), 0755), 0);
  MpsOptions o = Options();
  o.control = wedged;
  o.command_deadline = std::chrono::milliseconds(200);
  MpsDaemons mps(o);
  const auto start = std::chrono::steady_clock::now();
  const Status s = mps.Ensure(0, "GPU-aaaa");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("GPU 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("-d"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("deadline"), std::string::npos) << s.message();
}

TEST_F(MpsDaemonsTest, ADeadDaemonIsStartedAgainAndErrorsNameGpuCommandAndAnswer) {
  MpsDaemons mps(Options());
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  ASSERT_TRUE(mps.SetLimits(0, kAlice, 25, 2048).ok());
  const pid_t pid = DaemonPid(0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  for (int i = 0; i < 500 && Alive(pid); ++i) usleep(10'000);
  const Status s = mps.SetLimits(0, kAlice, 50, 2048);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("GPU 0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("get_server_list"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("Cannot find MPS control daemon process"), std::string::npos)
      << s.message();
  ASSERT_TRUE(mps.Ensure(0, "GPU-aaaa").ok());
  EXPECT_EQ(Count(0, "daemon started CUDA_VISIBLE_DEVICES=GPU-aaaa"), 2);
  EXPECT_TRUE(Alive(DaemonPid(0)));
  // The old server died with its daemon: a new one is started.
  ASSERT_TRUE(mps.SetLimits(0, kAlice, 50, 2048).ok());
  EXPECT_EQ(Count(0, "start_server -uid 1999000001"), 2);
}

// The fake itself keeps the real tool's rules, or the tests above prove nothing.
class MpsFakeControlTest : public MpsDaemonsTest {
 protected:
  void SetUp() override { ASSERT_EQ(mkdir(Root().c_str(), 0755), 0); }
  void TearDown() override {
    if (const pid_t pid = DaemonPid(Root()); pid > 0) kill(pid, SIGKILL);
  }
  // The fake control program with `args`, its commands on stdin, as a client of the daemon
  // whose pipe directory is `pipe`.
  testing::CommandResult Run(const std::vector<std::string>& args, const std::string& input,
                             const std::string& pipe) {
    std::vector<std::string> argv = {kFake};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunProgram(
        argv, input, {{"CUDA_MPS_PIPE_DIRECTORY", pipe}, {"CUDA_VISIBLE_DEVICES", "GPU-aaaa"}});
  }
};

TEST_F(MpsFakeControlTest, KeepsTheRealToolsRules) {
  const std::string pipe = Root();
  auto none = Run({}, "get_server_list\n", pipe);
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(none.err, "Cannot find MPS control daemon process\n");
  ASSERT_EQ(Run({"-d"}, "", pipe).exit_code, 0);
  const pid_t daemon = DaemonPid(pipe);
  EXPECT_TRUE(Alive(daemon));
  auto second = Run({"-d"}, "", pipe);
  EXPECT_EQ(second.exit_code, 1);
  EXPECT_NE(second.err.find("already running"), std::string::npos) << second.err;

  EXPECT_EQ(Run({}, "start_server -uid 7\nstart_server -uid 7\n", pipe).exit_code, 0);
  auto list = Run({}, "get_server_list\n", pipe);
  EXPECT_EQ(list.exit_code, 0);
  ASSERT_EQ(Lines(list.out).size(), 1u) << list.out;
  const std::string server = Lines(list.out)[0];
  EXPECT_GT(std::stoll(server), 4194304);  // No real process has it.
  EXPECT_EQ(Run({}, "set_device_pinned_mem_limit " + server + " 0 512M\n", pipe).exit_code, 0);
  const std::vector<std::string> bad_commands = {
      "set_device_pinned_mem_limit " + server + " 1 512M",  // The daemon sees one GPU.
      "set_device_pinned_mem_limit " + server + " 0 lots",
      "set_active_thread_percentage 12345 50",
      "set_default_active_thread_percentage 101",
      "shutdown_server 1",
      "reboot_everything"};
  for (const std::string& bad : bad_commands) {
    auto r = Run({}, bad + "\n", pipe);
    EXPECT_EQ(r.exit_code, 1) << bad;
    EXPECT_FALSE(r.out.empty()) << bad;
  }
  EXPECT_EQ(Run({}, "shutdown_server " + server + "\nget_server_list\n", pipe).out, "");
  EXPECT_EQ(Run({}, "quit\n", pipe).exit_code, 0);
  EXPECT_FALSE(Alive(daemon));
  EXPECT_EQ(Run({}, "get_server_list\n", pipe).exit_code, 1);
  const auto log = Lines(ReadOr(pipe + "/commands.log"));
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front(), "daemon started CUDA_VISIBLE_DEVICES=GPU-aaaa");
  EXPECT_EQ(log.back(), "quit");
}

}  // namespace
}  // namespace tessera::agent
