// Declarative stacks: plan, apply, destroy (docs/stacks.md). The request is read in
// stack_request.cc, and each kind's part is in stack_objects.cc.
#include "api/stacks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "api/stack_internal.h"
#include "common/auth.h"
#include "common/json.h"

namespace tessera::api {

namespace {

using nlohmann::json;
using namespace stack_internal;

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
  std::vector<json> diff;            // Each as {field, from, to} (hidden values as digests).
  std::string forces;                // A replacement's first field that cannot change in place.
  std::vector<json> drift;
  std::vector<std::string> unknown;  // References known only once applied.
  std::string adopt;                 // The id adopted.
  std::string note;
  Live live;
  Money before, after;
  json applied;   // The fields this plan applies, hidden values digested under the record's key.
  json digested;  // The same under a fixed key, for the plan's digest.

  // The id of what the action replaces or changes ("" for a new object).
  std::string OldId() const { return !adopt.empty() ? adopt : record ? record->id : ""; }
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

// Reservations and budgets commit the tenant's money, so making, changing or deleting one needs
// an owner, as their own routes do.
Status CheckRole(const StackCaller& caller, StackKind kind, const std::string& who) {
  if ((kind != StackKind::kReservation && kind != StackKind::kBudget) ||
      caller.role >= core::Role::kOwner) {
    return Status::Ok();
  }
  return Status::PermissionDenied(fmt::format(
      "{}: a {} commits the tenant's money and needs the owner role; this token's is {}", who,
      KindName(kind), core::RoleName(caller.role)));
}

// What the plan reads once: the stack's record by object, the caller's names (when needed).
struct PlanContext {
  core::State& s;
  const StackCaller& caller;
  const StackRequest& req;
  const std::string& stack;
  std::map<std::string, const core::StackObjectRecord*> recorded;  // By Key(kind, name).
  std::optional<Names> names;
  Outputs outputs;         // Of objects that exist and stay as they are.
  std::string salt;        // The key the record's hidden values are digested under.
  bool new_stack = false;  // Its key is drawn afresh by every plan: the digest must not use it.
};

// An object the stack has not made: new, or (with --adopt) an existing one of its name taken.
Status PlanUnowned(PlanContext& ctx, const StackObject& o, Entry& e) {
  if (!ctx.names) ctx.names.emplace(ctx.s, *ctx.caller.tenant);
  if (o.kind == StackKind::kBudget) {
    // The tenant has one budget: a stack that holds it holds it under one name, even while it
    // is gone (its next apply makes it again).
    const core::StackRecord* owner = ctx.names->Owner(o.kind, ctx.caller.tenant->id.str());
    if (owner && owner->name == ctx.stack) {
      return Status::FailedPrecondition(fmt::format(
          "{}: the stack holds the tenant's budget under another name already; keep that name",
          Where(o)));
    }
    if (owner) {
      return Status::FailedPrecondition(
          fmt::format("{}: the tenant's budget belongs to stack '{}'; a tenant has one budget",
                      Where(o), owner->name));
    }
  }
  const std::string id = ctx.names->Id(o.kind, o.name);
  if (id.empty()) return Status::Ok();
  if (const core::StackRecord* owner = ctx.names->Owner(o.kind, id)) {
    return Status::FailedPrecondition(
        fmt::format("{}: {} exists and belongs to stack '{}'; a name has one owner", Where(o),
                    Label(o.kind, o.name), owner->name));
  }
  if (!ctx.req.adopt) {
    return Status::AlreadyExists(fmt::format(
        "{}: {} exists ({}) and this stack did not create it: rename it in the stack, or adopt it "
        "(--adopt) to manage it from here",
        Where(o), Label(o.kind, o.name), id));
  }
  e.live = Find(ctx.s, *ctx.caller.tenant, o.kind, id);
  e.adopt = id;
  return Status::Ok();
}

// What changed in the file since the last apply, and on the server since: the action for an
// object the stack made and that still exists.
void Compare(PlanContext& ctx, const StackObject& o, Entry& e) {
  json was = json::parse(e.record->applied, nullptr, false);
  if (!was.is_object()) was = json::object();
  std::set<std::string> keys;
  for (const auto& item : was.items()) keys.insert(item.key());
  for (const auto& item : e.applied.items()) keys.insert(item.key());
  const bool autoscaled = o.kind == StackKind::kGroup && e.applied.contains("autoscale") &&
                          !e.applied["autoscale"].is_null();
  for (const std::string& k : keys) {
    const json a = was.contains(k) ? was[k] : json();
    const json b = e.applied.contains(k) ? e.applied[k] : json();
    if (a == b || (autoscaled && k == "size")) continue;  // The autoscaler sets the size.
    e.changed.push_back(k);
    e.diff.push_back({{"field", k}, {"from", a}, {"to", b}});
    if (!InPlace(o.kind, k) && e.forces.empty()) e.forces = FirstDifference(a, b, k);
  }
  std::vector<std::string> ignored;
  Result<Checked> applied = Check(ctx.s, ctx.caller, o.kind, Resolve(was, {}, ignored, ignored),
                                  /*admit=*/false);
  if (applied.ok()) e.drift = Drift(o.kind, *applied, e.live);
  if (!e.forces.empty()) {
    e.action = Action::kReplace;
  } else if (!e.changed.empty() || !e.drift.empty()) {
    e.action = Action::kUpdate;
  }
}

Result<Entry> PlanObject(PlanContext& ctx, const StackObject& o) {
  TESSERA_RETURN_IF_ERROR(CheckRole(ctx.caller, o.kind, Where(o)));
  const core::Tenant& tenant = *ctx.caller.tenant;
  Entry e;
  e.kind = o.kind;
  e.name = o.name;
  e.desired = &o;
  const std::string key = Key(o.kind, o.name);
  if (auto it = ctx.recorded.find(key); it != ctx.recorded.end()) {
    e.record = it->second;
    ctx.recorded.erase(it);
    e.live = Find(ctx.s, tenant, o.kind, e.record->id);
  } else {
    TESSERA_RETURN_IF_ERROR(PlanUnowned(ctx, o, e));
  }
  std::vector<std::string> missing;
  const json resolved = Resolve(o.spec, ctx.outputs, e.unknown, missing);
  e.unknown.insert(e.unknown.end(), missing.begin(), missing.end());
  e.applied = Hidden(o.kind, resolved, ctx.salt);
  e.digested = ctx.new_stack ? Hidden(o.kind, resolved, "") : e.applied;
  e.before = e.live.exists ? e.live.monthly : Money();
  // An object the API would refuse fails the plan, before anything changes. One that waits on
  // another's outputs is checked in full when those are known, as it is applied.
  Result<Checked> checked = Check(ctx.s, ctx.caller, o.kind, resolved, !e.live.exists);
  if (!checked.ok() && e.unknown.empty()) {
    return Status(checked.status().code(), Where(o) + ": " + checked.status().message());
  }
  if (checked.ok()) e.after = checked->monthly;
  if (!e.live.exists) {
    e.action = Action::kCreate;
    if (e.record) e.note = e.live.gone;
  } else if (!e.adopt.empty()) {
    // Fields that cannot change in place must already be as the file says, or it is replaced.
    e.forces = checked.ok() ? AdoptDifference(ctx.s, o.kind, *checked, e.live) : "";
    e.action = e.forces.empty() ? Action::kAdopt : Action::kReplace;
  } else {
    Compare(ctx, o, e);
  }
  if (e.action == Action::kReplace && o.kind == StackKind::kReservation && e.live.term_began) {
    return Status::FailedPrecondition(fmt::format(
        "{}: field '{}' changed, which replaces a reservation, but its term began and a "
        "reservation cannot be cancelled then; give it a new name to buy another",
        Where(o), e.forces));
  }
  if (e.action == Action::kReplace && o.kind == StackKind::kVolume) {
    return Status::FailedPrecondition(fmt::format(
        "{}: field '{}' changed, which would replace the volume and lose its data; a volume "
        "keeps the size, node and sharing it was made with: give it a new name for another",
        Where(o), e.forces));
  }
  if (e.action == Action::kReplace && Protected(e)) {
    return Status::FailedPrecondition(
        fmt::format("{}: lifecycle.prevent_destroy is set, and field '{}' changed, which replaces "
                    "it; undo the change or set prevent_destroy: false",
                    Where(o), e.forces));
  }
  if (e.action == Action::kNone || e.action == Action::kUpdate) ctx.outputs[key] = e.live.shown;
  if (e.action == Action::kNone && e.record && e.record->prevent_destroy != o.prevent_destroy) {
    e.note = "lifecycle changes in the stack's record";
  }
  return e;
}

// An object the file no longer holds: deleted (or only forgotten, when it is gone).
Result<Entry> PlanRemoved(PlanContext& ctx, const core::StackObjectRecord& r) {
  Entry e;
  const auto kind = ParseKind(r.kind);
  if (!kind) return Status::DataLoss(fmt::format("a stack's record holds kind '{}'", r.kind));
  e.kind = *kind;
  e.name = r.name;
  e.record = &r;
  TESSERA_RETURN_IF_ERROR(CheckRole(ctx.caller, e.kind, Label(e.kind, e.name)));
  e.live = Find(ctx.s, *ctx.caller.tenant, e.kind, r.id);
  e.before = e.live.exists ? e.live.monthly : Money();
  e.action = e.live.exists ? Action::kDelete : Action::kForget;
  if (!e.live.exists) e.note = e.live.gone;
  if (e.action == Action::kDelete && Protected(e)) {
    return Status::FailedPrecondition(fmt::format(
        "{} ({}) is no longer in the stack, but lifecycle.prevent_destroy was set when it was "
        "last applied; apply it with prevent_destroy: false first, then remove it",
        Label(e.kind, e.name), r.id));
  }
  return e;
}

Result<Plan> MakePlan(core::State& s, const StackCaller& caller, const std::string& stack,
                      const StackRequest& req) {
  const core::Tenant& tenant = *caller.tenant;
  Plan plan;
  plan.stack = stack;
  plan.record = s.stacks().Find(tenant.id.str(), stack);
  if (!plan.record && s.stacks().List(tenant.id.str()).size() >= core::kMaxStacksPerTenant) {
    return Status::ResourceExhausted(
        fmt::format("the tenant has {} stacks, the most it may have; destroy one first",
                    core::kMaxStacksPerTenant));
  }
  plan.salt = plan.record ? plan.record->salt : "";
  if (plan.salt.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::string token, GenerateToken());
    plan.salt = HashToken(token);
  }
  PlanContext ctx{s, caller, req, stack, {}, std::nullopt, {}, plan.salt, plan.record == nullptr};
  if (plan.record) {
    for (const core::StackObjectRecord& r : plan.record->objects) {
      ctx.recorded[r.kind + "/" + r.name] = &r;
    }
  }
  for (const StackObject& o : req.objects) {
    TESSERA_ASSIGN_OR_RETURN(Entry e, PlanObject(ctx, o));
    plan.entries.push_back(std::move(e));
  }
  if (plan.record) {
    // What the file no longer holds, the last applied first.
    for (auto it = plan.record->objects.rbegin(); it != plan.record->objects.rend(); ++it) {
      if (!ctx.recorded.contains(it->kind + "/" + it->name)) continue;
      TESSERA_ASSIGN_OR_RETURN(Entry e, PlanRemoved(ctx, *it));
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
  if (const std::string id = e.OldId(); !id.empty()) j["id"] = id;
  if (!e.changed.empty()) j["changed"] = e.changed;
  if (!e.diff.empty()) j["diff"] = e.diff;
  if (!e.forces.empty()) j["forces"] = e.forces;
  if (!e.drift.empty()) j["drift"] = e.drift;
  if (!e.unknown.empty()) j["known_after_apply"] = e.unknown;
  if (!e.note.empty()) j["note"] = e.note;
  if (e.record && !e.record->retiring.empty()) j["retiring"] = e.record->retiring;
  if (e.desired) j["index"] = e.desired->index;
  j["monthly_usd_before"] = e.before.RoundedToCents().ToString(2);
  j["monthly_usd_after"] = e.action == Action::kDelete || e.action == Action::kForget
                               ? "0.00"
                               : e.after.RoundedToCents().ToString(2);
  return j;
}

json PlanJson(Plan& plan) {
  json objects = json::array();
  json basis = json::array();
  std::map<std::string, int> counts;
  Money before, after;
  for (const Entry& e : plan.entries) {
    json j = EntryJson(e);
    // The digest covers what the plan does (its actions, the fields it applies) and what the
    // server holds that the plan read (each object's id, existence, and in-place fields, as the
    // drift shows them); not what changes by itself, such as an instance's state or a cost.
    json b = j;
    b.erase("monthly_usd_before");
    b.erase("monthly_usd_after");
    b["applied"] = e.digested;
    b["exists"] = e.live.exists;
    basis.push_back(std::move(b));
    objects.push_back(std::move(j));
    ++counts[std::string(ActionName(e.action))];
    before += e.before;
    if (e.action != Action::kDelete && e.action != Action::kForget) after += e.after;
  }
  const int64_t serial = plan.record ? plan.record->serial : 0;
  plan.digest = HashToken(
      DumpJson({{"stack", plan.stack}, {"serial", serial}, {"objects", std::move(basis)}}));
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
          {"serial", serial},
          {"digest", plan.digest},
          {"changes", changes},
          {"counts", counts},
          {"objects", std::move(objects)},
          {"drift", std::move(drift)},
          {"monthly_usd_before", before.RoundedToCents().ToString(2)},
          {"monthly_usd_after", after.RoundedToCents().ToString(2)},
          {"monthly_usd_change", Signed((after - before).RoundedToCents())}};
}

core::StackObjectRecord RecordOf(const Entry& e, const std::string& id, const json& applied) {
  core::StackObjectRecord r;
  r.kind = std::string(KindName(e.kind));
  r.name = e.name;
  r.id = id;
  r.applied = DumpJson(applied);
  r.digest = HashToken(r.applied);
  r.prevent_destroy = e.desired ? e.desired->prevent_destroy : e.record->prevent_destroy;
  if (e.record) r.retiring = e.record->retiring;
  return r;
}

// An apply in progress: what it did, and the stack's record as it goes.
struct Applying {
  core::State& s;
  const StackCaller& caller;
  const Plan& plan;
  store::Batch& batch;
  json done = json::array(), failed = json::array(), skipped = json::array();
  bool changed = false;
  Outputs outputs = {};                            // Of the objects applied so far.
  std::set<std::string> broken = {};               // Objects not applied, by Key.
  std::vector<core::StackObjectRecord> kept = {};  // The record's objects after the apply.

