// The fleet: nodes with vCPUs, memory and GPUs of a catalog model, NVLink islands, and the
// partition state of every GPU in one of three sharing modes:
//   exclusive  whole GPUs only;
//   mig        MIG instances at valid placements of the model's profile table;
//   shared     milli-GPU shares with a memory cap (time-slicing). A fully free shared GPU can also
//              be granted whole (1000 milli), as in the openb traces.
// Fleet is the single authority on capacity. Allocate and Release keep invariants that cannot be
// broken: no GPU or MIG slice booked twice, no overlapping MIG instances, no capacity below zero.
// An Assignment that would break one is refused whole with a Status and changes nothing.
// Thread-safety: not thread-safe. One writer (the core, or the simulator) owns a Fleet.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "common/ids.h"
#include "common/result.h"
#include "mig/mig.h"

namespace tessera::fleet {

using catalog::SharingMode;
struct NodeIndexTag {};
using NodeIndex = Index<NodeIndexTag>;

inline constexpr int kMaxGpusPerNode = 16;
inline constexpr int kMilliPerGpu = 1000;

enum class NodeState { kReady, kDraining, kDown };
std::string_view NodeStateName(NodeState s);  // "ready", "draining", "down".

struct MigInstance {
  const mig::Profile* profile = nullptr;
  int start = 0;
};

struct Gpu {
  SharingMode mode = SharingMode::kExclusive;
  int island = -1;  // NVLink island within the node; -1 when the GPU has no NVLink peers.
  // exclusive and shared: unallocated thousandths (exclusive is 0 or 1000). mig: 1000 while no
  // instance exists, else 0, so "fully free" means the same in every mode.
  int free_milli = kMilliPerGpu;
  int64_t free_memory_mib = 0;               // shared: memory not yet promised to a share.
  std::vector<MigInstance> mig_instances{};  // mig: instances that exist and are allocated.
  std::string uuid{};  // As the node's agent reported it; empty for nodes from a fleet file.
  // False once the server took the GPU out of service (a fatal XID, lost, double-bit ECC): its
  // capacity is still counted, but nothing new is granted on it (docs/fleet.md).
  bool healthy = true;
  // True while the GPU changes its sharing mode (its agent turns MIG on or off): like an
  // unhealthy GPU, it is granted to nobody meanwhile.
  bool held = false;

  // Whether anything new may be granted on it (what the scheduler counts as free).
  bool grantable() const { return healthy && !held; }
};

struct Node {
  std::string name{};            // Unique, e.g. "node-h100-01" or "openb-node-0001".
  catalog::GpuModelIndex model;  // Invalid for CPU-only nodes.
  NodeState state = NodeState::kReady;
  int64_t cpu_milli = 0, cpu_milli_free = 0;
  int64_t memory_mib = 0, memory_mib_free = 0;
  std::vector<Gpu> gpus{};
  int workloads = 0;  // Assignments currently held on the node.
  // Taken out of the fleet for good (Fleet::RemoveNode): down, its name free, and skipped by every
  // listing; it keeps its index, which nothing reuses.
  bool removed = false;
};

// What one workload holds on one GPU. Exclusive grants ignore memory_mib (the whole GPU's memory
// comes with it); MIG grants ignore milli and memory_mib (the profile says what they hold).
struct GpuGrant {
  int gpu = 0;                                // Index within the node.
  int milli = kMilliPerGpu;                   // 1000 for a whole GPU; 1..999 for a share.
  int64_t memory_mib = 0;                     // shared: the memory cap promised.
  const mig::Profile* mig_profile = nullptr;  // mig: the instance's profile...
  int mig_start = 0;                          // ...and its placement.
};

// Compute slices held by the MIG instances on `gpu` (0 unless it is in mig mode).
int UsedComputeSlices(const Gpu& gpu);

// Everything one workload holds on one node. Fixed-size so the scheduler's hot path never
// allocates.
struct Assignment {
  NodeIndex node;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpu_count = 0;
  std::array<GpuGrant, kMaxGpusPerNode> gpus{};
};

// How a node is described before it joins the fleet. Every member has a default, so designated
// initializers may name only what they need.
struct NodeSpec {
  std::string name{};
  std::string gpu_model{};  // Catalog id or alias; empty for a CPU-only node.
  int gpus = 0;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  // GPU indices grouped into NVLink islands; empty means none. Each GPU in at most one island.
  std::vector<std::vector<int>> nvlink_islands{};
  // Sharing mode of each GPU; empty means all `default_mode`.
  std::vector<SharingMode> gpu_modes{};
  SharingMode default_mode = SharingMode::kExclusive;
  // Each GPU's UUID, as its agent reported it; empty for nodes described by a fleet file.
  std::vector<std::string> gpu_uuids{};
};

class Fleet {
 public:
  // `catalog` must outlive the fleet.
  explicit Fleet(const catalog::Catalog* catalog) : catalog_(catalog) {}

