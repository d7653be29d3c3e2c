// The agent supervisor: which nodes agents serve, what each node's agent is told to run or stop
// (its desired state, versioned by a generation), and the reports that come back.
// Two kinds of agent serve nodes:
//   joined     a `tessera agent` on a real server, which joined with a node token
//              (POST /v1/nodes) and long-polls POST /v1/agent/sync (docs/agent.md). Its node
//              keeps a lease by reporting; one that stops reporting for the node timeout is
//              not_ready, and its work moves once the lease it last got has surely run out
//              (NodeHealth::ExpireLeases, AgentTiming).
//   simulated  fleet-file nodes under `tessera server --sim-agents`: the agent does at once what
//              it is told, and its reports arrive within the same core round.
// Nodes of a fleet file without --sim-agents have no agent: nothing runs there, so deleting an
// instance ends it at once.
// The supervisor keeps only what changed, so a round costs what changed, never a scan of every
// instance; a long-polling agent is answered after the round that changed its node commits.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/result.h"
#include "core/instance.h"
#include "core/mode_change.h"
#include "core/volumes.h"
#include "store/store.h"
#include "telemetry/sample.h"
#include "telemetry/series.h"

namespace tessera::core {

// How a node keeps its tenants' workloads apart, as its agent reports it (docs/agent.md).
enum class Isolation {
  kNone,  // Every workload runs as the agent's own user: the node hosts one tenant at a time.
  kUid,   // Each tenant's workloads run under a uid of their own, out of the agent's reach.
};
std::string_view IsolationName(Isolation isolation);  // "none", "uid".
std::optional<Isolation> ParseIsolation(std::string_view name);

// The agent protocol's timing, which the server dictates in every answer (docs/agent.md, "Leases
// and fencing"):
//   report_period  the longest an agent waits at the server between reports (heartbeat_ms);
//   node_timeout   a node not heard for this long, while the server was up, is not_ready;
//   outage_bound   how long the server may be down with every workload left running.
// An agent's lease covers an outage and the node timeout after it; the work of a node that went
// silent moves once that lease has run out and its workloads' kill grace has passed (fence).
struct AgentTiming {
  Duration report_period = std::chrono::seconds(2);
  Duration node_timeout = std::chrono::seconds(10);
  Duration outage_bound = std::chrono::minutes(5);

