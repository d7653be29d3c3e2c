// The attack suite of issue 24: a real `tessera server`, a real `tessera agent` (as root, with
// workload uids) and real workloads, bare processes and containers. Each attempt is made by a
// tenant's own command, which writes what it tried and whether it worked to an evidence file;
// every attempt must fail, and the instances' states and bills must stay right. The containers'
// image comes from Debian's docker-registry on loopback, with htpasswd auth, and their GPUs are
// stand-in device nodes given by a CDI spec the test writes.
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "agent/container_cdi.h"
#include "agent/container_test_support.h"
#include "common/text.h"
#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
namespace support = agent::testing_support;

constexpr int kPidsLimit = 64;

// The processes of the machine whose real uid is `uid`.
int ProcessesOf(uid_t uid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream status(ReadFile(e.path().string() + "/status"));
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Uid:", 0) == 0) {
        if (std::stoul(line.substr(4)) == uid) ++n;
        break;
      }
    }
  }
  return n;
}

// A shell function for the attack scripts: `t NAME COMMAND` runs COMMAND and appends
// "NAME DONE" or "NAME refused" to $E.
constexpr const char* kTry =
    "t() { if sh -c \"$2\" </dev/null >/dev/null 2>&1; then echo \"$1 DONE\"; "
    "else echo \"$1 refused\"; fi >> $E; }; ";

// The end of an attack script: a fork bomb (as many sleeps as the limits let it make, in the
// background), then "end" in the evidence, then a long sleep that needs no fork.
constexpr const char* kForkBombThenEnd =
    "sh -c 'i=0; while [ $i -lt 400 ]; do sleep 300 & i=$((i+1)); done; wait' >/dev/null 2>&1 & "
    "sleep 1; echo end >> $E; exec sleep 600";

// The evidence a tenant's command left: "NAME DONE|refused" lines, and other lines as they are.
struct Evidence {
  std::map<std::string, std::string> attempts;
  std::map<std::string, std::string> facts;  // "uid 1999000001" -> {"uid", "1999000001"}.
};

Evidence ReadEvidence(const std::string& path) {
  Evidence ev;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) {
      ev.facts[line] = "";
      continue;
    }
    const std::string key = line.substr(0, sp), value = line.substr(sp + 1);
    (value == "DONE" || value == "refused" ? ev.attempts : ev.facts)[key] = value;
  }
  return ev;
}

