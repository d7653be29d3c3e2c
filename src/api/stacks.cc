// Declarative stacks: parse, plan, apply, destroy (docs/stacks.md).
#include "api/stacks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "alerts/rule.h"
#include "api/codec.h"
#include "billing/budget.h"
#include "billing/reservation.h"
#include "catalog/catalog.h"
#include "common/auth.h"
#include "common/ids.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api {

namespace {

using nlohmann::json;

// Monthly costs count 730 hours, as the clouds' price pages do.
constexpr int64_t kHoursPerMonth = 730;
constexpr std::string_view kRefOpen = "${ref:";

constexpr StackKind kKinds[] = {StackKind::kInstance, StackKind::kGroup, StackKind::kReservation,
                                StackKind::kAlertRule, StackKind::kBudget};

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
  return k == StackKind::kInstance || k == StackKind::kGroup || k == StackKind::kAlertRule;
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

// ---- References -------------------------------------------------------------------------------

// Every `${ref:...}` in `s`, or InvalidArgument naming `field` for a malformed one.
Status FindRefs(const std::string& s, const std::string& field, std::vector<StackRef>& out) {
  for (size_t at = s.find(kRefOpen); at != std::string::npos; at = s.find(kRefOpen, at)) {
    const size_t end = s.find('}', at);
    const std::string text = s.substr(at, end == std::string::npos ? 40 : end - at + 1);
    auto bad = [&](std::string_view why) {
      return Status::InvalidArgument(
          fmt::format("field '{}': '{}' {} (a reference is "
                      "${{ref:KIND/NAME.FIELD}}, e.g. "
                      "${{ref:instance/train.node}})",
                      field, Quote(text, 80), why));
    };
    if (end == std::string::npos) return bad("is not closed");
    const std::string body = s.substr(at + kRefOpen.size(), end - at - kRefOpen.size());
    const size_t slash = body.find('/');
    const size_t dot = body.find('.', slash == std::string::npos ? 0 : slash);
    if (slash == std::string::npos || dot == std::string::npos) return bad("lacks KIND/NAME.FIELD");
    StackRef ref;
    const auto kind = ParseKind(body.substr(0, slash));
    if (!kind) return bad("names no kind (instance, group, reservation, alert_rule, budget)");
    ref.kind = *kind;
    ref.name = body.substr(slash + 1, dot - slash - 1);
    ref.field = body.substr(dot + 1);
    if (ref.name.empty() || ref.field.empty() ||
        ref.field.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_.") !=
            std::string::npos) {
      return bad("has an empty name or a field that is not a dotted path of [a-z0-9_]");
    }
    out.push_back(std::move(ref));
    at = end + 1;
  }
  return Status::Ok();
}

Status CollectRefs(const json& j, const std::string& path, std::vector<StackRef>& out) {
  if (j.is_string()) return FindRefs(j.get<std::string>(), path, out);
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      TESSERA_RETURN_IF_ERROR(CollectRefs(value, path.empty() ? key : path + "." + key, out));
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      TESSERA_RETURN_IF_ERROR(CollectRefs(j[i], fmt::format("{}[{}]", path, i), out));
    }
  }
  return Status::Ok();
}

std::string RefText(const StackRef& r) {
  return fmt::format("${{ref:{}/{}.{}}}", KindName(r.kind), r.name, r.field);
}

// `path` ("node", "gpus.0.uuid") in `j`; null when absent.
json Lookup(const json& j, const std::string& path) {
  const json* at = &j;
  size_t from = 0;
  while (from <= path.size()) {
    const size_t dot = std::min(path.find('.', from), path.size());
    const std::string part = path.substr(from, dot - from);
    if (at->is_object() && at->contains(part)) {
      at = &(*at)[part];
    } else if (at->is_array() && !part.empty() &&
               part.find_first_not_of("0123456789") == std::string::npos &&
               std::stoul(part) < at->size()) {
      at = &(*at)[std::stoul(part)];
    } else {
      return json();
    }
    from = dot + 1;
  }
  return *at;
}

// The outputs of the objects applied so far, by "kind/name": as the API shows each. An object
// whose outputs are not known yet (it is still to be made) is absent.
using Outputs = std::map<std::string, json>;

std::string Key(StackKind k, const std::string& name) {
  return fmt::format("{}/{}", KindName(k), name);
}

// `j` with every reference replaced by its value. A string that is one reference whole takes
// the value's type; within text, a value is written as text. A reference without a known value
// makes the result incomplete: `unknown` lists it, and `placeholder` stands in for it.
json Resolve(const json& j, const Outputs& outputs, std::vector<std::string>& unknown,
             std::vector<std::string>& missing) {
  if (j.is_object()) {
    json out = json::object();
    for (const auto& [key, value] : j.items()) out[key] = Resolve(value, outputs, unknown, missing);
    return out;
  }
  if (j.is_array()) {
    json out = json::array();
    for (const json& v : j) out.push_back(Resolve(v, outputs, unknown, missing));
    return out;
  }
  if (!j.is_string()) return j;
  const std::string& s = j.get_ref<const std::string&>();
  if (s.find(kRefOpen) == std::string::npos) return j;
  std::vector<StackRef> refs;
  if (!FindRefs(s, "", refs).ok()) return j;  // Checked when parsed.
  auto value_of = [&](const StackRef& r) -> std::optional<json> {
    auto it = outputs.find(Key(r.kind, r.name));
    if (it == outputs.end()) {
      unknown.push_back(RefText(r));
      return std::nullopt;
    }
    json v = Lookup(it->second, r.field);
    if (v.is_null()) {
      missing.push_back(fmt::format("{} has no value (the {} '{}' shows no '{}')", RefText(r),
                                    KindName(r.kind), r.name, r.field));
      return std::nullopt;
    }
    return v;
  };
  if (refs.size() == 1 && s == RefText(refs[0])) {
    auto v = value_of(refs[0]);
    return v ? *v : json("unknown");
  }
  std::string out;
  size_t from = 0;
  for (const StackRef& r : refs) {
    const std::string text = RefText(r);
    const size_t at = s.find(text, from);
    out += s.substr(from, at - from);
    auto v = value_of(r);
    out += !v ? "unknown" : v->is_string() ? v->get<std::string>() : v->dump();
    from = at + text.size();
  }
  out += s.substr(from);
  return out;
}

