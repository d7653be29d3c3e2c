// GroupTable: the working set of groups (docs/groups.md): every group that has not ended and
// those that ended less than a retention ago, by id, with their ids' sequence; which groups may
// have members to place; whether gangs are worth another pass; and the members that ended since
// the groups last settled. Ended groups older than the retention leave memory (the store keeps
// their records), swept a minute apart at most.
// What groups do (create, scale, place as gangs, restart whole) is Groups' (group_service.h);
// this is their memory, which Groups owns.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "core/group.h"
#include "core/instance.h"
#include "core/tenants.h"
#include "store/store.h"

namespace tessera::core {

class GroupTable {
 public:
  // Stored records (settings): each group's, and the next id's number.
  static constexpr std::string_view kPrefix = "group/";
  static constexpr std::string_view kNextKey = "groups/next";

  // Gives `g` the next id and seq ("grp-000001" on): ids are never reused, even for a group that
  // is not added after all.
  void Number(Group& g);
  // Writes `g`'s record into `batch`; one that ended first drops its template's values (it makes
  // no members again, so none is kept at rest).
  static void Save(Group& g, store::Batch& batch);
  int64_t next() const { return next_; }  // The next id's number, as kNextKey stores it.
  // Adds `g` (REQUIRES: its id is new), or puts back one restored (NextAtLeast first).
  Group& Add(Group g);
  // Takes back a group just added that made nothing (Groups::Create's failure).
  void Erase(std::string_view id) { groups_.erase(std::string(id)); }
  // New ids start at `next` at least: a stored next id, or one past a restored group's seq.
  void NextAtLeast(int64_t next) { next_ = std::max(next_, next); }

  Group* Find(std::string_view id);
  const Group* Find(std::string_view id) const;
  // The caller's group (any, for the admin); NotFound alike for an unknown id and another
  // tenant's group.
  Result<Group*> Of(const Tenant& caller, std::string_view id);
  Result<const Group*> Of(const Tenant& caller, std::string_view id) const;
  // Every group, by id.
  const std::map<std::string, Group>& all() const { return groups_; }
  std::map<std::string, Group>& all() { return groups_; }
  // True when `inst` is a member of its group's current attempt: it stays in memory while its
  // group may need its outcome.
  bool Lists(const Instance& inst) const;

  // Groups that may have members to place: marked when members are added, done when none waits.
  void MarkWaiting(const std::string& id) { waiting_.insert(id); }
  void DoneWaiting(const std::string& id) { waiting_.erase(id); }
  // The waiting groups of spot work (`spot`), or of higher priority, not ended: higher priority
  // first, then in creation order. Forgets those gone or ended.
  std::vector<Group*> Waiting(bool spot);

  // Whether gangs are worth another pass: capacity freed, groups changed, or a pass ran out of
  // failures. TakeRetry answers and clears it.
  void Retry() { retry_ = true; }
  bool TakeRetry() { return std::exchange(retry_, false); }

  // Members that ended since the groups last settled (their group decides its fate from them).
  void MemberEnded(std::string id) { ended_members_.push_back(std::move(id)); }
  std::vector<std::string> TakeEndedMembers() { return std::exchange(ended_members_, {}); }

  // Groups that ended before `cutoff` leave memory, each shown to `evicted` first; a sweep runs a
  // minute apart at most (or `retention` apart, when shorter).
  void EvictEnded(Time cutoff, Duration retention,
                  const std::function<void(const Group&)>& evicted);

 private:
  std::map<std::string, Group> groups_;  // By id. Nodes are stable: pointers stay valid.
  int64_t next_ = 1;
  std::set<std::string> waiting_;
  bool retry_ = false;
  std::vector<std::string> ended_members_;
  Time last_sweep_{};
};

}  // namespace tessera::core