class AttackTest : public ServerTest {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "the agent switches to workload uids: run as root";
    StartServer({"--node-timeout", "6s"}, /*with_fleet=*/false);
    victim_ = NewTenant("victim", 8);
    rival_ = NewTenant("rival", 8);
    // Workload uids traverse the test's directory to reach the evidence directory.
    ASSERT_EQ(chmod(dir_.path().c_str(), 0711), 0);
    evidence_ = dir_.File("evidence");
    std::filesystem::create_directories(evidence_);
    ASSERT_EQ(chmod(evidence_.c_str(), 01777), 0);
  }

  // Adds node `name` with 4 simulated H100s and starts its agent with `extra` flags.
  void Join(const std::string& name, std::vector<std::string> extra = {}) {
    auto r = Post("/v1/nodes", kAdminToken, {{"name", name}, {"sharing", "exclusive"}});
    ASSERT_EQ(r.status, 201) << r.raw;
    extra.insert(extra.end(),
                 {"--workload-pids", std::to_string(kPidsLimit), "--heartbeat-ms", "200"});
    work_dir_ = dir_.File("work-" + name);
    agent_ = std::make_unique<AgentProcess>(server_->url(), r.body.value("token", ""), work_dir_,
                                            dir_.File(name + ".log"), "H100-80GB:4", extra);
    ASSERT_TRUE(WaitFor(
        [&] {
          for (const json& n : Get("/v1/nodes", kAdminToken).body.value("nodes", json::array())) {
            if (n.value("id", "") == name) return n.value("state", "") == "ready";
          }
          return false;
        },
        15s, 20ms))
        << ReadFile(dir_.File(name + ".log"));
  }

  std::string Create(const std::string& tenant, json body) {
    body["billing"] = "on_demand";
    body["gpu_model"] = "H100-80GB";
    body["vcpus"] = 2;
    body["memory_mib"] = 4096;
    if (!body.contains("gpus")) body["gpus"] = 1;
    auto r = Post("/v1/instances", tenant, body);
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("id", "");
  }

  json Instance(const std::string& tenant, const std::string& id) {
    return Get("/v1/instances/" + id, tenant).body;
  }

  // Deletes the instance and waits until it has ended.
  void Delete(const std::string& tenant, const std::string& id) {
    EXPECT_EQ(Call("DELETE", "/v1/instances/" + id, tenant).status, 200);
    EXPECT_EQ(AwaitState(tenant, id, "terminated", 20s), "terminated");
  }

  // The seconds billed to the instance so far (0 when it has no usage).
  double BilledSeconds(const std::string& tenant, const std::string& id) {
    const json usage = Get("/v1/usage?group_by=instance", tenant).body;
    double seconds = 0;
    std::function<void(const json&)> walk = [&](const json& j) {
      if (j.is_object()) {
        bool mine = false;
        for (const auto& [k, v] : j.items()) mine |= v.is_string() && v == id;
        if (mine && j.contains("seconds")) seconds += j["seconds"].get<double>();
        for (const auto& [k, v] : j.items()) walk(v);
      } else if (j.is_array()) {
        for (const json& v : j) walk(v);
      }
    };
    walk(usage);
    return seconds;
  }

  // The victim's workload: a secret in its directory, its pid in the evidence directory, and a
  // long sleep. Returns its instance id once it runs.
  std::string StartVictim(json body = json::object()) {
    body["command"] = fmt::format(
        "echo victim-secret > secret; echo $$ > {}/victim.pid; exec sleep 600", evidence_);
    const std::string id = Create(victim_, body);
    EXPECT_EQ(AwaitState(victim_, id, "running", 60s), "running") << Instance(victim_, id).dump();
    EXPECT_TRUE(WaitFor([&] { return !ReadFile(evidence_ + "/victim.pid").empty(); }, 10s, 20ms));
    victim_pid_ = std::atoi(ReadFile(evidence_ + "/victim.pid").c_str());
    return id;
  }

  std::string victim_;
  std::string rival_;
  std::string evidence_;
  std::string work_dir_;
  std::unique_ptr<AgentProcess> agent_;
  int victim_pid_ = 0;
};

