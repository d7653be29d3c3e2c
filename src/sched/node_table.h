// NodeTable: the scheduler's compact, incrementally maintained mirror of the fleet. For each node
// it keeps a 32-byte summary that the filter reads for every candidate (free CPU and memory, model
// bit, free GPU milli, the largest share a GPU can still take, the GPUs free whole), the per-GPU
// detail that policies and GPU selection read, GpuClustering's tags, and the node's fragmentation
// against the target workload. A node is re-read only when its Fleet::version changed, so a
// placement costs one node's refresh, not a fleet scan; each refresh bumps the node's epoch, which
// keys the policies' score caches.
// It also indexes the nodes so that a decision need not look at all of them: nodes of identical
// state (summary, per-GPU detail and tags) form a group, listed by rank, whose lowest-ranked
// member (its lead) stands for the others, since they would score the same and lose the tie.
// Idle nodes (nothing booked) form few such groups. Nodes in use sit in buckets by the largest
// share they can take and by their whole free GPUs, so a GPU request skips full nodes, and so do
// the leads of their groups: a large fleet has many nodes in use but far fewer distinct states.
// Thread-safety: not thread-safe; owned by one Scheduler.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "fleet/fleet.h"
#include "sched/frag.h"
#include "sched/scheduler.h"

namespace tessera::sched {

// What the filter reads for every candidate node. Kept to 32 bytes so that a scan over ten
// thousand nodes stays in cache.
struct NodeFit {
  static constexpr uint8_t kReady = 1;    // NodeState::kReady.
  static constexpr uint8_t kHasMig = 2;   // Some GPU is in mig mode.
  static constexpr uint8_t kIslands = 4;  // Some GPU is in an NVLink island.

  int64_t cpu_free = 0;
  int64_t mem_free = 0;
  ModelMask model_bit = 0;  // 1 << GpuModelIndex; 0 without a model (or an index >= 64).
  int32_t gpu_free = 0;     // Free milli over all GPUs ("Ltot").
  int16_t share_cap = 0;    // Largest free milli on a GPU in shared mode.
  uint8_t whole_cap = 0;    // GPUs that are fully free and not in mig mode.
  uint8_t flags = 0;
  bool operator==(const NodeFit&) const = default;
};
static_assert(sizeof(NodeFit) == 32);

struct NodeGpus {
  int count = 0;
  std::array<int16_t, fleet::kMaxGpusPerNode> free{};         // Fleet's Gpu::free_milli.
  std::array<int64_t, fleet::kMaxGpusPerNode> free_memory{};  // Shared mode: unpromised MiB.
  std::array<catalog::SharingMode, fleet::kMaxGpusPerNode> mode{};
  std::array<int8_t, fleet::kMaxGpusPerNode> island{};  // -1 when not in an island.
  bool operator==(const NodeGpus&) const = default;
};

// GpuClustering's affinity tags of the workloads on a node: index 0 "share-gpu", k "k-gpu" for
// k whole GPUs, kMigTag for a MIG slice. CPU-only workloads carry no tag.
inline constexpr int kShareTag = 0;
inline constexpr int kMigTag = fleet::kMaxGpusPerNode + 1;
inline constexpr int kNumTags = kMigTag + 1;
inline constexpr int kNoTag = -1;
struct NodeTags {
  std::array<uint32_t, kNumTags> count{};
  int kinds = 0;  // Tags with a non-zero count.
  bool operator==(const NodeTags&) const = default;
};

// The tag of what an assignment or request holds; kNoTag for CPU-only.
int TagOf(int gpu_count, int gpu_milli, bool mig);

class NodeTable {
 public:
  // `fleet` and `frag` must outlive the table. Reads every node.
  NodeTable(const fleet::Fleet* fleet, const FragModel* frag);

  // Re-reads every node whose version changed since it was last read, and adds nodes that joined
  // the fleet (their rank follows every existing rank); no scan when Fleet::changes() has not
  // moved. Returns true when the fleet grew.
  bool Sync();
  // Re-reads node n now.
  void Refresh(uint32_t n);

  // Sets the node order: rank[n] for every node; lower wins ties. A permutation of 0..size()-1.
  void SetRanks(std::vector<uint32_t> ranks);

  // Adds `delta` workloads with tag `tag` (not kNoTag) on node n.
  void AddTag(uint32_t n, int tag, int delta);

  // The index. Share buckets hold in-use nodes by share_cap / kShareBucketWidth, whole buckets by
  // whole_cap; every in-use node is in one of each and in used(). The *_leads lists hold the same
  // for the groups of in-use nodes: the lead of each group, once.
  static constexpr int kShareBucketWidth = 50;
  static constexpr int kShareBuckets = fleet::kMilliPerGpu / kShareBucketWidth + 1;
  struct IdleGroup {
    NodeFit fit;
    NodeGpus gpus;
    std::vector<uint32_t> members;  // By rank, highest first: back() is the lowest-ranked.
    uint32_t id = 0;                // Its group().
  };
  const std::vector<uint32_t>& used() const { return used_.nodes; }
  const std::vector<uint32_t>& share_bucket(int b) const {
    return share_[static_cast<size_t>(b)].nodes;
  }
  const std::vector<uint32_t>& whole_bucket(int b) const {
    return whole_[static_cast<size_t>(b)].nodes;
  }
  const std::vector<IdleGroup>& idle_groups() const { return groups_; }
  const std::vector<uint32_t>& used_leads() const { return used_leads_.leads; }
  const std::vector<uint32_t>& share_leads(int b) const {
    return share_leads_[static_cast<size_t>(b)].leads;
  }
  const std::vector<uint32_t>& whole_leads(int b) const {
    return whole_leads_[static_cast<size_t>(b)].leads;
  }