  Duration lease() const { return outage_bound + node_timeout; }
  // From the last report heard to when no copy of the node's work can still run: the lease,
  // the shims' 2 s from SIGTERM to SIGKILL, and 3 s for a container runtime to tear down.
  Duration fence() const { return lease() + std::chrono::seconds(5); }
};
// Refuses timings that cannot work, naming the flag and the rule: a report period of 100 ms to
// 30 s, a node timeout of at least two report periods (one late report never makes a node
// not_ready), an outage bound of 0 to 7 days.
Status CheckAgentTiming(const AgentTiming& timing);

// What an agent says happened to an instance.
struct AgentReport {
  std::string instance;
  int attempt = 0;                                // The instance's restarts when it was started.
  InstanceState state = InstanceState::kRunning;  // kRunning, or kTerminated once it ended.
  std::optional<int> exit_code;                   // kTerminated: the process's, when it had one.
  std::string reason;                             // "exited", "stopped", "lease expired", ...
  bool lost = false;                              // It could not be adopted by a restarted agent.
  std::optional<Time> started_at;
  // kRunning: the TCP port its agent reserved for it (the desired state's reserve_port).
  std::optional<int> port;
  // kRunning: where its agent mapped each of its ports, (port, host port).
  std::vector<std::pair<int, int>> endpoints{};
};

// A workload whose image its agent is pulling: a report with "state": "pulling".
struct PullReport {
  std::string instance;
  int attempt = 0;
  PullProgress progress;
};

// POST /v1/agent/register: an agent run and its node's inventory (docs/agent.md).
// One MIG device on a node as its agent reports it (mig_manager.h): on GPU `gpu`, of `profile`
// at memory slice `start` (-1: the driver would not tell), and whose it is.
struct MigReport {
  int gpu = 0;
  std::string uuid;
  std::string profile;
  int start = 0;
  std::string owner;  // The instance holding it, "" (idle, Tessera's) or "unmanaged".
  friend bool operator==(const MigReport&, const MigReport&) = default;
};

struct AgentRegistration {
  std::string agent_id;  // Unique per agent run.
  nlohmann::json inventory;
  // Where other nodes reach this one (groups' MASTER_ADDR): the agent's --advertise-address, else
  // the address the server saw its registration come from. Empty: the node's name.
  std::string address{};
  // The node's MIG devices, from an agent that makes them on demand; absent otherwise.
  std::optional<std::vector<MigReport>> mig{};
};

// New bytes of a workload's log, shipped by its agent.
struct WorkloadLog {
  std::string instance;
  int attempt = 0;
  int64_t offset = 0;  // Of data's first byte in the workload's whole output.
  std::string data;
};

// POST /v1/agent/sync: a report, and how long the agent will wait for news.
// What an agent says of the volumes on its node (docs/volumes.md).
struct VolumeReport {
  bool enforced = false;  // Each volume is a file system of its own, so its size is a hard limit.
  std::string note;       // Why not, when not.
  std::vector<std::pair<std::string, VolumeUse>> held;  // By volume id: every one it holds.
};

struct AgentSync {
  std::string agent_id;
  int64_t seq = 0;          // Increases with every report of one agent run.
  uint64_t generation = 0;  // The desired state the agent last received.
  Duration wait{};          // Park the call until the node changes, at most this long.
  std::vector<AgentReport> reports;
  std::vector<PullReport> pulls;  // Reports of workloads still pulling their image.
  std::vector<WorkloadLog> logs;
  std::optional<bool> limits_enforced;
  std::string limits_note;
  std::optional<Isolation> isolation;  // Absent from an older agent.
  std::string isolation_note;
  std::shared_ptr<const telemetry::Telemetry> telemetry;
  // What the agent did with the GPU mode changes it was sent (docs/agent.md).
  std::vector<GpuModeResult> gpu_mode_results;
  std::optional<std::vector<MigReport>> mig;  // As in AgentRegistration.
  int64_t mig_repartitions = -1;              // The agent run's count; -1 when not told.
  // Whether the node's shares run under MPS, with their limits set through it, or time-sliced
  // without limits (and why); absent from an older agent.
  std::optional<bool> shares_mps;
  std::string shares_note;
  std::optional<VolumeReport> volumes;  // Absent from an agent that predates volumes.
};

// A command, or a shell, a tenant asked to run inside one of a node's instances (docs/volumes.md,
// "A shell"): its agent hears of it in the desired state and connects for it, until `expires`.
// Not stored: a session lives on the connections of the replica that opened it.
struct ExecSession {
  std::string id;  // "exec-" and 32 random hex digits: the agent names it when it connects.
  std::string node;
  std::string instance;
  int attempt = 0;  // The instance's run (Instance::restarts) it goes into.
  std::string tenant;
  std::vector<std::string> command;  // argv; empty: the workload's shell.
  bool tty = false;
  int cols = 80, rows = 24;
  Time expires;
};

// A fault an operator asked a node's (simulated) GPUs to show (State::InjectFault).
struct InjectedFault {
  int64_t id = 0;
  std::string fault;  // "xid:GPU:CODE", "overheat:GPU", ...
};

// What a node's agent is told: DesiredStates builds it (desired_state.h), api/agent_codec.cc
// writes it in the protocol's form (docs/agent.md, "Desired state").
struct DesiredGpu {
  int index = 0;
  int milli = 0;  // The workload's part of the GPU, in milli-GPU.
  // A MIG slice: its profile and start, and the UUID of the device made for it.
  std::string mig_profile;
  int mig_start = 0;
  std::string uuid;
  std::optional<int64_t> memory_mib;  // A share's MPS memory limit.
};
struct DesiredVolume {
  std::string id, name, path;
  int64_t size_gib = 0;
};
struct DesiredWorkload {
  enum class Action { kRun, kStop, kPreempt };
  std::string id;
  int attempt = 0;
  std::string name, tenant, command;
  // Tessera's variables, then the user's, secrets' values filled in (Tessera's win).
  std::map<std::string, std::string> env;
  int64_t cpu_milli = 0, memory_mib = 0, stop_grace_ms = 0;
  ImageSpec image;  // Its registry password included (a secret's value filled in).
  std::vector<DesiredVolume> volumes;
  std::vector<int> ports;
  Action action = Action::kRun;
  Time deadline{};     // kPreempt: when it is stopped.
  std::string reason;  // kPreempt.
  // Rank 0 of a gang waiting for its rendezvous: the variable whose port the agent reserves, and
  // those it writes the port into.
  std::string reserve_port;
  std::vector<std::string> port_env;
  std::vector<DesiredGpu> gpus;
  int64_t log_offset = 0;  // Where the server's copy of its log ends.
};
struct DesiredState {
  std::string node;
  std::vector<InjectedFault> faults;
  uint64_t generation = 0;
  Duration lease{}, heartbeat{};
  std::vector<DesiredWorkload> workloads;
  std::vector<std::string> volumes_to_delete;  // Volume ids.
  std::vector<GpuModeChange> mode_requests;
  std::vector<ExecSession> exec;
};

// A node joined by an agent.
struct AgentNode {
  // Stored.
  std::string name;  // Also the node's id in the fleet.
  std::map<std::string, std::string> labels;
  catalog::SharingMode sharing = catalog::SharingMode::kExclusive;  // GPUs not in MIG mode.
  std::string token_hash;
  Time created_at;
  nlohmann::json inventory;  // As its agent registered it; null before.
  bool drained = false;
  // GPUs out of service, by index: why, and since when (docs/gpu-health.md). A GPU leaves this
  // only when an operator clears it.
  struct Unhealthy {
    std::string reason;
    Time since;
  };
  std::map<int, Unhealthy> unhealthy;
  // Per GPU, the double-bit ECC count an operator accepted when clearing it: only errors above
  // it take the GPU out of service again (the driver's count survives until a reset).
  std::map<int, int64_t> dbe_cleared;
  // Per GPU not in MIG mode, the mode an operator set (tessera nodes set-gpu-mode), which
  // outlasts restarts; a GPU without one has `sharing`. A MIG GPU's mode is its inventory's.
  std::map<int, catalog::SharingMode> gpu_sharing;
  // Per GPU, its outstanding mode change (the GPU is held), else the last one that ended.
  std::map<int, GpuModeChange> mode_changes;
  int64_t next_mode_change = 1;
  // A fleet-file node served by one of the server's own simulated agents (--sim-agents): not
  // stored, its token made afresh at every start, and spot work on it has no notice period.
  bool simulated = false;
  // Silent for the node timeout: not_ready, its work unbilled, and moved once its lease ran out.
  // Stored: after a restart it stays so until its agent reports.
  bool lost = false;
  std::string address;  // As its agent last registered (AgentRegistration::address).
  // Not stored: rebuilt as its agent reports.
  std::string agent_id;     // The agent run that registered last.
  int64_t report_seq = -1;  // The last report accepted from agent_id.
  Time last_seen;
  std::optional<bool> limits_enforced;
  std::string limits_note;
  // As the current agent run last reported it; none before it did (a run that has not reported
  // yet, or an older agent that never does), which counts as Isolation::kNone.
  std::optional<Isolation> isolation;
  std::string isolation_note;
  std::shared_ptr<const telemetry::Telemetry> telemetry;  // The last report's.
  Time telemetry_at;
  // The inventory as series labels need it; set with the inventory.
  std::shared_ptr<const telemetry::NodeInfo> info;
  uint64_t generation = 1;        // Bumped whenever its desired state changes.
  uint64_t acked_generation = 0;  // The desired state its agent said it last received.
  // Being removed (NodeHealth::RemoveNode): drained, and gone once its agent has received the
  // desired state that stops its work (generation `remove_after`), or its lost work has moved. Not
  // stored: a restart in between leaves it drained, to be removed again.
  bool removing = false;
  uint64_t remove_after = 0;
  std::set<std::string> assigned;  // Instances its agent is told about.
  // Faults an admin asked its (simulated) GPUs to show: {"id", "fault"}, the newest kept.
  std::vector<InjectedFault> faults;
  int64_t next_fault = 1;
  // Its MIG devices as its agent last reported them (an agent that makes them on demand), the
  // fleet bookings that keep the unmanaged ones' slices from being granted, and how often the
  // agent run changed a GPU's layout to make a granted slice.
  std::vector<MigReport> mig;
  std::vector<fleet::Assignment> mig_held;
  int64_t mig_repartitions = 0;
  std::optional<bool> shares_mps;  // As AgentSync::shares_mps, last reported.
  std::string shares_note;
  // Whether its volumes' sizes are hard limits, as its agent last said (VolumeReport).
  std::optional<bool> volumes_enforced;
  std::string volumes_note;
  // Exec sessions its agent has not connected for yet (not stored).
  std::vector<ExecSession> exec;

