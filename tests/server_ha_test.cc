// Three `tessera server` replicas on one PostgreSQL database (docs/ha.md) under the failures of
// issue 27 §3, on a real PostgreSQL (testing/postgres.h; skipped when it is not installed):
//
// - kill -9 of the leader during a burst of creates and deletes from several clients, three
//   times in a row, with real `tessera agent --backend sim` processes listing every replica:
//   every acknowledged create is listed exactly once by the new leader and by the followers, no
//   GPU is held twice, nothing that ran is stopped or restarted, the agents report to the new
//   leader, and each ended stretch of use is billed by one ledger line;
// - a leader frozen (SIGSTOP) past its lease wakes up as a follower and writes nothing;
// - the database stopped for 10 s: writes fail with 5xx, no server exits, and service resumes.
//
// The replicas are started, and the clients follow the leader as the CLI and the agent do, by
// testing/replicas.h. The failover times (kill -9 -> the first create a new leader acknowledged)
// are printed, to be quoted; bench/failover_bench measures them over 20 kills.
#include <fmt/format.h>
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server_test_util.h"
#include "testing/postgres.h"
#include "testing/replicas.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using testing::Answer;
using testing::ClusterClient;

constexpr int kReplicas = 3;
// The lease: a dead leader is replaced about this long after its last renewal.
constexpr const char* kLease = "2s";
constexpr double kLeaseS = 2.0;
// The bound issue 27 states: kill -9 of the leader -> the first create a new leader acknowledges.
constexpr double kFailoverBoundS = 8.0;
// The database outage, and the bound on service resuming after it.
constexpr auto kOutage = 10s;
constexpr double kResumeBoundS = 10.0;

// Whether an instance in `state` holds its GPUs (docs/api.md: capacity is freed once the process
// is gone).
bool Holds(const std::string& state) {
  return state == "scheduled" || state == "pulling" || state == "running" || state == "stopping" ||
         state == "preempting";
}

