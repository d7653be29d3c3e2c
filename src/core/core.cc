#include "core/core.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <future>

#include "common/text.h"
#include "fleet/fleet_file.h"

namespace tessera::core {

namespace {

constexpr auto kDeferredRoundDelay = std::chrono::milliseconds(50);
// How often the core wakes on its own while agents hold leases or wait in long polls.
constexpr auto kTickDelay = std::chrono::milliseconds(100);

// Loads the fleet, creates the scheduler and restores the state from the store
// (RestoreFromStore); what recovery reconciled goes to `batch`.
Result<std::unique_ptr<State>> BuildState(const CoreOptions& options, store::Store& store,
                                          store::Batch& batch, RecoveryReport* report) {
  const Clock* clock = options.clock ? options.clock : &SystemClock::Get();
  bool openb_csv = false;
  Result<fleet::Fleet> loaded =
      !options.fleet_file.empty()
          ? fleet::LoadFleetFile(*options.catalog, options.fleet_file, &openb_csv)
      : options.empty_fleet ? Result<fleet::Fleet>(fleet::Fleet(options.catalog))
                            : fleet::DemoFleet(*options.catalog);
  if (!loaded.ok()) return loaded.status();
  auto fleet = std::make_unique<fleet::Fleet>(std::move(*loaded));
  sched::Options sched_options{options.policy, options.seed, CatalogWorkload(*options.catalog)};
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<sched::Scheduler> scheduler,
                           sched::Scheduler::Create(fleet.get(), sched_options));
  StateOptions state_options;
  state_options.sim_agents = options.sim_agents;
  state_options.retention = options.instance_retention;
  state_options.node_timeout = options.node_timeout;
  state_options.report_period = options.report_period;
  state_options.outage_bound = options.outage_bound;
  state_options.spot_notice = options.spot_notice;
  state_options.alert_interval = options.alert_interval;
  state_options.autoscale_interval = options.autoscale_interval;
  state_options.max_pending_per_tenant = options.max_pending_per_tenant;
  state_options.batch_window = options.batch_window;
  state_options.batch_wait = options.batch_wait;
  state_options.repack = options.repack;
  state_options.repack_cooldown = options.repack_cooldown;
  state_options.repack_max_run = options.repack_max_run;
  state_options.alerts = options.alerts;
  state_options.sealer = options.sealer;
  // openb's GPUs are all in shared mode and its whole-GPU pods run on them: a server on an openb
  // node list lets whole-GPU work onto a shared GPU that holds no share, as `tessera sim` does.
  state_options.whole_gpus_on_shared = openb_csv;
  auto state = std::make_unique<State>(options.catalog, clock, std::move(fleet),
                                       std::move(scheduler), state_options);
  TESSERA_ASSIGN_OR_RETURN(RecoveryReport r, RestoreFromStore(*state, store, batch));
  if (report) *report = std::move(r);
  return state;
}

}  // namespace

sched::Workload CatalogWorkload(const catalog::Catalog& catalog) {
  sched::Workload w;
  for (const auto& it : catalog.instance_types()) {
    auto idx = catalog.FindGpuIndex(it.gpu_model);
    if (!idx) continue;
    sched::WorkloadClass c;
    c.cpu_milli = it.vcpus * 1000;
    c.allowed_models = uint64_t{1} << idx->value;
    if (it.sharing == catalog::SharingMode::kShared) {
      c.gpu_count = 1;
      c.gpu_milli = it.milli_gpu;
    } else if (it.sharing == catalog::SharingMode::kExclusive) {
      c.gpu_count = it.gpus;
      c.gpu_milli = 1000;
    } else {
      continue;  // MIG slices do not fragment shared capacity.
    }
    w.push_back(c);
  }
  for (auto& c : w) c.weight = 1.0 / static_cast<double>(w.size());
  return w;
}