  bool registered() const { return !inventory.is_null(); }
  // How many GPUs its agent registered.
  size_t gpu_count() const;
  // Every one of its GPUs is out of service: the node is not_ready.
  bool all_gpus_unhealthy() const { return !unhealthy.empty() && unhealthy.size() >= gpu_count(); }
  // `unhealthy` as stored and shown: [{"gpu", "reason", "since"}].
  nlohmann::json UnhealthyJson() const;
  // Its inventory as its series' labels need it (`info`), with each GPU's health.
  std::shared_ptr<const telemetry::NodeInfo> SeriesInfo() const;
  // "waiting_for_agent" before its agent registered, "not_ready" while lost or with every GPU out
  // of service, else "ready".
  std::string_view StateName() const;
  // How its agent says it isolates workloads; until it says, that it hosts one tenant at a time.
  std::string IsolationNote() const;
  // Whether each tenant's workloads run apart; false until its agent run said so.
  bool isolated() const { return isolation == Isolation::kUid; }
  // The mode GPU `gpu` has when its inventory does not say MIG.
  catalog::SharingMode SharingOf(int gpu) const {
    auto it = gpu_sharing.find(gpu);
    return it == gpu_sharing.end() ? sharing : it->second;
  }
  // GPU `gpu` is changing its mode: nothing new is granted on it.
  bool mode_held(int gpu) const {
    auto it = mode_changes.find(gpu);
    return it != mode_changes.end() && it->second.outstanding();
  }
};

// A long-polling agent, answered once its node's generation passes `after` or at `deadline`.
struct SyncWaiter {
  uint64_t after = 0;
  Time deadline;
  std::function<void()> answer;  // Renders the desired state; runs on the core thread.
};

class AgentSupervisor {
 public:
  // `notice`: a simulated agent leaves a preempting instance running until Exited says it
  // stopped (StateOptions::simulated_notice), rather than stopping it at once.
  explicit AgentSupervisor(bool simulated, bool notice = false)
      : simulated_(simulated), notice_(notice) {}

