#include "core/tenants.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "common/json.h"

namespace tessera::core {

namespace {

// Drops the tokens whose grace has ended, and the oldest beyond kMaxLiveTokens. Tokens are in
// creation order, and so in order of their ends: a rotation gives every earlier token an end no
// later than the one it gives the token it replaces.
void Prune(Tenant& t, Time now) {
  std::erase_if(t.tokens, [&](const Token& k) { return k.expires_at && *k.expires_at <= now; });
  if (t.tokens.size() > kMaxLiveTokens) {
    t.tokens.erase(t.tokens.begin(), t.tokens.end() - static_cast<ptrdiff_t>(kMaxLiveTokens));
  }
}

// The hashes of a tenant's or a user's tokens.
template <typename T>
std::vector<std::string> Hashes(const T& holder) {
  std::vector<std::string> out;
  for (const auto& k : holder.tokens) out.push_back(k.hash);
  return out;
}

// Index removals of the hashes in `before` that `holder` no longer has.
template <typename T>
std::vector<PrincipalIndex::Change> Dropped(const std::vector<std::string>& before,
                                            const T& holder) {
  std::vector<PrincipalIndex::Change> changes;
  for (const std::string& hash : before) {
    const bool kept = std::any_of(holder.tokens.begin(), holder.tokens.end(),
                                  [&](const auto& k) { return k.hash == hash; });
    if (!kept) changes.push_back({hash, std::nullopt});
  }
  return changes;
}

}  // namespace

int64_t TenantNumber(std::string_view id) {
  const size_t dash = id.rfind('-');
  int64_t n = 0;
  if (dash == std::string_view::npos) return 0;
  const auto [ptr, ec] = std::from_chars(id.data() + dash + 1, id.data() + id.size(), n);
  return ec == std::errc() && ptr == id.data() + id.size() ? n : 0;
}

PrincipalIndex::Change Tenants::TokenEntry(const Tenant& t, const Token& k) const {
  Principal p{t.id, false, t.disabled, k.expires_at, ""};
  if (const User* owner = users_.FirstOwner(t.id)) {
    p.user = owner->id;
    p.user_name = owner->name;
    p.role = owner->role;
    p.user_disabled = owner->disabled;
  }
  return {k.hash, p};
}

Tenants::Tenants(const Clock* clock) : clock_(clock), users_(clock) {
  admin_.id = TenantId::Unchecked("admin");
  admin_.name = "admin";
  admin_.admin = true;
}

Status Tenants::Restore(const std::vector<store::TenantRecord>& records) {
  for (const auto& rec : records) {
    auto j = ParseJson(rec.doc, "stored tenant " + rec.id);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    auto t = TenantFromStoredJson(*j, rec.token_hash);
    if (!t.ok()) return Status::DataLoss(t.status().message());
    next_tenant_ = std::max(next_tenant_, TenantNumber(t->id.str()) + 1);
    // A record from before the cap may hold more tokens: the newest stay, as at a rotation. The
    // record itself is rewritten at the tenant's next change; until then every start keeps the
    // same ones.
    Prune(*t, clock_->Now());
    by_id_[t->id.str()] = std::move(*t);
  }
  std::vector<PrincipalIndex::Change> changes;
  for (const auto& [id, t] : by_id_) {
    for (const Token& k : t.tokens) {
      changes.push_back(TokenEntry(t, k));
    }
  }
  index_ = index_->With(changes);
  return Status::Ok();
}

void Tenants::SetAdminTokenHash(const std::string& hash, store::Batch& batch) {
  RestoreAdminTokenHash(hash);
  batch.settings.emplace_back("admin_token_hash", hash);
}

void Tenants::RestoreAdminTokenHash(const std::string& hash) {
  std::vector<PrincipalIndex::Change> changes;
  if (!admin_hash_.empty()) changes.push_back({admin_hash_, std::nullopt});
  if (!hash.empty()) changes.push_back({hash, Principal{admin_.id, true, false, {}, ""}});
  admin_hash_ = hash;
  index_ = index_->With(changes);
}

Result<Tenant> Tenants::Create(const std::string& name, int64_t quota_gpu_milli,
                               const std::string& token_hash, store::Batch& batch,
                               std::optional<int64_t> max_pending,
                               std::optional<int64_t> volumes_gib) {
  for (const auto& [id, t] : by_id_) {
    if (t.name == name) {
      return Status::AlreadyExists(fmt::format("field 'name': tenant '{}' exists already", name));
    }
  }
  Tenant t;
  t.id = TenantId::FromNumber(next_tenant_++);
  t.name = name;
  t.quota_gpu_milli = quota_gpu_milli;
  t.max_pending = max_pending;
  t.quota_volumes_gib = volumes_gib;
  t.created_at = clock_->Now();
  t.tokens.push_back({token_hash, t.created_at, std::nullopt});
  Tenant& stored = by_id_[t.id.str()] = std::move(t);
  TESSERA_RETURN_IF_ERROR(
      users_.Create(stored.id, "owner", Role::kOwner, std::nullopt, true, batch).status());
  Save(stored, batch);
  Reindex(stored, {});
  return stored;
}

Result<User> Tenants::CreateUser(const TenantId& tenant, const std::string& name, Role role,
                                 std::optional<int64_t> quota_gpu_milli, store::Batch& batch) {
  if (!Find(tenant.str()))
    return Status::NotFound(fmt::format("tenant '{}' not found", tenant.str()));
  TESSERA_ASSIGN_OR_RETURN(User u,
                           users_.Create(tenant, name, role, quota_gpu_milli, false, batch));
  ReindexUser(u, {});
  return u;
}

Result<User> Tenants::UpdateUser(const std::string& id, const UserUpdate& update,
                                 store::Batch& batch) {
  const std::vector<std::string> hashes = UserHashes(id);
  TESSERA_ASSIGN_OR_RETURN(User u, users_.Update(id, update, batch));
  ReindexUser(u, hashes);
  return u;
}

Status Tenants::DeleteUser(const std::string& id, store::Batch& batch) {
  const std::vector<std::string> hashes = UserHashes(id);
  TESSERA_RETURN_IF_ERROR(users_.Delete(id, batch));
  std::vector<PrincipalIndex::Change> changes;
  for (const std::string& h : hashes) changes.push_back({h, std::nullopt});
  index_ = index_->With(changes);
  return Status::Ok();
}

Result<UserToken> Tenants::AddUserToken(const std::string& id, const std::string& hash,
                                        const std::string& name, std::optional<Time> expires_at,
                                        bool read_only, store::Batch& batch) {
  const std::vector<std::string> hashes = UserHashes(id);
  TESSERA_ASSIGN_OR_RETURN(UserToken t,
                           users_.AddToken(id, hash, name, expires_at, read_only, batch));
  ReindexUser(*users_.Find(id), hashes);
  return t;
}

Status Tenants::RevokeUserToken(const std::string& id, const std::string& token,
                                store::Batch& batch) {
  const std::vector<std::string> hashes = UserHashes(id);
  TESSERA_RETURN_IF_ERROR(users_.RevokeToken(id, token, batch));
  ReindexUser(*users_.Find(id), hashes);
  return Status::Ok();
}

std::vector<std::string> Tenants::UserHashes(const std::string& id) const {
  const User* u = users_.Find(id);
  return u ? Hashes(*u) : std::vector<std::string>{};
}

void Tenants::ReindexUser(const User& u, const std::vector<std::string>& before) {
  const Tenant* t = Find(u.tenant.str());
  std::vector<PrincipalIndex::Change> changes = Dropped(before, u);
  for (auto& c : users_.Entries(u, t && t->disabled)) changes.push_back(std::move(c));
  if (u.first_owner && t) {
    for (const Token& k : t->tokens) changes.push_back(TokenEntry(*t, k));
  }
  index_ = index_->With(changes);
}

Status Tenants::RestoreUsers(const std::vector<std::pair<std::string, std::string>>& records,
                             store::Batch& batch) {
  TESSERA_RETURN_IF_ERROR(users_.Restore(records));
  for (const auto& [id, t] : by_id_) {
    if (users_.FirstOwner(t.id)) continue;
    // A tenant from before users existed: its token acts as its first owner from now on.
    std::string name = "owner";
    for (int n = 2; users_.Lookup(t.id, name); ++n) name = fmt::format("owner-{}", n);
    TESSERA_RETURN_IF_ERROR(
        users_.Create(t.id, name, Role::kOwner, std::nullopt, true, batch).status());
  }
  std::vector<PrincipalIndex::Change> changes;
  for (const auto& [id, t] : by_id_) {
    for (const Token& k : t.tokens) changes.push_back(TokenEntry(t, k));
    for (const User* u : users_.List(t.id)) {
      for (auto& c : users_.Entries(*u, t.disabled)) changes.push_back(std::move(c));
    }
  }
  index_ = index_->With(changes);
  return Status::Ok();
}

const Tenant* Tenants::Find(std::string_view id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

std::vector<const Tenant*> Tenants::List() const {
  std::vector<const Tenant*> out;
  for (const auto& [id, t] : by_id_) out.push_back(&t);
  std::sort(out.begin(), out.end(), [](const Tenant* a, const Tenant* b) {
    return TenantNumber(a->id.str()) < TenantNumber(b->id.str());
  });
  return out;
}

Result<Tenant> Tenants::Update(std::string_view id, std::optional<int64_t> quota_gpu_milli,
                               std::optional<bool> disabled, store::Batch& batch,
                               std::optional<int64_t> max_pending,
                               std::optional<int64_t> volumes_gib) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return Status::NotFound(fmt::format("tenant '{}' not found", id));
  Tenant& t = it->second;
  const std::vector<std::string> before = Hashes(t);
  if (quota_gpu_milli) t.quota_gpu_milli = *quota_gpu_milli;
  if (max_pending) t.max_pending = *max_pending;
  if (volumes_gib) t.quota_volumes_gib = *volumes_gib;
  const bool disabling = disabled && *disabled != t.disabled;
  if (disabled) t.disabled = *disabled;
  Save(t, batch);
  Reindex(t, before, /*users=*/disabling);
  return t;
}

Result<Tenant> Tenants::Rotate(std::string_view id, const std::string& new_hash, Duration grace,
                               store::Batch& batch) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return Status::NotFound(fmt::format("tenant '{}' not found", id));
  Tenant& t = it->second;
  const std::vector<std::string> before = Hashes(t);
  const Time now = clock_->Now();
  const Time end = now + std::clamp(grace, Duration::zero(), kMaxTokenGrace);
  for (Token& k : t.tokens) {
    if (!k.expires_at || *k.expires_at > end) k.expires_at = end;
  }
  t.tokens.push_back({new_hash, now, std::nullopt});
  Save(t, batch);  // Drops ended tokens, and the oldest beyond the cap.
  Reindex(t, before);
  return t;
}