// `j[key]` when it is a string, else "".
std::string Str(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

// Unix seconds of an RFC 3339 UTC time as the server writes it (2026-12-03T18:03:09.354Z).
double ParseTime(const std::string& text) {
  std::tm tm{};
  double seconds = 0;
  if (std::sscanf(text.c_str(), "%d-%d-%dT%d:%d:%lfZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &seconds) != 6) {
    return -1;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<double>(timegm(&tm)) + seconds;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double SecondsSince(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// A one-GPU H100 instance; with `command` it runs a real process on its node.
json H100(const std::string& name, const std::string& command = "") {
  json body = {{"billing", "on_demand"},
               {"gpu_model", "H100-80GB"},
               {"gpus", 1},
               {"vcpus", 2},
               {"memory_mib", 4096},
               {"name", name}};
  if (!command.empty()) body["command"] = command;
  return body;
}

// What the burst's clients were told.
struct Acks {
  std::map<std::string, std::string> created;  // Each create answered 201: id -> name.
  std::set<std::string> deleted;               // Each delete answered 200.
  std::set<std::string> delete_asked;          // Each delete sent, answered or not.
  std::vector<std::pair<SteadyClock::time_point, std::string>> created_at;  // When, and by whom.
  std::map<std::string, int> create_outcomes;  // How creates ended (Answer::Outcome).
  std::vector<std::string> anomalies;          // What no failover may cause.
};

// Clients that create and delete instances through every replica, each keeping a few of its
// own, and record what was acknowledged. Pause() holds them between requests.
class Burst {
 public:
  Burst(const std::vector<std::string>& urls, const std::string& token, int clients) {
    for (int k = 0; k < clients; ++k) {
      threads_.emplace_back([this, urls, token, k] { Run(ClusterClient(urls), token, k); });
    }
  }
  ~Burst() { Stop(); }
  Burst(const Burst&) = delete;
  Burst& operator=(const Burst&) = delete;

  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  // Holds the clients and waits until none has a request in flight.
  void Pause() {
    std::unique_lock lock(mu_);
    paused_ = true;
    cv_.wait(lock, [&] { return busy_ == 0; });
  }
  void Resume() {
    {
      std::lock_guard lock(mu_);
      paused_ = false;
    }
    cv_.notify_all();
  }
  Acks acks() const {
    std::lock_guard lock(mu_);
    return acks_;
  }
  // When a replica other than `not_url` first acknowledged a create after `t`.
  std::optional<SteadyClock::time_point> FirstCreateAfter(SteadyClock::time_point t,
                                                          const std::string& not_url) const {
    std::lock_guard lock(mu_);
    for (const auto& [at, url] : acks_.created_at) {
      if (at > t && url != not_url) return at;
    }
    return std::nullopt;
  }

 private:
  void Run(ClusterClient client, const std::string& token, int k) {
    std::deque<std::string> live;
    for (int n = 0;; ++n) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !paused_; });
        if (stop_) return;
        ++busy_;
      }
      Step(client, token, fmt::format("burst-{}-{}", k, n), live);
      {
        std::lock_guard lock(mu_);
        --busy_;
      }
      cv_.notify_all();
      std::this_thread::sleep_for(40ms);
    }
  }

  // One create, and the delete of the client's oldest instance once it has more than three.
  void Step(ClusterClient& client, const std::string& token, const std::string& name,
            std::deque<std::string>& live) {
    const json body = H100(name);
    const Answer c = client.Send("POST", "/v1/instances", token, &body);
    const SteadyClock::time_point at = SteadyClock::now();
    {
      std::lock_guard lock(mu_);
      ++acks_.create_outcomes[c.Outcome()];
      if (c.status == 201) {
        const std::string id = Str(c.body, "id");
        if (!acks_.created.emplace(id, name).second) {
          acks_.anomalies.push_back(
              fmt::format("{} acknowledged twice: {} and {}", id, acks_.created[id], name));
        }
        acks_.created_at.emplace_back(at, c.url);
        live.push_back(id);
      } else if (c.status >= 400 && c.status < 500) {
        acks_.anomalies.push_back("create " + name + ": " + c.Describe());
      }
    }
    if (live.size() <= 3) return;
    const std::string id = live.front();
    {
      std::lock_guard lock(mu_);
      acks_.delete_asked.insert(id);
    }
    const Answer d = client.Send("DELETE", "/v1/instances/" + id, token);
    std::lock_guard lock(mu_);
    if (d.status == 200) {
      acks_.deleted.insert(id);
      live.pop_front();
    } else if (d.status >= 400 && d.status < 500) {
      acks_.anomalies.push_back("delete " + id + " (acknowledged): " + d.Describe());
      live.pop_front();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool paused_ = false;
  int busy_ = 0;
  Acks acks_;
  std::vector<std::thread> threads_;
};

// Three replicas on a fresh database (testing/replicas.h), replica 0 leading at first, their
// logs and data in the test's directory.
class HaTest : public ::testing::Test {
 protected:
  void TearDown() override { replicas_.reset(); }

  // Starts the replicas with the test's lease and `extra` flags.
  void StartCluster(testing::PostgresServer& pg, const std::vector<std::string>& extra) {
    pg_ = &pg;
    db_ = pg.CreateDatabase();
    std::vector<std::string> flags = {"--lease", kLease};
    flags.insert(flags.end(), extra.begin(), extra.end());
    replicas_ =
        std::make_unique<testing::ReplicaSet>(kReplicas, db_, flags, kAdminToken, dir_.path());
    std::string error;
    ASSERT_TRUE(replicas_->Start(&error)) << error;
  }

  // Starts replica `i` again (as a follower, when another leads).
  void StartReplica(int i) {
    std::string error;
    ASSERT_TRUE(replicas_->StartReplica(i, &error)) << error;
  }

  // A request to replica `i` alone, no redirect followed, by default as the admin.
  Answer Direct(int i, const std::string& method, const std::string& path,
                const std::string& token = kAdminToken, const json* body = nullptr,
                int timeout_s = 3) const {
    return replicas_->Direct(i, method, path, token, body, timeout_s);
  }

  // Creates a tenant through the cluster; returns its token.
  std::string NewTenant() {
    ClusterClient client(replicas_->Urls());
    const json body = {{"name", "acme"}, {"quota", {{"gpus", 1000}}}};
    const Answer a = client.Send("POST", "/v1/tenants", kAdminToken, &body);
    EXPECT_EQ(a.status, 201) << a.Describe();
    return Str(a.body, "token");
  }

  // Every instance replica `i` lists (the admin sees all); nullopt when a page fails.
  std::optional<std::vector<json>> ListAll(int i) const {
    std::vector<json> out;
    std::string page;
    for (;;) {
      const Answer a = Direct(i, "GET", "/v1/instances?limit=1000" + page);
      if (a.status != 200) return std::nullopt;
      for (const json& inst : a.body["instances"]) out.push_back(inst);
      const std::string next = Str(a.body, "next_page_token");
      if (next.empty()) return out;
      page = "&page_token=" + next;
    }
  }

  // Runs `sql` on the cluster's database; what psql printed.
  std::string Sql(const std::string& sql) const {
    const auto out = pg_->Psql(db_.substr(db_.rfind('/') + 1), sql);
    EXPECT_TRUE(out.has_value()) << sql;
    return out.value_or("?");
  }

  testing::TempDir dir_;  // Outlives the replicas that log into it.
  testing::PostgresServer* pg_ = nullptr;
  std::string db_;
  std::unique_ptr<testing::ReplicaSet> replicas_;
};

// An instance that runs a real process the whole test, untouched by the burst.
struct Steady {
  std::string id, node, started_at, pid;
};

// The cluster with three nodes of four H100s, each served by a real agent that lists every
// replica, and instances that run real processes on them.
class HaAgentTest : public HaTest {
 protected:
  void TearDown() override {
    agents_.clear();
    // The shims outlive their agent: their workloads go with the test.
    for (const Steady& s : steady_) {
      if (!s.pid.empty()) kill(-std::stoi(s.pid), SIGKILL);
    }
    HaTest::TearDown();
  }

  void Join(const std::string& name) {
    ClusterClient client(replicas_->Urls());
    const json body = {{"name", name}, {"sharing", "exclusive"}};
    const Answer a = client.Send("POST", "/v1/nodes", kAdminToken, &body);
    ASSERT_EQ(a.status, 201) << a.Describe();
    const std::string urls = fmt::format("{}", fmt::join(replicas_->Urls(), ","));
    agents_[name] = std::make_unique<AgentProcess>(urls, Str(a.body, "token"), WorkDir(name),
                                                   dir_.File(name + ".log"), "H100-80GB:4");
  }

  std::string WorkDir(const std::string& node) const { return dir_.File("work-" + node); }

  // What replica `i` shows of instance `id`.
  json Instance(int i, const std::string& id, const std::string& token) const {
    return Direct(i, "GET", "/v1/instances/" + id, token).body;
  }

  // Starts an instance whose process writes its pid to `starts` in its directory (a second
  // start would add a line) and sleeps; returns it once it runs.
  Steady StartSteady(const std::string& token, const std::string& name) {
    ClusterClient client(replicas_->Urls());
    const json body = H100(name, "echo $$ >> starts; exec sleep 600");
    const Answer a = client.Send("POST", "/v1/instances", token, &body);
    EXPECT_EQ(a.status, 201) << a.Describe();
    Steady s{Str(a.body, "id"), "", "", ""};
    json inst;
    EXPECT_TRUE(WaitFor(
        [&] {
          inst = Instance(replicas_->WaitForLeader(5s), s.id, token);
          return Str(inst, "state") == "running";
        },
        10s))
        << inst.dump();
    s.node = Str(inst, "node");
    s.started_at = Str(inst, "started_at");
    const std::string starts = WorkDir(s.node) + "/" + s.id + "-a0/starts";
    EXPECT_TRUE(WaitFor([&] { return !ReadFile(starts).empty(); }, 5s)) << starts;
    s.pid = ReadFile(starts);
    if (!s.pid.empty() && s.pid.back() == '\n') s.pid.pop_back();
    return s;
  }

  // Waits until no instance on `leader` is about to change (scheduled or stopping).
  void Settle(int leader) const {
    WaitFor(
        [&] {
          const auto all = ListAll(leader);
          return all && std::none_of(all->begin(), all->end(), [](const json& i) {
                   return Str(i, "state") == "scheduled" || Str(i, "state") == "stopping";
                 });
        },
        10s, 100ms);
  }

  // Adds the nodes, each with its agent, and waits until they are ready.
  void JoinNodes(const std::vector<std::string>& names) {
    for (const std::string& name : names) ASSERT_NO_FATAL_FAILURE(Join(name));
    json nodes;
    ASSERT_TRUE(WaitFor(
        [&] {
          nodes = Direct(0, "GET", "/v1/nodes").body;
          return nodes.contains("nodes") && nodes["nodes"].size() == names.size() &&
                 std::all_of(nodes["nodes"].begin(), nodes["nodes"].end(),
                             [](const json& n) { return Str(n, "state") == "ready"; });
        },
        10s))
        << nodes.dump();
  }

  struct Kill9 {
    int replica = -1;        // The leader killed; -1 when none led.
    double wall = 0;         // When, in Unix seconds.
    double failover_s = -1;  // Until a new leader acknowledged a create; -1 past the bound.
  };

  // Kills the leader with SIGKILL while the burst runs, and measures the failover.
  Kill9 KillLeader(const Burst& burst) {
    Kill9 k;
    k.replica = replicas_->WaitForLeader(5s);
    if (k.replica < 0) return k;
    k.wall = WallSeconds();
    const SteadyClock::time_point killed = SteadyClock::now();
    replicas_->Kill(k.replica, SIGKILL);
    std::optional<SteadyClock::time_point> first;
    WaitFor(
        [&] {
          return (first = burst.FirstCreateAfter(killed, replicas_->Urls()[k.replica])).has_value();
        },
        std::chrono::milliseconds(static_cast<int>(kFailoverBoundS * 1000)), 20ms);
    if (first) k.failover_s = std::chrono::duration<double>(*first - killed).count();
    return k;
  }

  // With the burst paused after `kill`: the new leader and its followers hold what the clients
  // were told, no GPU is held twice, what ran runs on, and the agents report to the new leader.
  void ExpectFailoverLostNothing(const Burst& burst, const std::string& token, const Kill9& kill) {
    const int leader = replicas_->WaitForLeader(5s);
    ASSERT_GE(leader, 0) << replicas_->Logs();
    Settle(leader);
    ASSERT_NO_FATAL_FAILURE(ExpectAcknowledgedListedOnce(leader, burst.acks()));
    ASSERT_NO_FATAL_FAILURE(ExpectNoGpuGrantedTwice(leader));
    ExpectFollowersAgree(leader);
    ExpectRunningUndisturbed(leader, token);
    ExpectAgentsReportTo(leader, kill.wall);
    ASSERT_FALSE(HasFailure()) << replicas_->Logs();
  }

  void ExpectAcknowledgedListedOnce(int leader, const Acks& acks) const;
  void ExpectNoGpuGrantedTwice(int leader) const;
  void ExpectFollowersAgree(int leader) const;
  void ExpectRunningUndisturbed(int leader, const std::string& token) const;
  void ExpectAgentsReportTo(int leader, double since_wall) const;
  void ExpectEachStretchBilledOnce(int leader) const;

  std::map<std::string, std::unique_ptr<AgentProcess>> agents_;
  std::vector<Steady> steady_;
};

// Every create acknowledged is listed once, under the name it was created with; every delete
// acknowledged stays done; nothing failed, restarted or ended that no client asked to end.
void HaAgentTest::ExpectAcknowledgedListedOnce(int leader, const Acks& acks) const {
  const auto all = ListAll(leader);
  ASSERT_TRUE(all) << replicas_->Logs();
  std::map<std::string, json> by_id;
  for (const json& inst : *all) {
    EXPECT_TRUE(by_id.emplace(Str(inst, "id"), inst).second)
        << Str(inst, "id") << " is listed twice";
  }
  for (const auto& [id, name] : acks.created) {
    auto it = by_id.find(id);
    ASSERT_NE(it, by_id.end()) << "acknowledged create " << id << " (" << name << ") is lost\n"
                               << replicas_->Logs();
    EXPECT_EQ(Str(it->second, "name"), name) << id;
  }
  for (const std::string& id : acks.deleted) {
    const std::string state = by_id.count(id) ? Str(by_id[id], "state") : "missing";
    EXPECT_TRUE(state == "stopping" || state == "terminated") << id << " was deleted: " << state;
  }
  for (const auto& [id, inst] : by_id) {
    const std::string state = Str(inst, "state");
    EXPECT_EQ(inst.value("restarts", -1), 0) << inst.dump();
    EXPECT_TRUE(state != "failed" && state != "preempted") << inst.dump();
    if (state == "stopping" || state == "terminated") {
      EXPECT_EQ(acks.delete_asked.count(id), 1u) << "no client ended " << inst.dump();
    }
  }
  EXPECT_TRUE(acks.anomalies.empty()) << fmt::format("{}", fmt::join(acks.anomalies, "\n"));
}

// No node+GPU index is held by two live instances, and each GPU's free capacity is what its
// holders leave (the GPUs are exclusive: one holder at most).
void HaAgentTest::ExpectNoGpuGrantedTwice(int leader) const {
  using Gpu = std::pair<std::string, int>;
  auto holders = [](const std::vector<json>& all) {
    std::map<Gpu, std::vector<std::string>> held;
    for (const json& inst : all) {
      if (!Holds(Str(inst, "state"))) continue;
      for (const json& g : inst["gpus"]) {
        held[{Str(inst, "node"), g.value("index", -1)}].push_back(Str(inst, "id"));
      }
    }
    return held;
  };
  // The nodes and the instances are two reads: taken again until the holders did not change.
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto before = ListAll(leader);
    const Answer nodes = Direct(leader, "GET", "/v1/nodes");
    const auto after = ListAll(leader);
    ASSERT_TRUE(before && after && nodes.status == 200) << nodes.Describe();
    const auto held = holders(*after);
    if (held != holders(*before)) continue;
    size_t gpus = 0;
    for (const json& node : nodes.body["nodes"]) {
      for (const json& g : node["gpus"]) {
        ++gpus;
        const Gpu key{Str(node, "id"), g.value("index", -1)};
        const size_t n = held.count(key) ? held.at(key).size() : 0;
        EXPECT_LE(n, 1u) << key.first << " GPU " << key.second << " is granted to "
                         << fmt::format("{}", fmt::join(held.at(key), ", "));
        EXPECT_EQ(g.value("free_milli", -1), n == 0 ? 1000 : 0)
            << key.first << " GPU " << key.second << " with " << n << " holders: " << g.dump();
      }
    }
    EXPECT_EQ(gpus, 12u) << nodes.body.dump();
    return;
  }
  ADD_FAILURE() << "the instances kept changing while the burst was paused";
}

// Each follower lists what the leader lists, once it has caught up.
void HaAgentTest::ExpectFollowersAgree(int leader) const {
  auto view = [&](int i) {
    std::map<std::string, std::string> out;
    if (auto all = ListAll(i)) {
      for (const json& inst : *all) out[Str(inst, "id")] = Str(inst, "state");
    }
    return out;
  };
  const auto want = view(leader);
  for (int i = 0; i < kReplicas; ++i) {
    if (i == leader || !replicas_->Running(i)) continue;
    std::map<std::string, std::string> seen;
    EXPECT_TRUE(WaitFor(
        [&] {
          seen = view(i);
          return seen == want;
        },
        5s, 100ms))
        << "replica " << i << " lists " << seen.size() << " instances, the leader " << want.size();
  }
}

// The instances that ran from the start run on: the same process, never started again.
void HaAgentTest::ExpectRunningUndisturbed(int leader, const std::string& token) const {
  for (const Steady& s : steady_) {
    const json inst = Instance(leader, s.id, token);
    EXPECT_EQ(Str(inst, "state"), "running") << inst.dump();
    EXPECT_EQ(inst.value("restarts", -1), 0) << inst.dump();
    EXPECT_EQ(Str(inst, "started_at"), s.started_at) << inst.dump();
    EXPECT_EQ(Str(inst, "node"), s.node);
    const std::string starts = ReadFile(WorkDir(s.node) + "/" + s.id + "-a0/starts");
    EXPECT_EQ(starts, s.pid + "\n") << s.id << "'s workload was started again";
    EXPECT_EQ(kill(std::stoi(s.pid), 0), 0) << s.id << "'s process " << s.pid << " is gone";
  }
}

// Every node is ready on the leader, its agent having reported to it since `since_wall`.
void HaAgentTest::ExpectAgentsReportTo(int leader, double since_wall) const {
  json nodes;
  const bool reported = WaitFor(
      [&] {
        nodes = Direct(leader, "GET", "/v1/nodes").body;
        if (!nodes.contains("nodes") || nodes["nodes"].size() != agents_.size()) return false;
        for (const json& n : nodes["nodes"]) {
          const json agent = n.value("agent", json::object());
          if (Str(n, "state") != "ready" || Str(agent, "state") != "ready") return false;
          if (ParseTime(Str(agent, "last_report_at")) < since_wall) return false;
        }
        return true;
      },
      6s, 100ms);
  EXPECT_TRUE(reported) << "the agents do not report to the new leader: " << nodes.dump();
}

// Each stretch of use is one ledger line, never two: no two lines of an instance overlap, and an
// ended instance that ran is billed (docs/billing.md: at least a minute a start, else its
// seconds), not twice that.
void HaAgentTest::ExpectEachStretchBilledOnce(int leader) const {
  EXPECT_EQ(Sql("SELECT a.instance, a.start, a.\"end\", b.start, b.\"end\" FROM ledger a JOIN "
                "ledger b ON a.instance = b.instance AND a.ctid < b.ctid AND (a.start = b.start "
                "OR (a.start < b.\"end\" AND b.start < a.\"end\")) WHERE a.instance <> ''"),
            "")
      << "lines that bill the same stretch twice";
  std::map<std::string, std::pair<int, int64_t>> lines;  // Instance -> lines, seconds.
  std::istringstream rows(
      Sql("SELECT instance, count(*), sum(seconds) FROM ledger WHERE instance <> '' GROUP BY "
          "instance"));
  for (std::string row; std::getline(rows, row);) {
    std::string id, count, seconds;
    std::istringstream fields(row);
    std::getline(fields, id, '|');
    std::getline(fields, count, '|');
    std::getline(fields, seconds, '|');
    lines[id] = {std::stoi(count), std::stoll(seconds)};
  }
  const auto all = ListAll(leader);
  ASSERT_TRUE(all);
  int billed = 0;
  for (const json& inst : *all) {
    if (Str(inst, "state") != "terminated" || Str(inst, "started_at").empty()) continue;
    const std::string id = Str(inst, "id");
    // The run ended where the history leaves `running`.
    double ran_until = -1;
    for (const json& h : inst["history"]) {
      if (Str(h, "state") == "stopping" || Str(h, "state") == "terminated") {
        ran_until = ParseTime(Str(h, "at"));
        break;
      }
    }
    const double ran = ran_until - ParseTime(Str(inst, "started_at"));
    ASSERT_TRUE(lines.count(id)) << id << " ran and ended but has no ledger line: " << inst.dump();
    // A stretch across a UTC midnight is cut there: two lines.
    const bool midnight = static_cast<int64_t>(ParseTime(Str(inst, "started_at"))) / 86400 !=
                          static_cast<int64_t>(ran_until) / 86400;
    EXPECT_EQ(lines[id].first, midnight ? 2 : 1) << id << ": " << inst.dump();
    EXPECT_LE(static_cast<double>(lines[id].second), std::max(60.0, ran + 2)) << inst.dump();
    ++billed;
  }
  EXPECT_GE(billed, 10) << "too few ended instances ran for the ledger check to mean anything";
  std::cout << fmt::format("[ HA ] ledger: {} ended instances that ran, checked\n", billed);
}

TEST_F(HaAgentTest, KillNineOfTheLeaderLosesNoAcknowledgedWriteGrantsNoGpuTwiceAndBillsOnce) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  ASSERT_NO_FATAL_FAILURE(StartCluster(pg, {}));
  ASSERT_NO_FATAL_FAILURE(JoinNodes({"node-a", "node-b", "node-c"}));
  const std::string token = NewTenant();
  for (int i = 0; i < 3; ++i) steady_.push_back(StartSteady(token, fmt::format("steady-{}", i)));
  ASSERT_FALSE(HasFailure()) << replicas_->Logs();
  Burst burst(replicas_->Urls(), token, 3);
  std::vector<double> failovers;
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(1500ms);  // The burst runs against a settled cluster.
    const Kill9 kill = KillLeader(burst);
    ASSERT_GE(kill.replica, 0) << replicas_->Logs();
    ASSERT_GE(kill.failover_s, 0) << "no create acknowledged within " << kFailoverBoundS
                                  << " s of kill -9 of replica " << kill.replica << "\n"
                                  << replicas_->Logs();
    failovers.push_back(kill.failover_s);
    std::cout << fmt::format(
        "[ HA ] round {}: kill -9 of replica {} -> first 201 from the new leader: {:.2f} s\n",
        round, kill.replica, kill.failover_s);
    std::this_thread::sleep_for(500ms);
    burst.Pause();
    ASSERT_NO_FATAL_FAILURE(ExpectFailoverLostNothing(burst, token, kill));
    ASSERT_NO_FATAL_FAILURE(StartReplica(kill.replica));  // Back, as a follower.
    burst.Resume();
  }
  burst.Stop();
  const int leader = replicas_->WaitForLeader(5s);
  ASSERT_GE(leader, 0) << replicas_->Logs();
  Settle(leader);
  const Acks acks = burst.acks();
  ExpectAcknowledgedListedOnce(leader, acks);
  ExpectEachStretchBilledOnce(leader);
  std::string outcomes;
  for (const auto& [outcome, count] : acks.create_outcomes) {
    outcomes += fmt::format(" {} {},", count, outcome);
  }
  std::cout << fmt::format(
      "[ HA ] {} creates acknowledged, {} deletes; creates ended:{} failover median {:.2f} s, "
      "worst {:.2f} s over {} kills (lease {})\n",
      acks.created.size(), acks.deleted.size(), outcomes, testing::Percentile(failovers, 0.5),
      testing::Percentile(failovers, 1), failovers.size(), kLease);
  EXPECT_LT(testing::Percentile(failovers, 1), kFailoverBoundS);
  EXPECT_GE(acks.deleted.size(), 20u) << "the burst deleted too little to test anything";
}