Result<RecoveryReport> RestoreFromStore(State& state, store::Store& store, store::Batch& batch) {
  std::map<std::string, fleet::NodeState> node_states;
  TESSERA_ASSIGN_OR_RETURN(auto settings, store.ListSettings("node_state/"));
  for (const auto& [key, value] : settings) {
    node_states[key.substr(std::string("node_state/").size())] =
        value == "draining" ? fleet::NodeState::kDraining : fleet::NodeState::kReady;
  }
  // Secrets before instances and groups: what refers to one needs it to run.
  TESSERA_ASSIGN_OR_RETURN(auto secrets, store.ListSettings(std::string(TenantSecrets::kPrefix)));
  TESSERA_RETURN_IF_ERROR(state.RestoreSecrets(secrets));
  // Joined nodes before instances: the instances name them.
  TESSERA_ASSIGN_OR_RETURN(auto agent_nodes,
                           store.ListSettings(std::string(AgentSupervisor::kRecordPrefix)));
  TESSERA_RETURN_IF_ERROR(state.agent_hub().Restore(agent_nodes));
  // Reservations before instances: reserved instances hold their units.
  TESSERA_ASSIGN_OR_RETURN(auto reservations,
                           store.ListSettings(std::string(Accounts::kReservationPrefix)));
  TESSERA_ASSIGN_OR_RETURN(auto next_reservation,
                           store.GetSetting(std::string(Accounts::kNextReservation)));
  if (next_reservation) reservations.emplace_back(Accounts::kNextReservation, *next_reservation);
  TESSERA_RETURN_IF_ERROR(state.accounts().RestoreReservations(reservations));
  // Volumes before instances: the instances mount them.
  TESSERA_ASSIGN_OR_RETURN(auto volumes, store.ListSettings(std::string(Volumes::kPrefix)));
  TESSERA_ASSIGN_OR_RETURN(auto next_volume, store.GetSetting(std::string(Volumes::kNextKey)));
  if (next_volume) volumes.emplace_back(Volumes::kNextKey, *next_volume);
  TESSERA_RETURN_IF_ERROR(state.RestoreVolumes(volumes));
  // Budgets, with what the ledger holds of this month's spend.
  TESSERA_ASSIGN_OR_RETURN(auto budgets, store.ListSettings(std::string(Accounts::kBudgetPrefix)));
  const int64_t month = billing::MonthStart(billing::UnixSeconds(state.clock().Now()));
  std::map<std::string, Money> spent;
  for (const auto& [key, value] : budgets) {
    TESSERA_RETURN_IF_ERROR(
        store.ScanLedger(key.substr(Accounts::kBudgetPrefix.size()), month,
                         billing::NextMonthStart(month), [&](const store::LedgerRecord& l) {
                           spent[l.tenant] += Money::FromMicros(l.amount_micros);
                         }));
  }
  TESSERA_RETURN_IF_ERROR(state.accounts().RestoreBudgets(budgets, month, spent));
  TESSERA_ASSIGN_OR_RETURN(auto tenants, store.LoadTenants());
  const std::string since = FormatRfc3339(state.clock().Now() - state.options().retention);
  TESSERA_ASSIGN_OR_RETURN(auto instances, store.LoadInstances(since));
  TESSERA_ASSIGN_OR_RETURN(RecoveryReport report,
                           state.Restore(tenants, instances, node_states, batch));
  // Users after tenants: a tenant without its first owner gets one.
  TESSERA_ASSIGN_OR_RETURN(auto users, store.ListSettings(std::string(Users::kPrefix)));
  TESSERA_ASSIGN_OR_RETURN(auto users_meta, store.ListSettings("users/"));
  users.insert(users.end(), users_meta.begin(), users_meta.end());
  TESSERA_RETURN_IF_ERROR(state.RestoreUsers(users, batch));
  // After tenants and joined nodes: a store that predates the record is dated by them.
  TESSERA_ASSIGN_OR_RETURN(auto fleet_since, store.GetSetting(std::string(Accounts::kFleetSince)));
  TESSERA_RETURN_IF_ERROR(state.RestoreFleetSince(fleet_since, batch));
  // Groups after instances: they name their members.
  TESSERA_ASSIGN_OR_RETURN(auto groups, store.ListSettings(std::string(GroupTable::kPrefix)));
  TESSERA_ASSIGN_OR_RETURN(auto next_group, store.GetSetting(std::string(GroupTable::kNextKey)));
  if (next_group) groups.emplace_back(GroupTable::kNextKey, *next_group);
  TESSERA_RETURN_IF_ERROR(state.groups().Restore(groups, batch));
  TESSERA_ASSIGN_OR_RETURN(auto rules, store.ListSettings(std::string(Monitoring::kRulePrefix)));
  TESSERA_ASSIGN_OR_RETURN(auto alerts, store.ListSettings(std::string(Monitoring::kAlertPrefix)));
  TESSERA_ASSIGN_OR_RETURN(auto meta, store.ListSettings(std::string(Monitoring::kMetaPrefix)));
  TESSERA_RETURN_IF_ERROR(state.monitoring().Restore(rules, alerts, meta, batch));
  TESSERA_ASSIGN_OR_RETURN(auto stacks, store.ListSettings(std::string(Stacks::kPrefix)));
  TESSERA_RETURN_IF_ERROR(state.stacks().Restore(stacks));
  TESSERA_ASSIGN_OR_RETURN(auto admin_hash, store.GetSetting("admin_token_hash"));
  if (admin_hash) state.tenants().RestoreAdminTokenHash(*admin_hash);
  return report;
}

