#include "agent/container.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <cctype>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "agent/container_exec.h"
#include "agent/container_test_support.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_support::RunTool;

ContainerHost FullHost() {
  ContainerHost host;
  host.cpu_limits = host.memory_limits = host.pids_limits = host.userns_auto = host.init = true;
  return host;
}

ContainerSpec TypicalSpec() {
  ContainerSpec spec;
  spec.name = "tessera-inst-000042";
  spec.image = "registry.example.com/team/train:1.4";
  spec.command = "python train.py --epochs 3";
  spec.env = {{"RANK", "0"}, {"TESSERA_TOKEN", "s3cr3t value"}};
  spec.cpu_milli = 1500;
  spec.memory_mib = 512;
  spec.pids_limit = 100;
  spec.work_dir = "/var/lib/tessera/work/inst-000042";
  spec.binds = {{"/var/lib/tessera/volumes/vol-000007", "/ckpt"}};
  spec.cdi_devices = {"nvidia.com/gpu=0", "nvidia.com/gpu=GPU-1234"};
  spec.device_nodes = {"/dev/fuse"};
  spec.network = ContainerNetwork::kNone;
  return spec;
}

TEST(BuildPodmanRunTest, TypicalSpecGivesTheWholeCommand) {
  const ContainerControlFiles files = ControlFilesIn("/run/tessera/c/inst-000042");
  auto run = BuildPodmanRun(TypicalSpec(), FullHost(), files);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::vector<std::string> want = {
      "/usr/bin/podman",
      "run",
      "--rm",
      "--runtime=runc",
      "--name=tessera-inst-000042",
      "--pidfile=/run/tessera/c/inst-000042/container.pid",
      "--cidfile=/run/tessera/c/inst-000042/container.cid",
      "--pull=never",
      "--log-driver=none",
      "--sig-proxy=true",
      "--network=none",
      "--security-opt=no-new-privileges",
      "--cap-drop=all",
      "--init",
      "--userns=auto",
      "--cpus=1.5",
      "--memory=512m",
      "--memory-swap=512m",
      "--pids-limit=100",
      "--ulimit=nofile=1024:1024",
      "--ulimit=nproc=4096:4096",
      "--volume=/var/lib/tessera/work/inst-000042:/workspace:rw,U",
      "--workdir=/workspace",
      "--volume=/var/lib/tessera/volumes/vol-000007:/ckpt:rw,U",
      "--device=nvidia.com/gpu=0",
      "--device=nvidia.com/gpu=GPU-1234",
      "--device=/dev/fuse",
      "--env-file=/run/tessera/c/inst-000042/container.env",
      "--entrypoint=/bin/sh",
      "registry.example.com/team/train:1.4",
      "-c",
      "python train.py --epochs 3"};
  EXPECT_EQ(run->argv, want);
  EXPECT_EQ(run->container_name, "tessera-inst-000042");
  EXPECT_EQ(run->env_file_content, "RANK=0\nTESSERA_TOKEN=s3cr3t value\n");
  EXPECT_TRUE(run->notes.empty());
}

TEST(BuildPodmanRunTest, EnvironmentValuesNeverReachArgv) {
  auto run = BuildPodmanRun(TypicalSpec(), FullHost(), ControlFilesIn("/c"));
  ASSERT_TRUE(run.ok());
  for (const auto& arg : run->argv) EXPECT_THAT(arg, Not(HasSubstr("s3cr3t"))) << arg;
}

struct ArgvCase {
  std::string what;
  std::function<void(ContainerSpec&, ContainerHost&)> change;
  std::vector<std::string> present;  // Each must be an element of argv.
  std::vector<std::string> absent;   // None may be a prefix of an element.
  std::string note;                  // A substring of some note; "" = no notes.
  std::string error;                 // A substring of the error; "" = success.
};

// Names the case in test listings (ctest shows it) instead of its bytes.
void PrintTo(const ArgvCase& c, std::ostream* os) { *os << c.what; }

ArgvCase Case(std::string what, std::function<void(ContainerSpec&, ContainerHost&)> change,
              std::vector<std::string> present = {}, std::vector<std::string> absent = {},
              std::string note = "", std::string error = "") {
  return {std::move(what),   std::move(change), std::move(present),
          std::move(absent), std::move(note),   std::move(error)};
}

class BuildPodmanRunCaseTest : public ::testing::TestWithParam<ArgvCase> {};