// `tessera instances exec` given a follower first: sent on to the leader, whose broker joins it
// with the agent (which follows the leader the same way), into the instance's workload.
TEST_F(HaAgentTest, AnExecSentToAFollowerRunsThroughTheLeaderInTheWorkload) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  ASSERT_NO_FATAL_FAILURE(StartCluster(pg, {}));
  ASSERT_NO_FATAL_FAILURE(JoinNodes({"node-a"}));
  const std::string token = NewTenant();
  steady_.push_back(StartSteady(token, "steady"));
  ASSERT_FALSE(HasFailure()) << replicas_->Logs();
  const int leader = replicas_->WaitForLeader(5s);
  ASSERT_GE(leader, 0) << replicas_->Logs();
  std::vector<std::string> urls;
  for (int i = 1; i <= kReplicas; ++i) urls.push_back(replicas_->Urls()[(leader + i) % kReplicas]);
  const testing::CommandResult r = testing::RunTessera(
      {"instances", "exec", steady_[0].id, "--url", fmt::format("{}", fmt::join(urls, ",")),
       "--token", token, "--", "sh", "-c", "cat starts; exit 6"});
  EXPECT_EQ(r.exit_code, 6) << r.err << replicas_->Logs();
  EXPECT_EQ(r.out, steady_[0].pid + "\n");
}