Result<std::unique_ptr<Core>> Core::Start(const CoreOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<store::Store> store,
      store::OpenStore(options.store.empty() ? options.data_dir : options.store));
  return Start(options, std::move(store));
}

Result<std::unique_ptr<Core>> Core::Start(const CoreOptions& options,
                                          std::unique_ptr<store::Store> store) {
  store::Batch reconciled;
  RecoveryReport report;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<State> state,
                           BuildState(options, *store, reconciled, &report));
  for (const std::string& line : report.failed) spdlog::warn("reconciled at restart: {}", line);
  spdlog::info("{}", report.Summary());
  // What recovery changed is durable before anything is served; a replica that follows
  // commits nothing (the leader reconciles).
  if (!reconciled.empty() && !options.replicated) {
    TESSERA_RETURN_IF_ERROR(store->Commit(reconciled));
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<LedgerReads> reads,
      LedgerReads::Start(*store, options.ledger_read_threads, options.ledger_reads_per_tenant));
  std::unique_ptr<Core> core(new Core(options, std::move(store), std::move(state)));
  core->reads_ = std::move(reads);
  if (options.replicated) {  // A follower until Lead().
    core->unled_reconciled_ = std::move(reconciled);
    return core;
  }
  // Place whatever was queued before the restart, and let agents catch up.
  auto settled = core->Run<bool>([](State&, store::Batch&) -> Result<bool> { return true; });
  if (!settled.ok()) return settled.status();
  return core;
}

Core::Core(CoreOptions options, std::unique_ptr<store::Store> store, std::unique_ptr<State> state)
    : options_(std::move(options)), store_(std::move(store)), state_(std::move(state)) {
  follower_ = options_.replicated;
  Publish();
  thread_ = std::thread([this] { Loop(); });
}

Core::~Core() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Core::Enqueue(std::function<void(State&, store::Batch&)> apply,
                   std::function<void(const Status&)> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({std::move(apply), std::move(done)});
  }
  cv_.notify_one();
}

void Core::Publish() {
  if (principals_.load() != state_->tenants().index()) {
    principals_.store(state_->tenants().index());
  }
  if (auto snapshot = state_->EndpointSnapshot(); endpoints_.load() != snapshot) {
    endpoints_.store(std::move(snapshot));
  }
}

