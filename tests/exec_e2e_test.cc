// End-to-end tests of exec sessions (docs/volumes.md, "A shell"): `tessera instances exec` and
// `tessera instances shell` through a real server to a real agent and its workload, over plain
// HTTP and over TLS; the shell under a real terminal (tmux), as a person would use it.
#include <fmt/format.h>
#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "agent_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using testing::CommandResult;

class ExecTest : public AgentTest {
 protected:
  // `tessera instances exec ID -- ARGS...` as `token`.
  CommandResult Exec(const std::string& token, const std::string& id,
                     const std::vector<std::string>& args, const std::string& input = "") {
    std::vector<std::string> argv = {"instances",    "exec",    id,    "--url",
                                     server_->url(), "--token", token, "--"};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::RunTessera(argv, input);
  }

  // An instance on gpu-01 whose workload writes its uid to `uid` and sleeps; once it runs.
  std::string Sleeper() {
    const std::string id = Create(H100(1, "on_demand"), "id -u > uid; exec sleep 600");
    EXPECT_TRUE(WaitState(id, "running")) << Instance(id).dump();
    EXPECT_TRUE(WaitFor([&] { return !ReadFile(RunDir("gpu-01", id) + "/uid").empty(); }, 5s));
    return id;
  }
};

TEST_F(ExecTest, ACommandRunsAsTheWorkloadInItsDirectoryAndExitsWithItsCode) {
  Join("gpu-01");
  const std::string id = Sleeper();
  const CommandResult r =
      Exec(tenant_, id,
           {"sh", "-c",
            "echo out; echo err >&2; id -u; pwd; echo \"$TESSERA_INSTANCE_ID\"; "
            "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err << ReadFile(dir_.File("gpu-01.log"));
  EXPECT_EQ(r.out, fmt::format("out\n{}{}\n{}\n", ReadFile(RunDir("gpu-01", id) + "/uid"),
                               RunDir("gpu-01", id), id));
  EXPECT_EQ(r.err, "err\n");
  // Input reaches the command, and its end is the command's end of file.
  const CommandResult counted = Exec(tenant_, id, {"wc", "-l"}, "one\ntwo\nthree\n");
  EXPECT_EQ(counted.exit_code, 0) << counted.err;
  EXPECT_EQ(counted.out.substr(counted.out.find_first_not_of(' ')), "3\n");
  // Output larger than any buffer on the way arrives whole and in order.
  const CommandResult many = Exec(tenant_, id, {"seq", "1", "300000"});
  EXPECT_EQ(many.exit_code, 0) << many.err;
  EXPECT_EQ(many.out.size(), 1'988'895u);
  EXPECT_EQ(many.out.substr(many.out.size() - 14), "299999\n300000\n");
  // A program that is not there: the shell's 127, and it says so.
  const CommandResult missing = Exec(tenant_, id, {"no-such-program"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("no-such-program"), std::string::npos) << missing.err;
}

TEST_F(ExecTest, OnlyTheInstancesTenantMayExecAndEveryTryIsAudited) {
  Join("gpu-01");
  const std::string id = Sleeper();
  ASSERT_EQ(Exec(tenant_, id, {"true"}).exit_code, 0);
  const std::string other = NewTenant("globex", 4);
  const CommandResult stranger = Exec(other, id, {"cat", "/etc/hostname"});
  EXPECT_EQ(stranger.exit_code, 1);
  EXPECT_EQ(stranger.out, "");
  EXPECT_NE(stranger.err.find("not found (HTTP 404)"), std::string::npos) << stranger.err;
  const CommandResult admin = Exec(kAdminToken, id, {"true"});
  EXPECT_EQ(admin.exit_code, 1);
  EXPECT_NE(admin.err.find("(HTTP 403)"), std::string::npos) << admin.err;
  // A request that does not upgrade is refused, naming the headers.
  auto plain = Post("/v1/instances/" + id + "/exec", tenant_, {{"command", {"true"}}});
  EXPECT_EQ(plain.status, 400);
  EXPECT_NE(plain.raw.find("Upgrade: tessera-exec.v1"), std::string::npos) << plain.raw;
  // The audit log has who ran what, when, in which instance.
  const json audit = Get("/v1/audit", kAdminToken).body;
  int ran = 0, refused = 0;
  for (const json& e : audit["entries"]) {
    if (e.value("action", "") != "POST /v1/instances/" + id + "/exec") continue;
    if (e.value("status", 0) == 101) {
      ++ran;
      EXPECT_EQ(e.value("target", ""), id);
      EXPECT_FALSE(e.value("at", "").empty());
      EXPECT_FALSE(e.value("user", "").empty()) << e.dump();
      EXPECT_NE(e.value("detail", "").find("\"command\":[\"true\"]"), std::string::npos)
          << e.dump();
    } else {
      ++refused;
    }
  }
  EXPECT_EQ(ran, 1) << audit.dump();
  EXPECT_EQ(refused, 3) << audit.dump();  // The stranger, the admin and the plain POST.
  // An instance that has ended takes no command.
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  ASSERT_TRUE(WaitState(id, "terminated"));
  EXPECT_EQ(Instance(id).value("reason", ""), "deleted by its owner") << "not its agent's doing";
  const CommandResult ended = Exec(tenant_, id, {"true"});
  EXPECT_EQ(ended.exit_code, 1);
  EXPECT_NE(ended.err.find("is terminated"), std::string::npos) << ended.err;
}

TEST_F(ExecTest, ASessionEndsWhenItsInstanceStops) {
  Join("gpu-01");
  const std::string id = Sleeper();
  auto session = std::async(std::launch::async, [&] {
    return Exec(tenant_, id, {"sleep", "299.5"});
  });
  // The command runs under the workload's uid. Its exact command line is matched, not a count of
  // sleeps: other tests' workloads running at the same time may have the same uid.
  const std::string uid = ReadFile(RunDir("gpu-01", id) + "/uid");
  ASSERT_TRUE(WaitFor(
      [&] {
        return testing::RunProgram({"/usr/bin/pgrep", "-c", "-u", uid.substr(0, uid.size() - 1),
                                    "-x", "-f", "sleep 299.5"})
                   .out == "1\n";
      },
      10s));
  const auto deleted = std::chrono::steady_clock::now();
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + id, tenant_).status, 200);
  ASSERT_EQ(session.wait_for(20s), std::future_status::ready);
  const CommandResult r = session.get();
  EXPECT_LT(std::chrono::steady_clock::now() - deleted, 15s);
  EXPECT_EQ(r.exit_code, 137) << r.err;
  EXPECT_NE(r.err.find("the instance stopped"), std::string::npos) << r.err;
}

// `logs -f` follows a workload to its end and exits as it did.
TEST_F(ExecTest, LogsFollowedToTheEndExitWithTheWorkloadsExitCode) {
  Join("gpu-01");
  const std::string id = Create(H100(1, "on_demand"), "echo first; sleep 1; echo last; exit 3");
  const CommandResult r = testing::RunTessera(
      {"instances", "logs", id, "-f", "--url", server_->url(), "--token", tenant_});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "first\nlast\n");
}