TEST_F(HaTest, ALeaderFrozenPastItsLeaseWakesUpAsAFollowerAndWritesNothing) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  ASSERT_NO_FATAL_FAILURE(StartCluster(pg, {"--fleet", dir_.Write("fleet.json", kSmallFleet)}));
  const std::string token = NewTenant();
  const int64_t epoch_before = std::stoll(Sql("SELECT epoch FROM tessera_lease"));
  ASSERT_EQ(kill(replicas_->Pid(0), SIGSTOP), 0);
  const SteadyClock::time_point frozen = SteadyClock::now();

  // A follower takes the lease once it lapses, and acknowledges a create.
  ClusterClient others({replicas_->url(1), replicas_->url(2)});
  const json after = H100("after-the-freeze");
  Answer created;
  WaitFor(
      [&] {
        created = others.Send("POST", "/v1/instances", token, &after);
        return created.status == 201;
      },
      10s, 100ms);
  ASSERT_EQ(created.status, 201) << created.Describe() << "\n" << replicas_->Logs();
  std::cout << fmt::format("[ HA ] leader frozen -> first 201 from a follower: {:.2f} s\n",
                           SecondsSince(frozen));
  const std::string new_leader = created.url;
  const std::string lease_after = Sql("SELECT epoch, holder, url FROM tessera_lease");
  EXPECT_GT(std::stoll(lease_after), epoch_before) << lease_after;
  EXPECT_NE(lease_after.find(new_leader), std::string::npos) << lease_after;
  const auto thawed = frozen + std::chrono::milliseconds(static_cast<int>(2 * kLeaseS * 1000));
  std::this_thread::sleep_until(thawed);

  // Woken up, before its own loop has looked at the lease: a create sent to it is not applied.
  ASSERT_EQ(kill(replicas_->Pid(0), SIGCONT), 0);
  const json stale = H100("from-the-old-leader");
  const Answer refused = Direct(0, "POST", "/v1/instances", token, &stale, 5);
  EXPECT_TRUE(refused.status == 307 || refused.status == 503)
      << refused.Describe() << replicas_->Logs();
  std::cout << fmt::format("[ HA ] a create sent to the old leader as it wakes: {}\n",
                           refused.Describe());
  json ready;
  EXPECT_TRUE(WaitFor(
      [&] {
        ready = replicas_->ReadyZ(0);
        return Str(ready, "role") == "follower" && Str(ready, "leader") == new_leader;
      },
      5s, 50ms))
      << ready.dump() << "\n"
      << replicas_->Logs();
  EXPECT_EQ(Sql("SELECT epoch, holder, url FROM tessera_lease"), lease_after)
      << "the lease stays the new leader's";
  EXPECT_EQ(Sql("SELECT count(*) FROM instances WHERE doc LIKE '%from-the-old-leader%'"), "0\n");
  const auto listed = ListAll(0);
  ASSERT_TRUE(listed);
  std::set<std::string> names;
  for (const json& inst : *listed) names.insert(Str(inst, "name"));
  EXPECT_EQ(names, std::set<std::string>{"after-the-freeze"});

  // From now on it sends writes to the new leader.
  const Answer via = Direct(0, "POST", "/v1/instances", token, &stale);
  EXPECT_EQ(via.status, 307) << via.Describe();
  EXPECT_EQ(via.location, new_leader + "/v1/instances");
}