// ---- Parsing ----------------------------------------------------------------------------------

// Orders `objects` so that each follows what it references (stable otherwise); InvalidArgument
// naming a reference to an object the stack lacks, or a cycle.
Status Order(std::vector<StackObject>& objects) {
  std::map<std::string, size_t> by_key;
  for (size_t i = 0; i < objects.size(); ++i) by_key[Key(objects[i].kind, objects[i].name)] = i;
  for (const StackObject& o : objects) {
    for (const StackRef& r : o.refs) {
      if (!by_key.contains(Key(r.kind, r.name))) {
        return Status::InvalidArgument(fmt::format("{}: {} names {}, which the stack does not hold",
                                                   Where(o), RefText(r), Label(r.kind, r.name)));
      }
    }
  }
  std::vector<int> mark(objects.size(), 0);  // 0 new, 1 on the path, 2 done.
  std::vector<size_t> path, order;
  std::function<Status(size_t)> visit = [&](size_t i) -> Status {
    if (mark[i] == 2) return Status::Ok();
    if (mark[i] == 1) {
      auto start = std::find(path.begin(), path.end(), i);
      std::vector<std::string> names;
      for (auto it = start; it != path.end(); ++it) {
        names.push_back(Key(objects[*it].kind, objects[*it].name));
      }
      names.push_back(Key(objects[i].kind, objects[i].name));
      return Status::InvalidArgument(
          fmt::format("{}: a reference cycle: {}", Where(objects[i]), fmt::join(names, " -> ")));
    }
    mark[i] = 1;
    path.push_back(i);
    for (const StackRef& r : objects[i].refs) {
      TESSERA_RETURN_IF_ERROR(visit(by_key.at(Key(r.kind, r.name))));
    }
    path.pop_back();
    mark[i] = 2;
    order.push_back(i);
    return Status::Ok();
  };
  for (size_t i = 0; i < objects.size(); ++i) TESSERA_RETURN_IF_ERROR(visit(i));
  std::vector<StackObject> sorted;
  sorted.reserve(objects.size());
  for (size_t i : order) sorted.push_back(std::move(objects[i]));
  objects = std::move(sorted);
  return Status::Ok();
}

Result<StackObject> ReadObject(const json& j, size_t index) {
  StackObject o;
  o.index = index;
  const std::string at = fmt::format("objects[{}]", index);
  if (!j.is_object()) {
    return Status::InvalidArgument(
        fmt::format("{}: expected an object, found {}", at, JsonTypeName(j)));
  }
  if (!j.contains("kind") || !j["kind"].is_string()) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'kind': is missing or not a string (one "
                    "of instance, group, reservation, alert_rule, "
                    "budget)",
                    at));
  }
  const auto kind = ParseKind(j["kind"].get<std::string>());
  if (!kind) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'kind': '{}' is not instance, group, reservation, alert_rule or "
                    "budget",
                    at, Quote(j["kind"].get<std::string>(), 64)));
  }
  o.kind = *kind;
  if (!j.contains("name") || !j["name"].is_string()) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'name': is missing or not a string (every object has a name)", at));
  }
  o.name = j["name"].get<std::string>();
  // A rule's name is its alertname, which ParseRule checks; the others' are ids' bodies.
  if (o.kind != StackKind::kAlertRule && !IsValidIdBody(o.name)) {
    return Status::InvalidArgument(
        fmt::format("{}: field 'name': '{}' {}", at, Quote(o.name, 64), kNameRule));
  }
  o.spec = j;
  o.spec.erase("kind");
  if (!NameInBody(o.kind)) o.spec.erase("name");
  if (j.contains("lifecycle")) {
    const json& l = j["lifecycle"];
    if (!l.is_object()) {
      return Status::InvalidArgument(fmt::format(
          "{}: field 'lifecycle': expected an object, found {}", Where(o), JsonTypeName(l)));
    }
    for (const auto& [key, value] : l.items()) {
      if (key != "prevent_destroy") {
        return Status::InvalidArgument(
            fmt::format("{}: field 'lifecycle.{}': is not known (lifecycle takes prevent_destroy)",
                        Where(o), Quote(key, 64)));
      }
      if (!value.is_boolean()) {
        return Status::InvalidArgument(
            fmt::format("{}: field 'lifecycle.prevent_destroy': expected a boolean, found {}",
                        Where(o), JsonTypeName(value)));
      }
      o.prevent_destroy = value.get<bool>();
    }
    o.spec.erase("lifecycle");
  }
  Status refs = CollectRefs(o.spec, "", o.refs);
  if (!refs.ok()) return Status::InvalidArgument(Where(o) + ": " + refs.message());
  return o;
}

