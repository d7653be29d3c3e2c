// The node agent (`tessera agent`): registers its node's inventory with the server, then
// long-polls POST /v1/agent/sync (docs/agent.md). Each sync carries the state of every workload,
// the new bytes of their logs, GPU telemetry and whether limits are enforced; its answer is the
// node's desired state, which the agent applies: it starts what should run (never twice), stops
// what should stop, gives notice to what is preempted, and stops whatever the node no longer
// holds. Every answer renews the lease; the workloads' shims stop them when it lapses, even if
// the agent is dead, so no instance ever runs twice (workload.h).
// The transport is one function, so the same agent runs against the server over HTTP and, in
// tests and benchmarks, against anything that answers like it.
// Thread-safety: one thread runs an Agent; Stop may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "agent/container_image.h"
#include "agent/exec_session.h"
#include "agent/gpu_backend.h"
#include "agent/mig_manager.h"
#include "agent/mps.h"
#include "agent/volumes.h"
#include "agent/workload.h"
#include "common/result.h"
#include "telemetry/series.h"

namespace tessera::agent {

// One request to the server: POST `path` with a JSON body; the answer's status and body. A
// transport failure is Unavailable.
struct HttpAnswer {
  int status = 0;
  std::string body;
};
using Transport = std::function<Result<HttpAnswer>(const std::string& path, const std::string& body,
                                                   std::chrono::milliseconds timeout)>;

// A transport over HTTP(S) to `url` with a bearer token; `ca_file` for a private authority, and a
// client certificate and key (both or neither) for a server that asks for one (mutual TLS).
Result<Transport> HttpTransport(const std::string& url, const std::string& token,
                                const std::string& ca_file = "",
                                const std::string& client_cert = "",
                                const std::string& client_key = "");

struct AgentOptions {
  // The longest the agent waits between reports, unless the server's answers say less.
  std::chrono::milliseconds heartbeat{2000};
  size_t log_chunk_bytes = 64 << 10;  // Per workload per report.
  // Wait at the server for news (the default), or report every heartbeat and sleep between
  // (how benchmarks time a bare report).
  bool long_poll = true;
  // Where workloads with an image get it (pulls, the cache); null: such workloads fail, saying
  // this node runs no containers.
  std::shared_ptr<ImageStore> images;
  // The CDI device of each GPU and MIG device by its GpuDeviceKey (gpu_devices.h), e.g. "0" ->
  // "nvidia.com/gpu=GPU-...", "0/1g.10gb@3" -> "nvidia.com/gpu=MIG-...": a container gets those
  // of its grant (a share, its GPU's).
  std::map<std::string, std::string> gpu_cdi_devices;
  // Real GPUs: a grant without a CDI device fails its container's start, naming it. Simulated
  // GPUs have no nodes: their containers get what a node's own spec names, else nothing.
  bool gpu_cdi_required = false;
  // Where other nodes reach this one (a group's MASTER_ADDR when rank 0 runs here); empty: the
  // address the server sees this agent's calls come from.
  std::string advertise_address;
  // MIG devices made on demand (mig_manager.h) when the backend can change MIG and a record
  // path and the catalog are given: the record of Tessera's devices, and whether devices Tessera
  // did not make are taken over as free slices.
  std::string mig_record;
  bool mig_adopt = false;
  const catalog::Catalog* catalog = nullptr;
  // The CDI devices by GpuDeviceKey made afresh after MIG devices were made (the agent's command
  // writes its CDI spec again); null: they stay as they were.
  std::function<std::map<std::string, std::string>()> refresh_gpu_cdi;
  // The program that resets a GPU when an operator allowed it (a MIG mode change pending a
  // reset): run as `PROGRAM --gpu-reset -i INDEX`.
  std::string nvidia_smi = "nvidia-smi";
  // Shares of a GPU run under NVIDIA MPS (mps.h) when this control program is found: one daemon
  // per GPU and tenant uid under `mps_root`, whose server's limits are the tenant's shares there.
  // Empty: shares get only their environment.
  std::string mps_control;
  std::string mps_root;
  // The node's volumes (volumes.h); null: a workload that mounts one fails, saying so.
  std::shared_ptr<VolumeHost> volumes;
  // How the agent connects to the server for an exec session (exec_session.h); null: it takes
  // none (the server's own in-process agents, whose nodes the server refuses sessions for).
  ExecDialer exec_dialer;
};

// A fault to inject into the GPU backend: "xid:GPU:CODE", "overheat:GPU", "cool:GPU",
// "lost:GPU", "found:GPU" (tessera agent --sim-fault, and the faults of an admin's POST
// /v1/nodes/{id}/faults).
Status InjectFault(GpuBackend& gpus, const std::string& spec);

// One pull in flight, shared by the agent and the thread that runs it (agent_images.cc).
struct PullJob {
  std::mutex mu;
  PullProgress progress;  // Guarded by mu.
  bool done = false;      // Guarded by mu.
  Status status;          // Guarded by mu; once done.
};

class Agent {
 public:
  Agent(AgentOptions options, Transport transport, std::unique_ptr<GpuBackend> gpus,
        std::unique_ptr<WorkloadSupervisor> workloads);