Result<const Tenant*> Tenants::Authenticate(std::string_view token_hash) const {
  TESSERA_ASSIGN_OR_RETURN(Principal p, core::Authenticate(*index_, token_hash, clock_->Now()));
  if (p.admin) return &admin_;
  if (!p.node.empty()) {
    return Status::PermissionDenied("a node token may call only the agent routes (/v1/agent/...)");
  }
  const Tenant* t = Find(p.tenant.str());
  if (!t) return Status::Unauthenticated("invalid token");
  return t;
}

void Tenants::Save(Tenant& t, store::Batch& batch) {
  Prune(t, clock_->Now());
  const std::string current = t.tokens.empty() ? "" : t.tokens.back().hash;
  batch.tenants.push_back({t.id.str(), t.name, current, ToStoredJson(t).dump()});
}

void Tenants::Reindex(const Tenant& t, const std::vector<std::string>& before, bool users) {
  std::vector<PrincipalIndex::Change> changes = Dropped(before, t);
  for (const Token& k : t.tokens) {
    changes.push_back(TokenEntry(t, k));
  }
  if (users) {
    for (const User* u : users_.List(t.id)) {
      for (auto& c : users_.Entries(*u, t.disabled)) changes.push_back(std::move(c));
    }
  }
  index_ = index_->With(changes);
}

