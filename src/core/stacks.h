// Stacks: what each tenant's declarative stacks own (docs/stacks.md). A stack's record lists the
// objects it made, by kind and name, with the id each has now and the fields it last applied, so
// a plan can tell what changed in the file from what changed on the server. Planning and applying
// are in api/stacks.cc, which reads and writes these records; this keeps them in memory and in
// the store ("stack/<tenant>/<name>").
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace tessera::core {

// One object a stack made (or adopted).
struct StackObjectRecord {
  std::string kind;     // "instance", "group", "reservation", "alert_rule", "budget".
  std::string name;     // Its name in the stack.
  std::string id;       // What the API calls it now ("inst-000042"; a budget: its tenant).
  std::string applied;  // The fields last applied, as compact JSON, references resolved.
  std::string digest;   // Hex SHA-256 of `applied`.
  bool prevent_destroy = false;
  // Groups this one replaced, which keep running until each of its members runs (a replacement
  // made before what it replaces is destroyed); then State::RetireReplacedGroups deletes them.
  std::vector<std::string> retiring;
};

struct StackRecord {
  std::string tenant, name;
  int64_t serial = 0;  // Bumped by every apply that changed something.
  std::string updated_at;
  // A random key (hex) the record's hidden values are digested under (api/stacks.cc).
  std::string salt;
  std::vector<StackObjectRecord> objects;  // In the order they were applied.
};

// The kinds of object a stack holds, as records name them.
inline bool IsStackKind(std::string_view k) {
  return k == "instance" || k == "group" || k == "reservation" || k == "alert_rule" ||
         k == "budget" || k == "volume";
}

inline constexpr size_t kMaxStacksPerTenant = 100;
inline constexpr size_t kMaxStackObjects = 500;

class Stacks {
 public:
  static constexpr std::string_view kPrefix = "stack/";

  // The tenant's stack of that name, or null.
  const StackRecord* Find(const std::string& tenant, const std::string& name) const;
  // The tenant's stacks, by name.
  std::vector<const StackRecord*> List(const std::string& tenant) const;
  // The tenant's stack that owns (kind, id), or null. A lookup in an index.
  const StackRecord* OwnerOf(const std::string& tenant, std::string_view kind,
                             std::string_view id) const;
  // Stores `r` (a new one only within kMaxStacksPerTenant: ResourceExhausted otherwise).
  Status Put(StackRecord r, store::Batch& batch);
  void Erase(const std::string& tenant, const std::string& name, store::Batch& batch);
  // Rebuilds the records from their settings; DataLoss naming a malformed one.
  Status Restore(const std::vector<std::pair<std::string, std::string>>& records);
  // The records with an object whose replaced groups still run (cheap when there are none).
  std::vector<const StackRecord*> Retiring() const;

 private:
  void Index(const StackRecord& r);
  void Unindex(const StackRecord& r);
  std::map<std::pair<std::string, std::string>, StackRecord> records_;  // By (tenant, name).
  // Which stack owns each object: (tenant, "kind/id") -> the stack's name.
  std::map<std::pair<std::string, std::string>, std::string> owners_;
  std::set<std::pair<std::string, std::string>> retiring_;  // Records with replaced groups.
};

}  // namespace tessera::core
