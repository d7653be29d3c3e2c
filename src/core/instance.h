// The control plane's records: tenants and instances, their states and billing modes, and their
// JSON forms (the API's bodies and the store's documents share one codec, so what is stored is
// what is shown).
// Thread-safety: plain values; the core thread owns the live copies.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "billing/meter.h"
#include "common/clock.h"
#include "common/ids.h"
#include "common/money.h"
#include "common/result.h"
#include "core/env.h"
#include "core/image.h"
#include "core/volumes.h"
#include "fleet/fleet.h"
#include "store/store.h"

namespace tessera::core {

enum class InstanceState {
  kPending,     // Queued: waiting for capacity.
  kScheduled,   // Placed; the node's agent has not started it yet.
  kRunning,     // The agent reports it running.
  kStopping,    // Deleted by its owner; the agent is stopping it.
  kTerminated,  // Stopped by request. Terminal.
  kSucceeded,   // The workload exited 0. Terminal.
  kFailed,      // The workload or its node failed. Terminal.
  kPreempted,   // Evicted for higher-priority work. Terminal unless it restarts.
  kPreempting,  // A spot victim in its notice period: its agent stops it at preempt_at.
};
std::string_view StateName(InstanceState s);
std::optional<InstanceState> ParseState(std::string_view s);
// True for states that hold or wait for capacity (pending, scheduled, running, stopping,
// preempting).
bool IsActive(InstanceState s);

enum class Billing { kReserved, kOnDemand, kSpot };
std::string_view BillingName(Billing b);  // "reserved", "on_demand", "spot".
std::optional<Billing> ParseBilling(std::string_view s);
// Scheduling priority: reserved (2) over on-demand (1) over spot (0).
int Priority(Billing b);

// What an instance asks for, resolved from an instance type or given field by field.
struct Shape {
  std::string instance_type;  // Empty when the shape was given field by field.
  std::string gpu_model;      // Catalog id (aliases resolved).
  catalog::SharingMode mode = catalog::SharingMode::kExclusive;
  int gpus = 0;                // kExclusive: whole GPUs (0 = CPU-only).
  std::string mig_profile;     // kMig.
  int milli_gpu = 0;           // kShared: 1..999.
  int64_t gpu_memory_mib = 0;  // kShared: memory cap.
  int64_t vcpus = 0;
  int64_t memory_mib = 0;
  bool nvlink = false;

