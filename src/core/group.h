// Instance groups (docs/groups.md): a gang of `size` members made from one instance template,
// placed all or nothing (at least `min_available` at once) with a topology and a placement
// preference. Members are ordinary instances that carry their group and rank; the group's record
// holds its template and which instances form its current attempt.
// Thread-safety: plain values; the core thread owns the live copies.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/ids.h"
#include "common/json.h"
#include "core/admission.h"
#include "core/cron.h"
#include "core/instance.h"

namespace tessera::core {

// pack: members on as few nodes (and NVLink islands) as possible; spread: on as many nodes as
// possible.
enum class Placement { kPack, kSpread };
std::string_view PlacementName(Placement p);
std::optional<Placement> ParsePlacement(std::string_view s);

// nvlink: each member's GPUs on one NVLink island; node: members on as few nodes as possible;
// any: wherever the scheduling policy puts each member.
enum class Topology { kNvlink, kNode, kAny };
std::string_view TopologyName(Topology t);
std::optional<Topology> ParseTopology(std::string_view s);

inline constexpr int kMaxGroupSize = 1024;

// What an autoscaled group follows: the mean GPU utilization or framebuffer use of its members'
// GPUs (percent), the backlog its owner reports per member (PUT /v1/groups/{id}/backlog), or the
// requests per second its service serves per member (docs/volumes.md, "A group's service").
enum class AutoscaleMetric { kGpuUtil, kFbUsed, kPending, kRps };
std::string_view AutoscaleMetricName(AutoscaleMetric m);  // gpu_util, fb_used, pending, rps.

// A group's one endpoint, /v1/groups/{id}/service/..., balanced over its healthy members: the
// members' `port`, and the path each is checked on (2xx or 3xx: healthy).
struct Service {
  int port = 0;
  std::string health_path = "/";
};

// A floor the schedule sets from each time its cron fires until another entry's fires.
struct ScheduleEntry {
  Cron cron;
  int min = 1;
};

// Kubernetes HPA's rule (docs/groups.md): desired = ceil(size x value / target), unchanged
// within 10% of the target; up at once, down only to the highest desired size over the
// stabilization window; never below min (or the schedule's floor) nor above max.
struct Autoscale {
  int min = 1, max = 1;
  AutoscaleMetric metric = AutoscaleMetric::kGpuUtil;
  double target = 0;
  int64_t scale_down_stabilization_seconds = 300;
  std::vector<ScheduleEntry> schedule;
};
inline constexpr double kAutoscaleTolerance = 0.1;

// A gang whose size may change while it runs (docs/groups.md): members get torchrun's elastic
// rendezvous (--nnodes=min:max, c10d at rank 0's node) and a resize within [min, max] restarts
// nothing. Without it, a resize of a gang that runs something restarts it whole at the new size.
struct Elastic {
  int min = 1, max = 1;
};

// POST /v1/groups.
struct GroupRequest {
  std::string name;
  CreateInstanceRequest member;  // The template.
  int size = 1;
  int min_available = 0;  // 0: size.
  Placement placement = Placement::kPack;
  Topology topology = Topology::kAny;
  bool restart = true;  // Restart the whole group when a member fails or is preempted.
  std::optional<Autoscale> autoscale;
  // Absent: `elastic: false`, except an autoscaled group's default, its autoscale [min, max].
  std::optional<Elastic> elastic;
  std::optional<Service> service;
};

// PATCH /v1/groups/{id}: what changes. `autoscale` holds nullopt to remove the group's.
struct GroupPatch {
  std::optional<int> size;
  std::optional<std::optional<Autoscale>> autoscale;
};

// The `autoscale` object of `body` (absent: none); errors name "autoscale.<field>".
std::optional<Autoscale> ReadAutoscale(JsonFields& f, const nlohmann::json& body);

// Reads a group request from `body`; errors name the field ("template.gpus", "size").
// `form` kStored reads the store's form (the template's values sealed).
Result<GroupRequest> ReadGroupRequest(JsonFields& f, const nlohmann::json& body,
                                      Secrets form = Secrets::kHidden);

enum class GroupState {
  kWaiting,    // No member placed yet: the gang waits for room for min_available members.
  kRunning,    // Members placed.
  kSucceeded,  // Every member exited 0.
  kFailed,     // A member failed and the group does not restart.
  kDeleted,    // Deleted by its owner: its members stop.
};
std::string_view GroupStateName(GroupState s);
// True once a group ended (succeeded, failed or deleted): it runs nothing again.
inline bool Ended(GroupState s) { return s != GroupState::kWaiting && s != GroupState::kRunning; }
std::optional<GroupState> ParseGroupState(std::string_view s);

struct Group {
  std::string id;  // "grp-000001".
  TenantId tenant;
  GroupRequest spec;
  GroupState state = GroupState::kWaiting;
  int restarts = 0;
  std::vector<std::string> members;  // The current attempt's instances, by rank.
  // Reserved groups between attempts: the last attempt's members still stopping, whose
  // reservation units the next attempt claims once they have.
  std::vector<std::string> draining;
  std::string reason;  // Why it waits, or why it ended.
  Time created_at;
  Time updated_at;
  int64_t seq = 0;  // Creation order: FIFO among waiting groups of one priority.

  // The autoscaler's memory, not stored: its recent recommendations (for the scale-down
  // window), its last reading and decision, and the backlog last reported.
  std::vector<std::pair<Time, int>> recommendations{};
  std::optional<double> metric_value{};
  std::optional<int64_t> backlog{};
  int desired = 0;
  int floor = 0;
  std::string decision{};
  Time scale_down_after{};  // No scale-down before this (a restart forgets the window).
  // Spot victims were given notice for this group: no more are taken before this.
  Time awaiting_notice_until{};
  // Not stored: the capacity generation (PendingQueue::generation) in which it last failed to
  // place; it is not tried again until capacity frees or it gains members. -1: untried.
  int64_t failed_in = -1;
  int64_t scale_ups = 0, scale_downs = 0;
};

// A group as the API shows it: its record, and each member of its current attempt with its
// instance as it is now (`known` false for one no longer in memory).
struct GroupMemberStatus {
  std::string instance;
  bool known = false;
  int rank = 0;
  InstanceState state = InstanceState::kPending;
  std::string node;  // "" while it waits.
};
struct GroupStatus {
  Group group;
  std::vector<GroupMemberStatus> members;
  int placed = 0;  // Members that hold capacity.
};

// The stored form under Secrets::kStored (the template's values sealed); under Secrets::kHidden,
// the form the API shows (with its members' states added), whose template has no registry
// password.
nlohmann::json ToJson(const Group& g, Secrets secrets);
// DataLoss naming the record and the field when it is malformed.
Result<Group> GroupFromJson(const nlohmann::json& j, const std::string& where);

// A member placed in its group's current attempt whose MASTER_PORT rank 0's agent has yet to
// reserve.
bool AwaitsRendezvous(const Instance& inst);

}  // namespace tessera::core
