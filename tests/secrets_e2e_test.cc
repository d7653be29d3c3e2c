// The server's and the agents' secrets against the other users of the node (issue 24, section
// 2): a real `tessera server` with its admin token in TESSERA_ADMIN_TOKEN and --sim-agents, real
// `tessera agent` processes given their node tokens by --token-file and by TESSERA_NODE_TOKEN,
// and real workloads. No token may be in any of their processes' argv or environment, and
// what is private (the environment of a process, the data directory) stays private.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr uid_t kNobody = 65534;

std::string ReadProc(int pid, const char* what) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + what, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every process of the machine and its parent, from /proc/PID/stat.
std::map<int, int> Parents() {
  std::map<int, int> parents;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = ReadProc(std::stoi(name), "stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos) continue;  // Gone since the listing.
    std::istringstream rest(stat.substr(paren + 1));
    std::string state;
    int ppid = 0;
    if (rest >> state >> ppid) parents[std::stoi(name)] = ppid;
  }
  return parents;
}

// argv[0] of a /proc/PID/cmdline text.
std::string Program(const std::string& cmdline) { return cmdline.substr(0, cmdline.find('\0')); }

// In a child that has dropped to `uid`: which of `paths` it can open (open(2) for a file,
// opendir(3) for a directory listing, marked by a trailing '/'). Empty when none.
std::string OpenableAs(uid_t uid, const std::vector<std::string>& paths) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(126);
    std::string opened;
    for (const std::string& p : paths) {
      if (!p.empty() && p.back() == '/') {
        if (DIR* d = opendir(p.c_str())) {
          opened += "listed " + p + "\n";
          closedir(d);
        }
      } else if (const int fd = ::open(p.c_str(), O_RDONLY); fd >= 0) {
        opened += "opened " + p + "\n";
        close(fd);
      }
    }
    if (write(fds[1], opened.data(), opened.size()) < 0) _exit(125);
    _exit(0);
  }
  close(fds[1]);
  std::string out = testing::ReadAll(fds[0]);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return "the child could not drop to uid " + std::to_string(uid);
  }
  return out;
}

class SecretsTest : public ServerTest {
 protected:
  // The fleet file's nodes have simulated agents in the server; joined nodes come on top.
  void SetUp() override {
    fleet_path_ = dir_.Write("fleet.json", kSmallFleet);
    StartServer({"--sim-agents"});
    tenant_ = NewTenant("acme", 16);
  }

  // Adds node `name`; returns its token.
  std::string AddNode(const std::string& name) {
    auto r = Post("/v1/nodes", kAdminToken, {{"name", name}});
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("token", "");
  }

  std::vector<std::string> AgentArgs(const std::string& name,
                                     const std::vector<std::string>& token_args) {
    std::vector<std::string> args = {testing::TesseraBinary(),
                                     "agent",
                                     "--server",
                                     server_->url(),
                                     "--backend",
                                     "sim",
                                     "--sim-gpus",
                                     "A100-80GB:1",
                                     "--work-dir",
                                     dir_.File("work-" + name),
                                     "--cgroup-root",
                                     "none"};
    args.insert(args.end(), token_args.begin(), token_args.end());
    return args;
  }

  bool AwaitReady(const std::string& name) {
    const auto end = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < end) {
      for (const auto& n : Get("/v1/nodes", kAdminToken).body.value("nodes", json::array())) {
        if (n.value("id", "") == name && n.value("state", "") == "ready") return true;
      }
      std::this_thread::sleep_for(50ms);
    }
    return false;
  }

  std::string Create(const json& body) {
    json b = body;
    b["command"] = "sleep 30";
    auto r = Post("/v1/instances", tenant_, b);
    EXPECT_EQ(r.status, 201) << r.raw;
    const std::string id = r.body.value("id", "");
    EXPECT_EQ(AwaitState(tenant_, id, "running"), "running") << id;
    return id;
  }

  static json A100() {
    return {{"billing", "on_demand"},
            {"gpu_model", "A100-80GB"},
            {"gpus", 1},
            {"vcpus", 2},
            {"memory_mib", 4096}};
  }

  std::string tenant_;
};