// A bare process of one tenant tries everything the issue lists against the agent, the server,
// its own instance's record and the other tenant's workload.
TEST_F(AttackTest, ABareProcessCannotForgeFenceReadSignalOrOutgrowItsLimits) {
  Join("gpu-01");
  const std::string victim = StartVictim();
  const std::string victim_dir = victim + "-a0";
  const std::string ev = evidence_ + "/attack";
  const std::string script = fmt::format(
      "E={ev}; W=$(dirname \"$PWD\"); ME=$(basename \"$PWD\"); {try}"
      "echo \"uid $(id -u)\" >> $E; echo \"cwd $PWD\" >> $E; "
      "t write-own-dir \"touch mine\"; "
      "t forge-exit \"echo 0 > $W/.control/$ME/exit\"; "
      "t forge-state \"echo {{}} > $W/.control/$ME/state\"; "
      "t stop-the-victim \"echo 0 > $W/.control/{v}/stop\"; "
      "t list-control-files \"ls $W/.control\"; "
      "t extend-the-lease \"touch $W/agent.lease\"; "
      "t replace-the-lease \"mv $W/agent.lease $W/old.lease\"; "
      "t read-victim-files \"cat $W/{v}/secret\"; "
      "t list-victim-files \"ls $W/{v}\"; "
      "t plant-in-victim-dir \"touch $W/{v}/planted\"; "
      "t read-victim-log \"cat $W/.control/{v}/log\"; "
      "t signal-victim \"kill -TERM {vpid}\"; "
      "t stop-victim \"kill -STOP {vpid}\"; "
      "t agent-environ \"cat /proc/{agent}/environ\"; "
      "t agent-fds \"ls /proc/{agent}/fd\"; "
      "t agent-token-file \"cat {token}\"; "
      "t server-environ \"cat /proc/{server}/environ\"; "
      "t server-db \"cat {data}/tessera.db\"; "
      "t raise-nofile \"ulimit -Hn $(( $(ulimit -Hn) + 1 ))\"; "
      "t raise-nproc \"ulimit -Hp $(( $(ulimit -Hp) + 1 ))\"; "
      "echo \"nproc $(ulimit -p)\" >> $E; "
      "{bomb}",
      fmt::arg("ev", ev), fmt::arg("try", kTry), fmt::arg("bomb", kForkBombThenEnd),
      fmt::arg("v", victim_dir), fmt::arg("vpid", victim_pid_), fmt::arg("agent", agent_->pid()),
      fmt::arg("token", work_dir_ + ".token"), fmt::arg("server", server_->pid()),
      fmt::arg("data", dir_.File("data")));
  const std::string attacker = Create(rival_, {{"command", script}});
  ASSERT_EQ(AwaitState(rival_, attacker, "running", 30s), "running");
  const auto running_since = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return ReadEvidence(ev).facts.count("end") > 0; }, 30s, 20ms))
      << ReadFile(ev);
  const Evidence got = ReadEvidence(ev);

  // It ran as a uid of its own tenant, in its own directory.
  ASSERT_TRUE(got.facts.count("uid")) << ReadFile(ev);
  const uid_t uid = static_cast<uid_t>(std::stoul(got.facts.at("uid")));
  EXPECT_GE(uid, 1999000000u);
  EXPECT_EQ(got.facts.at("cwd"), work_dir_ + "/" + attacker + "-a0");
  EXPECT_EQ(got.facts.at("nproc"), std::to_string(kPidsLimit));
  // Every attempt failed, and a check that can succeed shows the harness reports success.
  ASSERT_EQ(got.attempts.size(), 20u) << ReadFile(ev);
  for (const auto& [what, result] : got.attempts) {
    EXPECT_EQ(result, what == "write-own-dir" ? "DONE" : "refused") << what;
  }

  // The fork bomb stopped at the tenant's limit and the other tenant can still start work.
  const int processes = ProcessesOf(uid);
  EXPECT_LE(processes, kPidsLimit);
  EXPECT_GE(processes, kPidsLimit / 2) << "the fork bomb did not run";
  const std::string other = Create(victim_, {{"command", "true"}});
  EXPECT_EQ(AwaitState(victim_, other, "succeeded", 30s), "succeeded");

  // The forged exit changed nothing: the attacker is still running and billed, the victim too.
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(Instance(rival_, attacker).value("state", ""), "running");
  EXPECT_EQ(Instance(victim_, victim).value("state", ""), "running");
  EXPECT_EQ(ReadFile(work_dir_ + "/" + victim_dir + "/secret"), "victim-secret\n");
  EXPECT_FALSE(std::filesystem::exists(work_dir_ + "/" + victim_dir + "/planted"));
  EXPECT_EQ(kill(victim_pid_, 0), 0) << "the victim's process is gone";

  Delete(rival_, attacker);
  const double ran =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - running_since).count();
  EXPECT_GE(BilledSeconds(rival_, attacker), ran - 2) << "billed less than it ran";
  EXPECT_LE(BilledSeconds(rival_, attacker), std::max(60.0, ran + 5));  // A minute at least.
  // What the bomb left behind goes with the tenant's last workload on the node.
  EXPECT_TRUE(WaitFor([&] { return ProcessesOf(uid) == 0; }, 15s, 20ms)) << ProcessesOf(uid);
  Delete(victim_, victim);
}

