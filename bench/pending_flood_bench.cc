// A pending flood (issue 26): tenant A fills the queue with work that cannot be placed, groups of
// 1,024 members of 1 milli-GPU on nodes the operator drained, until the server refuses it (its
// cap on pending work, docs/api.md) or it has `--groups` of them; then A keeps asking for more
// while tenant B creates instances at a fixed rate on the same server. Prints B's create latency
// (p50, p99) alone and with A's pending work waiting, A's pending count and how A was answered.
// The budget: B's p99 with the flood within 2x of B's p99 alone, and under 20 ms.
// Usage: pending_flood_bench [--rate R] [--seconds S] [--groups N] [--max-pending N] [--again 0]
//   [--bin PATH]. --max-pending sets the server's default cap (to flood past the default);
//   --again 0 leaves A quiet while B is measured (to compare with a server without the cap, which
//   would take all A asks); --bin runs another build of the server (an earlier one, to compare).
#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "testing/open_loop.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using nlohmann::json;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b1";
const std::string kShare = R"({"billing":"spot","instance_type":"shared.l40s.half"})";
// A member A's flood is made of: a thousandth of an A100, whose nodes are all drained.
const json kFloodMember = {{"billing", "on_demand"}, {"gpu_model", "A100-80GB"},
                           {"milli_gpu", 1},         {"vcpus", 1},
                           {"memory_mib", 1024},     {"command", "sleep 3600"}};

// 1,000 nodes of 8 shared L40S for B, and 4 of shared A100s that the benchmark drains.
std::string WriteFleet(const testing::TempDir& dir) {
  return dir.Write("fleet.json", R"({"name": "bench", "shapes": [
    {"name": "l40s", "count": 1000, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"},
    {"name": "a100", "count": 4, "gpu_model": "A100-80GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"}]})");
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}

httplib::Headers Auth(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }

std::string NewTenant(const std::string& url, const std::string& name) {
  httplib::Client c(url);
  const json body = {{"name", name}, {"quota", {{"gpus", 1e6}}}};
  auto r = c.Post("/v1/tenants", Auth(kAdmin), body.dump(), "application/json");
  if (!r || r->status != 201) Die("cannot create a tenant: " + (r ? r->body : "no answer"));
  return json::parse(r->body)["token"];
}

// Drains every A100 node, so what asks for an A100 waits.
void DrainA100s(const std::string& url) {
  httplib::Client c(url);
  for (std::string page;;) {
    auto r =
        c.Get("/v1/nodes?limit=1000" + (page.empty() ? "" : "&page_token=" + page), Auth(kAdmin));
    if (!r || r->status != 200) Die("cannot list nodes: " + (r ? r->body : "no answer"));
    const json j = json::parse(r->body);
    for (const json& n : j["nodes"]) {
      if (n["gpu_model"] != "A100-80GB") continue;
      const std::string id = n["id"];
      auto d = c.Post("/v1/nodes/" + id + "/drain", Auth(kAdmin), "", "application/json");
      if (!d || d->status != 200) Die("cannot drain " + id + ": " + (d ? d->body : "no answer"));
    }
    if (!j.contains("next_page_token")) break;
    page = j["next_page_token"];
  }
}

// A's answers, by status.
struct Answers {
  std::map<int, int> by_status;
  std::string refusal;  // The last refusal's body.
  void Add(const httplib::Result& r) {
    ++by_status[r ? r->status : 0];
    if (r && r->status >= 400) refusal = r->body;
  }
  std::string Text() const {
    std::string out;
    for (const auto& [status, n] : by_status) out += fmt::format("{} x {}, ", n, status);
    return out.empty() ? "none" : out.substr(0, out.size() - 2);
  }
};

json FloodGroup(int i) {
  return {{"name", fmt::format("flood-{}", i)}, {"size", 1024}, {"template", kFloodMember}};
}