TEST_F(SecretsTest, NoTokenIsInTheArgvOrEnvironmentOfAnyProcessOfTheServerOrItsAgents) {
  const std::string file_token = AddNode("gpu-file");
  const std::string env_token = AddNode("gpu-env");
  ASSERT_FALSE(file_token.empty());
  ASSERT_FALSE(env_token.empty());
  const std::string token_file =
      testing::WritePrivateFile(dir_.File("gpu-file.token"), file_token + "\n");
  testing::ChildProcess by_file(AgentArgs("gpu-file", {"--token-file", token_file}),
                                dir_.File("gpu-file.log"));
  testing::ChildProcess by_env(AgentArgs("gpu-env", {}), dir_.File("gpu-env.log"),
                               {{"TESSERA_NODE_TOKEN", env_token}});
  ASSERT_TRUE(AwaitReady("gpu-file")) << ReadProc(by_file.pid(), "cmdline");
  ASSERT_TRUE(AwaitReady("gpu-env"));
  // One workload on each joined node (one A100 each), and one on a simulated agent's H100 node
  // where the server can run it (it runs tenants' commands only under workload uids, as root).
  Create(A100());
  Create(A100());
  const int expected_workloads = geteuid() == 0 ? 3 : 2;
  if (expected_workloads == 3) Create(H100(1, "on_demand"));

  // The processes to look at: the server, the agents, their shims (forks of them, re-parented
  // to init, that keep their argv), and everything below any of those.
  std::set<int> roots = {server_->pid(), by_file.pid(), by_env.pid()};
  std::map<int, std::string> cmdlines;
  const std::map<int, int> parents = Parents();
  for (const auto& [pid, ppid] : parents) cmdlines[pid] = ReadProc(pid, "cmdline");
  std::map<int, int> shims;  // Of each root.
  for (const int root : std::set<int>(roots)) {
    for (const auto& [pid, cmdline] : cmdlines) {
      if (pid != root && !cmdline.empty() && cmdline == cmdlines[root]) {
        roots.insert(pid);
        ++shims[root];
      }
    }
  }
  EXPECT_GE(shims[by_file.pid()], 1) << "the --token-file agent's shim was not found";
  EXPECT_GE(shims[by_env.pid()], 1) << "the TESSERA_NODE_TOKEN agent's shim was not found";
  auto below_a_root = [&](int pid) {
    for (int p = pid, hops = 0; p > 1 && hops < 64; ++hops) {
      if (roots.count(p)) return true;
      auto it = parents.find(p);
      if (it == parents.end()) return false;
      p = it->second;
    }
    return false;
  };
  const std::map<std::string, std::string> secrets = {
      {"the admin token", kAdminToken},
      {"the node token from --token-file", file_token},
      {"the node token from TESSERA_NODE_TOKEN", env_token}};
  int looked_at = 0, workloads = 0;
  for (const auto& [pid, cmdline] : cmdlines) {
    if (!below_a_root(pid)) continue;
    ++looked_at;
    if (Program(cmdline) == "sleep" || cmdline.find("sleep 30") != std::string::npos) ++workloads;
    const std::string env_block = ReadProc(pid, "environ");
    for (const auto& [what, secret] : secrets) {
      EXPECT_EQ(cmdline.find(secret), std::string::npos)
          << what << " is in /proc/" << pid << "/cmdline: " << Program(cmdline);
      EXPECT_EQ(env_block.find(secret), std::string::npos)
          << what << " is in /proc/" << pid << "/environ of " << Program(cmdline);
    }
  }
  // The server, two agents, their shims and the workloads: the check above saw what matters.
  EXPECT_GE(looked_at, 3 + 2 + expected_workloads) << "too few processes were looked at";
  EXPECT_GE(workloads, expected_workloads) << "not every workload's process was looked at";
}