// Under `tessera server --sim-agents` (the README's first example) a tenant's command runs as a
// workload uid, outside the server's reach: not its environment, not its database.
TEST_F(AttackTest, UnderSimAgentsATenantsCommandCannotReachTheServer) {
  fleet_path_ = dir_.Write("fleet.json", kSmallFleet);
  server_.reset();
  std::filesystem::remove_all(dir_.File("data"));
  StartServer({"--sim-agents"});
  const std::string tenant = NewTenant("acme", 4);
  const std::string ev = evidence_ + "/sim-attack";
  const std::string script = fmt::format(
      "E={ev}; {try}echo \"uid $(id -u)\" >> $E; "
      "t write-own-dir \"touch mine\"; "
      "t server-environ \"cat /proc/{server}/environ\"; "
      "t server-fds \"ls /proc/{server}/fd\"; "
      "t server-db \"cat {data}/tessera.db\"; "
      "t server-wal \"cat {data}/tessera.db-wal\"; "
      "t list-data \"ls {data}\"; "
      "t write-data \"touch {data}/planted\"; "
      "echo end >> $E",
      fmt::arg("ev", ev), fmt::arg("try", kTry), fmt::arg("server", server_->pid()),
      fmt::arg("data", dir_.File("data")));
  auto r = Post("/v1/instances", tenant,
                {{"billing", "on_demand"},
                 {"gpu_model", "H100-80GB"},
                 {"gpus", 1},
                 {"vcpus", 2},
                 {"memory_mib", 4096},
                 {"command", script}});
  ASSERT_EQ(r.status, 201) << r.raw;
  EXPECT_EQ(AwaitState(tenant, r.body.value("id", ""), "succeeded", 30s), "succeeded");
  const Evidence got = ReadEvidence(ev);
  ASSERT_TRUE(got.facts.count("end")) << ReadFile(ev);
  EXPECT_NE(got.facts.at("uid"), "0");
  EXPECT_NE(got.facts.at("uid"), std::to_string(geteuid()));
  ASSERT_EQ(got.attempts.size(), 7u) << ReadFile(ev);
  for (const auto& [what, result] : got.attempts) {
    EXPECT_EQ(result, what == "write-own-dir" ? "DONE" : "refused") << what;
  }
}

// Containers: an image pulled from a registry with credentials (a wrong password and a missing
// image fail their instances naming the image, unbilled), shown pulling, then run with its own
// GPU's device only, as the tenant's uid, within its limits, unable to reach the other tenant,
// the agent or the node's loopback services.
class ContainerAttackTest : public AttackTest {
 protected:
  void SetUp() override {
    AttackTest::SetUp();
    if (IsSkipped()) return;
    std::string missing = support::PodmanMissing();
    if (missing.empty()) missing = support::RegistryMissing();
    if (!missing.empty()) GTEST_SKIP() << missing;
    if (access("/var/run", W_OK) != 0) GTEST_SKIP() << "podman reads CDI specs from /var/run/cdi";
    // Stand-ins for the node's four GPUs, and a CDI spec naming them by index.
    dev_ = dir_.File("dev");
    major_ = support::MakeStandInGpuNodes(dev_, 4);
    ASSERT_GT(major_, 0) << strerror(errno);
    std::vector<agent::GpuDeviceNodes> gpus;
    for (int i = 0; i < 4; ++i) {
      gpus.push_back({std::to_string(i), "", i, {fmt::format("{}/nvidia{}", dev_, i)}});
    }
    kind_ = fmt::format("e2e{}.tessera.example/gpu", getpid());
    const agent::CdiSpecBuild spec =
        agent::BuildGpuCdiSpec(kind_, gpus, {dev_ + "/nvidiactl"}, {}, dev_);
    spec_path_ = fmt::format("/var/run/cdi/tessera-e2e-{}.json", getpid());
    std::filesystem::create_directories("/var/run/cdi");
    std::ofstream(spec_path_) << spec.json;
    registry_ = std::make_unique<support::LocalRegistry>("robot", "s3cret-pw");
    ASSERT_TRUE(registry_->ready()) << registry_->log();
    // A 24 MiB payload, so the pull lasts long enough to be seen.
    support::BusyboxImage local("localhost/" + support::UniqueName("tessera-e2e") + ":1", 24 << 20);
    ASSERT_TRUE(local.ok()) << local.error();
    path_ = support::UniqueName("team/e2e") + ":1";
    ASSERT_EQ(registry_->Push(local.reference(), path_, "robot", "s3cret-pw"), "");
    image_ = registry_->host() + "/" + path_;
    // `local` is removed here, so the agent's pull fetches every layer.
  }
  void TearDown() override {
    if (!spec_path_.empty()) unlink(spec_path_.c_str());
    if (!image_.empty()) support::RunTool({"podman", "rmi", "--force", "--ignore", image_});
  }