void Tenants::SetNodeToken(const std::string& node, const std::string& hash) {
  std::vector<PrincipalIndex::Change> changes;
  auto it = node_tokens_.find(node);
  if (it != node_tokens_.end()) {
    if (it->second == hash) return;
    changes.push_back({it->second, std::nullopt});
    node_tokens_.erase(it);
  }
  if (!hash.empty()) {
    node_tokens_[node] = hash;
    changes.push_back({hash, Principal{TenantId(), false, false, {}, node}});
  }
  index_ = index_->With(changes);
}

nlohmann::json ToJson(const Tenant& t, std::optional<int64_t> gpu_milli_in_use) {
  nlohmann::json tokens = nlohmann::json::array();
  for (const Token& k : t.tokens) {
    nlohmann::json kj = {{"created_at", FormatRfc3339(k.created_at)}};
    if (k.expires_at) kj["expires_at"] = FormatRfc3339(*k.expires_at);
    tokens.push_back(std::move(kj));
  }
  nlohmann::json j = {{"id", t.id.str()},
                      {"name", t.name},
                      {"quota", {{"gpus", static_cast<double>(t.quota_gpu_milli) / 1000}}},
                      {"disabled", t.disabled},
                      {"created_at", FormatRfc3339(t.created_at)},
                      {"tokens", std::move(tokens)}};
  if (t.quota_volumes_gib) j["quota"]["volumes_gib"] = *t.quota_volumes_gib;
  if (gpu_milli_in_use) {
    j["usage"] = {{"gpus", static_cast<double>(*gpu_milli_in_use) / 1000}};
  }
  return j;
}