  // Whether an agent serves `node` (a simulated one, or a joined one): a deleted instance then
  // stops through its agent, and a spot victim gets its notice.
  bool Serves(const std::string& node) const {
    auto it = joined_.find(node);
    return it != joined_.end() ? it->second.registered() : simulated_;
  }
  // `inst` changed in a way its agent must hear: scheduled (start it), stopping (stop it),
  // preempting (give notice), or it left the node (forget it).
  void Notify(const Instance& inst, const std::string& node);
  // A simulated agent's workload ended on its own with `exit_code` (the what-if simulator's jobs
  // finishing); reported like any exit.
  void Exited(const Instance& inst, int exit_code);
  // Simulated agents' reports since the last call, oldest first.
  std::vector<AgentReport> Collect();

  // Joined nodes, by name.
  std::map<std::string, AgentNode>& nodes() { return joined_; }
  const std::map<std::string, AgentNode>& nodes() const { return joined_; }
  AgentNode* Find(const std::string& name);
  const AgentNode* Find(const std::string& name) const;
  // Bumps the node's generation: its waiting agent is answered after this round commits.
  void Changed(AgentNode& node);
  // Queues a fault for the node's agent to inject into its GPU backend ("xid:GPU:CODE",
  // "overheat:GPU", "cool:GPU", "lost:GPU", "found:GPU"; checked by the agent, which logs a
  // refusal); the newest kMaxFaults are kept. NotFound for a node without a registered agent.
  // Not stored: a fault is a moment's event.
  Result<int64_t> InjectFault(const std::string& node, const std::string& fault);
  static constexpr size_t kMaxFaults = 16;
  // Queues exec session `request` (its id, instance and expiry set) for `node`'s agent, which
  // hears of it with its desired state until it expires. Unavailable while kMaxWaitingExec
  // sessions of the node wait for its agent already (expired ones are dropped first): a flood
  // of requests waits here, not in threads on the node.
  Status QueueExec(AgentNode& node, const ExecSession& request, Time now);
  static constexpr size_t kMaxWaitingExec = 32;
  // The session's agent connected for it (or it was given up): its node's agent no longer hears
  // of it. Its agent is not woken for this: it ignores a session it took already.
  void CloseExec(const std::string& node, std::string_view id);
  // The stored form of a node, for the batch.
  static std::pair<std::string, std::string> Record(const AgentNode& node);
  // Appends `node`'s record to `batch`; a simulated agent's node is made afresh from the fleet
  // file at every start, and is not stored.
  static void Save(const AgentNode& node, store::Batch& batch);
  // A node from its stored form; DataLoss naming the key when malformed.
  static Result<AgentNode> FromRecord(const std::string& key, const std::string& value);
  static constexpr std::string_view kRecordPrefix = "agent_node/";

  // Parks a long poll of `node`'s agent.
  void Park(const std::string& node, SyncWaiter waiter);
  // Answers the waiters whose node changed or whose deadline passed. After a commit.
  void AnswerWaiters(Time now);
  // True when waiters or joined nodes need the core to wake up on its own.
  bool needs_ticks() const { return !joined_.empty(); }
  size_t waiting() const;

 private:
  bool simulated_;
  bool notice_;
  std::vector<AgentReport> reports_;
  std::map<std::string, AgentNode> joined_;
  std::map<std::string, std::vector<SyncWaiter>> waiters_;
  std::set<std::string> changed_;  // Nodes whose generation moved since waiters were answered.
  Time last_scan_;
  static constexpr auto kDeadlineScan = std::chrono::milliseconds(50);
};

}  // namespace tessera::core