  // GPU demand in milli-GPU: 1000 per whole GPU, milli_gpu for a share, and for a MIG slice its
  // compute slices over the GPU's, rounded down (quotas sum slices first: core/usage.h).
  int64_t GpuMilli(const catalog::Catalog& catalog) const;
};

// A GPU (or MIG instance) an instance holds, as the API shows it.
struct GpuRef {
  std::string uuid;   // "GPU-..." or, for a MIG instance, "MIG-...".
  std::string model;  // Catalog id.
  int index = 0;      // On the node.
  std::string mig_profile;
  int mig_start = 0;
  int milli_gpu = 0;  // Shares only.
};

// Where one of an instance's ports is reached: its agent mapped `port` to `host_port` on the node
// at `node_address` (docs/volumes.md, "Endpoints").
struct Endpoint {
  int port = 0;
  std::string node_address;
  int host_port = 0;
  friend bool operator==(const Endpoint&, const Endpoint&) = default;
};
inline constexpr size_t kMaxPorts = 16;

// Reads the optional "ports" field of a create request or a stored instance into `out`: at most
// kMaxPorts distinct integers 1..65535; errors go to `f`, naming the entry (ports[1]).
void ReadPorts(JsonFields& f, std::vector<int>& out);

// One transition of an instance, for its history (`GET /v1/instances/{id}`).
struct StateChange {
  Time at;
  InstanceState state = InstanceState::kPending;
  std::string reason;
};
// The newest transitions an instance keeps.
inline constexpr size_t kHistoryKept = 16;

struct Instance {
  InstanceId id;
  TenantId tenant;
  std::string name;
  InstanceState state = InstanceState::kPending;
  Billing billing = Billing::kOnDemand;
  Shape shape;
  std::string command;  // Empty with an image: the image's own entrypoint runs.
  // Its OCI image, pull policy and registry credentials; stored with the instance, the password
  // sealed (core/image.h).
  ImageSpec image;
  // Its environment (core/env.h): literals sealed at rest under "instance/<id>", and references
  // to the tenant's secrets. Once it ended, the literals' values are dropped from memory and
  // store alike: work that will not run again keeps no values at rest.
  Env env;
  // The tenant's volumes it mounts (core/volumes.h): it is placed on their node.
  std::vector<VolumeMount> volumes;
  // The ports it serves on (1..65535), and while it runs where each is reached.
  std::vector<int> ports;
  std::vector<Endpoint> endpoints;
  std::string created_by;  // The user who made it (core/users.h); "" when not known.
  bool restart = true;     // Spot: re-queue automatically after preemption.
  // It may be moved to another GPU to make room (CreateInstanceRequest::migratable).
  bool migratable = false;
  int stop_grace_seconds = 10;  // SIGTERM, then SIGKILL after this long.
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  Money price_per_hour;
  Time created_at;
  Time updated_at;
  int restarts = 0;
  int64_t seq = 0;     // Creation order; FIFO within a priority.
  std::string reason;  // Why the last transition happened (preemption, failure, ...).
  std::optional<Time> preempted_at;
  std::optional<Time> preempt_at;  // kPreempting: when its agent stops it.
  Time enqueued_at;                // When this attempt began waiting: created, or re-queued.
  std::optional<Time> started_at;  // When its agent reported this attempt running.
  std::optional<int> exit_code;    // The workload's, once it ended (128 + signal if killed).
  std::optional<fleet::Assignment> assignment;  // While it holds capacity.
  // Repacking (docs/core.md): `moving` from its notice to move until it restarts elsewhere, with
  // the capacity booked for it there (`move_to`, none when a restart could not book it again);
  // `moved_at` is its last move's notice, after which it is not moved again for a while.
  bool moving = false;
  std::optional<fleet::Assignment> move_to;
  std::optional<Time> moved_at;
  // Billing (docs/billing.md): the open interval while running, and for `reserved` billing the
  // reservation whose unit it holds while active.
  std::optional<billing::Meter> meter;
  std::string reservation;
  // A member of a group (docs/groups.md): the group's id and this member's rank, and the
  // distributed-training environment its placement set (WORLD_SIZE, RANK, MASTER_ADDR, ...).
  std::string group;
  int rank = 0;
  std::map<std::string, std::string> group_env;
  std::string node;  // Where this attempt is placed; "" while it waits or once it ended.
  std::vector<GpuRef> gpus;
  // Where its last placed attempt was, kept when it ends or moves (an operator asks which GPU a
  // failed job ran on): the API shows it as `node` and `gpus` once the instance ended.
  std::string ran_on;
  std::vector<GpuRef> ran_gpus;
  std::vector<StateChange> history;  // Oldest first, at most kHistoryKept.
  // Not stored: the image pull its agent last reported for this attempt, while it is scheduled
  // (Instances::Transition clears it).
  std::optional<PullProgress> pull;
};

// The API form of an instance: a scheduled instance whose image is being pulled shows state
// "pulling" and `pull`; registry credentials show their username only.
nlohmann::json ToJson(const Instance& inst);
// The stored form: the API form (its real state, no pull) plus what recovery needs (the exact
// assignment, seq), with the registry password and env literals sealed (REQUIRES: sealed).
nlohmann::json ToStoredJson(const Instance& inst, const fleet::Fleet& fleet);
// `inst`'s record for the store's batch: its id, tenant and state, its stored form as the document
// (none with `document` false: runs without a store), and when it ended.
store::InstanceRecord StoredRecord(const Instance& inst, const fleet::Fleet& fleet, bool document);
// An instance rebuilt from its stored form, and whether the assignment it held still names
// today's fleet: `binding` is FailedPrecondition, saying what changed, when its node, GPU or MIG
// profile is gone (instance.assignment is then empty).
struct StoredInstance {
  Instance instance;
  Status binding;
};
// Rebuilds an instance from its stored form. DataLoss naming the instance and the field when the
// record is malformed.
Result<StoredInstance> FromStoredJson(const nlohmann::json& j, const fleet::Fleet& fleet);

// The GPUs an assignment holds, as the API shows them.
std::vector<GpuRef> DescribeGpus(const fleet::Assignment& a, const fleet::Fleet& fleet);

// Deterministic, well-formed UUIDs for GPUs and MIG instances of simulated nodes, derived from
// the node name and position, so they are stable across restarts.
std::string GpuUuid(std::string_view node, int gpu);
std::string MigUuid(std::string_view node, int gpu, int start);

}  // namespace tessera::core