void Core::Loop() {
  for (;;) {
    std::deque<Command> round;
    // Work deferred to a later round (queued requests that waited on the round's preemption
    // budget) gets a round of its own soon, even when no request comes to start one.
    // A follower runs no rounds of its own: it only answers.
    const bool deferred = !follower_ && state_->has_deferred_work();
    const bool ticks = !follower_ && state_->needs_ticks();
    std::deque<std::function<void()>> control;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto ready = [&] { return stopping_ || !queue_.empty() || !control_.empty(); };
      if (deferred || ticks) {
        // Leases to watch and long polls to answer: a round of its own now and then.
        // Creates held in the batch window get their round when the window closes.
        const auto delay = deferred ? std::min<std::chrono::microseconds>(kDeferredRoundDelay,
                                                                          state_->batch_due_in())
                                    : kTickDelay;
        cv_.wait_for(lock, delay, ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (queue_.empty() && control_.empty() && stopping_) return;
      round.swap(queue_);
      control.swap(control_);
    }
    for (auto& fn : control) fn();
    if (round.empty() && (follower_ || stale_)) continue;
    const Status status = RunRound(round);
    for (Command& c : round) {
      try {
        c.done(status);
      } catch (const std::exception& e) {
        spdlog::error("a command's completion threw: {}", EscapeForTerminal(e.what()));
      }
    }
  }
}

Status Core::RunRound(std::deque<Command>& round) {
  if (stale_) return Status::Unavailable("the store cannot be reached; retrying");
  if (follower_) return RunFollowerRound(round);
  store::Batch batch;
  try {
    state_->BeginRound();
    for (Command& c : round) c.apply(*state_, batch);
    // Agents' reports and queued work, in the same durable round: a stop frees capacity, queued
    // work is placed, and its agent starts it.
    state_->EndRound(batch);
    PruneAudit();
  } catch (const std::exception& e) {
    // Memory may be half-changed: nothing of this round is committed, and memory is rebuilt.
    const std::string what = EscapeForTerminal(e.what());
    spdlog::error("a command threw on the core thread: {}; reloading state from the store", what);
    RebuildOrExit(what);
    return Status::Internal("an internal error occurred; it has been logged");
  }
  // A round that changed nothing durable (heartbeats, reads, ticks) costs no commit.
  const Status committed = batch.empty() ? Status::Ok() : store_->Commit(batch);
  if (!committed.ok()) {
    spdlog::error("commit failed: {}; reloading state from the store", committed.message());
    if (store_->Fenced()) {
      // Another replica leads now (only replicas are fenced): nothing of this round is durable,
      // and this one steps down and follows.
      RebuildOrExit(committed.message());
      return Status::Unavailable(
          "this replica no longer leads; the request was not applied (retry on the leader)");
    }
    RebuildOrExit(committed.message());
    return Status::Unavailable("the store failed: " + committed.message());
  }
  Publish();
  state_->AfterCommit();
  // What the alert evaluation decided is durable now: deliver it.
  Monitoring::Outbox outbox = state_->monitoring().TakeOutbox();
  if (options_.notifier) {
    for (alerts::Delivery& d : outbox.deliveries) options_.notifier->Send(std::move(d));
    for (auto& batch_of_alerts : outbox.alertmanager) {
      options_.notifier->SendToAlertmanager(std::move(batch_of_alerts));
    }
  }
  return Status::Ok();
}

void Core::PruneAudit() {
  const Clock* clock = options_.clock ? options_.clock : &SystemClock::Get();
  const Time now = clock->Now();
  if (options_.audit_retention <= Duration::zero() ||
      now - last_audit_prune_ < std::chrono::hours(1)) {
    return;
  }
  last_audit_prune_ = now;
  auto pruned = store_->PruneAudit(FormatRfc3339(now - options_.audit_retention));
  if (!pruned.ok()) {
    spdlog::warn("pruning the audit log failed: {}", pruned.status().message());
  } else if (*pruned > 0) {
    spdlog::info("pruned {} audit entries older than the retention period", *pruned);
  }
}

Status Core::RunFollowerRound(std::deque<Command>& round) {
  store::Batch batch;
  try {
    for (Command& c : round) c.apply(*state_, batch);
  } catch (const std::exception& e) {
    spdlog::error("a command threw on the core thread: {}", EscapeForTerminal(e.what()));
    batch.audit.emplace_back();  // Memory may be half-changed: rebuilt below.
  }
  if (batch.empty()) {
    Publish();
    return Status::Ok();
  }
  // A command wrote: memory now holds what is not durable, so it is read back from the store.
  if (Status s = Rebuild(false); !s.ok()) stale_ = true;
  return Status::Unavailable("this replica follows; writes go to the leader");
}

Status Core::Control(std::function<Status()> fn) {
  std::promise<Status> promise;
  auto future = promise.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    control_.push_back([&promise, fn = std::move(fn)] { promise.set_value(fn()); });
  }
  cv_.notify_one();
  return future.get();
}

