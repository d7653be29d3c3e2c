// Declarative stacks: reading a plan or apply request, and the references between its objects
// (docs/stacks.md).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "api/stack_internal.h"
#include "common/ids.h"
#include "common/json.h"
#include "common/text.h"

namespace tessera::api::stack_internal {

using nlohmann::json;

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
    if (!kind)
      return bad("names no kind (instance, group, volume, reservation, alert_rule, budget)");
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

// `text` as an array index (digits only, no overflow).
bool Index(const std::string& text, size_t& out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
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
    } else if (size_t i = 0; at->is_array() && Index(part, i) && i < at->size()) {
      at = &(*at)[i];
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
  // What each object needs applied first: what it references, and the stack's volumes it mounts.
  for (StackObject& o : objects) {
    std::set<std::string> needs;
    for (const StackRef& r : o.refs) needs.insert(Key(r.kind, r.name));
    const json* mounts = o.kind == StackKind::kInstance ? &o.spec
                         : o.kind == StackKind::kGroup && o.spec.contains("template")
                             ? &o.spec["template"]
                             : nullptr;
    if (mounts && mounts->is_object() && mounts->contains("volumes") &&
        (*mounts)["volumes"].is_array()) {
      for (const json& v : (*mounts)["volumes"]) {
        if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) continue;
        const std::string key = Key(StackKind::kVolume, v["name"].get<std::string>());
        if (by_key.contains(key)) needs.insert(key);
      }
    }
    o.needs.assign(needs.begin(), needs.end());
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
    for (const std::string& need : objects[i].needs) {
      TESSERA_RETURN_IF_ERROR(visit(by_key.at(need)));
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
                    "of instance, group, volume, reservation, alert_rule, "
                    "budget)",
                    at));
  }
  const auto kind = ParseKind(j["kind"].get<std::string>());
  if (!kind) {
    return Status::InvalidArgument(fmt::format(
        "{}: field 'kind': '{}' is not instance, group, volume, reservation, alert_rule or "
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

}  // namespace tessera::api::stack_internal

namespace tessera::api {

using nlohmann::json;
using namespace stack_internal;

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

}  // namespace tessera::api
