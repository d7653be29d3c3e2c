#include "core/users.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "common/json.h"
#include "common/text.h"

namespace tessera::core {

namespace {

using nlohmann::json;

bool IsValidUserName(std::string_view name) {
  if (name.empty() || name.size() > 63 || name.starts_with("user-")) return false;
  auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  };
  return std::all_of(name.begin(), name.end(), ok) &&
         std::isalnum(static_cast<unsigned char>(name[0]));
}

// Drops the tokens whose expiry has passed.
void Prune(User& u, Time now) {
  std::erase_if(u.tokens, [&](const UserToken& k) { return k.expires_at && *k.expires_at <= now; });
}

int64_t Number(std::string_view id) {
  const size_t dash = id.rfind('-');
  int64_t n = 0;
  if (dash == std::string_view::npos) return 0;
  std::from_chars(id.data() + dash + 1, id.data() + id.size(), n);
  return n;
}

json StoredJson(const User& u) {
  json j = ToJson(u);
  j["first_owner"] = u.first_owner;
  if (u.quota_gpu_milli) j["quota_gpu_milli"] = *u.quota_gpu_milli;
  for (size_t i = 0; i < u.tokens.size(); ++i) j["tokens"][i]["hash"] = u.tokens[i].hash;
  return j;
}

Result<User> FromStoredJson(const json& j, const std::string& where) {
  JsonFields f(j, where);
  User u;
  u.id = f.String("id");
  auto tenant = TenantId::Parse(f.String("tenant"));
  u.name = f.String("name");
  const auto role = ParseRole(f.String("role"));
  u.disabled = f.Bool("disabled", false, false);
  u.first_owner = f.Bool("first_owner", false, false);
  if (j.is_object() && j.contains("quota_gpu_milli")) {
    u.quota_gpu_milli = f.Int("quota_gpu_milli", 0, INT64_MAX);
  }
  auto created = ParseRfc3339(f.String("created_at"));
  auto updated = ParseRfc3339(f.String("updated_at"));
  const json* tokens = f.Get("tokens");
  if (!role) f.Fail("role", "is not viewer, member or owner");
  if (!f.ok()) return Status::DataLoss(f.first_error().message());
  if (!tenant.ok() || !created.ok() || !updated.ok() || !tokens->is_array()) {
    return Status::DataLoss(where + ": not a user's record");
  }
  u.tenant = *tenant;
  u.role = *role;
  u.created_at = *created;
  u.updated_at = *updated;
  for (const json& kj : *tokens) {
    JsonFields k(kj, where + ": tokens");
    UserToken t;
    t.id = k.String("id");
    t.name = k.String("name", false);
    t.hash = k.String("hash");
    t.read_only = k.Bool("read_only", false, false);
    auto at = ParseRfc3339(k.String("created_at"));
    const bool expiring =
        kj.is_object() && kj.contains("expires_at") && !kj["expires_at"].is_null();
    const std::string expires = expiring ? k.String("expires_at") : "";
    if (!k.ok() || !at.ok()) return Status::DataLoss(where + ": a token without its fields");
    t.created_at = *at;
    if (!expires.empty()) {
      auto e = ParseRfc3339(expires);
      if (!e.ok()) return Status::DataLoss(where + ": a token's expires_at is not a time");
      t.expires_at = *e;
    }
    u.tokens.push_back(std::move(t));
  }
  return u;
}

}  // namespace

Result<User> Users::Create(const TenantId& tenant, const std::string& name, Role role,
                           std::optional<int64_t> quota_gpu_milli, bool first_owner,
                           store::Batch& batch) {
  if (!IsValidUserName(name)) {
    return Status::InvalidArgument(fmt::format(
        "field 'name': '{}' is not a user's name (1 to 63 of [a-z0-9._-], starting with a letter "
        "or digit, and not user-...)",
        Quote(name)));
  }
  if (by_name_.contains({tenant.str(), name})) {
    return Status::AlreadyExists(
        fmt::format("field 'name': user '{}' exists already in tenant '{}'", name, tenant.str()));
  }
  if (ByName(tenant).size() >= kMaxPerTenant) {
    return Status::ResourceExhausted(
        fmt::format("tenant '{}' has {} users, the most it may", tenant.str(), kMaxPerTenant));
  }
  User u;
  u.id = fmt::format("user-{:06}", next_user_++);
  u.tenant = tenant;
  u.name = name;
  u.role = role;
  u.quota_gpu_milli = quota_gpu_milli;
  u.first_owner = first_owner;
  u.created_at = u.updated_at = clock_->Now();
  by_name_[{tenant.str(), name}] = u.id;
  User& stored = by_id_[u.id] = std::move(u);
  Save(stored, batch);
  batch.settings.emplace_back(std::string(kNextUser), std::to_string(next_user_));
  return stored;
}