TEST_F(SecretsTest, OtherUsersCannotReadTheAgentsEnvironmentNorTheServersData) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to drop to another uid";
  const std::string token = AddNode("gpu-01");
  testing::ChildProcess agent(
      AgentArgs("gpu-01",
                {"--token-file", testing::WritePrivateFile(dir_.File("t"), token + "\n")}),
      dir_.File("gpu-01.log"));
  ASSERT_TRUE(AwaitReady("gpu-01"));
  Create(A100());
  const std::string data = dir_.File("data");
  struct stat st {};
  ASSERT_EQ(stat(data.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u) << "others may traverse the data directory, not list it";
  for (const char* file : {"/tessera.db", "/tessera.db-wal", "/tessera.db-shm"}) {
    ASSERT_EQ(stat((data + file).c_str(), &st), 0) << file;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << file;
  }
  // The directory above the data directory is open to all, so only the data directory's own
  // mode and its files' keep them out; a file others may read there shows the check works.
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  const std::string public_file = dir_.Write("public", "x");
  ASSERT_EQ(chmod(public_file.c_str(), 0644), 0);
  ASSERT_EQ(OpenableAs(kNobody, {public_file}), "opened " + public_file + "\n");
  EXPECT_EQ(OpenableAs(kNobody, {"/proc/" + std::to_string(agent.pid()) + "/environ",
                                 "/proc/" + std::to_string(server_->pid()) + "/environ",
                                 data + "/tessera.db", data + "/tessera.db-wal", data + "/",
                                 data + "/LOCK"}),
            "");
}

// Not even a process of the agent's own uid (a tenant's workload on a node without workload
// uids) may read the agent's environment or memory. The agent runs as `nobody` here, so only its
// PR_SET_DUMPABLE stands between the two.
TEST_F(SecretsTest, AProcessOfTheAgentsOwnUidCannotReadItsEnvironment) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run the agent as another uid";
  const std::string token = AddNode("gpu-nobody");
  const std::string work = dir_.File("work-gpu-nobody");
  ASSERT_TRUE(std::filesystem::create_directory(work));
  ASSERT_EQ(chown(work.c_str(), kNobody, kNobody), 0);
  const std::string token_file = testing::WritePrivateFile(dir_.File("nobody.token"), token);
  ASSERT_EQ(chown(token_file.c_str(), kNobody, kNobody), 0);
  ASSERT_EQ(chmod(dir_.path().c_str(), 0755), 0);
  testing::ChildProcess agent(AgentArgs("gpu-nobody", {"--token-file", token_file}),
                              dir_.File("gpu-nobody.log"), {}, kNobody);
  ASSERT_TRUE(AwaitReady("gpu-nobody")) << [&] {
    std::ifstream in(dir_.File("gpu-nobody.log"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }();
  // A process of the same uid that did not drop its dumpable flag is readable: the check can fail.
  testing::ChildProcess peer({"/bin/sleep", "30"}, "/dev/null", {}, kNobody);
  const std::string peer_environ = "/proc/" + std::to_string(peer.pid()) + "/environ";
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (ReadProc(peer.pid(), "cmdline").rfind("/bin/sleep", 0) != 0 &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(OpenableAs(kNobody, {peer_environ}), "opened " + peer_environ + "\n");
  const std::string agent_proc = "/proc/" + std::to_string(agent.pid());
  EXPECT_EQ(OpenableAs(kNobody, {agent_proc + "/environ", agent_proc + "/mem"}), "");
}

TEST_F(SecretsTest, TheAgentRefusesATokenInItsArgv) {
  auto r =
      testing::RunTessera({"agent", "--server", server_->url(), "--token",
                           "tsr_0000000000000000000000000000000000000000000000000000000000000002",
                           "--backend", "sim", "--work-dir", dir_.File("w")});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--token is not accepted"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("/proc/PID/cmdline"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--token-file PATH"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("TESSERA_NODE_TOKEN"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("w"))) << "it stopped before doing anything";
}

TEST_F(SecretsTest, TheAgentRefusesATokenFileOthersCanRead) {
  const std::string token = AddNode("gpu-01");
  const std::string path = dir_.Write("node.token", token + "\n");
  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  auto r = testing::RunTessera({"agent", "--server", server_->url(), "--token-file", path,
                                "--backend", "sim", "--work-dir", dir_.File("w")});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--token-file: " + path + ": permissions 0644 are too open"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("chmod 600 " + path), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_.File("w")));
}

}  // namespace
}  // namespace tessera