  // Registers, then syncs until Stop. A refused token or a rejected inventory ends it with the
  // server's message; a server that cannot be reached is retried (the lease still lapses).
  Status Run();
  void Stop() { stop_ = true; }

  // One step each, for tests and the benchmark.
  Status Register();
  Status SyncOnce(std::chrono::milliseconds wait);

  // The last desired state's generation, and what the agent knows of its workloads.
  uint64_t generation() const { return generation_; }
  const std::string& node() const { return node_; }
  // True once a registration succeeded (any thread).
  bool registered() const { return registered_; }
  // This node's GPU series in dcgm-exporter's format, from the latest sample, labelled with the
  // instances the server placed here (`tessera agent --metrics-listen`). Any thread.
  std::string MetricsText() const;

 private:
  struct Known {
    std::string instance;
    int attempt = 0;
    bool noop = false;  // No command: nothing to run, running until stopped.
    bool stop_sent = false;
    int64_t log_next = -1;        // The next log byte to ship; -1 until the server says.
    int64_t stop_at_unix_ms = 0;  // A noop's notice deadline.
    std::string start_error;      // Why its workload could not start: it ended at once.
    // While its image is being pulled (noop until then): the pull, and what starts after it.
    std::shared_ptr<PullJob> pull;
    std::optional<WorkloadSpec> pending;
    // On a simulated GPU, how busy it keeps its GPUs (0..1): TESSERA_SIM_LOAD (percent) from its
    // environment when set, else its CPU use (one busy core: 1), measured over a second or more.
    std::optional<double> sim_load;
    double activity = 0;
    double cpu_seconds = -1;
    std::chrono::steady_clock::time_point cpu_at{};
  };

  Result<nlohmann::json> Post(const std::string& path, const nlohmann::json& body,
                              std::chrono::milliseconds timeout);
  // Posts `body`, renews the lease from when it was sent, and applies the desired state that
  // comes back.
  Result<nlohmann::json> Exchange(const std::string& path, const nlohmann::json& body,
                                  std::chrono::milliseconds timeout);
  // Applies a desired state: starts, stops, gives notice, forgets.
  void Apply(const nlohmann::json& desired);
  nlohmann::json Report(std::chrono::milliseconds wait);
  static std::optional<double> SimLoadOf(const nlohmann::json& w);
  // Moves k.activity to the workload's CPU use since the last reading (`cpu`: by workload key).
  static void UpdateActivity(Known& k, const std::map<std::string, double>& cpu,
                             const std::string& key, std::chrono::steady_clock::time_point now);
  // Workloads adopted from an earlier run of the agent, by key.
  void Adopt();
  // Starts a workload with an image: at once when the image is on the node (and the policy lets
  // it be used), else after a pull on a thread of its own (the workload reports "pulling").
  void StartWithImage(Known& k, WorkloadSpec spec, const nlohmann::json& w);
  // Starts the workloads whose pulls ended well; fails those whose pulls did not.
  void FinishPulls();
  // Starts `spec` now; a refusal ends the workload with the reason.
  void StartNow(Known& k, const WorkloadSpec& spec);
  // Whether the image has /bin/sh (its command then runs with sh -c), cached by reference.
  bool ImageHasShell(const std::string& image);
  // Makes the MIG devices of a new workload's slices and writes their UUIDs into its
  // environment in place of the server's; the failure, named, when one cannot be made.
  Status PrepareMig(const std::string& instance, const nlohmann::json& w, WorkloadSpec& spec);
  // Starts a new workload's shares under MPS: its tenant's daemon on each shared GPU, limits for
  // all the tenant's shares there, and the daemon's pipe in its environment.
  Status PrepareMps(const nlohmann::json& w, WorkloadSpec& spec);
  // The MPS daemons of `uid` (one per GPU it holds shares on).
  MpsDaemons& MpsOf(int64_t uid);
  // Carries out the server's GPU mode requests (a MIG mode change) not yet answered.
  void ApplyModeRequests(const nlohmann::json& desired);
  // Makes a new workload's volumes ready and puts them in its spec; the failure, named.
  Status PrepareVolumes(const nlohmann::json& w, WorkloadSpec& spec);
  // Removes the volumes the server deleted (those still busy are tried again next time).
  void RemoveVolumes(const nlohmann::json& desired);
  // Starts the exec sessions the server names that are new, and ends those whose workload no
  // longer runs (`phase`: the supervisor's workloads by key).
  void ApplyExec(const nlohmann::json& desired, const std::map<std::string, WorkloadPhase>& phase);