// Restarts the database when the test ends while it is stopped.
class Outage {
 public:
  explicit Outage(testing::PostgresServer& pg) : pg_(pg) { down_ = pg_.Stop(); }
  ~Outage() {
    if (down_) pg_.Restart();
  }
  Outage(const Outage&) = delete;
  Outage& operator=(const Outage&) = delete;
  bool down() const { return down_; }
  bool End() {
    down_ = false;
    return pg_.Restart();
  }

 private:
  testing::PostgresServer& pg_;
  bool down_ = false;
};

// How the creates sent during an outage ended.
struct Outcomes {
  std::map<std::string, int> counts;  // By Answer::Outcome.
  std::vector<std::string> unclean;   // Each that did not end in a 5xx.
};

// Sends a create every 250 ms until `end`.
Outcomes CreateUntil(ClusterClient& client, const std::string& token, SteadyClock::time_point end) {
  Outcomes out;
  for (int n = 0; SteadyClock::now() < end; ++n) {
    const json body = H100(fmt::format("during-the-outage-{}", n));
    const Answer a = client.Send("POST", "/v1/instances", token, &body);
    ++out.counts[a.Outcome()];
    if (a.status < 500 || a.status > 599) out.unclean.push_back(a.Describe());
    std::this_thread::sleep_for(250ms);
  }
  return out;
}

