// Exec sessions (docs/volumes.md, "A shell"): `tessera instances exec` and `shell` reach a
// workload through the server. The client's POST /v1/instances/{id}/exec upgrades its
// connection; the core tells the instance's agent, which connects for the session with
// POST /v1/agent/exec/{session} (an agent only ever calls out, over its own TLS and token); the
// broker holds the client's connection until then, and the HTTP layer joins the two
// (Responder::Join). From then on the client and the agent speak the exec frames
// (common/exec_frames.h) to each other, and the server only carries them.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/http.h"

namespace tessera::api {

class ExecBroker {
 public:
  ExecBroker() = default;
  ~ExecBroker() { Stop(); }
  ExecBroker(const ExecBroker&) = delete;
  ExecBroker& operator=(const ExecBroker&) = delete;

  // Holds `client` until node `node`'s agent connects for session `id` (Take), or until
  // `within` passes: the client is then answered 504.
  void Wait(const std::string& id, const std::string& node, const std::string& tenant,
            Responder client, std::chrono::milliseconds within);
  // The client waiting for session `id`, when node `node` is the session's; nullopt otherwise
  // (unknown, given up, or another node's: a node can take only its own sessions).
  // With the session's tenant.
  std::optional<std::pair<Responder, std::string>> Take(const std::string& id,
                                                        const std::string& node);
  // Answers every waiting client 503 and stops the expiry thread.
  void Stop();

  // A tenant's sessions joined and not ended yet; Joined and Ended count them.
  int64_t OpenOf(const std::string& tenant) const;
  void Joined(const std::string& tenant);
  void Ended(const std::string& tenant);

 private:
  struct Waiting {
    std::string node;
    std::string tenant;
    Responder client;
    std::chrono::steady_clock::time_point deadline;
  };
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                       // Guarded by mu_.
  std::map<std::string, Waiting> waiting_;  // Guarded by mu_.
  std::map<std::string, int64_t> open_;     // Guarded by mu_; by tenant, none at 0.
  std::thread thread_;                      // Started by the first Wait.
};

}  // namespace tessera::api
