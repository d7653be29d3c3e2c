#include "core/stacks.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/json.h"

namespace tessera::core {

namespace {

using nlohmann::json;

std::string Key(const std::string& tenant, const std::string& name) {
  return fmt::format("{}{}/{}", Stacks::kPrefix, tenant, name);
}

json ToJson(const StackRecord& r) {
  json objects = json::array();
  for (const StackObjectRecord& o : r.objects) {
    json j = {{"kind", o.kind},
              {"name", o.name},
              {"id", o.id},
              {"applied", o.applied},
              {"digest", o.digest}};
    if (o.prevent_destroy) j["prevent_destroy"] = true;
    if (!o.retiring.empty()) j["retiring"] = o.retiring;
    objects.push_back(std::move(j));
  }
  return {{"tenant", r.tenant},         {"name", r.name}, {"serial", r.serial},
          {"updated_at", r.updated_at}, {"salt", r.salt}, {"objects", std::move(objects)}};
}

Result<StackRecord> FromJson(const json& j, const std::string& where) {
  JsonFields f(j, where);
  StackRecord r;
  r.tenant = f.String("tenant");
  r.name = f.String("name");
  r.serial = f.Int("serial", 0, INT64_MAX);
  r.updated_at = f.String("updated_at");
  r.salt = f.String("salt");
  if (const json* objects = f.Get("objects"); objects && objects->is_array()) {
    for (size_t i = 0; i < objects->size(); ++i) {
      JsonFields o((*objects)[i], fmt::format("{}: objects[{}]", where, i));
      StackObjectRecord rec;
      rec.kind = o.String("kind");
      if (!IsStackKind(rec.kind)) o.Fail("kind", "is not a kind a stack holds");
      rec.name = o.String("name");
      rec.id = o.String("id");
      rec.applied = o.String("applied");
      rec.digest = o.String("digest");
      rec.prevent_destroy = o.Bool("prevent_destroy", false);
      if ((*objects)[i].contains("retiring")) rec.retiring = o.Strings("retiring");
      if (!o.ok()) return Status::DataLoss(o.first_error().message());
      r.objects.push_back(std::move(rec));
    }
  } else if (objects) {
    f.Fail("objects", "expected an array");
  }
  if (!f.ok()) return Status::DataLoss(f.first_error().message());
  return r;
}

// What an object record owns, as "kind/id": its object, and the groups it replaced that still run.
std::vector<std::string> OwnedKeys(const StackObjectRecord& o) {
  std::vector<std::string> keys = {o.kind + "/" + o.id};
  for (const std::string& id : o.retiring) keys.push_back("group/" + id);
  return keys;
}

}  // namespace

const StackRecord* Stacks::Find(const std::string& tenant, const std::string& name) const {
  auto it = records_.find({tenant, name});
  return it == records_.end() ? nullptr : &it->second;
}

std::vector<const StackRecord*> Stacks::List(const std::string& tenant) const {
  std::vector<const StackRecord*> out;
  for (auto it = records_.lower_bound({tenant, ""});
       it != records_.end() && it->first.first == tenant; ++it) {
    out.push_back(&it->second);
  }
  return out;
}

const StackRecord* Stacks::OwnerOf(const std::string& tenant, std::string_view kind,
                                   std::string_view id) const {
  auto it = owners_.find({tenant, fmt::format("{}/{}", kind, id)});
  return it == owners_.end() ? nullptr : Find(tenant, it->second);
}

Status Stacks::Put(StackRecord r, store::Batch& batch) {
  if (!Find(r.tenant, r.name) && List(r.tenant).size() >= kMaxStacksPerTenant) {
    return Status::ResourceExhausted(
        fmt::format("tenant '{}' has {} stacks, the most it may have; destroy one first", r.tenant,
                    kMaxStacksPerTenant));
  }
  batch.settings.emplace_back(Key(r.tenant, r.name), DumpJson(ToJson(r)));
  if (const StackRecord* old = Find(r.tenant, r.name)) Unindex(*old);
  Index(r);
  const std::pair<std::string, std::string> key{r.tenant, r.name};
  records_[key] = std::move(r);
  return Status::Ok();
}

void Stacks::Erase(const std::string& tenant, const std::string& name, store::Batch& batch) {
  if (const StackRecord* old = Find(tenant, name)) Unindex(*old);
  records_.erase({tenant, name});
  retiring_.erase({tenant, name});
  batch.deleted_settings.push_back(Key(tenant, name));
}

void Stacks::Unindex(const StackRecord& r) {
  for (const StackObjectRecord& o : r.objects) {
    for (const std::string& key : OwnedKeys(o)) {
      auto it = owners_.find({r.tenant, key});
      if (it != owners_.end() && it->second == r.name) owners_.erase(it);
    }
  }
}

void Stacks::Index(const StackRecord& r) {
  for (const StackObjectRecord& o : r.objects) {
    for (const std::string& key : OwnedKeys(o)) owners_[{r.tenant, key}] = r.name;
  }
  const bool any = std::any_of(r.objects.begin(), r.objects.end(),
                               [](const StackObjectRecord& o) { return !o.retiring.empty(); });
  if (any) {
    retiring_.insert({r.tenant, r.name});
  } else {
    retiring_.erase({r.tenant, r.name});
  }
}

std::vector<const StackRecord*> Stacks::Retiring() const {
  std::vector<const StackRecord*> out;
  for (const auto& key : retiring_) {
    if (auto it = records_.find(key); it != records_.end()) out.push_back(&it->second);
  }
  return out;
}

Status Stacks::Restore(const std::vector<std::pair<std::string, std::string>>& records) {
  records_.clear();
  retiring_.clear();
  owners_.clear();
  for (const auto& [key, value] : records) {
    const std::string where = "setting " + key;
    auto j = ParseJson(value, where);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    TESSERA_ASSIGN_OR_RETURN(StackRecord r, FromJson(*j, where));
    if (key != Key(r.tenant, r.name)) {
      return Status::DataLoss(
          fmt::format("{}: holds stack '{}' of tenant '{}'", where, r.name, r.tenant));
    }
    const std::pair<std::string, std::string> id{r.tenant, r.name};
    Index(r);
    records_[id] = std::move(r);
  }
  return Status::Ok();
}

}  // namespace tessera::core
