// The two stores side by side, through the real server: SQLite in --data, and PostgreSQL (a
// private server from src/testing/postgres.h, fsync on) reached over its UNIX socket. For each:
//   1. durable instance creations per second, and their p50 and p99 latency, from `--clients`
//      clients in a closed loop for `--seconds`;
//   2. start-up time, process start to "listening on", with `--instances` active instances in
//      the store. The store is topped up to that count straight through store::Store::Commit
//      with copies of a document the server wrote in step 1, each booked on a free half GPU of
//      the fleet, so restore books every one again; the server's restore line must say so.
// PostgreSQL missing (or failing to start) skips its row with a message.
// Usage: store_bench [--seconds S] [--clients C] [--instances N] [--stores sqlite,postgres]
//   [--bin PATH]. --bin runs another build of the server (an earlier one, to compare).
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "store/store.h"
#include "testing/postgres.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using tessera::testing::Percentile;

constexpr const char* kAdmin =
    "tsr_00000000000000000000000000000000000000000000000000000000000000b1";
const std::string kShare = R"({"billing":"spot","instance_type":"shared.l40s.half"})";
constexpr int kGpusPerNode = 8;
constexpr int kMilliPerGpu = 1000;
constexpr size_t kCommitBatch = 5000;

// Nodes of 8 shared L40S: `nodes` of them, named as fleet files name them (node-l40s-0001 ...,
// src/fleet/fleet_file.cc), which Fill relies on.
std::string WriteFleet(const testing::TempDir& dir, int nodes) {
  return dir.Write("fleet.json", fmt::format(R"({{"name": "bench", "shapes": [
    {{"name": "l40s", "count": {}, "gpu_model": "L40S-48GB", "gpus": 8, "vcpus": 256,
     "memory_gib": 2048, "gpu_mode": "shared"}}]}})",
                                             nodes));
}

std::string NodeName(int i, int nodes) {
  const int width = std::max<int>(2, static_cast<int>(fmt::format("{}", nodes).size()));
  return fmt::format("node-l40s-{:0{}}", i, width);
}

// One store under test: how the server is pointed at it and how the bench opens it.
struct Target {
  std::string name;
  std::vector<std::string> server_args;   // --data, and --store for PostgreSQL.
  std::string spec;                       // What store::OpenStore takes.
  std::string bin;                        // The tessera binary to run.
  std::unique_ptr<testing::TempDir> dir;  // The fleet file, and the data directory.
};

Target MakeTarget(std::string name, const std::string& url, std::string bin) {
  Target t;
  t.name = std::move(name);
  t.bin = std::move(bin);
  t.dir = std::make_unique<testing::TempDir>();
  const std::string data = t.dir->File("data");
  t.spec = url.empty() ? data : url;
  if (!url.empty()) t.server_args = {"--store", url};
  t.server_args.insert(t.server_args.end(), {"--data", data});
  return t;
}

struct Figures {
  double creates_per_s = 0, p50_ms = 0, p99_ms = 0;
  int64_t created = 0, failed = 0;
  double fill_s = 0, restore_s = 0;
  double loaded_s = 0;   // Start to the server's restore line: the store read once.
  double stop_s = 0;     // SIGTERM to exit, after the restore.
  std::string restored;  // The server's restore line.
  std::string error;     // What went wrong, a line each; "" when nothing did.
};

void Note(Figures& f, const std::string& what) { f.error += (f.error.empty() ? "" : "\n") + what; }

std::optional<std::string> NewTenant(const std::string& url, std::string* error) {
  httplib::Client c(url);
  const json body = {{"name", "bench"}, {"quota", {{"gpus", 1e6}}}};
  auto r = c.Post("/v1/tenants", {{"Authorization", std::string("Bearer ") + kAdmin}}, body.dump(),
                  "application/json");
  if (!r || r->status != 201) {
    *error = "cannot create a tenant: " + (r ? r->body : httplib::to_string(r.error()));
    return std::nullopt;
  }
  return json::parse(r->body)["token"].get<std::string>();
}