// A shell in tmux: the prompt, a command, the terminal's size and a resize, and the exit code.
TEST_F(ExecTest, AShellWorksUnderARealTerminalAndFollowsItsSize) {
  if (access("/usr/bin/tmux", X_OK) != 0)
    GTEST_SKIP() << "tmux is not installed (apt-get install tmux)";
  Join("gpu-01");
  const std::string id = Sleeper();
  const std::string socket = dir_.File("tmux.sock");
  auto tmux = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"/usr/bin/tmux", "-S", socket});
    return testing::RunProgram(args);
  };
  const std::string line = fmt::format(
      "env TESSERA_URL={} TESSERA_TOKEN={} {} instances shell {}; echo EXITED=$?; sleep 60",
      server_->url(), tenant_, testing::TesseraBinary(), id);
  ASSERT_EQ(tmux({"new-session", "-d", "-s", "t", "-x", "100", "-y", "30", line}).exit_code, 0);
  auto screen = [&] { return tmux({"capture-pane", "-p", "-t", "t"}).out; };
  auto shows = [&](const std::string& text) {
    return WaitFor([&] { return screen().find(text) != std::string::npos; }, 10s);
  };
  ASSERT_TRUE(shows("$")) << screen();  // The shell's prompt.
  tmux({"send-keys", "-t", "t", "echo $((6*7)) $(id -u); stty size; tty", "Enter"});
  const std::string uid = ReadFile(RunDir("gpu-01", id) + "/uid");
  EXPECT_TRUE(shows(fmt::format("42 {}", uid.substr(0, uid.size() - 1)))) << screen();
  EXPECT_TRUE(shows("30 100")) << screen();
  EXPECT_TRUE(shows("/dev/pts/")) << screen();
  tmux({"resize-window", "-t", "t", "-x", "120", "-y", "40"});
  std::this_thread::sleep_for(300ms);
  tmux({"send-keys", "-t", "t", "stty size", "Enter"});
  EXPECT_TRUE(shows("40 120")) << screen();
  tmux({"send-keys", "-t", "t", "exit 3", "Enter"});
  EXPECT_TRUE(shows("EXITED=3")) << screen();
  tmux({"kill-server"});
}

