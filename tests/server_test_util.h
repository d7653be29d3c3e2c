// Shared fixture for end-to-end tests of `tessera server`: a real server process on a free
// loopback port with a temporary data directory, and a small HTTP+JSON client.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "testing/testing.h"

namespace tessera {

inline constexpr const char* kAdminToken =
    "tsr_0000000000000000000000000000000000000000000000000000000000000001";

// One node of 2 exclusive H100s, one A100-40GB in MIG mode, one L40S shared: small enough that
// tests fill it on purpose.
inline constexpr const char* kSmallFleet = R"({
  "name": "small",
  "shapes": [
    {"name": "h100", "count": 1, "gpu_model": "H100-80GB", "gpus": 2, "vcpus": 64,
     "memory_gib": 512, "nvlink": "all", "gpu_mode": "exclusive"},
    {"name": "a100", "count": 1, "gpu_model": "A100-40GB", "gpus": 1, "vcpus": 32,
     "memory_gib": 256, "gpu_mode": "mig"},
    {"name": "l40s", "count": 1, "gpu_model": "L40S-48GB", "gpus": 1, "vcpus": 32,
     "memory_gib": 256, "gpu_mode": "shared"}
  ]
})";

struct HttpReply {
  int status = 0;
  nlohmann::json body;
  std::string raw;
};

// The whole of a file, "" when it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether `done` holds within `limit`, asked every `poll`; asked once more at the end.
inline bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds limit,
                    std::chrono::milliseconds poll = std::chrono::milliseconds(50)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(poll);
  }
  return done();
}

// A `tessera agent` child process, its output in a file. Its token is in a 0600 file beside
// its work dir (never in argv, which the agent refuses).
class AgentProcess : public testing::ChildProcess {
 public:
  AgentProcess(const std::string& url, const std::string& token, const std::string& work_dir,
               const std::string& log, const std::string& gpus = "H100-80GB:2",
               const std::vector<std::string>& extra = {})
      : ChildProcess(Args(url, token, work_dir, gpus, extra), log) {}
  void Kill(int sig) { Stop(sig); }

 private:
  static std::vector<std::string> Args(const std::string& url, const std::string& token,
                                       const std::string& work_dir, const std::string& gpus,
                                       const std::vector<std::string>& extra) {
    const std::string token_file = testing::WritePrivateFile(work_dir + ".token", token + "\n");
    std::vector<std::string> all = {testing::TesseraBinary(),
                                    "agent",
                                    "--server",
                                    url,
                                    "--token-file",
                                    token_file,
                                    "--backend",
                                    "sim",
                                    "--sim-gpus",
                                    gpus,
                                    "--work-dir",
                                    work_dir,
                                    "--cgroup-root",
                                    "none"};
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  }
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fleet_path_ = dir_.Write("fleet.json", kSmallFleet);
    StartServer();
  }

  // Starts the server on the test's fleet, or with `with_fleet` false on an empty one.
  void StartServer(std::vector<std::string> extra = {"--sim-agents"}, bool with_fleet = true) {
    std::vector<std::string> args = {"--data", dir_.File("data")};
    if (with_fleet) {
      args.push_back("--fleet");
      args.push_back(fleet_path_);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<testing::ServerProcess>();
    ASSERT_TRUE(server_->Start(args, kAdminToken)) << server_->output();
  }

  HttpReply Call(const std::string& method, const std::string& path, const std::string& token,
                 const nlohmann::json* body = nullptr,
                 const std::string& content_type = "application/json",
                 const std::string* raw_body = nullptr) {
    httplib::Client client(server_->url());
    client.set_read_timeout(30);
    httplib::Headers headers;
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    const std::string text = raw_body ? *raw_body : (body ? body->dump() : "");
    httplib::Result r = method == "GET"       ? client.Get(path, headers)
                        : method == "HEAD"    ? client.Head(path, headers)
                        : method == "OPTIONS" ? client.Options(path, headers)
                        : method == "DELETE"  ? client.Delete(path, headers)
                        : method == "PATCH"   ? client.Patch(path, headers, text, content_type)
                        : method == "PUT"     ? client.Put(path, headers, text, content_type)
                                              : client.Post(path, headers, text, content_type);
    HttpReply out;
    if (!r) return out;
    out.status = r->status;
    out.raw = r->body;
    out.body = nlohmann::json::parse(r->body, nullptr, false);
    return out;
  }

  HttpReply Post(const std::string& path, const std::string& token, const nlohmann::json& body) {
    return Call("POST", path, token, &body);
  }
  HttpReply Patch(const std::string& path, const std::string& token, const nlohmann::json& body) {
    return Call("PATCH", path, token, &body);
  }
  HttpReply Get(const std::string& path, const std::string& token) {
    return Call("GET", path, token);
  }

  // The instance's state once it reads `want`, or what it reads after `limit`: agents act on
  // their own time, so `running` (and `terminated` after a delete) follow the answer by a few
  // milliseconds.
  std::string AwaitState(const std::string& token, const std::string& id, const std::string& want,
                         std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const std::string now = Get("/v1/instances/" + id, token).body.value("state", "?");
      if (now == want || std::chrono::steady_clock::now() >= end) return now;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Waits (up to 10 s) until the instance is in no state an agent is about to change: not
  // scheduled (it is starting) nor stopping.
  void Settle(const std::string& token, const std::string& id) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      const std::string now = Get("/v1/instances/" + id, token).body.value("state", "?");
      if (now != "scheduled" && now != "stopping") return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Creates a tenant through the API and returns its token.
  std::string NewTenant(const std::string& name, double gpus) {
    auto r = Post("/v1/tenants", kAdminToken, {{"name", name}, {"quota", {{"gpus", gpus}}}});
    EXPECT_EQ(r.status, 201) << r.raw;
    return r.body.value("token", "");
  }

  // A custom whole-GPU H100 request.
  static nlohmann::json H100(int gpus, const std::string& billing) {
    return {{"billing", billing},
            {"gpu_model", "H100-80GB"},
            {"gpus", gpus},
            {"vcpus", 4},
            {"memory_mib", 16384}};
  }

  testing::TempDir dir_;
  std::string fleet_path_;
  std::unique_ptr<testing::ServerProcess> server_;
};

}  // namespace tessera