const User* Users::Find(std::string_view id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

const User* Users::Lookup(const TenantId& tenant, std::string_view ref) const {
  const User* u = nullptr;
  if (ref.starts_with("user-")) {
    u = Find(ref);
  } else if (auto it = by_name_.find({tenant.str(), std::string(ref)}); it != by_name_.end()) {
    u = Find(it->second);
  }
  return u && u->tenant == tenant ? u : nullptr;
}

std::vector<const User*> Users::ByName(const TenantId& tenant) const {
  std::vector<const User*> out;
  for (auto it = by_name_.lower_bound({tenant.str(), ""});
       it != by_name_.end() && it->first.first == tenant.str(); ++it) {
    out.push_back(Find(it->second));
  }
  return out;
}

std::vector<const User*> Users::List(const TenantId& tenant) const {
  std::vector<const User*> out = ByName(tenant);
  std::sort(out.begin(), out.end(),
            [](const User* a, const User* b) { return Number(a->id) < Number(b->id); });
  return out;
}

const User* Users::FirstOwner(const TenantId& tenant) const {
  for (const User* u : ByName(tenant)) {
    if (u->first_owner) return u;
  }
  return nullptr;
}

Status Users::NotLastOwner(const User& u) const {
  for (const User* other : ByName(u.tenant)) {
    if (other->id != u.id && other->role == Role::kOwner && !other->disabled) return Status::Ok();
  }
  return Status::FailedPrecondition(
      fmt::format("user '{}' is the last enabled owner of tenant '{}': make another owner first",
                  u.name, u.tenant.str()));
}

Result<User> Users::Update(const std::string& id, const UserUpdate& update, store::Batch& batch) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return Status::NotFound(fmt::format("user '{}' not found", Quote(id)));
  User& u = it->second;
  const bool loses_owner =
      u.role == Role::kOwner && !u.disabled &&
      ((update.role && *update.role != Role::kOwner) || (update.disabled && *update.disabled));
  if (loses_owner) TESSERA_RETURN_IF_ERROR(NotLastOwner(u));
  if (update.role) u.role = *update.role;
  if (update.disabled) u.disabled = *update.disabled;
  if (update.quota_gpu_milli) u.quota_gpu_milli = *update.quota_gpu_milli;
  u.updated_at = clock_->Now();
  Save(u, batch);
  return u;
}

Status Users::Delete(const std::string& id, store::Batch& batch) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return Status::NotFound(fmt::format("user '{}' not found", Quote(id)));
  const User& u = it->second;
  if (u.first_owner) {
    return Status::FailedPrecondition(fmt::format(
        "user '{}' is the tenant's first owner, whose token is the tenant's own: disable it "
        "instead (PATCH with {{\"disabled\": true}})",
        u.name));
  }
  if (u.role == Role::kOwner && !u.disabled) TESSERA_RETURN_IF_ERROR(NotLastOwner(u));
  by_name_.erase({u.tenant.str(), u.name});
  batch.deleted_settings.push_back(std::string(kPrefix) + id);
  by_id_.erase(it);
  return Status::Ok();
}

