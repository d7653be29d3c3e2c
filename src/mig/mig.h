// The MIG model: profile tables with their valid placements, the rules a layout must satisfy,
// and a planner that adds instances to a GPU while keeping the most room for future ones.
// Terms follow NVML: a placement is (start, size) in memory-slice units, as `nvidia-smi mig
// -lgipp` prints it. This module knows nothing of files; catalog/ parses the tables from its data.
// Thread-safety: tables are immutable after construction; every function here is pure.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera::mig {

struct Profile {
  std::string name;               // NVIDIA's name on this model, e.g. "1g.10gb" or "1g.10gb+me".
  int id = 0;                     // NVML GPU-instance profile id.
  int compute_slices = 0;         // The "Ng" part.
  int memory_slices = 0;          // Placement size in memory slices.
  bool media_extensions = false;  // "+me": at most one per GPU.
  std::vector<int> starts;        // Valid first memory slices.
  int max_count = 0;              // At most this many of the profile on one GPU.
  int64_t memory_mib = 0;         // Usable memory, as nvidia-smi reports it.
};

// The MIG profile table of one GPU model.
struct Table {
  std::string model;  // Catalog GPU model id, e.g. "H100-80GB".
  int memory_slices = 8;
  int compute_slices = 7;
  std::vector<Profile> profiles;

  // The profile named `name`, or nullptr.
  const Profile* Find(std::string_view name) const;
  // The profile with NVML GPU-instance profile id `id`, or nullptr.
  const Profile* FindById(int id) const;
};

// One GPU instance on a GPU: a profile at a start.
struct Placement {
  const Profile* profile = nullptr;
  int start = 0;
  // "PROFILE@START", e.g. "3g.40gb@4".
  std::string ToString() const;
  friend bool operator==(const Placement& a, const Placement& b) {
    return a.profile == b.profile && a.start == b.start;
  }
};

// The profile named `name`, or NotFound whose message lists the table's profiles.
Result<const Profile*> LookupProfile(const Table& table, std::string_view name);

// "PROFILE@START" tokens separated by single spaces, e.g. "3g.40gb@4 1g.10gb@3".
std::string FormatLayout(const std::vector<Placement>& layout);

// Parses "PROFILE@START" against `table`. InvalidArgument for malformed text, NotFound for a
// profile the table lacks (the message lists the valid profiles).
Result<Placement> ParsePlacement(const Table& table, std::string_view text);

// What `tessera mig plan` asks for: the instances already on the GPU and the profiles to add.
struct PlanRequest {
  std::vector<Placement> existing;
  std::vector<const Profile*> add;  // One instance each, in the order given.
};

// Parses `tessera mig plan`'s tokens against `table`: PROFILE@START tokens are existing instances,
// allowed only when `existing_allowed` (the command's --existing was given), and PROFILE tokens are
// profiles to add. The first bad token's error, as ParsePlacement and LookupProfile give it, or
// InvalidArgument when a start comes without --existing or no profile is to be added.
Result<PlanRequest> ParsePlanTokens(const Table& table, const std::vector<std::string>& tokens,
                                    bool existing_allowed);

// OK when `layout` is valid on the table's model. Otherwise FailedPrecondition whose message names
// the rule broken and the instances involved, e.g. "memory slices overlap: 3g.40gb@4 and
// 1g.10gb@5". InvalidArgument when a placement's profile is not one of `table`'s.
Status CheckLayout(const Table& table, const std::vector<Placement>& layout);

// One valid layout holding every `existing` placement unmoved plus one instance of each profile in
// `add`. The returned layout lists `existing` first, then the new placements in the order given.
// ResourceExhausted, with the reason, when no such layout exists; FailedPrecondition when
// `existing` itself is invalid; InvalidArgument for a profile that is not one of `table`'s. The
// choice among valid layouts is documented in planner.cc and docs/mig.md.
Result<std::vector<Placement>> Plan(const Table& table, const std::vector<Placement>& existing,
                                    const std::vector<const Profile*>& add);

// Parses one model's table from the catalog's JSON. Errors name `where` (file and entry) and the
// field at fault.
Result<Table> ParseTable(const nlohmann::json& j, std::string_view where);

}  // namespace tessera::mig