// ---- The kinds --------------------------------------------------------------------------------

// The API's checks of an object's (resolved) fields, as its own route makes them; `priced`
// gets its monthly cost at the catalog's prices.
struct Checked {
  core::CreateInstanceRequest instance;
  core::GroupRequest group;
  billing::ReservationRequest reservation;
  alerts::Rule rule;
  billing::Budget budget;
  Money monthly;
};

// A reservation is checked against the fleet's capacity and the quota (a dry run) only when
// `admit`: one that exists already holds its place.
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
        TESSERA_RETURN_IF_ERROR(s.CreateReservation(*caller.tenant, probe, scratch).status());
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
  }
  return c;
}

// What the server holds for an object: whether it exists (active), and the API's form of it.
struct Live {
  bool exists = false;
  std::string id;
  std::string gone;         // Why it does not: "deleted outside the stack", "ended (failed)".
  json shown;               // The API's form, for references.
  Money monthly;            // What it costs a month now.
  bool term_began = false;  // A reservation whose term began (it cannot be cancelled).
};

Live Find(const core::State& s, const core::Tenant& caller, StackKind kind, const std::string& id) {
  Live l;
  l.id = id;
  l.gone = "deleted outside the stack";
  switch (kind) {
    case StackKind::kInstance: {
      auto inst = s.GetInstance(caller, id);
      if (!inst.ok()) break;
      if (!core::IsActive(inst->state)) {
        l.gone = fmt::format("ended ({})", core::StateName(inst->state));
        break;
      }
      l.exists = true;
      l.shown = core::ToJson(*inst);
      l.monthly = inst->price_per_hour * kHoursPerMonth;
      break;
    }
    case StackKind::kGroup: {
      auto g = s.GetGroup(caller, id);
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
        if (auto inst = s.GetInstance(caller, m.instance); inst.ok()) {
          l.monthly += inst->price_per_hour * kHoursPerMonth;
        }
      }
      break;
    }
    case StackKind::kReservation: {
      auto r = s.GetReservation(caller, id);
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
      for (const core::State::BudgetStatus& b : s.Budgets(caller)) {
        if (b.tenant != id) continue;
        l.exists = true;
        l.shown = billing::ToJson(b.budget);
        l.shown["tenant"] = b.tenant;
      }
      break;
    }
  }
  if (l.exists) l.gone.clear();
  return l;
}

// The id of a live object of the caller's named `name` (not `except`'s), or "".
std::string FindByName(const core::State& s, const core::Tenant& caller, StackKind kind,
                       const std::string& name) {
  switch (kind) {
    case StackKind::kInstance: {
      core::ListQuery q;
      q.limit = 1000;
      while (true) {
        const core::InstancePage page = s.ListInstances(caller, q);
        for (const core::Instance& i : page.items) {
          if (i.name == name && core::IsActive(i.state) && i.group.empty()) return i.id.str();
        }
        if (!page.next_after) return "";
        q.after_seq = *page.next_after;
      }
    }
    case StackKind::kGroup:
      for (const core::GroupStatus& g : s.ListGroups(caller)) {
        if (g.group.spec.name == name && !core::Ended(g.group.state)) return g.group.id;
      }
      return "";
    case StackKind::kAlertRule:
      for (const alerts::Rule& r : s.monitoring().ListRules(caller)) {
        if (r.name == name && !r.operator_owned()) return r.id;
      }
      return "";
    case StackKind::kBudget:
      for (const core::State::BudgetStatus& b : s.Budgets(caller)) {
        if (b.tenant == caller.id.str()) return b.tenant;
      }
      return "";
    case StackKind::kReservation:
      return "";  // Reservations have no names.
  }
  return "";
}

// Fields changed outside the stack: the in-place fields whose live value differs from what was
// applied. The autoscaler owns an autoscaled group's size, so that is never drift.
std::vector<json> Drift(StackKind kind, const Checked& applied, const json& applied_spec,
                        const Live& live) {
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
      break;
  }
  (void)applied_spec;
  return out;
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

// ---- Hidden values ----------------------------------------------------------------------------

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

// ---- Planning ---------------------------------------------------------------------------------

enum class Action { kNone, kCreate, kAdopt, kUpdate, kReplace, kDelete, kForget };

std::string_view ActionName(Action a) {
  switch (a) {
    case Action::kNone:
      return "none";
    case Action::kCreate:
      return "create";
    case Action::kAdopt:
      return "adopt";
    case Action::kUpdate:
      return "update";
    case Action::kReplace:
      return "replace";
    case Action::kDelete:
      return "delete";
    case Action::kForget:
      return "forget";
  }
  return "?";
}

struct Entry {
  StackKind kind = StackKind::kInstance;
  std::string name;
  const StackObject* desired = nullptr;             // Null: removed from the file.
  const core::StackObjectRecord* record = nullptr;  // Null: the stack has not made it.
  Action action = Action::kNone;
  std::vector<std::string> changed;  // Fields that differ from what was applied.
  std::string forces;                // A replacement's first field that cannot change in place.
  std::vector<json> drift;
  std::vector<std::string> unknown;  // References known only once applied.
  std::string adopt;                 // The id adopted.
  std::string note;
  Live live;
  Money before, after;
  json applied;  // The fields this plan applies, hidden values digested.
};

