// The agents a `tessera server` runs in its own process (--sim-agents, --demo) and the demo's
// load: the same agent code as `tessera agent`, talking to the server's own API without a socket
// (a fleet file's nodes) or over HTTP (the demo's own node).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "api/server.h"
#include "catalog/catalog.h"
#include "common/result.h"
#include "core/core.h"

namespace tessera::cli {

// The agents this process runs itself, each on a thread of its own; StopAll (or destroying the
// set) stops them and joins their threads. Their workloads live on under their shims (workload.h).
class InProcessAgents {
 public:
  InProcessAgents() = default;
  InProcessAgents(const InProcessAgents&) = delete;
  InProcessAgents& operator=(const InProcessAgents&) = delete;
  ~InProcessAgents();

  // Stops every agent and joins its thread (before the server they talk to stops). Idempotent.
  void StopAll();

  // Runs `a` on a new thread; `what` names it in the log if it stops on an error.
  void Run(std::unique_ptr<agent::Agent> a, std::string what);

  // Waits until every agent has registered, or `limit` has passed.
  void AwaitRegistered(std::chrono::seconds limit) const;

 private:
  std::vector<std::unique_ptr<agent::Agent>> agents_;
  std::vector<std::thread> threads_;
};

// --sim-agents: every node of the fleet file is served by an agent in this process, the same
// agent code as `tessera agent --backend sim`, through InProcessTransport. Instances with a
// command run as real processes under DATA/sim-agents/NODE. Returns once every agent has
// registered: a node without one ends deleted work at once, which a simulated agent's does not.
Status StartSimAgents(InProcessAgents& agents, core::Core& core, api::ApiServer& server,
                      const catalog::Catalog& catalog, const std::string& data_dir);

// The demo's own node: a `tessera agent` in process (the sim backend, 8 H100s) whose instances
// run as real processes under DATA/agent-demo-local, joined over HTTP like any other node.
Status StartDemoAgent(InProcessAgents& agents, core::Core& core, const catalog::Catalog& catalog,
                      const std::string& url, const std::string& data_dir);

// The demo's autoscaled group: tenant `demo`'s inference replicas, whose backlog follows a daily
// load curve in sped-up time (a day every 12 minutes, its peak at 14:00 as in the seed articles'
// trading day), so the autoscaler grows and shrinks the group while one watches.
class DemoLoad {
 public:
  static constexpr int kSecondsPerDay = 720;

  // The group's id, made on the first demo start and found again after.
  static Result<std::string> SetUp(core::Core& core);
  // Requests waiting at a time of the sped-up day: 5 at night, 55 at the 14:00 peak.
  static int64_t Backlog(double hour);

  DemoLoad(core::Core* core, std::string group);
  ~DemoLoad();
  const std::string& group() const { return group_; }

 private:
  void Loop();

  core::Core* core_;
  std::string group_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera::cli