  std::vector<std::string> AgentFlags() {
    return {"--insecure-registry", registry_->host(), "--cdi-kind", kind_};
  }

  json WithImage(json body, const std::string& password = "s3cret-pw") {
    body["image"] = image_;
    body["registry_auth"] = {{"username", "robot"}, {"password", password}};
    return body;
  }

  std::string dev_;
  int major_ = -1;
  std::string kind_;
  std::string spec_path_;
  std::unique_ptr<support::LocalRegistry> registry_;
  std::string path_;
  std::string image_;
};

TEST_F(ContainerAttackTest, PullsAreSeenAndFailuresNameTheImageAndBillNothing) {
  Join("gpu-01", AgentFlags());
  // Refused credentials, then an image the registry lacks: failed, with the image in the reason.
  const std::string bad = Create(rival_, WithImage({{"command", "true"}}, "wrong-password"));
  EXPECT_EQ(AwaitState(rival_, bad, "failed", 60s), "failed");
  json inst = Instance(rival_, bad);
  EXPECT_NE(inst.value("reason", "").find(image_), std::string::npos) << inst.dump();
  EXPECT_EQ(inst.dump().find("wrong-password"), std::string::npos) << inst.dump();
  json missing_body = WithImage({{"command", "true"}});
  missing_body["image"] = registry_->host() + "/team/no-such-image:1";
  const std::string missing = Create(rival_, missing_body);
  EXPECT_EQ(AwaitState(rival_, missing, "failed", 60s), "failed");
  inst = Instance(rival_, missing);
  EXPECT_NE(inst.value("reason", "").find("team/no-such-image:1"), std::string::npos)
      << inst.dump();
  EXPECT_EQ(BilledSeconds(rival_, bad), 0);
  EXPECT_EQ(BilledSeconds(rival_, missing), 0);

  // The right credentials: pulling, with its progress, then running with the image's files.
  const std::string good = Create(rival_, WithImage({{"command", "wc -c < /payload"}}));
  bool saw_pulling = false;
  std::string state;
  ASSERT_TRUE(WaitFor(
      [&] {
        const json now = Instance(rival_, good);
        state = now.value("state", "");
        if (state == "pulling") {
          saw_pulling = true;
          EXPECT_EQ(now["pull"].value("image", ""), image_) << now.dump();
          EXPECT_GE(now["pull"].value("percent", -1.0), 0) << now.dump();
        }
        return state == "succeeded" || state == "failed";
      },
      120s, 20ms))
      << state;
  EXPECT_EQ(state, "succeeded") << Instance(rival_, good).dump();
  EXPECT_TRUE(saw_pulling) << "the instance was never shown pulling";
  auto logs = Get("/v1/instances/" + good + "/logs", rival_);
  EXPECT_NE(logs.raw.find(std::to_string(24 << 20)), std::string::npos) << logs.raw;
  // Cached now: `never` runs it without the registry.
  json cached = WithImage({{"command", "true"}});
  cached["pull_policy"] = "never";
  cached.erase("registry_auth");
  const std::string again = Create(rival_, cached);
  EXPECT_EQ(AwaitState(rival_, again, "succeeded", 60s), "succeeded")
      << Instance(rival_, again).dump();
}

