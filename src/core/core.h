// The core is the one thread that owns the fleet, the scheduler and every tenant and instance.
// API handlers never mutate state: they hand the core a command (a function over State) and are
// called back with its result. The core runs the commands of a round, commits everything they
// changed to the store in one durable transaction (group commit), and only then releases their
// results, so an answer always describes committed state. After a failed commit, or a command
// that threw, it rebuilds memory from the store and fails the round's commands; if the store
// cannot be read back it exits (kExitStoreLost) rather than serve memory the store does not hold.
// After each commit it publishes the principal index for the HTTP threads.
// Thread-safety: Submit, Run and principals() may be called from any thread; State is touched
// only by the core thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "alerts/notifier.h"
#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/ledger_reads.h"
#include "core/state.h"
#include "store/store.h"

namespace tessera::core {

// The exit status when the store can no longer be read back (EX_TEMPFAIL): a supervisor should
// restart the server, which then serves exactly what is durable.
inline constexpr int kExitStoreLost = 75;

// Rebuilds everything memory holds from what is durable in `store`, into a fresh `state`: joined
// nodes, node states, reservations, budgets with this month's ledger spend, tenants, instances
// (those ended within the state's retention), alert rules and alerts, and the admin token. What
// recovery reconciled goes to `batch`, to be committed before anything else runs. What the server
// does at start-up, and what tests use to restart.
Result<RecoveryReport> RestoreFromStore(State& state, store::Store& store, store::Batch& batch);

// The target workload for fragmentation-aware policies before any traffic is seen: one class
// per GPU instance type of the catalog, weighted equally. The server's, and the what-if
// simulator's, so both place alike.
sched::Workload CatalogWorkload(const catalog::Catalog& catalog);

struct CoreOptions {
  const catalog::Catalog* catalog = nullptr;  // Must outlive the core.
  std::string fleet_file;                     // Fleet description or openb node CSV; "" = demo.
  bool empty_fleet = false;  // With no fleet file: start empty, for agents to join.
  std::string data_dir = "./tessera-data";
  // Where the state is kept: a PostgreSQL URL (store/postgres.h), or "" for the SQLite store in
  // data_dir.
  std::string store;
  const Clock* clock = nullptr;  // Defaults to the system clock.
  std::string policy = "guarded-fgd";
  uint64_t seed = 42;
  bool sim_agents = false;
  // The agent protocol's timing (core::AgentTiming, docs/agent.md).
  Duration node_timeout = std::chrono::seconds(10);
  Duration report_period = std::chrono::seconds(2);
  Duration outage_bound = std::chrono::minutes(5);
  Duration spot_notice = std::chrono::seconds(30);  // A spot victim's notice on a joined node.
  // How long an ended instance stays in memory (the store keeps it for billing and audit).
  Duration instance_retention = std::chrono::hours(1);
  // Alerts: how often rules are evaluated, the evaluator's options, and who delivers what they
  // decide (null: nobody; the notifier must outlive the core).
  Duration alert_interval = std::chrono::seconds(5);
  Duration autoscale_interval = std::chrono::seconds(15);
  // A tenant's cap on pending instances unless its quota sets one (StateOptions).
  int64_t max_pending_per_tenant = kDefaultMaxPending;
  // The batch window (StateOptions::batch_window; 1 = off) and how long a create may wait in it.
  int batch_window = 1;
  Duration batch_wait = std::chrono::milliseconds(200);
  // Repacking of migratable shares (StateOptions::repack), how long a moved one stays put, and
  // the longest run a move may throw away.
  bool repack = false;
  Duration repack_cooldown = std::chrono::hours(1);
  Duration repack_max_run = std::chrono::hours(6);
  alerts::EvaluatorOptions alerts;
  alerts::Notifier* notifier = nullptr;
  // Seals values at rest (common/envelope.h); null: none can be stored. Must outlive the core.
  Sealer* sealer = nullptr;
  // How long audit entries are kept; zero keeps them for ever.
  Duration audit_retention = std::chrono::hours(24 * 90);
  // Billing reads (usage, invoices, cost reports) run on these threads, not the core's; a tenant
  // may have this many waiting or running at once.
  int ledger_read_threads = 2;
  size_t ledger_reads_per_tenant = 4;
  // One of several replicas on a shared store (docs/ha.md): the core starts as a follower (see
  // Core::Lead), and a store it cannot read back makes it step down rather than exit.
  bool replicated = false;
};

class Core {
 public:
  // Opens options.store, else the SQLite store in options.data_dir (locking it: one server per
  // directory), loads the fleet,
  // rebuilds tenants and instances reconciled with the fleet and catalog (recovery.h), commits
  // what was reconciled, logs a summary, and starts the core thread. Errors name the file or
  // record at fault.
  static Result<std::unique_ptr<Core>> Start(const CoreOptions& options);
  // The same on a store the caller opened (tests hand in one that fails on demand).
  static Result<std::unique_ptr<Core>> Start(const CoreOptions& options,
                                             std::unique_ptr<store::Store> store);
  ~Core();  // Finishes the commands already queued, then stops the thread.

  // Who delivers alerts; null when nobody does.
  alerts::Notifier* notifier() const { return options_.notifier; }

