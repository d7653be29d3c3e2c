// The principal index: token hash -> who the token acts for (a tenant, the operator, or a node).
// The core publishes it after every durable change and the HTTP threads authenticate a request
// with it before reading its body, without a core round (docs/api.md).
//
// An index is immutable. A change makes a new index that shares everything it did not change
// with the one before: the entries sit in 64 x 64 buckets (a two-level trie on the hash's
// std::hash), and a change copies only the root, the tables and the buckets on its paths. A
// change of k hashes costs O(k) pointer copies plus k buckets of about size()/4096 entries each,
// never a copy of the whole index, so a tenant's token rotation costs the same beside ten
// tenants or a hundred thousand (bench/core_bench.cc, BM_Rotate).
// Thread-safety: a PrincipalIndex is immutable once With() returns it; any thread may read it.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/ids.h"
#include "common/result.h"

namespace tessera::core {

// A tenant user's role (docs/users.md), weakest first: a viewer reads; a member also creates and
// deletes work; an owner also manages the tenant's users, tokens, budget, reservations and
// secrets. The tenant's own token acts as its first owner.
enum class Role { kViewer = 0, kMember = 1, kOwner = 2 };
std::string_view RoleName(Role r);  // "viewer", "member", "owner".
std::optional<Role> ParseRole(std::string_view s);

// Who a token acts for, as the index holds it.
struct Principal {
  TenantId tenant;  // "admin" for the operator.
  bool admin = false;
  bool disabled = false;
  std::optional<Time> expires_at;
  std::string node = "";  // A node token's node (docs/agent.md); empty for the admin and tenants.
  // A tenant's token acts as a user of the tenant (core/users.h): its id and name, its role, and
  // whether this token may only read.
  std::string user = "";
  std::string user_name = "";
  Role role = Role::kOwner;
  bool read_only = false;
  bool user_token = false;     // A user's own token (else the tenant's, or the admin's).
  bool user_disabled = false;  // The user is disabled: its tokens stop.
};

class PrincipalIndex {
 public:
  // One change: `hash` now acts as `principal`, or without one it is removed.
  struct Change {
    std::string hash;
    std::optional<Principal> principal;
  };

  PrincipalIndex() = default;  // Empty.

  // The principal of `hash`, or nullptr.
  const Principal* Find(std::string_view hash) const;
  // 1 when `hash` is in the index, else 0 (as a map's count).
  size_t count(std::string_view hash) const { return Find(hash) ? 1 : 0; }
  size_t size() const { return size_; }

  // This index with `changes` applied in order, as a new index; this one is unchanged. Costs
  // O(changes.size()) copies of small tables and buckets, not O(size()).
  std::shared_ptr<const PrincipalIndex> With(std::span<const Change> changes) const;

 private:
  static constexpr size_t kFanout = 64;
  // Sorted by hash; about size() / kFanout^2 entries.
  using Bucket = std::vector<std::pair<std::string, Principal>>;
  using Table = std::array<std::shared_ptr<const Bucket>, kFanout>;

  std::array<std::shared_ptr<const Table>, kFanout> root_;  // Null: nothing under it yet.
  size_t size_ = 0;
};

// The principal `token_hash` acts for at `now`. Unauthenticated for an unknown or expired token,
// PermissionDenied for a disabled tenant or user. The one rule for the HTTP threads and the core
// alike.
Result<Principal> Authenticate(const PrincipalIndex& index, std::string_view token_hash, Time now);

// Whether `p` may call a route that needs role `need` and, when `write`, changes something: the
// operator and nodes always (their routes are theirs); a tenant's token as its user's role
// allows; a read-only token never writes. PermissionDenied naming the role needed and the user's.
// The one rule for the HTTP threads and the core alike.
Status Authorize(const Principal& p, Role need, bool write);

}  // namespace tessera::core
