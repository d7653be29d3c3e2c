// What the benchmarks that time a request through the whole stack start with: a real `tessera
// server` on loopback with a data directory of its own, tenant "bench", and node gpu-01 joined by
// a real `tessera agent` (8 simulated H100s, workload uids, so it needs root), ready.
#pragma once

#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "testing/testing.h"

namespace tessera::bench {

// One call to the API as `token`; its JSON answer, or {"error": ...} when none came.
inline nlohmann::json Call(httplib::Client& c, const std::string& method, const std::string& path,
                           const std::string& token, const nlohmann::json& body = nullptr) {
  httplib::Headers h = {{"Authorization", "Bearer " + token}};
  auto r = method == "GET"      ? c.Get(path, h)
           : method == "DELETE" ? c.Delete(path, h)
                                : c.Post(path, h, body.dump(), "application/json");
  if (!r) return nlohmann::json{{"error", "no answer"}};
  return nlohmann::json::parse(r->body, nullptr, false);
}

struct Stack {
  testing::TempDir dir;
  testing::ServerProcess server;
  std::unique_ptr<httplib::Client> api;
  std::string admin;   // The admin token.
  std::string tenant;  // Tenant "bench"'s token.
  std::unique_ptr<testing::ChildProcess> agent;

  // Starts it all (as `bench`, for the messages) with `admin` as the admin token and the
  // tenant's quota of `gpus`; null after saying why (not root: a note, and the caller exits 0).
  static std::unique_ptr<Stack> Start(const char* bench, const std::string& admin, int gpus) {
    if (geteuid() != 0) {
      std::fprintf(stderr, "%s: runs the agent as root with workload uids: run as root\n", bench);
      return nullptr;
    }
    auto s = std::make_unique<Stack>();
    s->admin = admin;
    chmod(s->dir.path().c_str(), 0711);  // Workload uids reach their directories below it.
    s->server.SetBinary(TESSERA_BIN);
    if (!s->server.Start({"--data", s->dir.File("data")}, admin)) {
      std::fprintf(stderr, "%s: server: %s\n", bench, s->server.output().c_str());
      return nullptr;
    }
    s->server.DiscardOutput();
    s->api = std::make_unique<httplib::Client>(s->server.url());
    s->api->set_read_timeout(30);
    s->tenant = Call(*s->api, "POST", "/v1/tenants", admin,
                     {{"name", "bench"}, {"quota", {{"gpus", gpus}}}})
                    .value("token", "");
    const std::string node_token =
        Call(*s->api, "POST", "/v1/nodes", admin, {{"name", "gpu-01"}, {"sharing", "exclusive"}})
            .value("token", "");
    s->agent = std::make_unique<testing::ChildProcess>(
        std::vector<std::string>{TESSERA_BIN, "agent", "--server", s->server.url(), "--token-file",
                                 testing::WritePrivateFile(s->dir.File("node.token"), node_token),
                                 "--backend", "sim", "--sim-gpus", "H100-80GB:8", "--work-dir",
                                 s->dir.File("work"), "--cgroup-root", "none"},
        s->dir.File("agent.log"));
    for (int i = 0; i < 200; ++i) {
      const nlohmann::json nodes = Call(*s->api, "GET", "/v1/nodes", admin);
      for (const nlohmann::json& n : nodes.value("nodes", nlohmann::json::array())) {
        if (n["state"] == "ready") return s;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::fprintf(stderr, "%s: the agent never joined (%s)\n", bench,
                 s->dir.File("agent.log").c_str());
    return nullptr;
  }
};

}  // namespace tessera::bench