TEST_F(ContainerAttackTest, AContainerSeesOnlyItsGpuAndCannotReachTheNodeOrAnotherTenant) {
  Join("gpu-01", AgentFlags());
  const std::string victim = StartVictim();
  const std::string ev = "/workspace/attack";
  const std::string script = fmt::format(
      "E={ev}; {try}"
      "echo \"uid $(id -u)\" >> $E; echo \"cwd $PWD\" >> $E; "
      "t write-own-dir \"touch mine\"; "
      "echo \"devices $(ls /dev | grep nvidia | tr '\\n' ,)\" >> $E; "
      "echo \"gpus $CUDA_VISIBLE_DEVICES\" >> $E; "
      "for i in 0 1 2 3; do t open-nvidia$i \"test -c /dev/nvidia$i && echo > /dev/nvidia$i\"; "
      "done; "
      "t mknod-gpu \"busybox mknod /tmp/gpu c {major} 1\"; "
      "t see-victim \"test -e /proc/{vpid}/status\"; "
      "t signal-victim \"kill -TERM {vpid}\"; "
      "t see-agent \"test -e /proc/{agent}/status\"; "
      "t agent-environ \"cat /proc/{agent}/environ\"; "
      "t reach-server \"busybox wget -q -T 2 -O /dev/null {url}/healthz\"; "
      "t read-victim-files \"cat {work}/{v}/secret\"; "
      "t list-control-files \"ls {work}/.control\"; "
      "t raise-nofile \"ulimit -Hn $(( $(ulimit -Hn) + 1 ))\"; "
      "t raise-nproc \"ulimit -Hp $(( $(ulimit -Hp) + 1 ))\"; "
      "t become-root \"test $(id -u) = 0\"; "
      "{bomb}",
      fmt::arg("ev", ev), fmt::arg("try", kTry), fmt::arg("bomb", kForkBombThenEnd),
      fmt::arg("major", major_), fmt::arg("vpid", victim_pid_), fmt::arg("agent", agent_->pid()),
      fmt::arg("url", server_->url()), fmt::arg("work", work_dir_), fmt::arg("v", victim + "-a0"));
  const std::string attacker = Create(rival_, WithImage({{"command", script}, {"gpus", 1}}));
  ASSERT_EQ(AwaitState(rival_, attacker, "running", 120s), "running")
      << Instance(rival_, attacker).dump() << ReadFile(dir_.File("gpu-01.log"));
  const auto running_since = std::chrono::steady_clock::now();
  const std::string evidence = work_dir_ + "/" + attacker + "-a0/attack";
  ASSERT_TRUE(WaitFor([&] { return ReadEvidence(evidence).facts.count("end") > 0; }, 60s, 20ms))
      << ReadFile(evidence) << Get("/v1/instances/" + attacker + "/logs", rival_).raw;
  const Evidence got = ReadEvidence(evidence);
  for (const char* fact : {"uid", "cwd", "devices"}) {
    ASSERT_TRUE(got.facts.count(fact)) << fact << " missing from:\n" << ReadFile(evidence);
  }
  EXPECT_GE(std::stoul(got.facts.at("uid")), 1999000000u);
  EXPECT_EQ(got.facts.at("cwd"), "/workspace");
  // Its GPU's node and the control node, nothing else; CUDA_VISIBLE_DEVICES names the one GPU.
  const json placed = Instance(rival_, attacker);
  ASSERT_EQ(placed["gpus"].size(), 1u) << placed.dump();
  const int gpu = placed["gpus"][0].is_object() ? placed["gpus"][0].value("index", -1)
                                                : placed["gpus"][0].get<int>();
  EXPECT_EQ(got.facts.at("devices"), fmt::format("nvidia{},nvidiactl,", gpu)) << placed.dump();
  ASSERT_EQ(got.attempts.size(), 16u) << ReadFile(evidence);
  for (const auto& [what, result] : got.attempts) {
    // Its own stand-in node exists; writing to it reaches no driver (the major is unused).
    if (what == fmt::format("open-nvidia{}", gpu)) continue;
    EXPECT_EQ(result, what == "write-own-dir" ? "DONE" : "refused") << what;
  }
  // The fork bomb stopped at the limit (the container's pids limit and its uid's RLIMIT_NPROC).
  const uid_t uid = static_cast<uid_t>(std::stoul(got.facts.at("uid")));
  EXPECT_LE(ProcessesOf(uid), kPidsLimit);
  EXPECT_GE(ProcessesOf(uid), kPidsLimit / 2) << "the fork bomb did not run";

  EXPECT_EQ(Instance(rival_, attacker).value("state", ""), "running");
  EXPECT_EQ(Instance(victim_, victim).value("state", ""), "running");
  EXPECT_EQ(kill(victim_pid_, 0), 0);
  // Its container is named for the instance and this agent, so another agent on the host (a test
  // beside this one) never takes it for its own.
  auto has_container = [&] {
    const auto names = support::RunTool({"podman", "ps", "-a", "--format", "{{.Names}}"});
    EXPECT_EQ(names.exit_code, 0) << names.err;
    return names.out.find("tessera-" + attacker + "-a0-") != std::string::npos;
  };
  EXPECT_TRUE(has_container());
  Delete(rival_, attacker);
  const double ran =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - running_since).count();
  EXPECT_GE(BilledSeconds(rival_, attacker), ran - 2);
  // The container is gone with its instance.
  EXPECT_TRUE(WaitFor([&] { return !has_container(); }, 20s));
  Delete(victim_, victim);
}

