// The scheduler: places one request at a time on the fleet through a policy's Filter and Score
// plugins, with integer scores and a per-run random node order as the tie-break, and books the
// winner through Reserve (Fleet::Allocate). The server's core and the simulator drive this same
// code, so a simulated result is a statement about production behaviour.
// It does no I/O and holds no global state. It keeps incremental per-node state (scores and the
// fragmentation of each node against the target workload), refreshed only for nodes that changed,
// and its placement path does not allocate.
// Thread-safety: not thread-safe; one owner thread, like the Fleet it drives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "fleet/fleet.h"

namespace tessera::sched {

struct Need;  // fit.h: a request digested for the filter and the policies.

// Bit i set = catalog GPU model with GpuModelIndex i is allowed. 0 means any model.
using ModelMask = uint64_t;

// The bit of a GPU model in a ModelMask; 0 for a node without GPUs (or a model index past the
// mask's 64 bits), which no non-zero mask admits.
inline ModelMask ModelBit(catalog::GpuModelIndex model) {
  return model.valid() && model.value < 64 ? ModelMask{1} << model.value : 0;
}

// Whether `mask` (a request's allowed models; 0 = any) admits a node whose model is `model_bit`.
inline bool AllowsModel(ModelMask mask, ModelMask model_bit) {
  return mask == 0 || (mask & model_bit) != 0;
}

// What one pod or instance asks for. Units as in the openb traces: milli-CPU, MiB, milli-GPU.
struct Request {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpu_count = 0;  // Whole GPUs wanted, or 1 for a share or a MIG slice; 0 for CPU-only.
  int gpu_milli = 0;  // Per GPU: 1000 whole, 1..999 a share, 0 CPU-only.
  int64_t gpu_memory_mib = 0;      // A share's memory cap; 0 = no cap beyond the milli share.
  ModelMask allowed_models = 0;    // gpu_spec.
  std::string_view mig_profile{};  // Non-empty: one MIG instance of this profile (caller owns it).
  bool nvlink = false;             // Multi-GPU: all GPUs on one NVLink island.
  // Whole GPUs only from GPUs in exclusive mode, not fully free shared-mode ones. The server sets
  // it (an exclusive instance must not land on a GPU its operator set up for sharing); the FGD
  // simulator does not, as the paper's GPUs have no modes.
  bool exclusive_mode = false;
  int priority = 0;  // Higher first; used by preemption in the server.
  // Who sent it: the server puts the tenant's number here; 0 = unknown, or the only source (the
  // simulator). An online policy weighs sources so that none outweighs all the others together.
  uint32_t source = 0;
  // Whether Schedule() lets the policy learn from it: false on a retry of a request already
  // observed (the server's queue retries waiting requests), so each request counts once.
  bool observe = true;
};

// Whether a GPU in `mode` may be one of a request's whole GPUs: any but a mig-mode GPU, and only
// an exclusive-mode one when the request sets exclusive_mode. The fit, the grant, the policies
// and the server's preemptor all ask this.
inline bool WholeGpuMode(catalog::SharingMode mode, bool exclusive_mode) {
  return exclusive_mode ? mode == catalog::SharingMode::kExclusive
                        : mode != catalog::SharingMode::kMig;
}

// One class of the target workload ("typical pods" in FGD) and its weight. The weights of a
// workload sum to 1.
struct WorkloadClass {
  int64_t cpu_milli = 0;
  int gpu_count = 0;
  int gpu_milli = 0;
  ModelMask allowed_models = 0;
  double weight = 0;
};
using Workload = std::vector<WorkloadClass>;

struct Options {
  std::string policy = "fgd";  // A name from PolicyNames().
  uint64_t seed = 42;          // Seeds the node order and any random choice.
  Workload target{};           // The target workload for fragmentation (FGD and metrics).
};

class Policy;        // sched/plugin.h
class FilterPlugin;  // sched/plugin.h

// Every policy name the registry knows, e.g. "random", "dotprod", "gpu-clustering",
// "gpu-packing", "bestfit", "fgd".
std::vector<std::string> PolicyNames();

// OK for a well-formed request; otherwise InvalidArgument naming the field: negative amounts,
// gpu_count outside [0, 16], a share (gpu_milli < 1000) of more than one GPU, gpu_milli without
// GPUs, a MIG slice with gpu_count other than 1. Schedule() places no malformed request.
Status ValidateRequest(const Request& r);

class Scheduler {
 public:
  // `fleet` must outlive the scheduler. NotFound for an unknown policy (the message lists the
  // known ones).
  static Result<std::unique_ptr<Scheduler>> Create(fleet::Fleet* fleet, Options options);
  // The same with a policy the caller built (a test's fake, or a policy outside the registry),
  // which options.policy then only names. InvalidArgument for a null policy.
  static Result<std::unique_ptr<Scheduler>> Create(fleet::Fleet* fleet, Options options,
                                                   std::unique_ptr<Policy> policy);
  ~Scheduler();