Result<UserToken> Users::AddToken(const std::string& id, const std::string& hash,
                                  const std::string& name, std::optional<Time> expires_at,
                                  bool read_only, store::Batch& batch) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return Status::NotFound(fmt::format("user '{}' not found", Quote(id)));
  User& u = it->second;
  Prune(u, clock_->Now());
  if (u.tokens.size() >= kMaxTokensPerUser) {
    return Status::ResourceExhausted(
        fmt::format("user '{}' holds {} tokens, the most one may; revoke one first", u.name,
                    kMaxTokensPerUser));
  }
  UserToken t;
  t.id = fmt::format("tok-{:06}", next_token_++);
  t.name = name;
  t.hash = hash;
  t.created_at = clock_->Now();
  t.expires_at = expires_at;
  t.read_only = read_only;
  u.tokens.push_back(t);
  u.updated_at = t.created_at;
  Save(u, batch);
  batch.settings.emplace_back(std::string(kNextToken), std::to_string(next_token_));
  return t;
}

Status Users::RevokeToken(const std::string& id, const std::string& token, store::Batch& batch) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return Status::NotFound(fmt::format("user '{}' not found", Quote(id)));
  User& u = it->second;
  const size_t before = u.tokens.size();
  std::erase_if(u.tokens, [&](const UserToken& k) { return k.id == token; });
  if (u.tokens.size() == before) {
    return Status::NotFound(fmt::format("token '{}' of user '{}' not found", Quote(token), u.name));
  }
  u.updated_at = clock_->Now();
  Save(u, batch);
  return Status::Ok();
}

std::vector<PrincipalIndex::Change> Users::Entries(const User& u, bool tenant_disabled) const {
  std::vector<PrincipalIndex::Change> out;
  for (const UserToken& k : u.tokens) {
    Principal p;
    p.tenant = u.tenant;
    p.disabled = tenant_disabled;
    p.expires_at = k.expires_at;
    p.user = u.id;
    p.user_name = u.name;
    p.role = u.role;
    p.read_only = k.read_only;
    p.user_token = true;
    p.user_disabled = u.disabled;
    out.push_back({k.hash, p});
  }
  return out;
}

void Users::Save(User& u, store::Batch& batch) {
  Prune(u, clock_->Now());
  batch.settings.emplace_back(std::string(kPrefix) + u.id, DumpJson(StoredJson(u)));
}

Status Users::Restore(const std::vector<std::pair<std::string, std::string>>& records) {
  for (const auto& [key, value] : records) {
    if (key == kNextUser || key == kNextToken) {
      int64_t& next = key == kNextUser ? next_user_ : next_token_;
      next = std::max<int64_t>(next, std::atoll(value.c_str()));
      continue;
    }
    const std::string where = "setting " + key;
    auto j = ParseJson(value, where);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(User u, FromStoredJson(*j, where));
    if (key != std::string(kPrefix) + u.id) return Status::DataLoss(where + ": names another user");
    Prune(u, clock_->Now());
    next_user_ = std::max(next_user_, Number(u.id) + 1);
    for (const UserToken& t : u.tokens) next_token_ = std::max(next_token_, Number(t.id) + 1);
    by_name_[{u.tenant.str(), u.name}] = u.id;
    by_id_[u.id] = std::move(u);
  }
  return Status::Ok();
}

json ToJson(const UserToken& t) {
  json j = {{"id", t.id},
            {"name", t.name},
            {"created_at", FormatRfc3339(t.created_at)},
            {"read_only", t.read_only}};
  j["expires_at"] = t.expires_at ? json(FormatRfc3339(*t.expires_at)) : json();
  return j;
}

json ToJson(const User& u, std::optional<int64_t> gpu_milli_in_use) {
  json tokens = json::array();
  for (const UserToken& t : u.tokens) tokens.push_back(ToJson(t));
  json j = {{"id", u.id},
            {"tenant", u.tenant.str()},
            {"name", u.name},
            {"role", RoleName(u.role)},
            {"disabled", u.disabled},
            {"created_at", FormatRfc3339(u.created_at)},
            {"updated_at", FormatRfc3339(u.updated_at)},
            {"tokens", std::move(tokens)}};
  if (u.first_owner) j["tenant_token"] = true;  // The tenant's own token acts as this user.
  j["quota"] =
      u.quota_gpu_milli ? json{{"gpus", static_cast<double>(*u.quota_gpu_milli) / 1000}} : json();
  if (gpu_milli_in_use) j["usage"] = {{"gpus", static_cast<double>(*gpu_milli_in_use) / 1000}};
  return j;
}

}  // namespace tessera::core
