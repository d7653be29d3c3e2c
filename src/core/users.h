// Users inside tenants (docs/users.md): each has a name unique in its tenant, a role (viewer,
// member, owner; principal_index.h), an optional GPU quota inside the tenant's, and tokens of its
// own: several at once, each with an optional expiry, a read-only flag and a label, listed by id
// and creation and never shown again after it was made (only a hash is held). A disabled user's
// tokens stop at once. The tenant's own token acts as its first owner, a user made with the
// tenant (or, for a tenant from before users existed, at the first start that finds it without).
//
// Users holds the records; Tenants (tenants.h), which owns the principal index, applies the index
// entries each change returns, so a change reaches the HTTP threads with the next published index.
// Stored as the settings "user/<id>", with the counters "users/next_user" and "users/next_token".
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/ids.h"
#include "common/result.h"
#include "core/principal_index.h"
#include "store/store.h"

namespace tessera::core {

struct UserToken {
  std::string id;    // "tok-000042".
  std::string name;  // A label ("ci"); may be empty.
  std::string hash;  // Lower-case hex SHA-256 of the token.
  Time created_at;
  std::optional<Time> expires_at;
  bool read_only = false;
};

struct User {
  std::string id;  // "user-000042".
  TenantId tenant;
  std::string name;
  Role role = Role::kMember;
  bool disabled = false;
  std::optional<int64_t> quota_gpu_milli;  // Inside the tenant's quota; none: the tenant's.
  bool first_owner = false;                // The tenant's own token acts as this user.
  Time created_at, updated_at;
  std::vector<UserToken> tokens;  // In creation order.
};

// What a change of a user does to its fields; unset fields stay.
struct UserUpdate {
  std::optional<Role> role = std::nullopt;
  std::optional<bool> disabled = std::nullopt;
  // {nullopt}: remove the user's quota.
  std::optional<std::optional<int64_t>> quota_gpu_milli = std::nullopt;
};

class Users {
 public:
  static constexpr std::string_view kPrefix = "user/";
  static constexpr std::string_view kNextUser = "users/next_user";
  static constexpr std::string_view kNextToken = "users/next_token";
  static constexpr size_t kMaxPerTenant = 1000;
  static constexpr size_t kMaxTokensPerUser = 16;

  explicit Users(const Clock* clock) : clock_(clock) {}  // `clock` must outlive this.

  // Makes user `name` of `tenant`. InvalidArgument naming 'name' (1 to 63 of [a-z0-9._-],
  // starting with a letter or digit, and not "user-..."); AlreadyExists; ResourceExhausted past
  // kMaxPerTenant.
  Result<User> Create(const TenantId& tenant, const std::string& name, Role role,
                      std::optional<int64_t> quota_gpu_milli, bool first_owner,
                      store::Batch& batch);
  const User* Find(std::string_view id) const;
  // `ref` names a user of `tenant` by id or by name; nullptr when it names none.
  const User* Lookup(const TenantId& tenant, std::string_view ref) const;
  // `tenant`'s users in creation order.
  std::vector<const User*> List(const TenantId& tenant) const;
  // The user the tenant's own token acts as, or nullptr (none yet).
  const User* FirstOwner(const TenantId& tenant) const;

  // Applies `update`. FailedPrecondition when it would leave the tenant without an enabled
  // owner (someone must be able to manage it).
  Result<User> Update(const std::string& id, const UserUpdate& update, store::Batch& batch);
  // Deletes a user and its tokens. FailedPrecondition for the first owner (the tenant's token
  // acts as it: disable it instead) and for the last enabled owner.
  Status Delete(const std::string& id, store::Batch& batch);
  // A new token for user `id` (its hash), with a label, an expiry and a read-only flag.
  // ResourceExhausted past kMaxTokensPerUser live tokens (expired ones are dropped first).
  Result<UserToken> AddToken(const std::string& id, const std::string& hash,
                             const std::string& name, std::optional<Time> expires_at,
                             bool read_only, store::Batch& batch);
  // Revokes token `token` of user `id`: it stops at once. NotFound naming it.
  Status RevokeToken(const std::string& id, const std::string& token, store::Batch& batch);

  // The index entries of `u`'s own tokens, each acting as `u` (disabled when `tenant_disabled`).
  // The tenant's tokens, which act as its first owner, are Tenants' to index.
  std::vector<PrincipalIndex::Change> Entries(const User& u, bool tenant_disabled) const;

  // Rebuilds from the stored records. DataLoss naming the record when one is corrupt.
  Status Restore(const std::vector<std::pair<std::string, std::string>>& records);

 private:
  void Save(User& u, store::Batch& batch);
  // `tenant`'s users in name order (an index range: the cost is the tenant's users, not all).
  std::vector<const User*> ByName(const TenantId& tenant) const;
  // FailedPrecondition when `u` is its tenant's last enabled owner (someone must be able to
  // manage the tenant).
  Status NotLastOwner(const User& u) const;

  const Clock* clock_;
  std::map<std::string, User, std::less<>> by_id_;
  std::map<std::pair<std::string, std::string>, std::string> by_name_;  // (tenant, name) -> id.
  int64_t next_user_ = 1;
  int64_t next_token_ = 1;
};

// The API form of a user: its tokens by id, label, creation, expiry and flag; never a hash.
nlohmann::json ToJson(const User& u, std::optional<int64_t> gpu_milli_in_use = std::nullopt);
nlohmann::json ToJson(const UserToken& t);

}  // namespace tessera::core
