// What envelope encryption costs (docs/secrets.md), against the real binary on loopback with the
// SQLite store and a keyring file:
//   1. durable creations/s (closed loop, 32 clients) of an instance without env, and of one whose
//      env holds 8 literal values (each sealed under its own data key) and 2 references to the
//      tenant's secrets, in alternating rounds; the median of each and their ratio;
//   2. a key rotation over 100,000 sealed records (100 tenants x 1,000 secrets): the time from
//      POST /v1/keys/rotate to the rotation's end, with the records looked at and re-sealed.
// Usage: secrets_bench [--requests N] [--rounds K] [--records R].
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "testing/open_loop.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b9";
constexpr int kClients = 32;

std::string WriteFleet(const testing::TempDir& dir) {
  return dir.Write("fleet.json", R"({"name": "bench", "shapes": [
    {"name": "l40s", "count": 1000, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"}]})");
}

json Call(httplib::Client& c, const std::string& method, const std::string& path,
          const std::string& token, const json& body = nullptr, int* status = nullptr) {
  const httplib::Headers h = {{"Authorization", "Bearer " + token}};
  auto r = method == "GET" ? c.Get(path, h) : c.Post(path, h, body.dump(), "application/json");
  if (status) *status = r ? r->status : 0;
  return r ? json::parse(r->body, nullptr, false) : json();
}

// `requests` creates of `body` by kClients clients; creations per second.
double Throughput(const std::string& url, const std::string& token, const std::string& body,
                  int requests) {
  return testing::ClosedLoopPosts(url, token, "/v1/instances", body, requests, kClients);
}

double Median(std::vector<double> v) { return testing::Percentile(std::move(v), 0.5); }

int Main(int argc, char** argv) {
  int requests = 10'000, rounds = 3, records = 100'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--requests") requests = std::max(100, std::atoi(argv[i + 1]));
    if (flag == "--rounds") rounds = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--records") records = std::max(1000, std::atoi(argv[i + 1]));
  }
  testing::TempDir dir;
  const std::string keys = testing::WritePrivateFile(
      dir.File("keys"), "bench-1 YmVuY2hiZW5jaGJlbmNoYmVuY2hiZW5jaGJlbmNoMTI=\n");
  const std::string plain = R"({"billing":"spot","instance_type":"shared.l40s.half"})";
  json sealed = json::parse(plain);
  for (int i = 0; i < 8; ++i)
    sealed["env"][fmt::format("VALUE_{}", i)] = fmt::format("value-{}-of-some-length", i);
  sealed["env"]["HF_TOKEN"] = {{"secret", "hf"}};
  sealed["env"]["DB_PASSWORD"] = {{"secret", "db"}};
  std::vector<double> without, with;
  for (int round = 0; round < rounds; ++round) {
    for (const bool env : {false, true}) {
      testing::TempDir run;
      testing::ServerProcess server;
      server.SetBinary(TESSERA_BIN);
      if (!server.Start(
              {"--data", run.File("data"), "--fleet", WriteFleet(run), "--kek-file", keys},
              kAdmin)) {
        std::fprintf(stderr, "server: %s\n", server.output().c_str());
        return 1;
      }
      server.DiscardOutput();
      httplib::Client c(server.url());
      const std::string token =
          Call(c, "POST", "/v1/tenants", kAdmin, {{"name", "bench"}, {"quota", {{"gpus", 1e6}}}})
              .value("token", "");
      Call(c, "POST", "/v1/secrets", token, {{"name", "hf"}, {"value", "hf_0123456789"}});
      Call(c, "POST", "/v1/secrets", token, {{"name", "db"}, {"value", "correct horse"}});
      (env ? with : without)
          .push_back(Throughput(server.url(), token, env ? sealed.dump() : plain, requests));
    }
  }
  std::printf("durable creations/s, %d creates by %d clients, median of %d rounds\n", requests,
              kClients, rounds);
  std::printf("  without env:                          %8.0f\n", Median(without));
  std::printf("  8 sealed literals + 2 secret refs:    %8.0f   (%.2f of without)\n", Median(with),
              Median(with) / Median(without));

  // Rotation over `records` sealed records.
  testing::TempDir run;
  testing::ServerProcess server;
  server.SetBinary(TESSERA_BIN);
  if (!server.Start({"--data", run.File("data"), "--fleet", WriteFleet(run), "--kek-file", keys},
                    kAdmin)) {
    std::fprintf(stderr, "server: %s\n", server.output().c_str());
    return 1;
  }
  server.DiscardOutput();
  const int tenants = (records + 999) / 1000;
  std::vector<std::string> tokens;
  {
    httplib::Client c(server.url());
    for (int t = 0; t < tenants; ++t) {
      tokens.push_back(Call(c, "POST", "/v1/tenants", kAdmin,
                            {{"name", fmt::format("t{}", t)}, {"quota", {{"gpus", 1}}}})
                           .value("token", ""));
    }
  }
  std::atomic<int> next{0};
  std::vector<std::thread> fill;
  const auto fill_start = Clock::now();
  for (int c = 0; c < kClients; ++c) {
    fill.emplace_back([&] {
      httplib::Client client(server.url());
      for (int i; (i = next++) < records;) {
        int status = 0;
        Call(client, "POST", "/v1/secrets", tokens[static_cast<size_t>(i / 1000)],
             {{"name", fmt::format("s{}", i % 1000)}, {"value", fmt::format("value {}", i)}},
             &status);
        if (status != 201) std::fprintf(stderr, "secret %d: HTTP %d\n", i, status);
      }
    });
  }
  for (auto& t : fill) t.join();
  const double fill_s = std::chrono::duration<double>(Clock::now() - fill_start).count();
  // The new key first in the keyring, then the rotation.
  testing::WritePrivateFile(keys,
                            "bench-2 YmVuY2gyYmVuY2gyYmVuY2gyYmVuY2gyYmVuY2gyMTI=\n"
                            "bench-1 YmVuY2hiZW5jaGJlbmNoYmVuY2hiZW5jaGJlbmNoMTI=\n");
  httplib::Client c(server.url());
  const auto start = Clock::now();
  int status = 0;
  Call(c, "POST", "/v1/keys/rotate", kAdmin, json::object(), &status);
  if (status != 202) {
    std::fprintf(stderr, "rotate: HTTP %d\n", status);
    return 1;
  }
  json keys_now;
  for (;;) {
    keys_now = Call(c, "GET", "/v1/keys", kAdmin);
    if (keys_now["rotation"].value("state", "") != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("key rotation over %d sealed records (%d secrets made in %.1f s, %.0f/s):\n", records,
              records, fill_s, records / fill_s);
  std::printf(
      "  %.2f s from POST /v1/keys/rotate to its end (the rotation's own %.2f s); "
      "%s records looked at, %s re-sealed; state %s; records by key now %s\n",
      took, keys_now["rotation"].value("seconds", 0.0),
      keys_now["rotation"]["examined"].dump().c_str(),
      keys_now["rotation"]["resealed"].dump().c_str(),
      keys_now["rotation"].value("state", "?").c_str(), keys_now["records_by_key"].dump().c_str());
  return 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