// The server's own simulated agents (--sim-agents, the demo) run no process to enter.
TEST_F(ServerTest, AnInstanceOnANodeSimulatedInsideTheServerTakesNoCommand) {
  const std::string tenant = NewTenant("acme", 8);
  json body = H100(1, "on_demand");
  body["command"] = "sleep 60";
  const auto created = Post("/v1/instances", tenant, body);
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body.value("id", "");
  ASSERT_TRUE(WaitFor(
      [&] { return Get("/v1/instances/" + id, tenant).body.value("state", "") == "running"; },
      10s));
  const CommandResult r = testing::RunTessera(
      {"instances", "exec", id, "--url", server_->url(), "--token", tenant, "--", "true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("simulated inside the server"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(HTTP 409)"), std::string::npos) << r.err;
}

// Over TLS, with the agent checking the server's certificate against the CA it was given.
TEST(ExecTlsTest, ASessionRunsOverTls) {
  testing::TempDir dir;
  std::string cert, key;
  ASSERT_TRUE(testing::MakeSelfSignedCert(dir, cert, key));
  testing::ServerProcess server;
  ASSERT_TRUE(
      server.Start({"--data", dir.File("data"), "--tls-cert", cert, "--tls-key", key}, kAdminToken))
      << server.output();
  ASSERT_EQ(server.url().rfind("https://", 0), 0u) << server.url();
  auto call = [&](const std::string& method, const std::string& path, const std::string& token,
                  const json& body) {
    httplib::Client client(server.url());
    client.set_ca_cert_path(cert);
    client.enable_server_certificate_verification(true);
    const httplib::Headers headers = {{"Authorization", "Bearer " + token}};
    auto r = method == "GET"      ? client.Get(path, headers)
             : method == "DELETE" ? client.Delete(path, headers)
                                  : client.Post(path, headers, body.dump(), "application/json");
    return r ? json::parse(r->body, nullptr, false) : json();
  };
  const std::string tenant =
      call("POST", "/v1/tenants", kAdminToken, {{"name", "acme"}, {"quota", {{"gpus", 4}}}})
          .value("token", "");
  const std::string node_token =
      call("POST", "/v1/nodes", kAdminToken, {{"name", "gpu-01"}}).value("token", "");
  ASSERT_FALSE(node_token.empty());
  AgentProcess agent(server.url(), node_token, dir.File("work"), dir.File("agent.log"),
                     "H100-80GB:1", {"--ca", cert});
  ASSERT_TRUE(WaitFor(
      [&] {
        const json nodes = call("GET", "/v1/nodes", kAdminToken, {});
        return nodes.contains("nodes") && nodes["nodes"].size() == 1 &&
               nodes["nodes"][0].value("state", "") == "ready";
      },
      15s))
      << ReadFile(dir.File("agent.log"));
  const json body = {
      {"billing", "on_demand"}, {"gpu_model", "H100-80GB"},   {"gpus", 1}, {"vcpus", 2},
      {"memory_mib", 2048},     {"command", "exec sleep 600"}};
  const std::string id = call("POST", "/v1/instances", tenant, body).value("id", "");
  ASSERT_TRUE(WaitFor(
      [&] {
        return call("GET", "/v1/instances/" + id, tenant, {}).value("state", "") == "running";
      },
      15s))
      << call("GET", "/v1/instances/" + id, tenant, {}).dump() << ReadFile(dir.File("agent.log"));
  const CommandResult r =
      testing::RunTessera({"instances", "exec", id, "--url", server.url(), "--token", tenant,
                           "--ca", cert, "--", "sh", "-c", "cat; echo done; exit 4"},
                          "through TLS\n");
  EXPECT_EQ(r.exit_code, 4) << r.err << ReadFile(dir.File("agent.log"));
  EXPECT_EQ(r.out, "through TLS\ndone\n");
  // Without the CA the client refuses the server rather than send its token.
  const CommandResult untrusted = testing::RunTessera(
      {"instances", "exec", id, "--url", server.url(), "--token", tenant, "--", "true"});
  EXPECT_EQ(untrusted.exit_code, 1);
  EXPECT_NE(untrusted.err.find("certificate"), std::string::npos) << untrusted.err;
  call("DELETE", "/v1/instances/" + id, tenant, {});
}

}  // namespace
}  // namespace tessera
