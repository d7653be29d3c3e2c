// Declarative stacks: what each kind of object is to a stack (docs/stacks.md): the API's checks
// of its fields, what the server holds of it, its drift, and how it is made, changed and deleted.
#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <set>

#include "alerts/rule.h"
#include "api/codec.h"
#include "api/stack_internal.h"
#include "billing/budget.h"
#include "billing/reservation.h"
#include "catalog/catalog.h"
#include "common/json.h"
#include "core/volumes.h"

namespace tessera::api::stack_internal {

using nlohmann::json;

constexpr StackKind kKinds[] = {StackKind::kInstance,  StackKind::kGroup,  StackKind::kReservation,
                                StackKind::kAlertRule, StackKind::kBudget, StackKind::kVolume};

std::string_view KindName(StackKind k) {
  switch (k) {
    case StackKind::kInstance:
      return "instance";
    case StackKind::kGroup:
      return "group";
    case StackKind::kReservation:
      return "reservation";
    case StackKind::kAlertRule:
      return "alert_rule";
    case StackKind::kBudget:
      return "budget";
    case StackKind::kVolume:
      return "volume";
  }
  return "?";
}

std::optional<StackKind> ParseKind(std::string_view s) {
  for (StackKind k : kKinds) {
    if (KindName(k) == s) return k;
  }
  return std::nullopt;
}

// Whether the API's own body carries the object's name (instances, groups, rules do).
bool NameInBody(StackKind k) {
  return k == StackKind::kInstance || k == StackKind::kGroup || k == StackKind::kAlertRule ||
         k == StackKind::kVolume;
}

// The fields an apply changes in place; any other change replaces the object.
bool InPlace(StackKind k, std::string_view field) {
  switch (k) {
    case StackKind::kInstance:
      return field == "labels" || field == "annotations";
    case StackKind::kGroup:
      return field == "size" || field == "autoscale";
    case StackKind::kBudget:
      return field == "monthly_usd" || field == "hard_stop";
    case StackKind::kReservation:
    case StackKind::kAlertRule:
    case StackKind::kVolume:  // Its size, node and sharing are set when it is made.
      return false;
  }
  return false;
}

std::string Label(StackKind k, const std::string& name) {
  return fmt::format("{} '{}'", KindName(k), name);
}
std::string Where(const StackObject& o) {
  return fmt::format("objects[{}] ({})", o.index, Label(o.kind, o.name));
}

Result<Checked> Check(core::State& s, const StackCaller& caller, StackKind kind, const json& spec,
                      bool admit) {
  Checked c;
  switch (kind) {
    case StackKind::kInstance: {
      TESSERA_ASSIGN_OR_RETURN(c.instance, ParseCreateInstance(spec));
      c.instance.user = caller.user;
      TESSERA_ASSIGN_OR_RETURN(core::Admitted a, s.PriceRequest(c.instance));
      c.monthly = a.price_per_hour * kHoursPerMonth;
      break;
    }
    case StackKind::kGroup: {
      TESSERA_ASSIGN_OR_RETURN(c.group, ParseCreateGroup(spec));
      c.group.member.user = caller.user;
      TESSERA_ASSIGN_OR_RETURN(core::Admitted a, s.PriceRequest(c.group.member));
      c.monthly = a.price_per_hour * kHoursPerMonth * c.group.size;
      break;
    }
    case StackKind::kReservation: {
      TESSERA_ASSIGN_OR_RETURN(c.reservation, billing::ParseReservationRequest(spec));
      if (c.reservation.dry_run) {
        return Status::InvalidArgument("field 'dry_run': a stack's plan is its dry run");
      }
      c.reservation.user = caller.user;
      if (admit) {
        billing::ReservationRequest probe = c.reservation;
        probe.dry_run = true;
        store::Batch scratch;  // A dry run writes nothing.
        TESSERA_RETURN_IF_ERROR(
            s.accounts().CreateReservation(*caller.tenant, probe, scratch).status());
      }
      if (const catalog::Price* p = s.catalog().FindPrice(c.reservation.instance_type)) {
        const Money rate =
            c.reservation.term == "3y" ? p->reserved_3y_per_hour : p->reserved_1y_per_hour;
        c.monthly = rate * kHoursPerMonth * c.reservation.count;
      }
      break;
    }
    case StackKind::kAlertRule: {
      TESSERA_ASSIGN_OR_RETURN(c.rule,
                               alerts::ParseRule(spec, true, caller.allow_private_receivers));
      break;
    }
    case StackKind::kBudget: {
      TESSERA_ASSIGN_OR_RETURN(c.budget, billing::ParseBudget(spec));
      break;
    }
    case StackKind::kVolume: {
      TESSERA_ASSIGN_OR_RETURN(c.volume, core::Volumes::Parse(spec));
      c.monthly = s.options().volume_price_per_gib_month * c.volume.size_gib;
      break;
    }
  }
  return c;
}

// The caller's volume of id `id` (the API names volumes by name; a stack's record, by id), or
// null.
const core::Volume* TenantVolume(const core::State& s, const core::Tenant& caller,
                                 const std::string& id) {
  const core::Volume* v = s.volumes().FindById(id);
  return v && v->tenant == caller.id.str() ? v : nullptr;
}

Live Find(const core::State& s, const core::Tenant& caller, StackKind kind, const std::string& id) {
  Live l;
  l.id = id;
  l.gone = "deleted outside the stack";
  switch (kind) {
    case StackKind::kInstance: {
      auto inst = s.views().Get(caller, id);
      if (!inst.ok()) break;
      if (!core::IsActive(inst->state)) {
        l.gone = fmt::format("ended ({})", core::StateName(inst->state));
        break;
      }
      if (inst->state == core::InstanceState::kStopping) {
        l.gone = "being deleted";  // Its agent is stopping it: it is going, not to be kept.
        break;
      }
      l.exists = true;
      l.shown = core::ToJson(*inst);
      l.monthly = inst->price_per_hour * kHoursPerMonth;
      break;
    }
    case StackKind::kGroup: {
      auto g = s.groups().Get(caller, id);
      if (!g.ok()) break;
      if (core::Ended(g->group.state)) {
        l.gone = fmt::format("ended ({})", core::GroupStateName(g->group.state));
        break;
      }
      l.exists = true;
      l.shown = core::ToJson(g->group, core::Secrets::kHidden);
      l.shown["id"] = g->group.id;
      l.shown["placed"] = g->placed;
      for (const core::GroupMemberStatus& m : g->members) {
        if (auto inst = s.views().Get(caller, m.instance); inst.ok()) {
          l.monthly += inst->price_per_hour * kHoursPerMonth;
        }
      }
      break;
    }
    case StackKind::kReservation: {
      auto r = s.accounts().GetReservation(caller, id);
      if (!r.ok()) break;
      const int64_t now = billing::UnixSeconds(s.clock().Now());
      if (r->end <= now) {
        l.gone = "its term ended";
        break;
      }
      l.exists = true;
      l.shown = billing::ToApiJson(*r);
      l.monthly = r->rate * kHoursPerMonth * r->count;
      l.term_began = r->start <= now;
      break;
    }
    case StackKind::kAlertRule: {
      auto r = s.monitoring().GetRule(caller, id);
      if (!r.ok()) break;
      l.exists = true;
      l.shown = alerts::RuleJson(*r);
      break;
    }
    case StackKind::kBudget: {
      for (const core::BudgetStatus& b : s.accounts().Budgets(caller)) {
        if (b.tenant != id) continue;
        l.exists = true;
        l.shown = billing::ToJson(b.budget);
        l.shown["tenant"] = b.tenant;
      }
      break;
    }
    case StackKind::kVolume: {
      const core::Volume* v = TenantVolume(s, caller, id);
      if (!v || v->deleting) break;
      l.exists = true;
      l.shown = core::ToJson(*v, s.mounts().Users(v->tenant, v->name));
      l.monthly = s.options().volume_price_per_gib_month * v->size_gib;
      break;
    }
  }
  if (l.exists) l.gone.clear();
  return l;
}

Names::Names(const core::State& s, const core::Tenant& caller) {
  core::ListQuery q;
  q.limit = 1000;
  for (bool more = true; more;) {
    const core::InstancePage page = s.views().List(caller, q);
    for (const core::Instance& i : page.items) {
      // One being deleted holds its name only until its agent stopped it.
      if (core::IsActive(i.state) && i.state != core::InstanceState::kStopping && i.group.empty()) {
        ids_.emplace(Key(StackKind::kInstance, i.name), i.id.str());
      }
    }
    more = page.next_after.has_value();
    if (more) q.after_seq = *page.next_after;
  }
  for (const core::GroupStatus& g : s.groups().List(caller)) {
    if (!core::Ended(g.group.state))
      ids_.emplace(Key(StackKind::kGroup, g.group.spec.name), g.group.id);
  }
  for (const alerts::Rule& r : s.monitoring().ListRules(caller)) {
    if (!r.operator_owned()) ids_.emplace(Key(StackKind::kAlertRule, r.name), r.id);
  }
  for (const core::BudgetStatus& b : s.accounts().Budgets(caller)) {
    if (b.tenant == caller.id.str()) ids_.emplace(Key(StackKind::kBudget, ""), b.tenant);
  }
  for (const core::Volume* v : s.volumes().List(caller.id.str())) {
    if (!v->deleting) ids_.emplace(Key(StackKind::kVolume, v->name), v->id);
  }
  for (const core::StackRecord* r : s.stacks().List(caller.id.str())) {
    for (const core::StackObjectRecord& o : r->objects) {
      owners_[o.kind + "/" + o.id] = r;
      for (const std::string& id : o.retiring) owners_["group/" + id] = r;
    }
  }
}

std::string Names::Id(StackKind kind, const std::string& name) const {
  if (kind == StackKind::kReservation) return "";  // Reservations have no names.
  // A tenant has one budget, whatever a stack calls it.
  auto it = ids_.find(Key(kind, kind == StackKind::kBudget ? "" : name));
  return it == ids_.end() ? "" : it->second;
}

const core::StackRecord* Names::Owner(StackKind kind, const std::string& id) const {
  auto it = owners_.find(fmt::format("{}/{}", KindName(kind), id));
  return it == owners_.end() ? nullptr : it->second;
}

std::vector<json> Drift(StackKind kind, const Checked& applied, const Live& live) {
  std::vector<json> out;
  if (!live.exists) return out;
  auto note = [&](const std::string& field, const json& was, const json& now) {
    if (was != now) out.push_back({{"field", field}, {"applied", was}, {"live", now}});
  };
  switch (kind) {
    case StackKind::kInstance:
      note("labels", json(applied.instance.labels), live.shown.value("labels", json::object()));
      note("annotations", json(applied.instance.annotations),
           live.shown.value("annotations", json::object()));
      break;
    case StackKind::kGroup: {
      core::Group g;
      g.spec = applied.group;
      const json want = core::ToJson(g, core::Secrets::kHidden);
      note("autoscale", want.value("autoscale", json()), live.shown.value("autoscale", json()));
      if (!applied.group.autoscale) note("size", want["size"], live.shown["size"]);
      break;
    }
    case StackKind::kBudget: {
      const json want = billing::ToJson(applied.budget);
      note("monthly_usd", want["monthly_usd"], live.shown["monthly_usd"]);
      note("hard_stop", want.value("hard_stop", false), live.shown.value("hard_stop", false));
      break;
    }
    case StackKind::kReservation:
    case StackKind::kAlertRule:
    case StackKind::kVolume:
      break;
  }
  return out;
}

std::string AdoptDifference(core::State& s, StackKind kind, const Checked& want, const Live& live) {
  const json& j = live.shown;
  switch (kind) {
    case StackKind::kInstance: {
      const core::CreateInstanceRequest& r = want.instance;
      if (j.value("billing", "") != core::BillingName(r.billing)) return "billing";
      if (j.value("command", "") != r.command) return "command";
      if (j.value("restart", true) != r.restart) return "restart";
      if (j.value("migratable", false) != r.migratable) return "migratable";
      if (j.value("image", "") != r.image.ref) return "image";
      if (j.value("stop_grace_seconds", 10) != r.stop_grace_seconds) return "stop_grace_seconds";
      const json want_json = core::ToJson(r, core::Secrets::kHidden);
      for (const char* field : {"ports", "volumes"}) {
        if (want_json.value(field, json()) != j.value(field, json())) return field;
      }
      auto a = s.PriceRequest(r);
      if (!a.ok()) return "";
      const json shape = j.value("shape", json::object());
      const core::Shape& want_shape = a->shape;
      if (!r.instance_type.empty() && shape.value("instance_type", "") != r.instance_type) {
        return "instance_type";
      }
      if (shape.value("gpu_model", "") != want_shape.gpu_model) return "gpu_model";
      if (shape.value("vcpus", int64_t{0}) != want_shape.vcpus) return "vcpus";
      if (shape.value("memory_mib", int64_t{0}) != want_shape.memory_mib) return "memory_mib";
      if (shape.value("mig_profile", "") != want_shape.mig_profile) return "mig_profile";
      if (shape.value("milli_gpu", 0) != want_shape.milli_gpu) return "milli_gpu";
      if (shape.value("gpus", want_shape.gpus) != want_shape.gpus) return "gpus";
      return "";
    }
    case StackKind::kGroup: {
      core::Group g;
      g.id = live.id;  // A service's path names its group.
      g.spec = want.group;
      const json w = core::ToJson(g, core::Secrets::kHidden);
      for (const char* field : {"template", "placement", "topology", "min_available", "restart",
                                "elastic", "service"}) {
        if (w.value(field, json()) != j.value(field, json())) {
          return FirstDifference(j.value(field, json()), w.value(field, json()), field);
        }
      }
      return "";
    }
    case StackKind::kAlertRule: {
      json w = alerts::RuleJson(want.rule);
      for (const auto& item : w.items()) {
        const std::string& k = item.key();
        if (k == "id" || k == "owner" || k == "created_at" || k == "builtin") continue;
        if (item.value() != j.value(k, json())) return k;
      }
      return "";
    }
    case StackKind::kVolume: {
      const core::Volumes::Request& v = want.volume;
      if (j.value("size_gib", int64_t{0}) != v.size_gib) return "size_gib";
      if (j.value("shared", false) != v.shared) return "shared";
      if (!v.node.empty() && j.value("node", json()) != json(v.node)) return "node";
      return "";
    }
    case StackKind::kReservation:
    case StackKind::kBudget:
      return "";
  }
  return "";
}

// The first path at which `a` and `b` differ ("template.gpus"), under `prefix`.
std::string FirstDifference(const json& a, const json& b, const std::string& prefix) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const std::string& k : keys) {
      const json va = a.contains(k) ? a[k] : json();
      const json vb = b.contains(k) ? b[k] : json();
      if (va != vb) return FirstDifference(va, vb, prefix.empty() ? k : prefix + "." + k);
    }
  }
  return prefix;
}

