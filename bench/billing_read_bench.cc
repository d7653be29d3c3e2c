// Billing reads stay off the core thread (docs/billing.md): tenant A's usage over 1,000,000
// ledger lines, asked for again and again by two clients, against tenant B's instance creations
// at a fixed rate on the same server. Prints B's create latency (p50, p99) alone and during A's
// reads, and A's read latency. The budget: B's p99 under 20 ms during A's reads.
// Usage: billing_read_bench [--lines N] [--rate R] [--seconds S].
#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "store/store.h"
#include "testing/open_loop.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using tessera::testing::Percentile;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b1";
const std::string kShare = R"({"billing":"spot","instance_type":"shared.l40s.half"})";

std::string WriteFleet(const testing::TempDir& dir) {
  return dir.Write("fleet.json", R"({"name": "bench", "shapes": [
    {"name": "l40s", "count": 1000, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"}]})");
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}

void Start(testing::ServerProcess& server, const std::string& data, const std::string& fleet) {
  server.SetBinary(TESSERA_BIN);
  if (!server.Start({"--data", data, "--fleet", fleet}, kAdmin)) {
    Die("the server failed to start:\n" + server.output());
  }
}

// Makes tenant `name`; its token and id.
std::pair<std::string, std::string> NewTenant(const std::string& url, const std::string& name) {
  httplib::Client c(url);
  const json body = {{"name", name}, {"quota", {{"gpus", 1e6}}}};
  auto r = c.Post("/v1/tenants", {{"Authorization", std::string("Bearer ") + kAdmin}}, body.dump(),
                  "application/json");
  if (!r || r->status != 201) Die("cannot create a tenant: " + (r ? r->body : "no answer"));
  const json j = json::parse(r->body);
  return {j["token"], j["id"]};
}

// `lines` ledger lines of `tenant` this month, before now, over 5,000 instances.
void SeedLedger(const std::string& data, const std::string& tenant, int64_t lines) {
  auto store = store::OpenSqliteStore(data);
  if (!store.ok()) Die(store.status().message());
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  const int64_t month = now - now % 86400 - 86400;  // Yesterday's midnight on: this period.
  const int64_t span = std::max<int64_t>(1, now - 600 - month);
  for (int64_t i = 0; i < lines;) {
    store::Batch b;
    for (int64_t k = 0; k < 50'000 && i < lines; ++k, ++i) {
      store::LedgerRecord l;
      l.tenant = tenant;
      l.instance = fmt::format("inst-9{:05}", i % 5000);
      l.instance_type = "gpu.1xh100";
      l.billing = "on_demand";
      l.start = month + i % span;
      l.end = l.start + 60;
      l.seconds = 60;
      l.rate_micros = 11'061'250;
      l.amount_micros = 184'354;
      l.gpu_milli = 1000;
      b.ledger.push_back(std::move(l));
    }
    if (Status s = (*store)->Commit(b); !s.ok()) Die(s.message());
  }
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  int64_t lines = 1'000'000;
  double rate = 100, seconds = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--lines") lines = std::atoll(argv[i + 1]);
    if (a == "--rate") rate = std::atof(argv[i + 1]);
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
  }
  testing::TempDir dir;
  const std::string data = dir.File("data"), fleet = WriteFleet(dir);
  std::string a_token, a_id, b_token;
  {
    testing::ServerProcess server;
    Start(server, data, fleet);
    std::tie(a_token, a_id) = NewTenant(server.url(), "heavy");
    b_token = NewTenant(server.url(), "light").first;
    server.Stop(SIGTERM);
  }
  SeedLedger(data, a_id, lines);
  testing::ServerProcess server;
  Start(server, data, fleet);
  const std::string url = server.url();

  // A's usage, once, to check what it reads.
  httplib::Client probe(url);
  probe.set_read_timeout(120);
  const httplib::Headers a_auth = {{"Authorization", "Bearer " + a_token}};
  auto once = probe.Get("/v1/usage?group_by=type", a_auth);
  if (!once || once->status != 200) Die("A's usage failed: " + (once ? once->body : "no answer"));

  const int creates = static_cast<int>(rate * seconds);
  const auto [alone_p50, alone_p99] =
      testing::OpenLoopPosts(url, b_token, "/v1/instances", kShare, creates, rate, 8);

  std::atomic<bool> stop{false};
  std::atomic<int> refused{0};
  std::vector<double> reads;
  std::mutex reads_mu;
  std::vector<std::thread> readers;
  for (int c = 0; c < 2; ++c) {
    readers.emplace_back([&] {
      httplib::Client client(url);
      client.set_read_timeout(120);
      while (!stop) {
        const auto t0 = Clock::now();
        auto r = client.Get("/v1/usage?group_by=instance", a_auth);
        if (!r || r->status != 200) {
          ++refused;
          continue;
        }
        std::lock_guard lock(reads_mu);
        reads.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
    });
  }
  const auto [busy_p50, busy_p99] =
      testing::OpenLoopPosts(url, b_token, "/v1/instances", kShare, creates, rate, 8);
  stop = true;
  for (auto& t : readers) t.join();

  fmt::print(
      "billing reads: tenant A's usage over {} ledger lines ({} bytes of JSON grouped by "
      "type), 2 clients asking again and again; tenant B creating at {:.0f}/s for {:.0f} s\n",
      lines, once->body.size(), rate, seconds);
  fmt::print("B's create latency alone:        p50 {:.2f} ms, p99 {:.2f} ms\n", alone_p50,
             alone_p99);
  fmt::print("B's create latency during reads: p50 {:.2f} ms, p99 {:.2f} ms (budget: p99 < 20)\n",
             busy_p50, busy_p99);
  fmt::print("A's usage reads meanwhile: {} answered (median {:.2f} s, max {:.2f} s), {} refused\n",
             reads.size(), Percentile(reads, 0.5), Percentile(reads, 1.0), refused.load());
  return busy_p99 < 20 ? 0 : 1;
}