struct Plan {
  std::string stack;
  const core::StackRecord* record = nullptr;
  std::string salt;
  std::vector<Entry> entries;  // The file's objects in apply order, then the removed ones.
  std::string digest;
};

bool Protected(const Entry& e) {
  return (e.desired && e.desired->prevent_destroy) || (e.record && e.record->prevent_destroy);
}

Result<Plan> MakePlan(core::State& s, const StackCaller& caller, const std::string& stack,
                      const StackRequest& req) {
  const core::Tenant& tenant = *caller.tenant;
  Plan plan;
  plan.stack = stack;
  plan.record = s.stacks().Find(tenant.id.str(), stack);
  plan.salt = plan.record ? plan.record->salt : "";
  if (plan.salt.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::string token, GenerateToken());
    plan.salt = HashToken(token);
  }
  std::map<std::string, const core::StackObjectRecord*> recorded;
  if (plan.record) {
    for (const core::StackObjectRecord& r : plan.record->objects) {
      recorded[r.kind + "/" + r.name] = &r;
    }
  }
  Outputs outputs;  // Of objects that exist and stay as they are.
  for (const StackObject& o : req.objects) {
    if ((o.kind == StackKind::kReservation || o.kind == StackKind::kBudget) &&
        caller.role < core::Role::kOwner) {
      return Status::PermissionDenied(fmt::format(
          "{}: a {} commits the tenant's money and needs the owner role; this token's is {}",
          Where(o), KindName(o.kind), core::RoleName(caller.role)));
    }
    Entry e;
    e.kind = o.kind;
    e.name = o.name;
    e.desired = &o;
    const std::string key = Key(o.kind, o.name);
    if (auto it = recorded.find(key); it != recorded.end()) {
      e.record = it->second;
      recorded.erase(it);
    }
    std::vector<std::string> missing;
    const json resolved = Resolve(o.spec, outputs, e.unknown, missing);
    e.unknown.insert(e.unknown.end(), missing.begin(), missing.end());
    e.applied = Hidden(o.kind, resolved, plan.salt);
    if (e.record) {
      e.live = Find(s, tenant, o.kind, e.record->id);
    } else if (const std::string id = FindByName(s, tenant, o.kind, o.name); !id.empty()) {
      if (const core::StackRecord* owner =
              s.stacks().OwnerOf(tenant.id.str(), KindName(o.kind), id)) {
        return Status::FailedPrecondition(
            fmt::format("{}: {} exists and belongs to stack '{}'; a name has one owner", Where(o),
                        Label(o.kind, o.name), owner->name));
      }
      if (!req.adopt) {
        return Status::AlreadyExists(fmt::format(
            "{}: {} exists ({}) and this stack did not create it: rename it in the stack, or "
            "adopt it (--adopt) to manage it from here",
            Where(o), Label(o.kind, o.name), id));
      }
      e.live = Find(s, tenant, o.kind, id);
      e.adopt = id;
    }
    e.before = e.live.exists ? e.live.monthly : Money();
    // An object the API would refuse fails the plan, before anything changes. One that waits on
    // another's outputs is checked in full when those are known, as it is applied.
    Result<Checked> checked = Check(s, caller, o.kind, resolved, !e.live.exists);
    if (!checked.ok() && e.unknown.empty()) {
      return Status(checked.status().code(), Where(o) + ": " + checked.status().message());
    }
    if (checked.ok()) e.after = checked->monthly;
    if (!e.live.exists) {
      e.action = Action::kCreate;
      if (e.record) e.note = e.live.gone;
    } else if (!e.adopt.empty()) {
      e.action = Action::kAdopt;
    } else {
      // What changed in the file since the last apply, and on the server since.
      json was = json::parse(e.record->applied, nullptr, false);
      if (!was.is_object()) was = json::object();
      std::set<std::string> keys;
      for (const auto& [k, v] : was.items()) keys.insert(k);
      for (const auto& [k, v] : e.applied.items()) keys.insert(k);
      const bool autoscaled = o.kind == StackKind::kGroup && e.applied.contains("autoscale") &&
                              !e.applied["autoscale"].is_null();
      for (const std::string& k : keys) {
        const json a = was.contains(k) ? was[k] : json();
        const json b = e.applied.contains(k) ? e.applied[k] : json();
        if (a == b) continue;
        if (autoscaled && k == "size") continue;  // The autoscaler's to set.
        e.changed.push_back(k);
      }
      for (const std::string& k : e.changed) {
        if (!InPlace(o.kind, k) && e.forces.empty()) {
          e.forces = FirstDifference(was.contains(k) ? was[k] : json(),
                                     e.applied.contains(k) ? e.applied[k] : json(), k);
        }
      }
      std::vector<std::string> ignored;
      Result<Checked> applied = Check(s, caller, o.kind, Resolve(was, {}, ignored, ignored), false);
      if (applied.ok()) e.drift = Drift(o.kind, *applied, was, e.live);
      if (!e.forces.empty() || (!e.unknown.empty() && !e.changed.empty() &&
                                std::any_of(e.changed.begin(), e.changed.end(),
                                            [&](auto& k) { return !InPlace(o.kind, k); }))) {
        e.action = Action::kReplace;
        if (e.forces.empty()) e.forces = e.changed.front();
      } else if (!e.changed.empty() || !e.drift.empty()) {
        e.action = Action::kUpdate;
      }
      if (e.action == Action::kReplace && o.kind == StackKind::kReservation && e.live.term_began) {
        return Status::FailedPrecondition(fmt::format(
            "{}: field '{}' changed, which replaces a reservation, but its term began and a "
            "reservation cannot be cancelled then; give it a new name to buy another",
            Where(o), e.forces));
      }
    }
    if (e.action == Action::kReplace && Protected(e)) {
      return Status::FailedPrecondition(
          fmt::format("{}: lifecycle.prevent_destroy is set, and field '{}' changed, which "
                      "replaces it; undo the change or set prevent_destroy: false",
                      Where(o), e.forces));
    }
    if (e.action == Action::kNone || e.action == Action::kUpdate) {
      outputs[key] = e.live.shown;
    }
    if (e.action == Action::kNone && e.record && e.record->prevent_destroy != o.prevent_destroy) {
      e.note = "lifecycle changes in the stack's record";
    }
    plan.entries.push_back(std::move(e));
  }
  // What the file no longer holds: deleted, the last applied first.
  if (plan.record) {
    for (auto it = plan.record->objects.rbegin(); it != plan.record->objects.rend(); ++it) {
      if (!recorded.contains(it->kind + "/" + it->name)) continue;
      Entry e;
      e.kind = *ParseKind(it->kind);
      e.name = it->name;
      e.record = &*it;
      e.live = Find(s, tenant, e.kind, it->id);
      e.before = e.live.exists ? e.live.monthly : Money();
      e.action = e.live.exists ? Action::kDelete : Action::kForget;
      if (!e.live.exists) e.note = e.live.gone;
      if (e.action == Action::kDelete && Protected(e)) {
        return Status::FailedPrecondition(fmt::format(
            "{} ({}) is no longer in the stack, but lifecycle.prevent_destroy was set when it "
            "was last applied; apply it with prevent_destroy: false first, then remove it",
            Label(e.kind, e.name), it->id));
      }
      plan.entries.push_back(std::move(e));
    }
  }
  return plan;
}