std::string Hmac(const std::string& key, const std::string& value) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(value.data()), value.size(), out, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", out[i]);
  return "hmac:" + hex;
}

void HideWorkload(json& w, const std::string& salt) {
  if (!w.is_object()) return;
  if (w.contains("env") && w["env"].is_object()) {
    for (auto& [name, value] : w["env"].items()) {
      if (value.is_string()) value = Hmac(salt, value.get<std::string>());
    }
  }
  if (w.contains("registry_auth") && w["registry_auth"].is_object() &&
      w["registry_auth"].contains("password") && w["registry_auth"]["password"].is_string()) {
    w["registry_auth"]["password"] = Hmac(salt, w["registry_auth"]["password"].get<std::string>());
  }
}

// `spec` as the record keeps it: env literals, registry passwords and webhook URLs (which carry
// tokens) as keyed digests, enough to see a change without keeping the value.
json Hidden(StackKind kind, json spec, const std::string& salt) {
  if (kind == StackKind::kInstance) HideWorkload(spec, salt);
  if (kind == StackKind::kGroup && spec.contains("template")) HideWorkload(spec["template"], salt);
  if (kind == StackKind::kAlertRule && spec.contains("notify") && spec["notify"].is_array()) {
    for (json& r : spec["notify"]) {
      if (r.is_object() && r.contains("webhook") && r["webhook"].is_string()) {
        r["webhook"] = Hmac(salt, r["webhook"].get<std::string>());
      }
    }
  }
  return spec;
}

