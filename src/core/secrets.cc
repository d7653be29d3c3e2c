#include "core/secrets.h"

#include <fmt/format.h>

#include "common/envelope.h"
#include "common/json.h"
#include "common/text.h"
#include "core/env.h"
#include "core/sealing.h"

namespace tessera::core {

namespace {

using nlohmann::json;

std::string Context(const Secret& s) { return fmt::format("secret/{}/{}", s.tenant, s.name); }

}  // namespace

std::string TenantSecrets::Key(std::string_view tenant, std::string_view name) {
  return fmt::format("{}/{}", tenant, name);
}

Result<Secret> TenantSecrets::Put(const std::string& tenant, const std::string& name,
                                  std::string value, const std::string& user, bool replace,
                                  store::Batch& batch) {
  if (!IsValidSecretName(name)) {
    return Status::InvalidArgument(fmt::format(
        "field 'name': '{}' is not a secret's name (1 to 63 of [A-Za-z0-9_.-], starting with a "
        "letter or digit)",
        Quote(name)));
  }
  if (value.size() > kMaxValueBytes) {
    return Status::InvalidArgument(fmt::format("field 'value': {} bytes; a secret holds at most {}",
                                               value.size(), kMaxValueBytes));
  }
  if (value.find('\0') != std::string::npos) {
    return Status::InvalidArgument(
        "field 'value': holds a NUL byte, which no environment variable can");
  }
  const std::string key = Key(tenant, name);
  auto it = by_key_.find(key);
  if (!replace && it != by_key_.end()) {
    return Status::AlreadyExists(
        fmt::format("secret '{}' exists; PUT /v1/secrets/{} replaces its value", name, name));
  }
  if (replace && it == by_key_.end()) {
    return Status::NotFound(fmt::format("secret '{}' not found", name));
  }
  if (it == by_key_.end() && per_tenant_[tenant] >= kMaxPerTenant) {
    return Status::ResourceExhausted(fmt::format(
        "the tenant holds {} secrets, the most it may; delete one first", kMaxPerTenant));
  }
  Secret s = it != by_key_.end() ? it->second : Secret{};
  const Time now = clock_->Now();
  if (it == by_key_.end()) {
    s.tenant = tenant;
    s.name = name;
    s.created_at = now;
    s.created_by = user;
  } else {
    ++s.version;
  }
  s.updated_at = now;
  s.updated_by = user;
  TESSERA_ASSIGN_OR_RETURN(s.sealed, SealValue(sealer_, value, Context(s), "a secret"));
  s.value = std::move(value);
  Save(s, batch);
  if (it == by_key_.end()) ++per_tenant_[tenant];
  by_key_[key] = s;
  return s;
}

const Secret* TenantSecrets::Find(std::string_view tenant, std::string_view name) const {
  auto it = by_key_.find(Key(tenant, name));
  return it == by_key_.end() ? nullptr : &it->second;
}

std::vector<const Secret*> TenantSecrets::List(std::string_view tenant) const {
  std::vector<const Secret*> out;
  if (tenant.empty()) {
    for (const auto& [key, s] : by_key_) out.push_back(&s);
    return out;
  }
  const std::string prefix = std::string(tenant) + "/";
  for (auto it = by_key_.lower_bound(prefix); it != by_key_.end() && it->first.starts_with(prefix);
       ++it) {
    out.push_back(&it->second);
  }
  return out;
}

Status TenantSecrets::Delete(const std::string& tenant, const std::string& name,
                             store::Batch& batch) {
  auto it = by_key_.find(Key(tenant, name));
  if (it == by_key_.end()) {
    return Status::NotFound(fmt::format("secret '{}' not found", Quote(name)));
  }
  batch.deleted_settings.push_back(std::string(kPrefix) + it->first);
  by_key_.erase(it);
  if (--per_tenant_[tenant] == 0) per_tenant_.erase(tenant);
  return Status::Ok();
}

void TenantSecrets::Save(const Secret& s, store::Batch& batch) const {
  json j = {{"tenant", s.tenant},
            {"name", s.name},
            {"value", s.sealed},
            {"created_at", FormatRfc3339(s.created_at)},
            {"updated_at", FormatRfc3339(s.updated_at)},
            {"created_by", s.created_by},
            {"updated_by", s.updated_by},
            {"version", s.version}};
  batch.settings.emplace_back(std::string(kPrefix) + Key(s.tenant, s.name), DumpJson(j));
}

Status TenantSecrets::Restore(const std::vector<std::pair<std::string, std::string>>& records) {
  for (const auto& [key, value] : records) {
    const std::string where = "setting " + key;
    auto j = ParseJson(value, where);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    JsonFields f(*j, where);
    Secret s;
    s.tenant = f.String("tenant");
    s.name = f.String("name");
    s.sealed = f.String("value");
    s.created_by = f.String("created_by", false);
    s.updated_by = f.String("updated_by", false);
    s.version = f.Int("version", 1, INT64_MAX, false, 1);
    const std::string created = f.String("created_at"), updated = f.String("updated_at");
    if (!f.ok()) return Status::DataLoss(f.first_error().message());
    auto c = ParseRfc3339(created);
    auto u = ParseRfc3339(updated);
    if (!c.ok() || !u.ok() || key != std::string(kPrefix) + Key(s.tenant, s.name)) {
      return Status::DataLoss(where + ": not a secret's record");
    }
    s.created_at = *c;
    s.updated_at = *u;
    TESSERA_ASSIGN_OR_RETURN(
        s.value, OpenValue(sealer_, s.sealed, Context(s),
                           fmt::format("{}: secret '{}' of {}", where, s.name, s.tenant)));
    ++per_tenant_[s.tenant];
    by_key_[Key(s.tenant, s.name)] = std::move(s);
  }
  return Status::Ok();
}

Result<ResealStep> TenantSecrets::Reseal(const std::string& key_id, std::string& cursor,
                                         size_t limit, store::Batch& batch) {
  ResealStep step;
  auto it = cursor.empty() ? by_key_.begin() : by_key_.upper_bound(cursor);
  for (; it != by_key_.end() && step.examined < limit; ++it) {
    Secret& s = it->second;
    ++step.examined;
    cursor = it->first;
    auto id = SealedKeyId(s.sealed);
    if (id.ok() && *id == key_id) continue;
    TESSERA_ASSIGN_OR_RETURN(s.sealed,
                             SealValue(sealer_, s.value, Context(s), "secret " + it->first));
    Save(s, batch);
    ++step.resealed;
  }
  step.done = it == by_key_.end();
  return step;
}

void TenantSecrets::CountKeys(std::map<std::string, int64_t>& by_key) const {
  for (const auto& [key, s] : by_key_) {
    auto id = SealedKeyId(s.sealed);
    ++by_key[id.ok() ? *id : "?"];
  }
}

json ToJson(const Secret& s) {
  return {{"name", s.name},
          {"tenant", s.tenant},
          {"created_at", FormatRfc3339(s.created_at)},
          {"updated_at", FormatRfc3339(s.updated_at)},
          {"created_by", s.created_by.empty() ? json() : json(s.created_by)},
          {"updated_by", s.updated_by.empty() ? json() : json(s.updated_by)},
          {"version", s.version}};
}

std::vector<std::string> TenantSecrets::RefsOf(const Env& env, const ImageSpec& image) {
  std::vector<std::string> refs = SecretRefs(env);
  if (image.auth && !image.auth->password_secret.empty()) {
    refs.push_back(image.auth->password_secret);
  }
  return refs;
}

Status TenantSecrets::CheckRefs(std::string_view tenant, const Env& env, const ImageSpec& image,
                                std::string_view field) const {
  for (const auto& [var, v] : env) {
    if (v.is_secret() && !Find(tenant, v.secret)) {
      return Status::InvalidArgument(
          fmt::format("field '{}env.{}': secret '{}' does not exist (POST /v1/secrets makes it)",
                      field, var, v.secret));
    }
  }
  if (image.auth && !image.auth->password_secret.empty() &&
      !Find(tenant, image.auth->password_secret)) {
    return Status::InvalidArgument(fmt::format(
        "field '{}registry_auth.password': secret '{}' does not exist (POST /v1/secrets makes it)",
        field, image.auth->password_secret));
  }
  return Status::Ok();
}

std::string TenantSecrets::Missing(std::string_view tenant, const Env& env,
                                   const ImageSpec& image) const {
  for (const std::string& name : RefsOf(env, image)) {
    if (!Find(tenant, name)) return name;
  }
  return "";
}

void TenantSecrets::Resolve(std::string_view tenant, const Env& env,
                            std::map<std::string, std::string>& out) const {
  for (const auto& [name, v] : env) {
    if (out.contains(name) || v.dropped) continue;  // Tessera's own variables win.
    if (!v.is_secret()) {
      out[name] = v.value;
    } else if (const Secret* s = Find(tenant, v.secret)) {
      out[name] = s->value;
    }
    // A secret deleted by force after the instance started: the instance runs already, and
    // a new attempt fails before it asks for the value (Instances::Requeue).
  }
}

void TenantSecrets::ResolvePassword(std::string_view tenant, ImageSpec& image) const {
  if (!image.auth || image.auth->password_secret.empty()) return;
  const Secret* s = Find(tenant, image.auth->password_secret);
  image.auth->password = s ? s->value : "";
}

std::string TenantSecrets::InstanceRecord(std::string_view id) {
  return fmt::format("instance/{}", id);
}

std::string TenantSecrets::TemplateRecord(std::string_view group) {
  return fmt::format("group/{}/template", group);
}

Status TenantSecrets::SealValues(std::string_view record, Env& env, ImageSpec& image) const {
  TESSERA_RETURN_IF_ERROR(SealEnv(sealer_, record, env));
  return SealImageAuth(sealer_, record, image);
}

Result<bool> TenantSecrets::OpenValues(std::string_view record, bool ended, Env& env,
                                       ImageSpec& image) const {
  TESSERA_RETURN_IF_ERROR(OpenEnv(sealer_, record, env));
  TESSERA_RETURN_IF_ERROR(OpenImageAuth(sealer_, record, image));
  if (!HoldsPlainPassword(image)) return false;
  if (ended) {
    DropValues(env, image);
    return true;
  }
  if (sealer_ == nullptr) return false;  // Sealed at the first start with a keyring.
  TESSERA_RETURN_IF_ERROR(SealImageAuth(sealer_, record, image));
  return true;
}

void TenantSecrets::DropValues(Env& env, ImageSpec& image) {
  DropEnvValues(env);
  if (image.auth) {
    image.auth->password.clear();
    image.auth->sealed.clear();
  }
}

}  // namespace tessera::core
