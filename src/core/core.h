// The core is the one thread that owns the fleet, the scheduler and every tenant and instance.
// API handlers never mutate state: they hand the core a command (a function over State) and wait.
// The core runs the commands of a round, commits everything they changed to the store in one
// durable transaction (group commit), and only then releases their results, so an answer always
// describes committed state. After a failed commit it rebuilds memory from the store and fails
// the round's commands with Unavailable.
// Thread-safety: Core::Run may be called from any thread; State is touched only by the core thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/state.h"
#include "store/store.h"

namespace tessera::core {

struct CoreOptions {
  const catalog::Catalog* catalog = nullptr;  // Must outlive the core.
  std::string fleet_file;                     // Fleet description or openb node CSV; "" = demo.
  std::string data_dir = "./tessera-data";
  const Clock* clock = nullptr;  // Defaults to the system clock.
  std::string policy = "guarded-fgd";
  uint64_t seed = 42;
  bool sim_agents = false;
};

class Core {
 public:
  // Opens the store, loads the fleet, rebuilds tenants and instances (re-booking every held
  // assignment), and starts the core thread. Errors name the file or record at fault.
  static Result<std::unique_ptr<Core>> Start(const CoreOptions& options);
  ~Core();  // Finishes the commands already queued, then stops the thread.

  // Runs `fn` on the core thread and returns its result once what it wrote is durable.
  template <typename T>
  Result<T> Run(std::function<Result<T>(State&, store::Batch&)> fn) {
    std::promise<Result<T>> done;
    auto future = done.get_future();
    std::optional<Result<T>> result;
    Submit([&](State& s, store::Batch& b) { result.emplace(fn(s, b)); },
           [&](const Status& commit) {
             if (!commit.ok()) {
               done.set_value(Status::Unavailable("the store failed: " + commit.message()));
             } else {
               done.set_value(std::move(*result));
             }
           });
    return future.get();
  }

  // Audit entries with seq > after_seq, oldest first, at most `limit`; read on the core thread.
  Result<std::vector<store::AuditRecord>> ListAudit(int64_t after_seq, int limit);

 private:
  struct Command {
    std::function<void(State&, store::Batch&)> apply;
    std::function<void(const Status&)> done;
  };

  Core(CoreOptions options, std::unique_ptr<store::Store> store, std::unique_ptr<State> state);
  void Submit(std::function<void(State&, store::Batch&)> apply,
              std::function<void(const Status&)> done);
  void Loop();

  CoreOptions options_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<State> state_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> queue_;  // Guarded by mu_.
  bool stopping_ = false;      // Guarded by mu_.
  std::thread thread_;
};

}  // namespace tessera::core