Result<std::string> Create(core::State& s, const StackCaller& caller, StackKind kind,
                           const Checked& c, store::Batch& batch) {
  const core::Tenant& t = *caller.tenant;
  switch (kind) {
    case StackKind::kInstance: {
      TESSERA_ASSIGN_OR_RETURN(core::Instance i, s.instances().Create(t, c.instance, batch));
      return i.id.str();
    }
    case StackKind::kGroup: {
      TESSERA_ASSIGN_OR_RETURN(core::GroupStatus g, s.groups().Create(t, c.group, batch));
      return g.group.id;
    }
    case StackKind::kReservation: {
      TESSERA_ASSIGN_OR_RETURN(billing::Reservation r,
                               s.accounts().CreateReservation(t, c.reservation, batch));
      return r.id;
    }
    case StackKind::kAlertRule: {
      TESSERA_ASSIGN_OR_RETURN(alerts::Rule r, s.monitoring().CreateRule(t, c.rule, batch));
      return r.id;
    }
    case StackKind::kBudget: {
      TESSERA_RETURN_IF_ERROR(s.accounts().SetBudget(t, t.id.str(), c.budget, batch).status());
      return t.id.str();
    }
    case StackKind::kVolume: {
      TESSERA_ASSIGN_OR_RETURN(core::Volume v, s.CreateVolume(t, c.volume, caller.user, batch));
      return v.id;
    }
  }
  return Status::Internal("unknown kind");
}