  // The group node n is in (idle or in use). Nodes with the same id are in the same state, so a
  // policy whose score of a node reads only its state may compute it once per group and cache it
  // per id. Ids are below group_ids(); an id passes to another state only after its group emptied,
  // and its generation (never 0) then changes, so that values cached per id and generation stay
  // exact.
  uint32_t group(uint32_t n) const { return group_id_[n]; }
  uint32_t group_generation(uint32_t id) const { return id_generation_[id]; }
  size_t group_ids() const { return id_generation_.size(); }

  size_t size() const { return fit_.size(); }
  const NodeFit& fit(uint32_t n) const { return fit_[n]; }
  const NodeGpus& gpus(uint32_t n) const { return gpus_[n]; }
  const NodeTags& tags(uint32_t n) const { return tags_[n]; }
  double frag(uint32_t n) const { return frag_[n]; }
  uint32_t epoch(uint32_t n) const { return epochs_[n]; }
  uint32_t rank(uint32_t n) const { return ranks_[n]; }
  // Σ frag(n), kept up to date on every refresh.
  double total_frag() const { return total_frag_; }
  // Fleet-wide sums over every node, kept up to date on every refresh: free CPU (negative free
  // counts as 0), free GPU milli, and per GPU model index (< 64) its GPUs and their free milli.
  int64_t total_cpu_free() const { return total_cpu_free_; }
  int64_t total_gpu_free() const { return total_gpu_free_; }
  int64_t model_gpus(int model) const { return model_gpus_[static_cast<size_t>(model)]; }
  int64_t model_gpu_free(int model) const { return model_gpu_free_[static_cast<size_t>(model)]; }

  const fleet::Fleet& fleet() const { return *fleet_; }
  const FragModel& frag_model() const { return *frag_model_; }

 private:
  // A set of nodes with O(1) insert and erase, in no particular order.
  struct NodeList {
    std::vector<uint32_t> nodes;
    void Insert(uint32_t n, std::vector<uint32_t>& pos) {
      pos[n] = static_cast<uint32_t>(nodes.size());
      nodes.push_back(n);
    }
    void Erase(uint32_t n, std::vector<uint32_t>& pos) {
      const uint32_t i = pos[n], last = nodes.back();
      nodes[i] = last;
      pos[last] = i;
      nodes.pop_back();
    }
  };
  // The leads of a set of groups of in-use nodes, with O(1) insert, erase and change of lead.
  struct LeadList {
    std::vector<uint32_t> leads;
    std::vector<uint32_t> groups;  // groups[i] is the group led by leads[i].
  };
  // In-use nodes of one state.
  struct BusyGroup {
    uint64_t hash = 0;
    uint32_t id = 0;  // Its group(), taken when it formed, given back when it emptied.
    std::vector<uint32_t> members;  // By rank, highest first: back() is the lead.
    uint32_t at_used = 0, at_share = 0, at_whole = 0;  // Places in the lead lists.
    uint8_t share = 0, whole = 0;                      // Its buckets.
  };
  static constexpr int32_t kInUse = -1, kUnindexed = -2;

  void Grow();
  void Read(uint32_t n);
  // Adds (sign +1) or removes (-1) a node's summary from the fleet-wide sums.
  void Count(const NodeFit& f, int gpus, int sign);
  void Unindex(uint32_t n);
  void Index(uint32_t n);
  void InsertIdle(uint32_t n, IdleGroup& g);
  uint32_t TakeId();
  uint64_t StateHash(uint32_t n) const;
  bool SameState(uint32_t a, uint32_t b) const;
  void JoinBusy(uint32_t n);
  void LeaveBusy(uint32_t n);
  // Adds group g, led by `lead`, to the lead lists (sign +1), removes it (-1), or (0) sets the
  // lead it is listed with.
  void ListBusy(uint32_t g, int sign);

  const fleet::Fleet* fleet_;
  const FragModel* frag_model_;
  std::vector<NodeFit> fit_;
  std::vector<NodeGpus> gpus_;
  std::vector<NodeTags> tags_;
  std::vector<double> frag_;
  std::vector<uint32_t> epochs_;
  std::vector<uint64_t> versions_;  // The fleet version each node was last read at.
  uint64_t changes_ = 0;            // Fleet::changes() when every node was last in step.
  std::vector<uint32_t> ranks_;
  double total_frag_ = 0;
  int64_t total_cpu_free_ = 0, total_gpu_free_ = 0;
  std::array<int64_t, 64> model_gpus_{}, model_gpu_free_{};

  std::vector<IdleGroup> groups_;
  std::vector<int32_t> group_of_;  // A group index, kInUse or kUnindexed.
  NodeList used_;
  std::vector<NodeList> share_ = std::vector<NodeList>(kShareBuckets);
  std::vector<NodeList> whole_ = std::vector<NodeList>(fleet::kMaxGpusPerNode + 1);
  std::vector<uint32_t> used_pos_, share_pos_, whole_pos_;
  std::vector<uint8_t> share_of_, whole_of_;  // The buckets an in-use node is in.

  std::vector<BusyGroup> busy_;
  std::vector<uint32_t> busy_free_;  // Indices into busy_ not in use.
  std::unordered_multimap<uint64_t, uint32_t> busy_by_hash_;
  std::vector<uint32_t> busy_of_;        // An in-use node's group.
  std::vector<uint32_t> group_id_;       // Every indexed node's group().
  std::vector<uint32_t> id_generation_;  // By group id; ids of emptied groups are reused.
  std::vector<uint32_t> free_ids_;
  LeadList used_leads_;
  std::vector<LeadList> share_leads_ = std::vector<LeadList>(kShareBuckets);
  std::vector<LeadList> whole_leads_ = std::vector<LeadList>(fleet::kMaxGpusPerNode + 1);
};

}  // namespace tessera::sched