std::string Signed(Money m) {
  return (m < Money() ? "-" : "+") + (m < Money() ? -m : m).ToString(2);
}

json EntryJson(const Entry& e) {
  json j = {{"kind", KindName(e.kind)}, {"name", e.name}, {"action", ActionName(e.action)}};
  const std::string id = !e.adopt.empty() ? e.adopt : e.record ? e.record->id : "";
  if (!id.empty()) j["id"] = id;
  if (!e.changed.empty()) j["changed"] = e.changed;
  if (!e.forces.empty()) j["forces"] = e.forces;
  if (!e.drift.empty()) j["drift"] = e.drift;
  if (!e.unknown.empty()) j["known_after_apply"] = e.unknown;
  if (!e.note.empty()) j["note"] = e.note;
  if (e.desired) j["index"] = e.desired->index;
  j["monthly_usd_before"] = e.before.RoundedToCents().ToString(2);
  j["monthly_usd_after"] = e.action == Action::kDelete || e.action == Action::kForget
                               ? "0.00"
                               : e.after.RoundedToCents().ToString(2);
  return j;
}

json PlanJson(Plan& plan) {
  json objects = json::array();
  std::map<std::string, int> counts;
  Money before, after;
  for (const Entry& e : plan.entries) {
    objects.push_back(EntryJson(e));
    ++counts[std::string(ActionName(e.action))];
    before += e.before;
    if (e.action != Action::kDelete && e.action != Action::kForget) after += e.after;
  }
  // The digest covers what the plan does and what the server held when it was made, so an
  // apply of it is refused once either changed.
  json basis = {{"stack", plan.stack},
                {"serial", plan.record ? plan.record->serial : 0},
                {"objects", objects}};
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    basis["objects"][i]["applied"] = plan.entries[i].applied;
    basis["objects"][i]["live"] = plan.entries[i].live.shown;
  }
  for (json& b : basis["objects"]) {
    // What changes by itself (a pending reason, a member's state) is not a change of the stack.
    if (b["live"].is_object()) {
      for (const char* noisy : {"reason", "updated_at", "history", "members", "placed", "state",
                                "autoscale_status", "node", "gpus", "pull", "endpoints"}) {
        b["live"].erase(noisy);
      }
    }
  }
  plan.digest = HashToken(DumpJson(basis));
  const bool changes = std::any_of(plan.entries.begin(), plan.entries.end(), [](const Entry& e) {
    return e.action != Action::kNone || !e.note.empty();
  });
  json drift = json::array();
  for (const Entry& e : plan.entries) {
    if (!e.drift.empty() || (e.record && !e.live.exists && e.desired)) {
      drift.push_back({{"kind", KindName(e.kind)},
                       {"name", e.name},
                       {"fields", e.drift},
                       {"note", e.live.exists ? "" : e.live.gone}});
    }
  }
  return {{"stack", plan.stack},
          {"serial", plan.record ? plan.record->serial : 0},
          {"digest", plan.digest},
          {"changes", changes},
          {"counts", counts},
          {"objects", std::move(objects)},
          {"drift", std::move(drift)},
          {"monthly_usd_before", before.RoundedToCents().ToString(2)},
          {"monthly_usd_after", after.RoundedToCents().ToString(2)},
          {"monthly_usd_change", Signed((after - before).RoundedToCents())}};
}

// ---- Applying ---------------------------------------------------------------------------------

struct Made {
  std::string id;
  json shown;
};