Status Delete(core::State& s, const StackCaller& caller, StackKind kind, const std::string& id,
              store::Batch& batch) {
  const core::Tenant& t = *caller.tenant;
  switch (kind) {
    case StackKind::kInstance:
      return s.instances().Delete(t, id, batch).status();
    case StackKind::kGroup:
      return s.groups().Delete(t, id, batch).status();
    case StackKind::kReservation:
      return s.accounts().DeleteReservation(t, id, batch);
    case StackKind::kAlertRule:
      return s.monitoring().DeleteRule(t, id, batch);
    case StackKind::kBudget:
      return s.accounts().DeleteBudget(t, id, batch);
    case StackKind::kVolume:
      if (const core::Volume* v = TenantVolume(s, t, id)) {
        return s.DeleteVolume(t, v->name, batch).status();
      }
      return Status::NotFound(fmt::format("volume '{}' not found", id));
  }
  return Status::Internal("unknown kind");
}

// Sets the in-place fields of a live object to `c`'s.
Status Update(core::State& s, const StackCaller& caller, StackKind kind, const std::string& id,
              const Checked& c, store::Batch& batch) {
  const core::Tenant& t = *caller.tenant;
  switch (kind) {
    case StackKind::kInstance:
      return s.instances()
          .Relabel(t, id, c.instance.labels, c.instance.annotations, batch)
          .status();
    case StackKind::kGroup: {
      core::GroupPatch patch;
      patch.autoscale = c.group.autoscale;  // Absent: removed.
      // The autoscaler owns an autoscaled group's size.
      if (!c.group.autoscale) patch.size = c.group.size;
      return s.groups().Patch(t, id, patch, batch).status();
    }
    case StackKind::kBudget:
      return s.accounts().SetBudget(t, t.id.str(), c.budget, batch).status();
    case StackKind::kReservation:
    case StackKind::kAlertRule:
    case StackKind::kVolume:
      break;
  }
  return Status::Internal("nothing of this kind changes in place");
}

// Deletes the groups `o` replaced that still run (they go with what replaced them).
void DeleteRetiring(core::State& s, const StackCaller& caller, const core::StackObjectRecord& o,
                    store::Batch& batch) {
  for (const std::string& id : o.retiring) {
    if (Find(s, *caller.tenant, StackKind::kGroup, id).exists) {
      (void)s.groups().Delete(*caller.tenant, id, batch);
    }
  }
}

}  // namespace tessera::api::stack_internal