nlohmann::json ToStoredJson(const Tenant& t) {
  nlohmann::json j = ToJson(t);
  j["quota_gpu_milli"] = t.quota_gpu_milli;
  if (t.max_pending) j["max_pending"] = *t.max_pending;
  if (t.quota_volumes_gib) j["quota_volumes_gib"] = *t.quota_volumes_gib;
  for (size_t i = 0; i < t.tokens.size(); ++i) j["tokens"][i]["hash"] = t.tokens[i].hash;
  return j;
}

Result<Tenant> TenantFromStoredJson(const nlohmann::json& j, const std::string& column_hash) {
  JsonFields f(j, "stored tenant");
  Tenant t;
  auto id = TenantId::Parse(f.String("id"));
  t.name = f.String("name");
  t.quota_gpu_milli = f.Int("quota_gpu_milli", 0, INT64_MAX);
  if (j.is_object() && j.contains("max_pending"))
    t.max_pending = f.Int("max_pending", 0, INT64_MAX);
  if (j.is_object() && j.contains("quota_volumes_gib"))
    t.quota_volumes_gib = f.Int("quota_volumes_gib", 0, INT64_MAX);
  t.disabled = f.Bool("disabled", false, false);
  auto created = ParseRfc3339(f.String("created_at"));
  const nlohmann::json* tokens = f.Get("tokens", false);
  TESSERA_RETURN_IF_ERROR(f.status());
  TESSERA_RETURN_IF_ERROR(id.status());
  TESSERA_RETURN_IF_ERROR(created.status());
  t.id = *id;
  t.created_at = *created;
  if (!tokens) {
    // Written before tokens could be rotated: the one token is the store's column.
    t.tokens.push_back({column_hash, t.created_at, std::nullopt});
    return t;
  }
  if (!tokens->is_array()) return Status::DataLoss("stored tenant: field 'tokens': not an array");
  for (const auto& kj : *tokens) {
    JsonFields k(kj, fmt::format("stored tenant {}: tokens", t.id.str()));
    Token token;
    token.hash = k.String("hash");
    auto at = ParseRfc3339(k.String("created_at"));
    const std::string expires = k.String("expires_at", false);
    TESSERA_RETURN_IF_ERROR(k.status());
    TESSERA_RETURN_IF_ERROR(at.status());
    token.created_at = *at;
    if (!expires.empty()) {
      TESSERA_ASSIGN_OR_RETURN(token.expires_at, ParseRfc3339(expires));
    }
    t.tokens.push_back(std::move(token));
  }
  return t;
}

}  // namespace tessera::core