Result<Made> Create(core::State& s, const StackCaller& caller, StackKind kind, const Checked& c,
                    store::Batch& batch) {
  const core::Tenant& t = *caller.tenant;
  switch (kind) {
    case StackKind::kInstance: {
      TESSERA_ASSIGN_OR_RETURN(core::Instance i, s.CreateInstance(t, c.instance, batch));
      return Made{i.id.str(), core::ToJson(i)};
    }
    case StackKind::kGroup: {
      TESSERA_ASSIGN_OR_RETURN(core::GroupStatus g, s.CreateGroup(t, c.group, batch));
      return Made{g.group.id, {}};
    }
    case StackKind::kReservation: {
      TESSERA_ASSIGN_OR_RETURN(billing::Reservation r,
                               s.CreateReservation(t, c.reservation, batch));
      return Made{r.id, {}};
    }
    case StackKind::kAlertRule: {
      TESSERA_ASSIGN_OR_RETURN(alerts::Rule r, s.monitoring().CreateRule(t, c.rule, batch));
      return Made{r.id, {}};
    }
    case StackKind::kBudget: {
      TESSERA_RETURN_IF_ERROR(s.SetBudget(t, t.id.str(), c.budget, batch).status());
      return Made{t.id.str(), {}};
    }
  }
  return Status::Internal("unknown kind");
}

Status Delete(core::State& s, const StackCaller& caller, StackKind kind, const std::string& id,
              store::Batch& batch) {
  const core::Tenant& t = *caller.tenant;
  switch (kind) {
    case StackKind::kInstance:
      return s.DeleteInstance(t, id, batch).status();
    case StackKind::kGroup:
      return s.DeleteGroup(t, id, batch).status();
    case StackKind::kReservation:
      return s.DeleteReservation(t, id, batch);
    case StackKind::kAlertRule:
      return s.monitoring().DeleteRule(t, id, batch);
    case StackKind::kBudget:
      return s.DeleteBudget(t, id, batch);
  }
  return Status::Internal("unknown kind");
}

// Sets the in-place fields of a live object to `c`'s.
Status Update(core::State& s, const StackCaller& caller, StackKind kind, const std::string& id,
              const Checked& c, store::Batch& batch) {
  const core::Tenant& t = *caller.tenant;
  switch (kind) {
    case StackKind::kInstance:
      return s.Relabel(t, id, c.instance.labels, c.instance.annotations, batch).status();
    case StackKind::kGroup: {
      core::GroupPatch patch;
      patch.autoscale = c.group.autoscale;  // Absent: removed.
      // The autoscaler owns an autoscaled group's size.
      if (!c.group.autoscale) patch.size = c.group.size;
      return s.PatchGroup(t, id, patch, batch).status();
    }
    case StackKind::kBudget:
      return s.SetBudget(t, t.id.str(), c.budget, batch).status();
    case StackKind::kReservation:
    case StackKind::kAlertRule:
      break;
  }
  return Status::Internal("nothing of this kind changes in place");
}

core::StackObjectRecord RecordOf(const Entry& e, const std::string& id, const json& applied) {
  core::StackObjectRecord r;
  r.kind = std::string(KindName(e.kind));
  r.name = e.name;
  r.id = id;
  r.applied = DumpJson(applied);
  r.digest = HashToken(r.applied);
  r.prevent_destroy = e.desired ? e.desired->prevent_destroy : e.record->prevent_destroy;
  return r;
}

struct Outcome {
  json done = json::array(), failed = json::array(), skipped = json::array();
  bool changed = false;
};