  // Runs `fn` on the core thread and, once what it wrote is durable, calls `done` with its
  // result, on the core thread (so `done` must be quick: hand the result on, no work). A failed
  // commit answers Unavailable; a command that throws answers Internal, and the round's state is
  // rebuilt from the store.
  template <typename T>
  void Submit(std::function<Result<T>(State&, store::Batch&)> fn,
              std::function<void(Result<T>)> done) {
    auto result = std::make_shared<std::optional<Result<T>>>();
    Enqueue([fn = std::move(fn), result](State& s, store::Batch& b) { result->emplace(fn(s, b)); },
            [done = std::move(done), result](const Status& round) {
              if (!round.ok()) return done(round);
              if (!*result) return done(Status::Internal("the command did not run"));
              done(std::move(**result));
            });
  }

  // Submit, waiting for the result. For start-up and tests; request handlers use Submit.
  template <typename T>
  Result<T> Run(std::function<Result<T>(State&, store::Batch&)> fn) {
    std::promise<Result<T>> promise;
    auto future = promise.get_future();
    Submit<T>(std::move(fn), [&promise](Result<T> r) { promise.set_value(std::move(r)); });
    return future.get();
  }

  // Who each token acts for, as of the last durable commit. Any thread; never null.
  std::shared_ptr<const PrincipalIndex> principals() const { return principals_.load(); }
  // Where running instances' ports are reached, as of the last durable commit. Any thread; never
  // null.
  std::shared_ptr<const EndpointIndex> endpoints() const { return endpoints_.load(); }
  // What groups' services served (service_stats.h). Any thread.
  ServiceStats& service_stats() { return state_->service_stats(); }

  // Replication (docs/ha.md). A follower's core holds state rebuilt from the store, answers
  // commands that only read, runs no rounds of its own (no placement, no ticks) and never
  // commits; the leader's core commits fenced with its lease's epoch. Any thread.
  bool follower() const { return follower_.load(); }
  // Fences the store with `epoch`, rebuilds from the store (what the previous leader committed
  // is there: its later commits fail the fence), commits what recovery reconciled and leads.
  // With `current` (the caller knows nothing was committed since this core's state was last
  // built or committed) the rebuild is skipped. Waits until done; on an error the core stays a
  // follower.
  Status Lead(int64_t epoch, bool current = false);
  // A leader stops committing, between rounds: memory is what it committed, so nothing is
  // rebuilt (Follow catches up later). Waits until done.
  void StopLeading();
  // Rebuilds from the store and serves reads only: a leader steps down; a follower catches up
  // with what the leader committed. Waits until done; on an error the previous state stays, and
  // until a rebuild succeeds after a failed commit, commands are answered Unavailable.
  Status Follow();
  // Called on the core thread when a leader's core steps down by itself: its commit was fenced
  // (another replica leads) or the store could not be read back. Set before serving.
  void set_on_step_down(std::function<void(const std::string&)> fn) {
    on_step_down_ = std::move(fn);
  }

  // The store, for reads inside a command (the audit log). Core thread only.
  store::Store& store() { return *store_; }

  // Runs `job` on a billing-read thread with a ledger reader of its own (LedgerReads). Any
  // thread. False, running nothing, when `tenant` has its share of reads waiting already.
  bool ReadLedger(const std::string& tenant, LedgerReads::Job job) {
    return reads_->Submit(tenant, std::move(job));
  }

 private:
  struct Command {
    std::function<void(State&, store::Batch&)> apply;
    std::function<void(const Status&)> done;
  };

  Core(CoreOptions options, std::unique_ptr<store::Store> store, std::unique_ptr<State> state);
  void Enqueue(std::function<void(State&, store::Batch&)> apply,
               std::function<void(const Status&)> done);
  // Runs `fn` on the core thread between rounds and waits for its status.
  Status Control(std::function<Status()> fn);
  // Rebuilds state_ from the store (and commits what recovery reconciled when `commit`).
  Status Rebuild(bool commit);
  // A follower's round: its commands read; anything one wrote is not durable, so memory is
  // rebuilt from the store.
  Status RunFollowerRound(std::deque<Command>& round);
  void Loop();
  // Applies one round's commands and commits their batch; the status every command gets.
  Status RunRound(std::deque<Command>& round);
  // Replaces memory with what the store holds, after a failed commit or a command that threw.
  // A store that cannot be read back ends the process: memory must never run ahead of it.
  void RebuildOrExit(const std::string& why);
  void Publish();
  // Deletes audit entries past the retention period, at most once an hour.
  void PruneAudit();

  CoreOptions options_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<LedgerReads> reads_;  // Destroyed before the store its readers read.
  std::unique_ptr<State> state_;

  std::atomic<std::shared_ptr<const PrincipalIndex>> principals_;
  std::atomic<std::shared_ptr<const EndpointIndex>> endpoints_{
      std::make_shared<const EndpointIndex>()};
  Time last_audit_prune_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> queue_;                  // Guarded by mu_.
  std::deque<std::function<void()>> control_;  // Guarded by mu_.
  std::atomic<bool> follower_ = false;
  // What recovery reconciled when the state was last built from the store, not committed (a
  // follower commits nothing): a leader that takes over with the state current commits it
  // instead of rebuilding. nullopt when the state is not known to be current.
  std::optional<store::Batch> unled_reconciled_;
  bool stale_ = false;  // Memory ran ahead of a failed commit and could not be rebuilt yet.
  std::function<void(const std::string&)> on_step_down_;
  bool stopping_ = false;  // Guarded by mu_.
  std::thread thread_;
};

}  // namespace tessera::core
