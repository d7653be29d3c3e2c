#include "core/volumes.h"

#include <fmt/format.h>

#include <filesystem>
#include <set>

#include "common/ids.h"
#include "common/text.h"

namespace tessera::core {

namespace {

using nlohmann::json;

// Where nothing of a tenant's may be mounted: the container's own kernel interfaces and its work
// directory (docs/volumes.md).
constexpr std::string_view kReservedPaths[] = {"/proc", "/sys", "/dev", "/workspace"};

// Why `path` cannot be a mount path, or "".
std::string PathProblem(const std::string& path) {
  if (path.empty() || path[0] != '/') return "must be an absolute path";
  if (path.size() > 255) return fmt::format("is {} bytes; at most 255", path.size());
  for (unsigned char c : path) {
    // ':' and ',' separate podman's --volume fields; the rest keeps a path printable.
    if (c < 0x21 || c > 0x7e || c == ':' || c == ',' || c == '\\') {
      return "holds a character other than printable ASCII without spaces, ':', ',' or '\\'";
    }
  }
  const std::string normal = std::filesystem::path(path).lexically_normal().string();
  if (normal != path || path.find("/./") != std::string::npos ||
      path.find("/../") != std::string::npos || path.ends_with("/..") || path.ends_with("/.")) {
    return "must be normalized (no '.', '..', '//' or trailing '/')";
  }
  if (path == "/") return "cannot be /";
  for (std::string_view r : kReservedPaths) {
    if (path == r || (path.size() > r.size() && path.starts_with(r) && path[r.size()] == '/')) {
      return fmt::format("cannot be {} or under it", r);
    }
  }
  return "";
}

}  // namespace

void ReadVolumeMounts(JsonFields& f, std::vector<VolumeMount>& out) {
  const json* list = f.Get("volumes", false);
  if (!list) return;
  if (!list->is_array()) {
    f.Fail("volumes",
           fmt::format("is {}; expected an array of {{\"name\", \"path\"}}", JsonTypeName(*list)));
    return;
  }
  if (list->size() > kMaxVolumeMounts) {
    f.Fail("volumes", fmt::format("has {} entries; at most {}", list->size(), kMaxVolumeMounts));
    return;
  }
  std::set<std::string> names, paths;
  for (size_t i = 0; i < list->size(); ++i) {
    const json& e = (*list)[i];
    const std::string at = fmt::format("volumes[{}]", i);
    if (!e.is_object()) {
      f.Fail(at, fmt::format("is {}; expected {{\"name\", \"path\"}}", JsonTypeName(e)));
      continue;
    }
    VolumeMount m;
    bool ok = true;
    for (const auto& [key, value] : e.items()) {
      if (key != "name" && key != "path") {
        f.Fail(fmt::format("{}.{}", at, key), "is not a known field (name, path)");
        ok = false;
      } else if (!value.is_string()) {
        f.Fail(fmt::format("{}.{}", at, key),
               fmt::format("is {}; expected a string", JsonTypeName(value)));
        ok = false;
      } else {
        (key == "name" ? m.name : m.path) = value.get<std::string>();
      }
    }
    if (!ok) continue;
    if (!IsValidIdBody(m.name)) {
      f.Fail(at + ".name", m.name.empty() ? std::string("is required") : std::string(kNameRule));
      continue;
    }
    if (std::string why = PathProblem(m.path); !why.empty()) {
      f.Fail(at + ".path", fmt::format("'{}' {}", Quote(m.path), why));
      continue;
    }
    if (!names.insert(m.name).second) {
      f.Fail(at + ".name", fmt::format("volume '{}' is mounted twice", m.name));
      continue;
    }
    if (!paths.insert(m.path).second) {
      f.Fail(at + ".path", fmt::format("'{}' is given twice", m.path));
      continue;
    }
    out.push_back(std::move(m));
  }
}

json VolumeMountsJson(const std::vector<VolumeMount>& mounts) {
  json out = json::array();
  for (const VolumeMount& m : mounts) out.push_back({{"name", m.name}, {"path", m.path}});
  return out;
}

billing::Payer PayerOf(const Volume& v) {
  return {v.tenant, v.id, "volume", "storage", "", 0, v.created_by};
}

Money VolumeRate(int64_t size_gib, Money per_gib_month) {
  return (per_gib_month * size_gib).MulDiv(1, 730);
}

json ToJson(const Volume& v, const std::vector<std::string>& attached_to) {
  json j = {{"id", v.id},
            {"tenant", v.tenant},
            {"name", v.name},
            {"size_gib", v.size_gib},
            {"node", v.node.empty() ? json() : json(v.node)},
            {"shared", v.shared},
            {"state", v.deleting            ? "deleting"
                      : attached_to.empty() ? "available"
                                            : "attached"},
            {"attached_to", attached_to},
            {"price_per_hour_usd", v.meter.rate.ToString(6)},
            {"created_at", FormatRfc3339(v.created_at)}};
  if (!v.created_by.empty()) j["created_by"] = v.created_by;
  if (v.use) {
    j["used_bytes"] = v.use->used_bytes;
    j["size_bytes"] = v.use->size_bytes;
    j["size_enforced"] = v.use->enforced;
  }
  return j;
}

Result<Volumes::Request> Volumes::Parse(const json& body) {
  JsonFields f(body, "body");
  f.RejectUnknown({"name", "size_gib", "node", "shared"});
  Request r;
  r.name = f.String("name");
  r.size_gib = f.Int("size_gib", 1, kMaxSizeGib);
  r.node = f.String("node", false);
  r.shared = f.Bool("shared", false, false);
  if (f.ok() && !IsValidIdBody(r.name)) f.Fail("name", kNameRule);
  if (f.ok() && !r.node.empty() && !IsValidIdBody(r.node)) f.Fail("node", kNameRule);
  TESSERA_RETURN_IF_ERROR(f.body_error());
  return r;
}

std::string Volumes::Key(std::string_view tenant, std::string_view name) {
  return fmt::format("{}/{}", tenant, name);
}

Result<Volume*> Volumes::Create(const std::string& tenant, const Request& r,
                                const std::string& user, Time now, Money rate,
                                store::Batch& batch) {
  const std::string key = Key(tenant, r.name);
  if (auto it = by_key_.find(key); it != by_key_.end()) {
    return Status::AlreadyExists(fmt::format(
        "field 'name': volume '{}' exists already{}", r.name,
        it->second.deleting ? " (it is being deleted; try again once its node removed it)" : ""));
  }
  if (List(tenant).size() >= kMaxPerTenant) {
    return Status::ResourceExhausted(
        fmt::format("a tenant may have at most {} volumes", kMaxPerTenant));
  }
  Volume v;
  v.id = fmt::format("vol-{:06d}", next_++);
  v.tenant = tenant;
  v.name = r.name;
  v.size_gib = r.size_gib;
  v.node = r.node;
  v.shared = r.shared;
  v.created_at = now;
  v.created_by = user;
  v.meter.since = billing::UnixSeconds(now);
  v.meter.rate = rate;
  key_by_id_[v.id] = key;
  Volume& stored = by_key_[key] = std::move(v);
  batch.settings.emplace_back(std::string(kNextKey), std::to_string(next_));
  Save(stored, batch);
  return &stored;
}

Volume* Volumes::Find(std::string_view tenant, std::string_view name) {
  auto it = by_key_.find(Key(tenant, name));
  return it == by_key_.end() ? nullptr : &it->second;
}

const Volume* Volumes::Find(std::string_view tenant, std::string_view name) const {
  auto it = by_key_.find(Key(tenant, name));
  return it == by_key_.end() ? nullptr : &it->second;
}

const Volume* Volumes::FindById(std::string_view id) const {
  auto it = key_by_id_.find(id);
  return it == key_by_id_.end() ? nullptr : &by_key_.find(it->second)->second;
}

std::vector<const Volume*> Volumes::List(std::string_view tenant) const {
  std::vector<const Volume*> out;
  const std::string prefix = tenant.empty() ? "" : std::string(tenant) + "/";
  for (auto it = by_key_.lower_bound(prefix); it != by_key_.end() && it->first.starts_with(prefix);
       ++it) {
    out.push_back(&it->second);
  }
  return out;
}

std::vector<Volume*> Volumes::All() {
  std::vector<Volume*> out;
  for (auto& [key, v] : by_key_) out.push_back(&v);
  return out;
}

int64_t Volumes::GibOf(std::string_view tenant) const {
  int64_t gib = 0;
  for (const Volume* v : List(tenant)) gib += v->size_gib;
  return gib;
}

void Volumes::Save(const Volume& v, store::Batch& batch) const {
  json j = {{"id", v.id},
            {"tenant", v.tenant},
            {"name", v.name},
            {"size_gib", v.size_gib},
            {"node", v.node},
            {"shared", v.shared},
            {"deleting", v.deleting},
            {"created_at", FormatRfc3339(v.created_at)},
            {"created_by", v.created_by},
            {"meter",
             {{"since", v.meter.since},
              {"billed", v.meter.billed},
              {"rate_usd_per_hour", v.meter.rate.ToString(6)}}}};
  batch.settings.emplace_back(std::string(kPrefix) + Key(v.tenant, v.name), DumpJson(j));
}

void Volumes::MarkDeleting(Volume& v, store::Batch& batch) {
  v.deleting = true;
  deleting_.insert(Key(v.tenant, v.name));
  Save(v, batch);
}

std::vector<const Volume*> Volumes::Deleting() const {
  std::vector<const Volume*> out;
  for (const std::string& key : deleting_) {
    if (auto it = by_key_.find(key); it != by_key_.end()) out.push_back(&it->second);
  }
  return out;
}

void Volumes::Erase(const std::string& tenant, const std::string& name, store::Batch& batch) {
  const std::string key = Key(tenant, name);
  deleting_.erase(key);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return;
  key_by_id_.erase(it->second.id);
  by_key_.erase(it);
  batch.deleted_settings.push_back(std::string(kPrefix) + key);
}

Status Volumes::Restore(const std::vector<std::pair<std::string, std::string>>& records) {
  for (const auto& [key, value] : records) {
    if (key == kNextKey) {
      next_ = std::max<int64_t>(next_, std::atoll(value.c_str()));
      continue;
    }
    const std::string where = "setting " + key;
    auto j = ParseJson(value, where);
    if (!j.ok()) return Status::DataLoss(j.status().message());
    JsonFields f(*j, where);
    Volume v;
    v.id = f.String("id");
    v.tenant = f.String("tenant");
    v.name = f.String("name");
    v.size_gib = f.Int("size_gib", 1, kMaxSizeGib);
    v.node = f.String("node", false);
    v.shared = f.Bool("shared", false, false);
    v.deleting = f.Bool("deleting", false, false);
    v.created_by = f.String("created_by", false);
    auto created = ParseRfc3339(f.String("created_at"));
    JsonFields meter = f.Object("meter");
    v.meter.since = meter.Int("since", 0, INT64_MAX);
    v.meter.billed = meter.Int("billed", 0, INT64_MAX);
    auto rate = Money::Parse(meter.String("rate_usd_per_hour"));
    if (!f.ok()) return Status::DataLoss(f.status().message());
    for (const Status& s : {created.status(), rate.status()}) {
      if (!s.ok()) return Status::DataLoss(s.WithPrefix(where).message());
    }
    v.created_at = *created;
    v.meter.rate = *rate;
    const std::string k = Key(v.tenant, v.name);
    if (std::string(kPrefix) + k != key || v.id.rfind("vol-", 0) != 0) {
      return Status::DataLoss(
          fmt::format("{}: holds volume '{}' of '{}' with id '{}'", where, v.name, v.tenant, v.id));
    }
    if (const int64_t n = std::atoll(v.id.c_str() + 4); n >= next_) next_ = n + 1;
    key_by_id_[v.id] = k;
    if (v.deleting) deleting_.insert(k);
    by_key_[k] = std::move(v);
  }
  return Status::Ok();
}

}  // namespace tessera::core