Status Core::Rebuild(bool commit) {
  unled_reconciled_.reset();
  TESSERA_RETURN_IF_ERROR(store_->Reload());
  store::Batch reconciled;
  auto rebuilt = BuildState(options_, *store_, reconciled, nullptr);
  if (!rebuilt.ok()) return rebuilt.status();
  if (commit && !reconciled.empty()) TESSERA_RETURN_IF_ERROR(store_->Commit(reconciled));
  state_ = std::move(*rebuilt);
  stale_ = false;
  if (!commit) unled_reconciled_ = std::move(reconciled);
  Publish();
  return Status::Ok();
}

Status Core::Lead(int64_t epoch, bool current) {
  return Control([this, epoch, current] {
    store_->SetFence(epoch);
    Status s = Status::Ok();
    if (current && unled_reconciled_ && !stale_) {
      // Nothing was committed since the state was built: only what recovery reconciled then.
      s = store_->Reload();
      if (s.ok() && !unled_reconciled_->empty()) s = store_->Commit(*unled_reconciled_);
      unled_reconciled_.reset();
      if (!s.ok() && !store_->Fenced()) s = Rebuild(true);
    } else {
      s = Rebuild(true);
    }
    if (!s.ok()) {
      follower_ = true;
      return s;
    }
    follower_ = false;
    return Status::Ok();
  });
}

void Core::StopLeading() {
  (void)Control([this] {
    follower_ = true;
    // Between rounds, memory is exactly what this leader committed.
    if (!stale_) unled_reconciled_ = store::Batch{};
    return Status::Ok();
  });
}

Status Core::Follow() {
  return Control([this] {
    follower_ = true;
    Status s = Rebuild(false);
    if (!s.ok() && stale_) spdlog::warn("a follower cannot rebuild yet: {}", s.message());
    return s;
  });
}

void Core::RebuildOrExit(const std::string& why) {
  if (options_.replicated) {
    // Another replica may lead on what is durable: this one steps down, and serves again once
    // it has read the store back (Follow, from the replica's loop).
    follower_ = true;
    if (Status s = Rebuild(false); !s.ok()) {
      stale_ = true;
      spdlog::error(
          "cannot rebuild state from the store after '{}': {}; stepping down until "
          "it can",
          why, s.message());
    }
    if (on_step_down_) on_step_down_(why);
    return;
  }
  store::Batch reconciled;
  auto rebuilt = BuildState(options_, *store_, reconciled, nullptr);
  if (rebuilt.ok() && !reconciled.empty()) {
    if (Status s = store_->Commit(reconciled); !s.ok()) rebuilt = s;
  }
  if (!rebuilt.ok()) {
    spdlog::critical(
        "cannot rebuild state from the store after '{}': {}; exiting so that a "
        "supervisor restarts the server from what is durable",
        why, rebuilt.status().message());
    std::_Exit(kExitStoreLost);
  }
  state_ = std::move(*rebuilt);
  Publish();
}

}  // namespace tessera::core
