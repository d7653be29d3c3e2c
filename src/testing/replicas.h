// Several `tessera server` replicas on one PostgreSQL database (docs/ha.md), for end-to-end tests
// and benchmarks of failover, and a client that follows the leader as `tessera --url` and
// `tessera agent --server` do.
// Thread-safety: SendOnce may be called from any thread; a ClusterClient is used by one thread at
// a time; a ReplicaSet's const methods may be called from several threads while none of its
// other methods runs.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace tessera::testing {

// One answer, and which replica gave it.
struct Answer {
  int status = 0;     // 0: no answer.
  bool sent = false;  // The request may have reached the server: without an answer its
                      // outcome is unknown.
  nlohmann::json body;
  std::string url;       // The replica asked last.
  std::string location;  // A 307's Location.

  // The error's code ("no_leader"), "" when the body holds none.
  std::string Code() const;
  // "201 from http://127.0.0.1:PORT: {...}", for failure messages.
  std::string Describe() const;
  // How it ended, in a word or two: "201", "503 no_leader", "refused", "no answer".
  std::string Outcome() const;
};

// One request to `url` with a bearer `token` and, for POST, the JSON `body`; no redirect
// followed. Connecting gives up after 1 s, reading and writing after `timeout_s`.
Answer SendOnce(const std::string& url, const std::string& method, const std::string& path,
                const std::string& token, const nlohmann::json* body, int timeout_s);

// A client of several replicas that follows the leader: a follower's 307 is followed to a listed
// replica; a refused connection or a 503 no_leader sends the request to the next replica. A
// request that may have reached a server but got no answer is not sent again (it may have been
// applied).
class ClusterClient {
 public:
  explicit ClusterClient(std::vector<std::string> urls, int timeout_s = 3)
      : urls_(std::move(urls)), timeout_s_(timeout_s) {}

  // The answer; when every try was sent on (twice round the replicas), the last refusal met on
  // the way (a replica that could not be reached or knew no leader), else the last redirect.
  Answer Send(const std::string& method, const std::string& path, const std::string& token,
              const nlohmann::json* body = nullptr);

 private:
  std::vector<std::string> urls_;
  int timeout_s_;
  size_t current_ = 0;
};

// Whether process `pid` is gone or a zombie (exited, not yet reaped).
bool ProcessExited(int pid);

// `count` replicas of `tessera server --listen 127.0.0.1:PORT --data DIR/data-I --store URL
// <flags>` with TESSERA_ADMIN_TOKEN set, each on a port of its own that a restart keeps (so its
// URL stays listed), its output appended to DIR/replica-I.log. Every replica still running is
// killed (SIGCONT, then SIGKILL) with the object.
class ReplicaSet {
 public:
  ReplicaSet(int count, std::string store_url, std::vector<std::string> flags,
             std::string admin_token, std::string dir);
  ~ReplicaSet();
  ReplicaSet(const ReplicaSet&) = delete;
  ReplicaSet& operator=(const ReplicaSet&) = delete;

  // Starts every replica, replica 0 alone first until it leads, so that it is the leader. False
  // with `error` set (and the logs' ends) when a replica does not start or 0 does not lead.
  bool Start(std::string* error);
  // Starts replica `i` (again) and waits until it listens, up to 20 s; false with `error` set
  // when it exits or does not listen in time.
  bool StartReplica(int i, std::string* error);
  // Sends `signal` to replica `i` and waits for it to exit; its exit status (128+N for signal N),
  // -1 when it was not running.
  int Kill(int i, int signal);

  int size() const { return static_cast<int>(replicas_.size()); }
  // The replica's pid, -1 once it was killed.
  int Pid(int i) const { return replicas_[i].process ? replicas_[i].process->pid() : -1; }
  bool Running(int i) const { return Pid(i) > 0 && !ProcessExited(Pid(i)); }
  const std::string& url(int i) const { return replicas_[i].url; }
  const std::vector<std::string>& Urls() const { return urls_; }
  // The index of the replica whose URL `url` is, -1 when none.
  int IndexOf(const std::string& url) const;

  // A request to replica `i` alone, no redirect followed.
  Answer Direct(int i, const std::string& method, const std::string& path, const std::string& token,
                const nlohmann::json* body = nullptr, int timeout_s = 3) const;
  // Replica `i`'s GET /readyz ({"role", "leader", "epoch"}); not an object when it does not
  // answer within 1 s.
  nlohmann::json ReadyZ(int i) const;
  // The replica that says it leads, once exactly one running replica does, within `limit`; -1
  // when that did not happen.
  int WaitForLeader(std::chrono::milliseconds limit) const;
  // The last 4,000 bytes of every replica's log, for failure messages.
  std::string Logs() const;

 private:
  struct Replica {
    int port = 0;
    std::string url, log, data;
    std::unique_ptr<ChildProcess> process;
  };

  std::string store_url_, admin_token_;
  std::vector<std::string> flags_, urls_;
  std::vector<Replica> replicas_;
};

}  // namespace tessera::testing
