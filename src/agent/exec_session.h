// The agent's side of exec sessions (docs/volumes.md, "A shell"): for each session the server
// names in the desired state, a thread connects to the server for it (the agent only calls out:
// its own TLS, token and client certificate), runs the command inside the workload (podman exec
// into a container; a bare process as the workload's uid, in its directory, cgroup and
// environment), under a pseudo-terminal when asked, and carries the exec frames
// (common/exec_frames.h) between the stream and the command until the command exits, the client
// leaves, or the workload stops, which ends the session with the command killed.
// Thread-safety: one thread (the agent loop) calls the methods; each session runs on its own.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/workload.h"
#include "common/result.h"
#include "common/tunnel.h"

namespace tessera::agent {

// Opens the stream of session `id` to the server (POST /v1/agent/exec/{id}).
using ExecDialer = std::function<Result<std::unique_ptr<Tunnel>>(const std::string& id)>;

struct ExecCommand {
  std::string id;                    // The session's.
  std::string workload;              // The workload key it goes into.
  std::vector<std::string> command;  // Empty: a shell (bash when the workload has it, else sh).
  bool tty = false;
  int cols = 80, rows = 24;
};

class ExecSessions {
 public:
  // At most this many sessions run at once on a node; more are told so and end (exit 126).
  static constexpr size_t kMaxSessions = 32;

  explicit ExecSessions(ExecDialer dialer) : dialer_(std::move(dialer)) {}
  // Ends every session (their commands killed) and waits for their threads.
  ~ExecSessions();
  ExecSessions(const ExecSessions&) = delete;
  ExecSessions& operator=(const ExecSessions&) = delete;

  // Whether session `id` was started already (the desired state names it until it connects).
  bool Seen(const std::string& id) const { return seen_.count(id) > 0; }
  // Starts the session: `command` run in `target`.
  void Start(const ExecCommand& command, const ExecTarget& target);
  // Connects for the session only to tell the client why it cannot run, and ends it (exit 126).
  void Refuse(const std::string& id, const std::string& why);
  // Ends the sessions into workloads not in `running` (their commands are killed), forgets the
  // ids the server no longer names (`named`), and joins the threads that ended.
  void Keep(const std::set<std::string>& running, const std::set<std::string>& named);
  size_t active() const;

 private:
  struct Session {
    std::string workload;
    std::atomic<bool> end{false};  // Asked to end: the workload stopped.
    std::atomic<bool> done{false};
    std::thread thread;
  };
  void Launch(const std::string& id, const std::string& workload,
              std::function<void(Session&)> body);

  ExecDialer dialer_;
  std::map<std::string, std::unique_ptr<Session>> sessions_;  // By session id.
  std::set<std::string> seen_;
};

// Runs one session on the calling thread: connects with `dialer`, runs `command` in `target`
// and carries the frames until it ends; `end` asks it to end (the command killed, exit 137).
// Returns the exit code sent (or the error that ended the stream first).
Result<int> RunExecSession(const ExecDialer& dialer, const ExecCommand& command,
                           const ExecTarget& target, const std::atomic<bool>& end);

}  // namespace tessera::agent