TEST_P(BuildPodmanRunCaseTest, Argv) {
  const ArgvCase& c = GetParam();
  ContainerSpec spec = TypicalSpec();
  ContainerHost host = FullHost();
  c.change(spec, host);
  auto run = BuildPodmanRun(spec, host, ControlFilesIn("/c"));
  if (!c.error.empty()) {
    ASSERT_FALSE(run.ok()) << c.what;
    EXPECT_THAT(run.status().message(), HasSubstr(c.error)) << c.what;
    return;
  }
  ASSERT_TRUE(run.ok()) << c.what << ": " << run.status().ToString();
  for (const auto& p : c.present) {
    EXPECT_THAT(run->argv, ::testing::Contains(p)) << c.what;
  }
  for (const auto& a : c.absent) {
    for (const auto& arg : run->argv) EXPECT_NE(arg.rfind(a, 0), 0u) << c.what << ": " << arg;
  }
  if (c.note.empty()) {
    EXPECT_TRUE(run->notes.empty()) << c.what << ": " << ::testing::PrintToString(run->notes);
  } else {
    EXPECT_THAT(run->notes, ::testing::Contains(HasSubstr(c.note))) << c.what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BuildPodmanRunCaseTest,
    ::testing::Values(
        Case("host uid instead of a user namespace",
             [](ContainerSpec& s, ContainerHost&) {
               s.user_mode = ContainerUserMode::kHostUid;
               s.uid = 1999000007;
               s.gid = 1999000007;
             },
             {"--user=1999000007:1999000007"}, {"--userns"}),
        Case(
            "host root is refused",
            [](ContainerSpec& s, ContainerHost&) { s.user_mode = ContainerUserMode::kHostUid; }, {},
            {}, "", "never runs as the host's root"),
        Case(
            "user namespace without subuid ranges",
            [](ContainerSpec&, ContainerHost& h) { h.userns_auto = false; }, {}, {}, "",
            "/etc/subuid"),
        Case(
            "limits the node cannot enforce are left out and said",
            [](ContainerSpec&, ContainerHost& h) {
              h.cpu_limits = h.memory_limits = h.pids_limits = false;
            },
            {"--ulimit=nofile=1024:1024"}, {"--cpus", "--memory", "--pids-limit"},
            "memory limit (512 MiB) not enforced"),
        Case("no limits asked, none given",
             [](ContainerSpec& s, ContainerHost&) {
               s.cpu_milli = s.memory_mib = s.pids_limit = 0;
             },
             {}, {"--cpus", "--memory", "--pids-limit"}),
        Case("fractions of a core", [](ContainerSpec& s, ContainerHost&) { s.cpu_milli = 250; },
             {"--cpus=0.25"}),
        Case("whole cores", [](ContainerSpec& s, ContainerHost&) { s.cpu_milli = 8000; },
             {"--cpus=8"}),
        Case("private and host networks",
             [](ContainerSpec& s, ContainerHost&) { s.network = ContainerNetwork::kPrivate; },
             {"--network=bridge"}),
        Case("host network",
             [](ContainerSpec& s, ContainerHost&) { s.network = ContainerNetwork::kHost; },
             {"--network=host"}),
        Case("its asked ports published on its own network",
             [](ContainerSpec& s, ContainerHost&) {
               s.network = ContainerNetwork::kPrivate;
               s.publish = {{31000, 8000}};
             },
             {"--network=bridge", "--publish=31000:8000/tcp"}),
        Case(
            "no publishing on the node's network",
            [](ContainerSpec& s, ContainerHost&) {
              s.network = ContainerNetwork::kHost;
              s.publish = {{31000, 8000}};
            },
            {}, {}, "", "publish"),
        Case(
            "without catatonit", [](ContainerSpec&, ContainerHost& h) { h.init = false; }, {},
            {"--init"}, "ignores SIGTERM"),
        Case("exec form without a shell",
             [](ContainerSpec& s, ContainerHost&) {
               s.image_has_shell = false;
               s.command.clear();
               s.args = {"/app/server", "--port", "80"};
             },
             {"--entrypoint=/app/server", "--port", "80"}, {"--entrypoint=/bin/sh", "-c"}),
        Case(
            "a command without a shell is refused",
            [](ContainerSpec& s, ContainerHost&) { s.image_has_shell = false; }, {}, {}, "",
            "exec form"),
        Case("no command: the image's own",
             [](ContainerSpec& s, ContainerHost&) { s.command.clear(); }, {},
             {"--entrypoint", "-c"}),
        Case("no env, no env file", [](ContainerSpec& s, ContainerHost&) { s.env.clear(); }, {},
             {"--env-file"}),
        Case("no work dir and no volumes, no mount",
             [](ContainerSpec& s, ContainerHost&) {
               s.work_dir.clear();
               s.binds.clear();
             },
             {}, {"--volume", "--workdir"}),
        Case("a volume for a host uid is the agent's to chown, not podman's",
             [](ContainerSpec& s, ContainerHost&) {
               s.user_mode = ContainerUserMode::kHostUid;
               s.uid = s.gid = 1999000007;
             },
             {"--volume=/var/lib/tessera/volumes/vol-000007:/ckpt:rw"}),
        Case(
            "a volume path podman's -v would split",
            [](ContainerSpec& s, ContainerHost&) {
              s.binds = {{"/v/vol-1", "/a,ro"}};
            },
            {}, {}, "", "binds"),
        Case(
            "bad name", [](ContainerSpec& s, ContainerHost&) { s.name = "Inst/1"; }, {}, {}, "",
            "name \"Inst/1\""),
        Case(
            "an image that reads as a flag",
            [](ContainerSpec& s, ContainerHost&) { s.image = "--privileged"; }, {}, {}, "",
            "not an image reference"),
        Case(
            "a work dir podman's -v would split",
            [](ContainerSpec& s, ContainerHost&) { s.work_dir = "/w:/etc"; }, {}, {}, "",
            "work_dir"),
        Case(
            "a device node outside /dev",
            [](ContainerSpec& s, ContainerHost&) { s.device_nodes = {"/etc/shadow"}; }, {}, {}, "",
            "not under /dev"),
        Case(
            "a malformed CDI name",
            [](ContainerSpec& s, ContainerHost&) { s.cdi_devices = {"gpu0"}; }, {}, {}, "",
            "vendor.com/class=name"),
        Case(
            "an env name podman would glob",
            [](ContainerSpec& s, ContainerHost&) {
              s.env = {{"TESSERA_*", "x"}};
            },
            {}, {}, "", "env: name \"TESSERA_*\""),
        Case(
            "an env value with a newline",
            [](ContainerSpec& s, ContainerHost&) {
              s.env = {{"A", "1\nB=2"}};
            },
            {}, {}, "", "env A: the value holds a line break")),
    [](const ::testing::TestParamInfo<ArgvCase>& param_info) {
      std::string name;
      for (char c : param_info.param.what)
        name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

TEST(HasContainersRangeTest, Table) {
  const struct {
    std::string text;
    bool want;
  } cases[] = {
      {"", false},
      {"containers:2147483647:2147483648\n", true},
      {"alice:100000:65536\ncontainers:200000:65536\n", true},
      {"alice:100000:65536\n", false},
      {"containers:200000:0\n", false},
      {"containers::65536\n", false},
      {"#containers:200000:65536\n", false},
  };
  for (const auto& c : cases) EXPECT_EQ(HasContainersRange(c.text), c.want) << c.text;
}

TEST(DetectContainerHostTest, ReadsCgroupV1AndV2AndSubids) {
  tessera::testing::TempDir dir;
  const std::string v1 = dir.path() + "/v1";
  ASSERT_EQ(RunTool({"mkdir", "-p", v1 + "/cpu", v1 + "/memory", v1 + "/pids"}).exit_code, 0);
  dir.Write("v1/cpu/cpu.cfs_quota_us", "-1\n");
  dir.Write("v1/memory/memory.limit_in_bytes", "9223372036854771712\n");
  const std::string subuid = dir.Write("subuid", "containers:2147483647:2147483648\n");
  const std::string empty = dir.Write("empty", "");
  ContainerHost h1 = DetectContainerHost(v1, subuid, subuid);
  EXPECT_TRUE(h1.cpu_limits);
  EXPECT_TRUE(h1.memory_limits);
  EXPECT_FALSE(h1.pids_limits);  // No pids hierarchy mounted.
  EXPECT_TRUE(h1.userns_auto);
  EXPECT_EQ(DefaultUserMode(h1), ContainerUserMode::kUserNamespace);

  ASSERT_EQ(RunTool({"mkdir", "-p", dir.path() + "/v2"}).exit_code, 0);
  dir.Write("v2/cgroup.controllers", "cpuset cpu io memory pids\n");
  ContainerHost h2 = DetectContainerHost(dir.path() + "/v2", subuid, empty);
  EXPECT_TRUE(h2.cpu_limits && h2.memory_limits && h2.pids_limits);
  EXPECT_FALSE(h2.userns_auto);  // subgid lacks the range.
  EXPECT_EQ(DefaultUserMode(h2), ContainerUserMode::kHostUid);
}

TEST(PrepareContainerRunTest, WritesTheEnvFilePrivatelyAndClearsStaleFiles) {
  tessera::testing::TempDir dir;
  const ContainerControlFiles files = ControlFilesIn(dir.path() + "/ctl");
  ASSERT_EQ(mkdir(files.dir.c_str(), 0755), 0);
  std::ofstream(files.cid_file) << "old";
  std::ofstream(files.pid_file) << "123";
  ContainerRun run;
  run.env_file_content = "TOKEN=secret\n";
  ASSERT_TRUE(PrepareContainerRun(run, files).ok());
  struct stat st {};
  ASSERT_EQ(stat(files.env_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(stat(files.dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(ReadSmallFile(files.env_file).value_or(""), "TOKEN=secret\n");
  EXPECT_FALSE(ReadSmallFile(files.cid_file).has_value());
  EXPECT_FALSE(ReadSmallFile(files.pid_file).has_value());
}

TEST(RunCommandTest, CapturesOutputAndExitCode) {
  auto r = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_FALSE(r->timed_out);
}

TEST(RunCommandTest, KillsTheWholeGroupAtTheDeadline) {
  tessera::testing::TempDir dir;
  ExecOptions options;
  options.deadline = std::chrono::milliseconds(300);
  int ticks = 0;
  options.on_tick = [&] { ++ticks; };
  options.tick = std::chrono::milliseconds(50);
  const auto start = std::chrono::steady_clock::now();
  // The grandchild holds the pipes open: only killing the group ends the wait.
  auto r = RunCommand({"sh", "-c", "sleep 30 & sleep 30"}, options);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_EQ(r->exit_code, 128 + SIGKILL);
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_GE(ticks, 2);
}

TEST(RunCommandTest, AMissingProgramIsAnError) {
  auto r = RunCommand({"no-such-program-tessera"});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no-such-program-tessera"));
}

// Real containers through podman and runc.
class ContainerPodmanTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing_support::PodmanMissing().empty()) return;
    image_ = new testing_support::BusyboxImage(
        "localhost/" + testing_support::UniqueName("tessera-container-test") + ":1");
  }
  static void TearDownTestSuite() {
    delete image_;
    image_ = nullptr;
  }
  void SetUp() override {
    const std::string missing = testing_support::PodmanMissing();
    if (!missing.empty()) GTEST_SKIP() << missing;
    ASSERT_TRUE(image_->ok()) << image_->error();
    host_ = DetectContainerHost();
    files_ = ControlFilesIn(dir_.path() + "/ctl");
  }

  ContainerSpec Spec(const std::string& command) const {
    ContainerSpec spec;
    spec.name = testing_support::UniqueName("ctest");
    spec.image = image_->reference();
    spec.command = command;
    spec.user_mode = DefaultUserMode(host_);
    spec.uid = spec.gid = 1999000901;
    spec.network = ContainerNetwork::kNone;
    return spec;
  }

  ContainerRun Prepared(const ContainerSpec& spec) {
    auto run = BuildPodmanRun(spec, host_, files_);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    if (!run.ok()) return {};
    EXPECT_TRUE(PrepareContainerRun(*run, files_).ok());
    return *run;
  }

  // Waits (up to 30 s) until `path` holds `text`.
  static bool WaitForText(const std::string& path, const std::string& text) {
    for (int i = 0; i < 300; ++i) {
      if (ReadSmallFile(path).value_or("").find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  static bool WaitForNonEmpty(const std::string& path) {
    for (int i = 0; i < 300; ++i) {
      if (!ReadSmallFile(path).value_or("").empty()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  bool ContainerExists(const std::string& name) const {
    return RunTool({"podman", "container", "exists", name}).exit_code == 0;
  }

  static testing_support::BusyboxImage* image_;
  tessera::testing::TempDir dir_;
  ContainerHost host_;
  ContainerControlFiles files_;
};

testing_support::BusyboxImage* ContainerPodmanTest::image_ = nullptr;

TEST_F(ContainerPodmanTest, RunsTheCommandContainedAndReturnsItsExitCode) {
  const std::string work = dir_.path() + "/work";
  ASSERT_EQ(mkdir(work.c_str(), 0755), 0);
  ContainerSpec spec = Spec(
      "echo uid=$(id -u); head -1 /proc/self/uid_map; grep -E 'NoNewPrivs|CapEff' "
      "/proc/self/status; echo TOKEN=$TESSERA_TOKEN; cat /sys/fs/cgroup/pids/pids.max "
      "/sys/fs/cgroup/pids.max 2>/dev/null; echo nofile=$(ulimit -n); pwd; "
      "echo result > /workspace/out.txt; exit 7");
  spec.env = {{"TESSERA_TOKEN", "tok en#1"}};
  spec.pids_limit = 64;
  spec.memory_mib = 128;
  spec.cpu_milli = 500;
  spec.work_dir = work;
  const ContainerRun run = Prepared(spec);
  const ExecResult r = RunTool(run.argv);
  EXPECT_EQ(r.exit_code, 7) << r.err;
  EXPECT_THAT(r.out, HasSubstr("TOKEN=tok en#1\n"));
  EXPECT_THAT(r.out, HasSubstr("NoNewPrivs:\t1"));
  EXPECT_THAT(r.out, HasSubstr("CapEff:\t0000000000000000"));
  EXPECT_THAT(r.out, HasSubstr("nofile=1024\n"));
  EXPECT_THAT(r.out, HasSubstr("/workspace\n"));
  if (host_.pids_limits) {
    EXPECT_THAT(r.out, HasSubstr("\n64\n"));
  }
  if (spec.user_mode == ContainerUserMode::kUserNamespace) {
    // Root inside is an unprivileged range outside: the map does not start "0 0".
    EXPECT_THAT(r.out, ::testing::ContainsRegex("\\s+0\\s+[1-9][0-9]+\\s+[0-9]+"));
  } else {
    EXPECT_THAT(r.out, HasSubstr("uid=1999000901"));
  }
  EXPECT_EQ(ReadSmallFile(work + "/out.txt").value_or(""), "result\n");
  EXPECT_FALSE(ContainerExists(run.container_name));  // --rm.
}

TEST_F(ContainerPodmanTest, RunsAsTheWorkloadUidWithoutAUserNamespace) {
  ContainerSpec spec = Spec("id -u; id -g");
  spec.user_mode = ContainerUserMode::kHostUid;
  const ExecResult r = RunTool(Prepared(spec).argv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1999000901\n1999000901\n");
}

TEST_F(ContainerPodmanTest, SigtermToPodmanStopsTheCommandWith143) {
  const ContainerRun run = Prepared(Spec("echo ready; sleep 60"));
  const std::string log = dir_.File("out.log");
  tessera::testing::ChildProcess podman(run.argv, log);
  ASSERT_TRUE(WaitForText(log, "ready")) << ReadSmallFile(log).value_or("");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(podman.Stop(SIGTERM), 143);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(ContainerPodmanTest, KillContainerEndsItAfterItsPodmanWasKilled) {
  const ContainerRun run = Prepared(Spec("echo ready; sleep 600"));
  const std::string log = dir_.File("out.log");
  tessera::testing::ChildProcess podman(run.argv, log);
  ASSERT_TRUE(WaitForText(log, "ready"));
  ASSERT_TRUE(WaitForNonEmpty(files_.pid_file));
  const std::string pid_text = ReadSmallFile(files_.pid_file).value_or("");
  const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
  // The shim's SIGKILL reaches podman only: the container goes on without it.
  EXPECT_EQ(podman.Stop(SIGKILL), 128 + SIGKILL);
  EXPECT_TRUE(ContainerExists(run.container_name));
  EXPECT_EQ(kill(pid, 0), 0);

  const auto start = std::chrono::steady_clock::now();
  const Status s = KillContainer(host_, run.container_name, files_);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
  EXPECT_FALSE(ContainerExists(run.container_name));
  bool gone = false;
  for (int i = 0; i < 50 && !gone; ++i) {
    gone = kill(pid, 0) != 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(gone) << "the container's init " << pid << " still runs";
  EXPECT_FALSE(ReadSmallFile(files_.cid_file).has_value());
  EXPECT_FALSE(ReadSmallFile(files_.env_file).has_value());
}

TEST_F(ContainerPodmanTest, KillContainerOfNoContainerIsOk) {
  const Status s = KillContainer(host_, "tessera-" + testing_support::UniqueName("none"), files_);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace tessera::agent
