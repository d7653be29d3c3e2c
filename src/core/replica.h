// One replica of a control plane that several servers share on one PostgreSQL database
// (docs/ha.md). A thread of its own takes the leadership lease when it is free, renews it while
// it leads, and steps the core down when it cannot; a follower reads the lease to learn the
// leader's URL and rebuilds its core's state from the store whenever the leader has committed
// since. The lease's epoch fences the leader's commits (store::Leadership), so correctness never
// rests on these timings: they decide only how fast a failover is.
// Thread-safety: view() from any thread; the rest from the owner's.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/core.h"
#include "store/postgres.h"

namespace tessera::core {

struct ReplicaOptions {
  // How long a lease lasts unrenewed: a dead leader is replaced about this long after its last
  // renewal. The leader renews every renew_s; followers read the lease every poll_s.
  double lease_s = 3.0;
  double renew_s = 1.0;
  double poll_s = 0.25;
};

// What a replica knows of the cluster, as of its last pass.
struct ReplicaStatus {
  bool leader = false;
  bool settled = false;         // The first pass is done: this replica leads or knows who does.
  int64_t epoch = 0;            // The lease's epoch (this replica's own while it leads).
  std::string id;               // This replica's holder id.
  std::string leader_url;       // "" while no replica leads.
  int64_t applied_commits = 0;  // The leader's commit count this replica's state reflects.
  double lag_s = 0;             // How long this follower's state has been behind the leader's.
  int64_t takeovers = 0;        // Times this replica became leader.
  std::vector<store::ReplicaView> replicas;  // Heard from recently (GET /v1/cluster).
};

class Replica {
 public:
  // `built_from`: the lease as read before `core`'s state was built (nullopt when unknown), so
  // that taking the lease with no commit since needs no second read of the store.
  Replica(Core* core, std::unique_ptr<store::Leadership> leadership, ReplicaOptions options,
          std::optional<store::LeaseView> built_from = std::nullopt);
  // Stops the thread; a leader releases its lease so that a follower takes over at once.
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  void Start();
  // Waits until the first pass is done (or `timeout_s` passes); returns view().settled.
  bool AwaitSettled(double timeout_s);
  // Waits until this replica leads (or `timeout_s` passes); returns view().leader.
  bool AwaitLeader(double timeout_s);
  ReplicaStatus view() const;

 private:
  void Loop();
  void LeadPass();
  void FollowPass();
  void StepDown(const std::string& why);
  void Announce();
  void Sleep(double seconds);
  // Logs `what`, at most once in 10 s (a database down for minutes is one problem).
  void Warn(const std::string& what);

  Core* core_;
  std::unique_ptr<store::Leadership> leadership_;
  ReplicaOptions options_;

  // The loop's own.
  double deadline_ = 0;  // Steady seconds until which our lease surely holds.
  double behind_since_ = -1;
  // The lease's commit count the core's state is known to hold exactly (-1: unknown).
  int64_t built_at_commits_ = -1;
  double last_announce_ = -1e9;
  double last_warning_ = -1e9;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                   // Guarded by mu_.
  ReplicaStatus status_;                    // Guarded by mu_.
  std::atomic<bool> stepped_down_ = false;  // Set by the core when it stops leading itself.
  std::thread thread_;
};

}  // namespace tessera::core