// Applies one of the file's objects; its record goes to `kept` when it still names something.
void ApplyEntry(core::State& s, const StackCaller& caller, const Plan& plan, const Entry& e,
                Outputs& outputs, std::set<std::string>& broken,
                std::vector<core::StackObjectRecord>& kept, Outcome& out, store::Batch& batch) {
  const std::string key = Key(e.kind, e.name);
  json item = {{"kind", KindName(e.kind)}, {"name", e.name}, {"action", ActionName(e.action)}};
  auto keep_old = [&] {
    if (e.record && e.live.exists) kept.push_back(*e.record);
  };
  for (const StackRef& r : e.desired->refs) {
    if (broken.contains(Key(r.kind, r.name))) {
      item["why"] = fmt::format("it uses {}, which was not applied", RefText(r));
      out.skipped.push_back(std::move(item));
      broken.insert(key);
      keep_old();
      return;
    }
  }
  if (e.action == Action::kNone) {
    kept.push_back(RecordOf(e, e.record->id, json::parse(e.record->applied)));
    if (e.record->prevent_destroy != e.desired->prevent_destroy) out.changed = true;
    outputs[key] = e.live.shown;
    return;
  }
  auto fail = [&](const Status& why) {
    item["error"] = Where(*e.desired) + ": " + why.message();
    out.failed.push_back(std::move(item));
    broken.insert(key);
  };
  std::vector<std::string> unknown, missing;
  const json resolved = Resolve(e.desired->spec, outputs, unknown, missing);
  if (!missing.empty() || !unknown.empty()) {
    fail(Status::FailedPrecondition(
        fmt::format("{}", fmt::join(missing.empty() ? unknown : missing, "; "))));
    keep_old();
    return;
  }
  // Creating runs the API's own admission (capacity, quota) again.
  Result<Checked> c = Check(s, caller, e.kind, resolved, false);
  if (!c.ok()) {
    fail(c.status());
    keep_old();
    return;
  }
  const json applied = Hidden(e.kind, resolved, plan.salt);
  std::string id;
  Status st;
  switch (e.action) {
    case Action::kAdopt:
    case Action::kUpdate: {
      id = e.action == Action::kAdopt ? e.adopt : e.record->id;
      const bool mutable_kind = e.kind == StackKind::kInstance || e.kind == StackKind::kGroup ||
                                e.kind == StackKind::kBudget;
      if (mutable_kind) st = Update(s, caller, e.kind, id, *c, batch);
      break;
    }
    case Action::kCreate: {
      Result<Made> made = Create(s, caller, e.kind, *c, batch);
      st = made.status();
      if (made.ok()) id = made->id;
      break;
    }
    case Action::kReplace: {
      // A group that serves is replaced by a new one made first; the others make room first.
      const bool before = e.kind == StackKind::kGroup;
      if (!before) {
        st = Delete(s, caller, e.kind, e.record->id, batch);
        if (!st.ok()) break;
        out.done.push_back({{"kind", KindName(e.kind)},
                            {"name", e.name},
                            {"action", "delete"},
                            {"id", e.record->id}});
      }
      Result<Made> made = Create(s, caller, e.kind, *c, batch);
      st = made.status();
      if (!made.ok()) {
        if (before) keep_old();
        break;
      }
      id = made->id;
      if (before) {
        Status gone = Delete(s, caller, e.kind, e.record->id, batch);
        if (!gone.ok()) {
          out.failed.push_back({{"kind", KindName(e.kind)},
                                {"name", e.name},
                                {"action", "delete"},
                                {"error", fmt::format("{} was replaced by {}, but deleting it "
                                                      "failed: {}",
                                                      e.record->id, id, gone.message())}});
        }
      }
      break;
    }
    case Action::kNone:
    case Action::kDelete:
    case Action::kForget:
      break;
  }
  if (!st.ok()) {
    fail(st);
    if (e.action == Action::kUpdate) keep_old();
    if (e.action == Action::kAdopt) {
      // Not adopted: the stack does not own it.
    }
    return;
  }
  out.changed = true;
  item["id"] = id;
  out.done.push_back(std::move(item));
  kept.push_back(RecordOf(e, id, applied));
  outputs[key] = Find(s, *caller.tenant, e.kind, id).shown;
}

Status SaveRecord(core::State& s, const StackCaller& caller, const Plan& plan,
                  std::vector<core::StackObjectRecord> kept, bool changed, store::Batch& batch,
                  int64_t& serial) {
  serial = plan.record ? plan.record->serial : 0;
  if (!changed && plan.record) return Status::Ok();
  core::StackRecord r;
  r.tenant = caller.tenant->id.str();
  r.name = plan.stack;
  r.serial = ++serial;
  r.updated_at = FormatRfc3339(s.clock().Now());
  r.salt = plan.salt;
  r.objects = std::move(kept);
  return s.stacks().Put(std::move(r), batch);
}

}  // namespace

Result<StackRequest> ParseStackRequest(const json& body) {
  StackRequest req;
  if (!body.is_object()) return Status::InvalidArgument("the body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (key != "objects" && key != "plan_digest" && key != "adopt") {
      return Status::InvalidArgument(
          fmt::format("field '{}': is not known here (a stack takes objects, plan_digest, adopt)",
                      Quote(key, 64)));
    }
  }
  const json* objects = body.contains("objects") ? &body["objects"] : nullptr;
  if (!objects || !objects->is_array()) {
    return Status::InvalidArgument("field 'objects': is missing or not an array");
  }
  if (objects->size() > core::kMaxStackObjects) {
    return Status::InvalidArgument(
        fmt::format("field 'objects': holds {} objects; a stack holds "
                    "at most {}",
                    objects->size(), core::kMaxStackObjects));
  }
  if (body.contains("plan_digest")) {
    const json& d = body["plan_digest"];
    if (!d.is_string() || d.get<std::string>().size() != 64 ||
        d.get<std::string>().find_first_not_of("0123456789abcdef") != std::string::npos) {
      return Status::InvalidArgument("field 'plan_digest': expected the 64 hex digits of a plan");
    }
    req.plan_digest = d.get<std::string>();
  }
  if (body.contains("adopt")) {
    if (!body["adopt"].is_boolean()) {
      return Status::InvalidArgument("field 'adopt': expected a boolean");
    }
    req.adopt = body["adopt"].get<bool>();
  }
  std::map<std::string, size_t> seen;
  bool budget = false;
  for (size_t i = 0; i < objects->size(); ++i) {
    TESSERA_ASSIGN_OR_RETURN(StackObject o, ReadObject((*objects)[i], i));
    const std::string key = Key(o.kind, o.name);
    if (auto it = seen.find(key); it != seen.end()) {
      return Status::InvalidArgument(
          fmt::format("{}: field 'name': {} is given twice (also "
                      "objects[{}])",
                      Where(o), Label(o.kind, o.name), it->second));
    }
    if (o.kind == StackKind::kBudget && budget) {
      return Status::InvalidArgument(
          fmt::format("{}: a tenant has one budget, and the stack holds another", Where(o)));
    }
    budget = budget || o.kind == StackKind::kBudget;
    seen[key] = i;
    req.objects.push_back(std::move(o));
  }
  TESSERA_RETURN_IF_ERROR(Order(req.objects));
  return req;
}

Result<json> PlanStack(core::State& s, const StackCaller& caller, const std::string& stack,
                       const StackRequest& req) {
  TESSERA_ASSIGN_OR_RETURN(Plan plan, MakePlan(s, caller, stack, req));
  return PlanJson(plan);
}