// A command run with `tessera instances exec` goes into the container as its workload: its uid,
// its directory, its GPU's device and nothing of the node or the other tenant; the other tenant
// cannot run one there.
TEST_F(ContainerAttackTest, AnExecGoesIntoTheContainerAsItsWorkloadAndNoFurther) {
  Join("gpu-01", AgentFlags());
  const std::string victim = StartVictim();
  const std::string id = Create(rival_, WithImage({{"command", "exec sleep 600"}, {"gpus", 1}}));
  ASSERT_EQ(AwaitState(rival_, id, "running", 120s), "running")
      << Instance(rival_, id).dump() << ReadFile(dir_.File("gpu-01.log"));
  const std::string script = fmt::format(
      "id -u; pwd; ls /dev | grep nvidia | tr '\\n' ,; echo; "
      "test -e /proc/{}/status && echo sees-victim; test -e /proc/{}/status && echo sees-agent; "
      "cat {}/{}-a0/secret 2>/dev/null && echo reads-victim; exit 3",
      victim_pid_, agent_->pid(), work_dir_, victim);
  auto exec = [&](const std::string& token) {
    return testing::RunTessera({"instances", "exec", id, "--url", server_->url(), "--token", token,
                                "--", "sh", "-c", script});
  };
  const testing::CommandResult r = exec(rival_);
  EXPECT_EQ(r.exit_code, 3) << r.err << ReadFile(dir_.File("gpu-01.log"));
  const std::vector<std::string_view> lines = Split(r.out, '\n');
  ASSERT_GE(lines.size(), 3u) << r.out;
  EXPECT_GE(std::stoul(std::string(lines[0])), 1999000000u) << r.out;
  EXPECT_EQ(lines[1], "/workspace");
  const json placed = Instance(rival_, id);
  ASSERT_EQ(placed["gpus"].size(), 1u) << placed.dump();
  EXPECT_EQ(lines[2], fmt::format("nvidia{},nvidiactl,", placed["gpus"][0].value("index", -1)));
  EXPECT_EQ(r.out.find("sees-"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("reads-victim"), std::string::npos) << r.out;
  // Under a terminal (script(1) gives the CLI one): podman's own terminal in the container.
  if (access("/usr/bin/script", X_OK) == 0) {
    const testing::CommandResult tty = testing::RunProgram(
        {"/usr/bin/script", "-qec",
         fmt::format(
             "{} instances exec -t {} --url {} --token {} -- sh -c 'tty; stty size; exit 4'",
             testing::TesseraBinary(), id, server_->url(), rival_),
         "/dev/null"});
    EXPECT_EQ(tty.exit_code, 4) << tty.out << tty.err;
    EXPECT_NE(tty.out.find("/dev/pts/"), std::string::npos) << tty.out;
    EXPECT_NE(tty.out.find("24 80"), std::string::npos) << tty.out;
  }
  const testing::CommandResult stranger = exec(victim_);
  EXPECT_EQ(stranger.exit_code, 1);
  EXPECT_NE(stranger.err.find("(HTTP 404)"), std::string::npos) << stranger.err;
  Delete(rival_, id);
  Delete(victim_, victim);
}

}  // namespace
}  // namespace tessera