  // Adds a filter that runs after the fit filter in every placement (Schedule and ScheduleOn, so
  // also in the preemptor's trials), and returns it; the scheduler owns it, and the caller may
  // keep the pointer to feed it what it reads (see plugins/sole_tenant.h).
  FilterPlugin* AddFilter(std::unique_ptr<FilterPlugin> filter);

  // Places `r`: shows it to the policy first when r.observe (Policy::Observe), then filters,
  // scores, breaks ties by node rank, reserves. Returns the booked assignment, or nullopt when no
  // node can host it (an expected "no", not an error).
  std::optional<fleet::Assignment> Schedule(const Request& r);

  // Places `r` on node `n` only (the server's preemption path), or nullopt when it does not fit
  // there. Same GPU choice as Schedule. The policy does not observe `r`, whatever r.observe says.
  std::optional<fleet::Assignment> ScheduleOn(const Request& r, fleet::NodeIndex n);

  // Books an exact, already-chosen assignment (recovery from the store, undoing a trial release
  // during preemption), keeping the caches in step. Fails, changing nothing, when it does not fit.
  Status Reserve(const fleet::Assignment& a);

  // Releases what Schedule booked, keeping the caches in step. REQUIRES: `a` was booked by
  // Schedule, ScheduleOn or Reserve and not released since (see Fleet::Release).
  Status Release(const fleet::Assignment& a);

  // The fleet's fragmentation against the target workload, in milli-GPU (FGD's frag_gpu_milli):
  // the sum over nodes of the expected idle GPU milli that a random target-workload pod cannot
  // use. Maintained incrementally.
  double FragmentationMilli() const;

  // Node n's place in this run's seeded node order; the lowest rank wins ties. Nodes that join
  // the fleet later rank after every earlier node.
  uint32_t NodeRank(fleet::NodeIndex n) const;

  // OK unless a Schedule() found a winner that the fleet then refused, which is a scheduler bug:
  // the reason. Schedule() returned nullopt for that request.
  const Status& last_error() const;

  const Options& options() const { return options_; }
  const fleet::Fleet& fleet() const { return *fleet_; }

 private:
  struct State;  // Per-node caches, the node order, the RNG, the plugins, scratch space.
  Scheduler(fleet::Fleet* fleet, Options options, std::unique_ptr<State> state);
  // The filter, the node order and the scratch space around a state that holds its policy.
  static std::unique_ptr<Scheduler> Assemble(fleet::Fleet* fleet, Options options,
                                             std::unique_ptr<State> state);
  // Asks the policy for the GPUs of `need` on feasible node `node` and books them; nullopt, with
  // last_error set, when either fails (a bug: the node passed the filter).
  std::optional<fleet::Assignment> Grant(const Need& need, uint32_t node);
  Status Book(const fleet::Assignment& a);

  fleet::Fleet* fleet_;
  Options options_;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::sched