// `clients` clients create instances back to back for `seconds`; every answer's latency counts.
void CreateLoad(const std::string& url, const std::string& token, int clients, double seconds,
                Figures& f) {
  std::vector<std::vector<double>> latencies(static_cast<size_t>(clients));
  std::atomic<int64_t> failed{0};
  std::string first_failure;  // Written by the one client whose failure is the first.
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client(url);
      client.set_read_timeout(60);
      const httplib::Headers h = {{"Authorization", "Bearer " + token}};
      while (Clock::now() < deadline) {
        const auto t0 = Clock::now();
        auto r = client.Post("/v1/instances", h, kShare, "application/json");
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (r && r->status == 201) {
          latencies[static_cast<size_t>(c)].push_back(ms);
        } else if (failed++ == 0) {
          first_failure =
              r ? fmt::format("HTTP {}: {}", r->status, r->body) : httplib::to_string(r.error());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  f.created = static_cast<int64_t>(all.size());
  f.failed = failed;
  f.creates_per_s = static_cast<double>(all.size()) / elapsed;
  f.p50_ms = Percentile(all, 0.5);
  f.p99_ms = Percentile(all, 0.99);
  if (failed > 0)
    Note(f, fmt::format("{} create(s) failed, the first: {}", failed.load(), first_failure));
}

// What a store holds, as Fill needs it: the milli-GPU booked on each node's GPUs, the number of
// instances, the highest seq, and an instance booked on one GPU to copy.
struct Held {
  std::map<std::string, std::array<int, kGpusPerNode>> milli;
  int64_t count = 0, seq = 0;
  std::optional<store::InstanceRecord> booked;
};

Result<Held> ReadHeld(store::Store& st) {
  auto loaded = st.LoadInstances("");
  if (!loaded.ok()) return loaded.status();
  Held h;
  h.count = static_cast<int64_t>(loaded->size());
  try {
    for (const store::InstanceRecord& r : *loaded) {
      const json d = json::parse(r.doc);
      h.seq = std::max(h.seq, d.at("seq").get<int64_t>());
      if (!d.contains("assignment")) continue;  // Waiting: it holds nothing.
      const json& a = d.at("assignment");
      auto& gpus = h.milli[a.at("node").get<std::string>()];
      for (const json& g : a.at("gpus"))
        gpus.at(g.at("gpu").get<size_t>()) += g.at("milli").get<int>();
      if (!h.booked && a.at("gpus").size() == 1) h.booked = r;
    }
  } catch (const json::exception& e) {
    return Status::DataLoss(std::string("a stored instance: ") + e.what());
  }
  if (!h.booked) return Status::FailedPrecondition("the store holds no booked instance to copy");
  return h;
}

// Tops the store up to `total` instances with copies of one it holds, each on a share of a GPU
// that no stored instance holds, in batches of kCommitBatch. An error names what went wrong.
Status Fill(const std::string& spec, int64_t total, int nodes) {
  auto opened = store::OpenStore(spec);
  if (!opened.ok()) return opened.status();
  store::Store& st = **opened;
  TESSERA_ASSIGN_OR_RETURN(Held held, ReadHeld(st));
  const store::InstanceRecord& first = *held.booked;
  const json tmpl = json::parse(first.doc);
  const int milli = tmpl["assignment"]["gpus"][0]["milli"];
  store::Batch batch;
  for (int n = 1; n <= nodes && held.count < total; ++n) {
    const std::string node = NodeName(n, nodes);
    auto& gpus = held.milli[node];
    for (int g = 0; g < kGpusPerNode && held.count < total; ++g) {
      int& used = gpus.at(static_cast<size_t>(g));
      for (; used + milli <= kMilliPerGpu && held.count < total; used += milli, ++held.count) {
        json d = tmpl;
        const std::string id = fmt::format("inst-{:06}", ++held.seq);
        d["id"] = id;
        d["name"] = id;
        d["seq"] = held.seq;
        d["node"] = node;
        d["assignment"]["node"] = node;
        d["assignment"]["gpus"][0]["gpu"] = g;
        // The GPU's uuid stays the template's: restore derives it from the assignment.
        d["gpus"][0]["index"] = g;
        batch.instances.push_back({id, first.tenant, first.state, d.dump(), ""});
        if (batch.instances.size() < kCommitBatch) continue;
        TESSERA_RETURN_IF_ERROR(st.Commit(batch));
        batch = store::Batch();
      }
    }
  }
  if (!batch.empty()) TESSERA_RETURN_IF_ERROR(st.Commit(batch));
  if (held.count < total) {
    return Status::FailedPrecondition(
        fmt::format("the fleet has room for {} instances, not {}", held.count, total));
  }
  return Status::Ok();
}

// Runs the server on `t` until it is listening; false, with its output noted in `f`, when not.
bool StartServer(testing::ServerProcess& server, const Target& t, const std::string& fleet,
                 Figures& f) {
  server.SetBinary(t.bin);
  std::vector<std::string> args = t.server_args;
  args.insert(args.end(), {"--fleet", fleet});
  if (server.Start(args, kAdmin)) return true;
  Note(f, "the server did not start (it has 20 s):\n" + server.output());
  return false;
}

Figures Run(const Target& t, int clients, double seconds, int64_t instances, int nodes) {
  Figures f;
  const std::string fleet = WriteFleet(*t.dir, nodes);
  {
    testing::ServerProcess server;
    if (!StartServer(server, t, fleet, f)) return f;
    server.DiscardOutput();
    const auto token = NewTenant(server.url(), &f.error);
    if (!token) return f;
    CreateLoad(server.url(), *token, clients, seconds, f);
    server.Stop(SIGTERM);
  }
  const auto fill_start = Clock::now();
  if (Status s = Fill(t.spec, instances, nodes); !s.ok()) {
    Note(f, "cannot fill the store: " + s.message());
    return f;
  }
  f.fill_s = std::chrono::duration<double>(Clock::now() - fill_start).count();
  testing::ServerProcess server;
  const auto start = Clock::now();
  const auto wall_start = std::chrono::system_clock::now();
  if (!StartServer(server, t, fleet, f)) return f;
  f.restore_s = std::chrono::duration<double>(Clock::now() - start).count();
  // "<time> info restored 1 tenant(s) and N instance(s): B holding capacity, Q queued, F failed"
  std::smatch m;
  const std::string out = server.output();
  const std::regex line(R"((\S+) info (restored \d+ tenant\(s\) and (\d+) instance\(s\): )"
                        R"((\d+) holding capacity, (\d+) queued, (\d+) failed))");
  const int64_t want = std::max(instances, f.created);
  if (std::regex_search(out, m, line)) {
    f.restored = m[2];
    if (auto at = ParseRfc3339(m[1].str()); at.ok()) {
      f.loaded_s = std::chrono::duration<double>(*at - wall_start).count();
    }
    if (std::stoll(m[3]) != want || std::stoll(m[4]) + std::stoll(m[5]) != want ||
        std::stoll(m[6]) != 0) {
      Note(f, fmt::format("restore did not bring back all {} instances: {}", want, f.restored));
    }
  } else {
    Note(f, "the server printed no restore line:\n" + out);
  }
  const auto stop = Clock::now();
  server.Stop(SIGTERM);
  f.stop_s = std::chrono::duration<double>(Clock::now() - stop).count();
  return f;
}

void PrintTable(const std::vector<std::pair<std::string, Figures>>& rows, int64_t instances,
                int clients, double seconds) {
  fmt::print("\n{:<10}{:>12}{:>10}{:>10}{:>22}\n", "store", "creates/s", "p50 ms", "p99 ms",
             fmt::format("restore s, {}k inst", instances / 1000));
  const std::string rule(64, '-');
  fmt::print("{}\n", rule);
  for (const auto& [name, f] : rows) {
    fmt::print("{:<10}{:>12.0f}{:>10.2f}{:>10.2f}{:>22.2f}\n", name, f.creates_per_s, f.p50_ms,
               f.p99_ms, f.restore_s);
  }
  fmt::print(
      "{}\ncreates: durable POST /v1/instances from {} clients back to back for {:.0f} s; "
      "restore: process start to \"listening on\"\n",
      rule, clients, seconds);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  double seconds = 10;
  int clients = 8;
  int64_t instances = 100'000;
  std::string stores = "sqlite,postgres", bin = TESSERA_BIN;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    if (a == "--clients") clients = std::atoi(argv[i + 1]);
    if (a == "--instances") instances = std::atoll(argv[i + 1]);
    if (a == "--stores") stores = argv[i + 1];
    if (a == "--bin") bin = argv[i + 1];
  }
  // A quarter more half GPUs than instances, so step 1's creations never run out of room.
  const int nodes = static_cast<int>(instances * 5 / 4 / (2 * kGpusPerNode)) + 1;
  std::vector<Target> targets;
  std::vector<std::string> skipped;
  if (stores.find("sqlite") != std::string::npos) targets.push_back(MakeTarget("sqlite", "", bin));
  std::unique_ptr<testing::PostgresServer> pg;
  if (stores.find("postgres") != std::string::npos) {
    std::string error;
    if (!testing::PostgresBinDir()) {
      skipped.push_back(
          "postgres: skipped, PostgreSQL is not installed (scripts/bootstrap.sh installs Debian's "
          "postgresql package, or set TESSERA_PG_BINDIR)");
    } else if (!(pg = testing::PostgresServer::Start(&error, /*durable=*/true))) {
      skipped.push_back("postgres: skipped, PostgreSQL did not start: " + error);
    } else {
      targets.push_back(MakeTarget("postgres", pg->SocketUrl(pg->CreateDatabase()), bin));
    }
  }
  fmt::print(
      "store_bench: {} clients creating for {:.0f} s, then restore with {} instances on {} nodes "
      "of 8 shared L40S\n",
      clients, seconds, instances, nodes);
  std::vector<std::pair<std::string, Figures>> rows;
  for (const Target& t : targets) {
    rows.emplace_back(t.name, Run(t, clients, seconds, instances, nodes));
    const Figures& f = rows.back().second;
    fmt::print(
        "{}: {} created; filled in {:.1f} s; {}; restore line after {:.2f} s, listening after "
        "{:.2f} s; SIGTERM to exit {:.2f} s\n",
        t.name, f.created, f.fill_s, f.restored.empty() ? "no restore line" : f.restored,
        f.loaded_s, f.restore_s, f.stop_s);
    std::fflush(stdout);
  }
  PrintTable(rows, instances, clients, seconds);
  int rc = 0;
  for (const auto& [name, f] : rows) {
    if (f.error.empty()) continue;
    fmt::print(stderr, "{}: {}\n", name, f.error);
    rc = 1;
  }
  for (const std::string& s : skipped) fmt::print("{}\n", s);
  if (pg) fmt::print("postgres: {} (UNIX socket), fsync on\n", targets.back().spec);
  return rc;
}
