// Tenants and the tokens that act for them, and the operator's (admin) token. Tenants owns who
// may call the API: it creates tenants, changes their quota or disables them, rotates their
// tokens (the replaced token keeps working for a grace period, or stops at once; a tenant holds
// at most kMaxLiveTokens), and keeps the principal index: token hash -> who it acts for. Every
// change publishes a new immutable index (principal_index.h) that shares what it did not change
// with the one before, so the core can hand it to the HTTP threads, which then authenticate a
// request before reading its body and without a core round; a change costs what it touches, not
// the size of the index. Only token hashes are held, never tokens.
// Thread-safety: Tenants belongs to the core thread; a published PrincipalIndex is immutable and
// may be read from any thread.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/ids.h"
#include "common/result.h"
#include "core/principal_index.h"
#include "core/users.h"
#include "store/store.h"

namespace tessera::core {

struct Token {
  std::string hash;  // Lower-case hex SHA-256 of the token.
  Time created_at;
  std::optional<Time> expires_at;  // Set on a replaced token: the end of its grace period.
};

struct Tenant {
  TenantId id;
  std::string name;
  int64_t quota_gpu_milli = 0;
  // The most instances it may have pending (quota.max_pending); unset: the server's default
  // (PendingWork).
  std::optional<int64_t> max_pending;
  // The most GiB its volumes may hold (quota.volumes_gib); unset: no limit.
  std::optional<int64_t> quota_volumes_gib;
  bool disabled = false;
  Time created_at;
  std::vector<Token> tokens;  // The current token last; replaced ones in their grace before it.
  bool admin = false;         // The operator; not stored as a tenant.
};

// The number in "tenant-000042" (42), or 0 when there is none: tenants are listed in this order.
int64_t TenantNumber(std::string_view id);

// The longest grace period a replaced token may keep.
inline constexpr Duration kMaxTokenGrace = std::chrono::hours(24 * 30);
// The most tokens of one tenant that authenticate at once: the current one and its newest
// predecessors in their grace. A rotation past it retires the oldest predecessor at once.
inline constexpr size_t kMaxLiveTokens = 8;

class Tenants {
 public:
  explicit Tenants(const Clock* clock);  // `clock` must outlive this.

  // Rebuilds from stored records. DataLoss naming the record when one is corrupt.
  // REQUIRES: no tenant was created or restored before.
  Status Restore(const std::vector<store::TenantRecord>& records);

  // The operator's token hash ("" until set). Setting it records it in the batch.
  const std::string& admin_token_hash() const { return admin_hash_; }
  void SetAdminTokenHash(const std::string& hash, store::Batch& batch);
  void RestoreAdminTokenHash(const std::string& hash);

  // AlreadyExists for a name in use. The tenant's token acts as its first owner, user "owner",
  // made with it.
  Result<Tenant> Create(const std::string& name, int64_t quota_gpu_milli,
                        const std::string& token_hash, store::Batch& batch,
                        std::optional<int64_t> max_pending = std::nullopt,
                        std::optional<int64_t> volumes_gib = std::nullopt);

  // Users (users.h). Each change publishes the index entries it changes.
  const Users& users() const { return users_; }
  Result<User> CreateUser(const TenantId& tenant, const std::string& name, Role role,
                          std::optional<int64_t> quota_gpu_milli, store::Batch& batch);
  Result<User> UpdateUser(const std::string& id, const UserUpdate& update, store::Batch& batch);
  Status DeleteUser(const std::string& id, store::Batch& batch);
  Result<UserToken> AddUserToken(const std::string& id, const std::string& hash,
                                 const std::string& name, std::optional<Time> expires_at,
                                 bool read_only, store::Batch& batch);
  Status RevokeUserToken(const std::string& id, const std::string& token, store::Batch& batch);
  // Rebuilds users from their records (Users::kPrefix, kNextUser, kNextToken), gives every tenant
  // without one its first owner (recorded in `batch`: stores from before users existed), and
  // publishes the whole index again. REQUIRES: after Restore.
  Status RestoreUsers(const std::vector<std::pair<std::string, std::string>>& records,
                      store::Batch& batch);
  // The tenant with this id, or nullptr (also for "admin").
  const Tenant* Find(std::string_view id) const;
  // Every tenant, in creation order.
  std::vector<const Tenant*> List() const;
  // Sets the quota, the cap on pending work and/or the disabled flag. NotFound for an unknown id.
  Result<Tenant> Update(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                        std::optional<bool> disabled, store::Batch& batch,
                        std::optional<int64_t> max_pending = std::nullopt,
                        std::optional<int64_t> volumes_gib = std::nullopt);
  // Makes `new_hash` the tenant's token. The previous tokens stop at now + grace (0: at once);
  // tokens already in a shorter grace keep it. Beyond kMaxLiveTokens the oldest stop at once: a
  // rotation always succeeds, so a tenant whose token leaked can always rotate. Costs the same
  // however often the tenant rotated before. NotFound for an unknown id.
  Result<Tenant> Rotate(std::string_view id, const std::string& new_hash, Duration grace,
                        store::Batch& batch);

  // The authoritative check on the core thread: the tenant (or the operator) behind a token.
  Result<const Tenant*> Authenticate(std::string_view token_hash) const;

  // Makes `hash` node `node`'s token in the index (it acts only as its node), replacing the
  // node's previous token at once; an empty hash removes the node's token.
  void SetNodeToken(const std::string& node, const std::string& hash);

  // The current index; a new object after every change, so a pointer compare tells.
  const std::shared_ptr<const PrincipalIndex>& index() const { return index_; }

 private:
  // Publishes `t`'s tokens in a new index; `before` are the hashes it had, and those it no
  // longer has leave the index. With `users`, its users' tokens are published again too (the
  // tenant was disabled or enabled).
  void Reindex(const Tenant& t, const std::vector<std::string>& before, bool users = false);
  // Publishes user `u`'s tokens (and, for the first owner, its tenant's); `before` are the hashes
  // of its own tokens it had.
  void ReindexUser(const User& u, const std::vector<std::string>& before);
  // The hashes of user `id`'s tokens; none for an unknown id.
  std::vector<std::string> UserHashes(const std::string& id) const;
  // The index entry of one of `t`'s own tokens, acting as its first owner.
  PrincipalIndex::Change TokenEntry(const Tenant& t, const Token& k) const;
  void Save(Tenant& t, store::Batch& batch);

  const Clock* clock_;
  Users users_;
  Tenant admin_;
  std::string admin_hash_;
  std::map<std::string, Tenant, std::less<>> by_id_;
  std::map<std::string, std::string> node_tokens_;  // Node -> its token's hash.
  int64_t next_tenant_ = 1;
  std::shared_ptr<const PrincipalIndex> index_ = std::make_shared<const PrincipalIndex>();
};

// The API form of a tenant (no token hashes); `gpus_in_use` in milli-GPU when known.
nlohmann::json ToJson(const Tenant& t, std::optional<int64_t> gpu_milli_in_use = std::nullopt);
// The stored form: the API form plus the milli quota and the token hashes.
nlohmann::json ToStoredJson(const Tenant& t);
// Rebuilds a tenant from its stored form; `column_hash` is the store's token_hash column, used
// when the document predates the token list.
Result<Tenant> TenantFromStoredJson(const nlohmann::json& j, const std::string& column_hash);

}  // namespace tessera::core