// A's flood: groups of 1,024 until `groups` were made or one is refused, then single instances
// until one is refused (at most `groups` x 1,024 in all). Returns the groups made.
int Flood(const std::string& url, const std::string& token, int groups, Answers& answers) {
  httplib::Client c(url);
  c.set_read_timeout(60);
  int made = 0;
  for (int i = 0; i < groups; ++i) {
    auto r = c.Post("/v1/groups", Auth(token), FloodGroup(i).dump(), "application/json");
    answers.Add(r);
    if (!r || r->status != 201) break;
    ++made;
  }
  for (int i = made * 1024; i < groups * 1024; ++i) {
    auto r = c.Post("/v1/instances", Auth(token), kFloodMember.dump(), "application/json");
    answers.Add(r);
    if (!r || r->status != 201) break;
  }
  return made;
}

int64_t PendingOf(const std::string& url, const std::string& token) {
  httplib::Client c(url);
  c.set_read_timeout(60);
  int64_t n = 0;
  for (std::string page;;) {
    auto r = c.Get(
        "/v1/instances?state=pending&limit=1000" + (page.empty() ? "" : "&page_token=" + page),
        Auth(token));
    if (!r || r->status != 200) Die("cannot list A's instances: " + (r ? r->body : "no answer"));
    const json j = json::parse(r->body);
    n += static_cast<int64_t>(j["instances"].size());
    if (!j.contains("next_page_token")) return n;
    page = j["next_page_token"];
  }
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  double rate = 100, seconds = 20;
  int groups = 30;
  bool again_on = true;
  std::string max_pending, bin = TESSERA_BIN;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rate") rate = std::atof(argv[i + 1]);
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--groups") groups = std::atoi(argv[i + 1]);
    if (a == "--max-pending") max_pending = argv[i + 1];
    if (a == "--bin") bin = argv[i + 1];
    if (a == "--again") again_on = std::atoi(argv[i + 1]) != 0;
  }
  testing::TempDir dir;
  std::vector<std::string> args = {"--data", dir.File("data"), "--fleet", WriteFleet(dir)};
  if (!max_pending.empty()) {
    args.push_back("--max-pending-per-tenant");
    args.push_back(max_pending);
  }
  testing::ServerProcess server;
  server.SetBinary(bin);
  if (!server.Start(args, kAdmin)) Die("the server failed to start:\n" + server.output());
  server.DiscardOutput();
  const std::string url = server.url();
  const std::string a_token = NewTenant(url, "flooder"), b_token = NewTenant(url, "neighbour");
  DrainA100s(url);

  const int creates = static_cast<int>(rate * seconds);
  const auto [alone_p50, alone_p99] =
      testing::OpenLoopPosts(url, b_token, "/v1/instances", kShare, creates, rate, 8);

  Answers flood;
  const auto t0 = std::chrono::steady_clock::now();
  const int made = Flood(url, a_token, groups, flood);
  const double flood_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t pending = PendingOf(url, a_token);

  // A keeps asking while B is measured: a group and an instance, again and again.
  std::atomic<bool> stop{false};
  Answers during;
  std::thread again([&] {
    httplib::Client c(url);
    c.set_read_timeout(60);
    for (int i = 0; again_on && !stop; ++i) {
      auto r =
          i % 2 == 0
              ? c.Post("/v1/groups", Auth(a_token), FloodGroup(1000 + i).dump(), "application/json")
              : c.Post("/v1/instances", Auth(a_token), kFloodMember.dump(), "application/json");
      during.Add(r);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  const auto [flood_p50, flood_p99] =
      testing::OpenLoopPosts(url, b_token, "/v1/instances", kShare, creates, rate, 8);
  stop = true;
  again.join();

  fmt::print(
      "pending flood: tenant A made {} group(s) of 1,024 and {} pending instance(s) in "
      "{:.1f} s (answers: {}); tenant B creating at {:.0f}/s for {:.0f} s\n",
      made, pending, flood_s, flood.Text(), rate, seconds);
  if (!flood.refusal.empty()) fmt::print("A's refusal: {}\n", flood.refusal);
  fmt::print("A asking again during B's creates: {}\n", during.Text());
  fmt::print("B's create latency alone:             p50 {:.2f} ms, p99 {:.2f} ms\n", alone_p50,
             alone_p99);
  fmt::print(
      "B's create latency with A's flood:    p50 {:.2f} ms, p99 {:.2f} ms (budget: p99 < "
      "max(2 x alone, 20))\n",
      flood_p50, flood_p99);
  return flood_p99 < std::max(2 * alone_p99, 20.0) ? 0 : 1;
}