TEST_F(HaTest, TheDatabaseDownForTenSecondsFailsWritesCleanlyAndServiceResumesWithoutARestart) {
  TESSERA_POSTGRES_OR_SKIP(pg);
  ASSERT_NO_FATAL_FAILURE(StartCluster(pg, {"--fleet", dir_.Write("fleet.json", kSmallFleet)}));
  const std::string token = NewTenant();
  ClusterClient client(replicas_->Urls());
  const json before = H100("before-the-outage");
  const Answer made = client.Send("POST", "/v1/instances", token, &before);
  ASSERT_EQ(made.status, 201) << made.Describe();
  std::array<int, kReplicas> pids{};
  for (int i = 0; i < kReplicas; ++i) pids[i] = replicas_->Pid(i);

  Outage outage(pg);
  ASSERT_TRUE(outage.down());
  const SteadyClock::time_point down = SteadyClock::now();
  const Outcomes during = CreateUntil(client, token, down + kOutage);
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(Direct(i, "GET", "/healthz").status, 200) << "replica " << i << "\n"
                                                        << replicas_->Logs();
  }
  std::string seen;
  for (const auto& [outcome, count] : during.counts) seen += fmt::format(" {} {},", count, outcome);
  std::cout << fmt::format("[ HA ] creates during a {} s database outage:{}\n",
                           std::chrono::duration_cast<std::chrono::seconds>(kOutage).count(), seen);
  EXPECT_TRUE(during.unclean.empty()) << "writes during the outage must fail with 5xx:\n"
                                      << fmt::format("{}", fmt::join(during.unclean, "\n"));

  ASSERT_TRUE(outage.End()) << "PostgreSQL did not come back";
  const SteadyClock::time_point up = SteadyClock::now();
  const json after = H100("after-the-outage");
  Answer resumed;
  WaitFor(
      [&] {
        resumed = client.Send("POST", "/v1/instances", token, &after);
        return resumed.status == 201;
      },
      std::chrono::milliseconds(static_cast<int>(3 * kResumeBoundS * 1000)), 100ms);
  ASSERT_EQ(resumed.status, 201) << resumed.Describe() << "\n" << replicas_->Logs();
  const double resume_s = SecondsSince(up);
  std::cout << fmt::format("[ HA ] database back -> first 201: {:.2f} s (from {})\n", resume_s,
                           resumed.url);
  EXPECT_LT(resume_s, kResumeBoundS);
  for (int i = 0; i < kReplicas; ++i) {
    EXPECT_EQ(replicas_->Pid(i), pids[i]);
    EXPECT_FALSE(testing::ProcessExited(pids[i])) << "replica " << i << " exited\n"
                                                  << replicas_->Logs();
    EXPECT_EQ(Direct(i, "GET", "/healthz").status, 200) << "replica " << i;
  }
  const int leader = replicas_->WaitForLeader(5s);
  ASSERT_GE(leader, 0) << replicas_->Logs();
  for (const std::string& id : {Str(made.body, "id"), Str(resumed.body, "id")}) {
    EXPECT_EQ(Direct(leader, "GET", "/v1/instances/" + id, token).status, 200) << id;
  }
}

}  // namespace
}  // namespace tessera