  json Item(const Entry& e, std::string_view action) const {
    return {{"kind", KindName(e.kind)}, {"name", e.name}, {"action", action}};
  }
  // The entry's object as the record had it still names something live: it stays recorded.
  void KeepOld(const Entry& e) {
    // (A record whose object is gone still names the groups it replaced, which run on.)
    if (e.record && (e.live.exists || !e.record->retiring.empty())) kept.push_back(*e.record);
  }
  void Fail(const Entry& e, const Status& why) {
    json item = Item(e, ActionName(e.action));
    item["error"] = Where(*e.desired) + ": " + why.message();
    failed.push_back(std::move(item));
    broken.insert(Key(e.kind, e.name));
  }
};

// Whether `e`'s replacement is made before what it replaces goes: a group's, unless its
// template mounts volumes.
bool CreateFirst(const Entry& e) {
  if (e.kind != StackKind::kGroup) return false;
  const json& spec = e.desired->spec;
  return !(spec.contains("template") && spec["template"].is_object() &&
           spec["template"].contains("volumes"));
}

// Makes, changes or replaces what `e` plans; the id of the object that stands for it now, or why
// not. `old_gone` says whether the object it replaced was deleted on the way.
Result<std::string> Act(Applying& a, const Entry& e, const Checked& c, bool& old_gone) {
  switch (e.action) {
    case Action::kAdopt:
    case Action::kUpdate: {
      const bool changes_in_place = e.kind == StackKind::kInstance || e.kind == StackKind::kGroup ||
                                    e.kind == StackKind::kBudget;
      if (changes_in_place) {
        TESSERA_RETURN_IF_ERROR(Update(a.s, a.caller, e.kind, e.OldId(), c, a.batch));
      }
      return e.OldId();
    }
    case Action::kCreate:
      return Create(a.s, a.caller, e.kind, c, a.batch);
    case Action::kReplace:
      // A group is replaced by a new one made first, and retires once that one runs
      // (State::RetireReplacedGroups); the others make room first, and so does a group that
      // mounts volumes (its old members hold them until they stop).
      if (!CreateFirst(e)) {
        TESSERA_RETURN_IF_ERROR(Delete(a.s, a.caller, e.kind, e.OldId(), a.batch));
        old_gone = true;
        a.changed = true;
        json item = a.Item(e, "delete");
        item["id"] = e.OldId();
        a.done.push_back(std::move(item));
      }
      return Create(a.s, a.caller, e.kind, c, a.batch);
    case Action::kNone:
    case Action::kDelete:
    case Action::kForget:
      break;
  }
  return Status::Internal("not an action on a file's object");
}

// Applies one of the file's objects.
void ApplyEntry(Applying& a, const Entry& e) {
  const std::string key = Key(e.kind, e.name);
  for (const std::string& need : e.desired->needs) {
    if (!a.broken.contains(need)) continue;
    json item = a.Item(e, ActionName(e.action));
    item["why"] = fmt::format("it needs {}, which was not applied", need);
    a.skipped.push_back(std::move(item));
    a.broken.insert(key);
    a.KeepOld(e);
    return;
  }
  if (e.action == Action::kNone) {
    a.kept.push_back(RecordOf(e, e.record->id, json::parse(e.record->applied, nullptr, false)));
    if (e.record->prevent_destroy != e.desired->prevent_destroy) a.changed = true;
    a.outputs[key] = e.live.shown;
    return;
  }
  std::vector<std::string> unknown, missing;
  const json resolved = Resolve(e.desired->spec, a.outputs, unknown, missing);
  // Creating runs the API's own admission (capacity, quota) again.
  Result<Checked> c = !missing.empty() || !unknown.empty()
                          ? Result<Checked>(Status::FailedPrecondition(fmt::format(
                                "{}", fmt::join(missing.empty() ? unknown : missing, "; "))))
                          : Check(a.s, a.caller, e.kind, resolved, /*admit=*/false);
  bool old_gone = false;
  Result<std::string> id = c.ok() ? Act(a, e, *c, old_gone) : Result<std::string>(c.status());
  if (!id.ok()) {
    a.Fail(e, id.status());
    // A replacement not made keeps what it replaces (unless that went); an adoption that
    // failed leaves the object unowned.
    if (!old_gone && e.action != Action::kAdopt) a.KeepOld(e);
    return;
  }
  a.changed = true;
  json item = a.Item(e, ActionName(e.action));
  item["id"] = *id;
  core::StackObjectRecord rec = RecordOf(e, *id, Hidden(e.kind, resolved, a.plan.salt));
  if (e.action == Action::kReplace && CreateFirst(e)) {
    rec.retiring.push_back(e.OldId());
    item["retiring"] = e.OldId();
  }
  a.done.push_back(std::move(item));
  a.kept.push_back(std::move(rec));
  a.outputs[key] = Find(a.s, *a.caller.tenant, e.kind, *id).shown;
}

// Deletes an object the file no longer holds (with the groups it replaced that still run).
void ApplyRemoval(Applying& a, const Entry& e) {
  json item = a.Item(e, ActionName(e.action));
  item["id"] = e.record->id;
  a.changed = true;
  DeleteRetiring(a.s, a.caller, *e.record, a.batch);
  if (e.action == Action::kDelete) {
    Status st = Delete(a.s, a.caller, e.kind, e.record->id, a.batch);
    if (!st.ok()) {
      item["error"] = fmt::format("{} ({}): {}", Label(e.kind, e.name), e.record->id, st.message());
      a.failed.push_back(std::move(item));
      a.kept.push_back(*e.record);
      return;
    }
  }
  a.done.push_back(std::move(item));
}

// The stack's record after the apply: the serial it is at.
Result<int64_t> SaveRecord(Applying& a) {
  const int64_t serial = a.plan.record ? a.plan.record->serial : 0;
  if (!a.changed && a.plan.record) return serial;
  core::StackRecord r;
  r.tenant = a.caller.tenant->id.str();
  r.name = a.plan.stack;
  r.serial = serial + 1;
  r.updated_at = FormatRfc3339(a.s.clock().Now());
  r.salt = a.plan.salt;
  r.objects = std::move(a.kept);
  TESSERA_RETURN_IF_ERROR(a.s.stacks().Put(std::move(r), a.batch));
  return serial + 1;
}

}  // namespace

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
  Applying a{s, caller, plan, batch};
  for (const Entry& e : plan.entries) {
    if (e.desired) {
      ApplyEntry(a, e);
    } else {
      ApplyRemoval(a, e);
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t serial, SaveRecord(a));
  const bool complete = a.failed.empty() && a.skipped.empty();
  return json{{"stack", stack},          {"serial", serial},   {"complete", complete},
              {"done", a.done},          {"failed", a.failed}, {"skipped", a.skipped},
              {"plan", std::move(shown)}};
}

Result<json> DestroyStack(core::State& s, const StackCaller& caller, const std::string& stack,
                          store::Batch& batch) {
  const core::Tenant& tenant = *caller.tenant;
  const core::StackRecord* record = s.stacks().Find(tenant.id.str(), stack);
  if (!record) return Status::NotFound(fmt::format("stack '{}' not found", stack));
  // Records hold only known kinds (core::Stacks::Restore checks what it reads).
  for (const core::StackObjectRecord& o : record->objects) {
    const StackKind kind = *ParseKind(o.kind);
    TESSERA_RETURN_IF_ERROR(CheckRole(caller, kind, Label(kind, o.name)));
    if (o.prevent_destroy && Find(s, tenant, kind, o.id).exists) {
      return Status::FailedPrecondition(fmt::format(
          "{} ({}) has lifecycle.prevent_destroy: apply it with prevent_destroy: false first",
          Label(kind, o.name), o.id));
    }
  }
  json done = json::array(), failed = json::array();
  std::vector<core::StackObjectRecord> kept;
  for (auto it = record->objects.rbegin(); it != record->objects.rend(); ++it) {
    const StackKind kind = *ParseKind(it->kind);
    json item = {{"kind", it->kind}, {"name", it->name}, {"id", it->id}};
    DeleteRetiring(s, caller, *it, batch);
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
    if (!o.retiring.empty()) j["retiring"] = o.retiring;
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

void AddStackOwner(const core::State& s, std::string_view kind, json& j) {
  if (!j.contains("tenant") || !j["tenant"].is_string() || !j.contains("id") ||
      !j["id"].is_string()) {
    return;
  }
  if (const core::StackRecord* r =
          s.stacks().OwnerOf(j["tenant"].get<std::string>(), kind, j["id"].get<std::string>())) {
    j["stack"] = r->name;
  }
}

}  // namespace tessera::api