  // Validates and adds a node. Errors name the node and the field: an unknown GPU model, a
  // duplicate name, MIG mode on a model without MIG, more than kMaxGpusPerNode GPUs, and so on.
  Result<NodeIndex> AddNode(const NodeSpec& spec);

  const catalog::Catalog& catalog() const { return *catalog_; }
  // A label for reports, e.g. the fleet file's "name"; empty unless set.
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  size_t size() const { return nodes_.size(); }
  const Node& node(NodeIndex i) const { return nodes_[i.value]; }
  const std::vector<Node>& nodes() const { return nodes_; }
  // The index of the node named `name`, or NotFound.
  Result<NodeIndex> Find(std::string_view name) const;

  // Takes node `n` out of the fleet for good (an operator removed it): it must hold nothing
  // (FailedPrecondition saying how much it holds); then it is down and marked removed, Find no
  // longer finds it, and AddNode may add a node of its name anew.
  Status RemoveNode(NodeIndex n);

  // OK when Allocate(a) would succeed; otherwise the reason, naming node and GPU.
  Status CanAllocate(const Assignment& a) const;
  // Books `a` whole, or refuses it and changes nothing.
  Status Allocate(const Assignment& a);
  // Returns what `a` booked. Refused, changing nothing, unless the capacity `a` names is held.
  // REQUIRES: `a` was booked by Allocate and not released since. The fleet counts capacity; it
  // does not record who holds it, so releasing an equal grant that another workload holds (two
  // 300-milli shares on one GPU) is not told apart: the caller keeps each workload's assignment
  // and releases only its own (the core does, per instance).
  Status Release(const Assignment& a);
  // OK when Release(a) would succeed; otherwise the reason, naming node and GPU.
  Status CanRelease(const Assignment& a) const;

  // Changes a GPU's sharing mode; only while nothing is allocated on that GPU.
  Status SetGpuMode(NodeIndex n, int gpu, SharingMode mode);
  Status SetNodeState(NodeIndex n, NodeState state);
  // Takes a GPU out of service or puts it back. What it holds stays booked until released; an
  // unhealthy GPU is granted to nobody (CanAllocate says why).
  Status SetGpuHealthy(NodeIndex n, int gpu, bool healthy);
  // Holds a GPU while its sharing mode changes, or releases it. What it holds stays booked; a held
  // GPU is granted to nobody (CanAllocate says why).
  Status SetGpuHeld(NodeIndex n, int gpu, bool held);

  // Incremented on every change to node n, so schedulers can cache per-node values.
  uint64_t version(NodeIndex n) const { return versions_[n.value]; }
  // Incremented on every change to any node and when a node joins, so that a scheduler can tell
  // without a scan that no version moved.
  uint64_t changes() const { return changes_; }

  // Totals across the fleet. MIG slices count as their compute slices over the GPU's, summed per
  // GPU model and rounded down once (the unit quotas and /metrics use too).
  int64_t total_gpus() const { return total_gpus_; }
  int64_t used_gpu_milli() const;

 private:
  // What one grant does to its GPU, computed before anything changes.
  struct GpuChange {
    int free_milli = 0;
    int64_t free_memory_mib = 0;
    int64_t used_milli_delta = 0;  // Whole GPUs and shares.
    int mig_slices_delta = 0;      // MIG compute slices.
    int mig_index = -1;            // Release: the instance to remove.
  };

  Status ValidateSpec(const NodeSpec& spec, const catalog::GpuModel** model) const;
  // InvalidArgument unless node `n` exists and has GPU `gpu`.
  Status CheckGpuIndex(NodeIndex n, int gpu) const;
  Status CheckShape(const Assignment& a) const;
  Status CheckGrantMode(const Node& n, const GpuGrant& grant) const;
  Status CanGrant(const Node& n, const GpuGrant& grant) const;
  Status CanReturn(const Node& n, const GpuGrant& grant) const;
  static int FindMigInstance(const Gpu& gpu, const GpuGrant& grant);
  // The always-on invariant guard: Internal when the change would break capacity.
  Result<GpuChange> PlanChange(const Node& n, const GpuGrant& grant, bool allocate) const;
  // Applies a checked assignment; `allocate` false releases it.
  Status Apply(const Assignment& a, bool allocate);

  const catalog::Catalog* catalog_;
  std::string name_;
  std::vector<Node> nodes_;
  std::vector<uint64_t> versions_;
  uint64_t changes_ = 0;
  std::unordered_map<std::string, NodeIndex> by_name_;
  int64_t total_gpus_ = 0;
  int64_t used_gpu_milli_ = 0;                 // Whole GPUs and shares.
  std::array<int64_t, 64> mig_slices_used_{};  // By GPU model index.
};

}  // namespace tessera::fleet