  // The outcome of a GPU mode request, reported until the server stops asking.
  struct ModeResult {
    int gpu = 0;
    std::string state;  // "applied", "pending_reset", "refused" or "failed".
    std::string reason;
  };

  AgentOptions options_;
  Transport transport_;
  std::unique_ptr<GpuBackend> gpus_;
  std::unique_ptr<WorkloadSupervisor> workloads_;
  std::string agent_id_;
  std::string node_;
  int64_t seq_ = 0;
  uint64_t generation_ = 0;
  std::chrono::milliseconds lease_{5000};   // As the server's last answer gave it.
  std::chrono::milliseconds period_{2000};  // Between reports: the heartbeat or the server's.
  int gpu_count_ = 0;
  int64_t last_fault_ = 0;      // The last fault the server asked for that was injected.
  bool telemetry_due_ = false;  // Send telemetry with the next report, whatever its turn.
  // Per GPU, whether it was lost and its double-bit ECC count, as last sent: a change is a fault
  // the server must hear of in this report, not at the next turn.
  std::vector<std::pair<bool, int64_t>> sent_faults_;
  std::map<std::string, Known> known_;  // By workload key, "<instance>-a<attempt>".
  // When the workloads' CPU use was last read (simulated GPUs only): once a second at most, as
  // UpdateActivity measures over a second, however often desired states arrive.
  std::chrono::steady_clock::time_point cpu_read_at_{};
  std::map<std::string, bool> image_shell_;     // ImageHasShell's answers.
  std::unique_ptr<MigManager> mig_;             // Null unless MIG devices are made on demand.
  std::map<int64_t, ModeResult> mode_results_;  // By request id.
  bool register_again_ = false;         // The inventory changed (a MIG mode did): register anew.
  std::vector<std::string> gpu_uuids_;  // By index, as registered.
  std::string backend_;                 // The inventory's: "nvml" or "sim".
  std::unique_ptr<ExecSessions> exec_;  // Null without AgentOptions::exec_dialer.
  // MPS, per tenant uid; and what every tenant's shares add up to per (GPU, uid): the largest
  // thread percentage and the sum of the memory.
  std::map<int64_t, std::unique_ptr<MpsDaemons>> mps_;
  std::map<std::pair<int, int64_t>, std::pair<int, int64_t>> share_limits_;
  bool mps_available_ = false;
  std::string mps_note_ = "no MPS control program was given";
  std::atomic<bool> stop_{false};
  std::atomic<bool> registered_{false};
  // What MetricsText renders, as the agent loop last saw it.
  mutable std::mutex metrics_mu_;
  telemetry::NodeInfo metrics_node_;                    // Guarded by metrics_mu_.
  std::optional<telemetry::Telemetry> metrics_sample_;  // Guarded by metrics_mu_.
  std::vector<telemetry::Holder> metrics_holders_;      // Guarded by metrics_mu_.
};

// The workload key of an instance's attempt, and back.
std::string WorkloadKey(const std::string& instance, int attempt);
bool ParseWorkloadKey(const std::string& key, std::string& instance, int& attempt);

// An inventory as the server's registration takes it.
nlohmann::json InventoryJson(const Inventory& inv);

}  // namespace tessera::agent