Result<json> ApplyStack(core::State& s, const StackCaller& caller, const std::string& stack,
                        const StackRequest& req, store::Batch& batch) {
  TESSERA_ASSIGN_OR_RETURN(Plan plan, MakePlan(s, caller, stack, req));
  json shown = PlanJson(plan);
  if (!req.plan_digest.empty() && req.plan_digest != plan.digest) {
    return Status::FailedPrecondition(fmt::format(
        "stack '{}' changed since its plan was made (on the server, or by another apply): its "
        "plan now differs; plan again",
        stack));
  }
  Outcome out;
  Outputs outputs;
  std::set<std::string> broken;
  std::vector<core::StackObjectRecord> kept;
  for (const Entry& e : plan.entries) {
    if (e.desired) {
      ApplyEntry(s, caller, plan, e, outputs, broken, kept, out, batch);
      continue;
    }
    json item = {{"kind", KindName(e.kind)},
                 {"name", e.name},
                 {"action", ActionName(e.action)},
                 {"id", e.record->id}};
    out.changed = true;
    if (e.action == Action::kDelete) {
      Status st = Delete(s, caller, e.kind, e.record->id, batch);
      if (!st.ok()) {
        item["error"] =
            fmt::format("{} ({}): {}", Label(e.kind, e.name), e.record->id, st.message());
        out.failed.push_back(std::move(item));
        kept.push_back(*e.record);
        continue;
      }
    }
    out.done.push_back(std::move(item));
  }
  int64_t serial = 0;
  TESSERA_RETURN_IF_ERROR(SaveRecord(s, caller, plan, std::move(kept), out.changed, batch, serial));
  const bool complete = out.failed.empty() && out.skipped.empty();
  return json{{"stack", stack},          {"serial", serial},     {"complete", complete},
              {"done", out.done},        {"failed", out.failed}, {"skipped", out.skipped},
              {"plan", std::move(shown)}};
}

Result<json> DestroyStack(core::State& s, const StackCaller& caller, const std::string& stack,
                          store::Batch& batch) {
  const core::Tenant& tenant = *caller.tenant;
  const core::StackRecord* record = s.stacks().Find(tenant.id.str(), stack);
  if (!record) return Status::NotFound(fmt::format("stack '{}' not found", stack));
  for (const core::StackObjectRecord& o : record->objects) {
    if (o.prevent_destroy && Find(s, tenant, *ParseKind(o.kind), o.id).exists) {
      return Status::FailedPrecondition(fmt::format(
          "{} ({}) has lifecycle.prevent_destroy: apply it with prevent_destroy: false first",
          Label(*ParseKind(o.kind), o.name), o.id));
    }
  }
  json done = json::array(), failed = json::array();
  std::vector<core::StackObjectRecord> kept;
  for (auto it = record->objects.rbegin(); it != record->objects.rend(); ++it) {
    const StackKind kind = *ParseKind(it->kind);
    json item = {{"kind", it->kind}, {"name", it->name}, {"id", it->id}};
    const Live live = Find(s, tenant, kind, it->id);
    item["action"] = live.exists ? "delete" : "forget";
    if (live.exists) {
      Status st = Delete(s, caller, kind, it->id, batch);
      if (!st.ok()) {
        item["error"] = st.message();
        failed.push_back(std::move(item));
        kept.insert(kept.begin(), *it);
        continue;
      }
    }
    done.push_back(std::move(item));
  }
  int64_t serial = record->serial + 1;
  if (kept.empty()) {
    s.stacks().Erase(tenant.id.str(), stack, batch);
  } else {
    core::StackRecord r = *record;
    r.serial = serial;
    r.updated_at = FormatRfc3339(s.clock().Now());
    r.objects = std::move(kept);
    TESSERA_RETURN_IF_ERROR(s.stacks().Put(std::move(r), batch));
  }
  const bool complete = failed.empty();
  return json{{"stack", stack}, {"complete", complete}, {"done", done}, {"failed", failed}};
}

Result<json> StackStateJson(const core::State& s, const core::Tenant& caller,
                            const std::string& stack) {
  const core::StackRecord* record = s.stacks().Find(caller.id.str(), stack);
  if (!record) return Status::NotFound(fmt::format("stack '{}' not found", stack));
  json objects = json::array();
  for (const core::StackObjectRecord& o : record->objects) {
    const Live live = Find(s, caller, *ParseKind(o.kind), o.id);
    json j = {{"kind", o.kind},     {"name", o.name},
              {"id", o.id},         {"exists", live.exists},
              {"digest", o.digest}, {"applied", json::parse(o.applied, nullptr, false)}};
    if (!live.exists) j["note"] = live.gone;
    if (o.prevent_destroy) j["lifecycle"] = {{"prevent_destroy", true}};
    objects.push_back(std::move(j));
  }
  return json{{"stack", record->name},
              {"serial", record->serial},
              {"updated_at", record->updated_at},
              {"objects", std::move(objects)}};
}

json StackListJson(const core::State& s, const core::Tenant& caller) {
  json list = json::array();
  for (const core::StackRecord* r : s.stacks().List(caller.id.str())) {
    list.push_back({{"stack", r->name},
                    {"serial", r->serial},
                    {"updated_at", r->updated_at},
                    {"objects", r->objects.size()}});
  }
  return {{"stacks", std::move(list)}};
}

}  // namespace tessera::api
