// What the parts of the stacks engine share (stack_request.cc, stack_objects.cc, stacks.cc):
// the kinds' names, references, and each kind's checks, lookups and changes. Not an API.
// Thread-safety: none; called on the core thread.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "alerts/rule.h"
#include "api/stacks.h"
#include "billing/budget.h"
#include "billing/reservation.h"
#include "common/money.h"
#include "core/state.h"

namespace tessera::api::stack_internal {

// Monthly costs count 730 hours, as the clouds' price pages do.
inline constexpr int64_t kHoursPerMonth = 730;
inline constexpr std::string_view kRefOpen = "${ref:";

std::string_view KindName(StackKind k);
std::optional<StackKind> ParseKind(std::string_view s);
// Whether the API's own body carries the object's name (instances, groups, rules do).
bool NameInBody(StackKind k);
// Whether `field` changes in place (an apply patches it); any other change replaces the object.
bool InPlace(StackKind k, std::string_view field);
// "instance 'train'".
std::string Label(StackKind k, const std::string& name);
// "objects[3] (instance 'train')": how errors name an object of the request.
std::string Where(const StackObject& o);

// ---- References (stack_request.cc)

// "${ref:instance/train.node}".
std::string RefText(const StackRef& r);
// "instance/train".
std::string Key(StackKind k, const std::string& name);
// The outputs of objects whose values are known, by Key: each as the API shows it.
using Outputs = std::map<std::string, nlohmann::json>;
// `j` with every reference replaced by its value. A string that is one reference whole takes
// the value's type; within text, a value is written as text. A reference to an object without
// outputs goes to `unknown`, and one whose field has no value to `missing`; "unknown" stands in
// for either.
nlohmann::json Resolve(const nlohmann::json& j, const Outputs& outputs,
                       std::vector<std::string>& unknown, std::vector<std::string>& missing);

// ---- The kinds (stack_objects.cc)

// An object's fields as the API's own route reads them, and its monthly cost at the catalog's
// prices.
struct Checked {
  core::CreateInstanceRequest instance;
  core::GroupRequest group;
  billing::ReservationRequest reservation;
  alerts::Rule rule;
  billing::Budget budget;
  core::Volumes::Request volume;
  Money monthly;
};
// The API's checks of a (resolved) object. A reservation is checked against the fleet's capacity
// and the quota (a dry run) only when `admit`: one that exists already holds its place.
Result<Checked> Check(core::State& s, const StackCaller& caller, StackKind kind,
                      const nlohmann::json& spec, bool admit);

// What the server holds for an object: whether it exists (is active), and the API's form of it.
struct Live {
  bool exists = false;
  std::string id;
  std::string gone;         // Why it does not: "deleted outside the stack", "ended (failed)".
  nlohmann::json shown;     // The API's form, for references.
  Money monthly;            // What it costs a month now.
  bool term_began = false;  // A reservation whose term began (it cannot be cancelled).
};
Live Find(const core::State& s, const core::Tenant& caller, StackKind kind, const std::string& id);
// The caller's live objects by kind and name, and which of its stacks owns each: read once per
// plan (a tenant's instances are listed once, not once per object).
class Names {
 public:
  Names(const core::State& s, const core::Tenant& caller);
  // The id of the caller's live object of `kind` named `name` (its budget, whatever the name),
  // or "". Several instances may share a name: the first made.
  std::string Id(StackKind kind, const std::string& name) const;
  // The caller's stack that owns (kind, id), or null.
  const core::StackRecord* Owner(StackKind kind, const std::string& id) const;

 private:
  std::map<std::string, std::string> ids_;                  // By Key(kind, name).
  std::map<std::string, const core::StackRecord*> owners_;  // By "kind/id".
};
// The in-place fields whose live value differs from what was applied, as {field, applied, live}.
// The autoscaler owns an autoscaled group's size, so that is never drift.
std::vector<nlohmann::json> Drift(StackKind kind, const Checked& applied, const Live& live);
// For --adopt: the first field that cannot change in place where the live object differs from
// `want` (it would have to be replaced), or "".
std::string AdoptDifference(core::State& s, StackKind kind, const Checked& want, const Live& live);
// The first path at which `a` and `b` differ ("template.gpus"), under `prefix`.
std::string FirstDifference(const nlohmann::json& a, const nlohmann::json& b,
                            const std::string& prefix);
// `spec` as a stack's record keeps it: env literals, registry passwords and webhook URLs (which
// carry tokens) as HMAC digests under `salt`, enough to see a change without keeping the value.
nlohmann::json Hidden(StackKind kind, nlohmann::json spec, const std::string& salt);

// Makes the object; its id.
Result<std::string> Create(core::State& s, const StackCaller& caller, StackKind kind,
                           const Checked& c, store::Batch& batch);
Status Delete(core::State& s, const StackCaller& caller, StackKind kind, const std::string& id,
              store::Batch& batch);
// Sets the in-place fields of a live object to `c`'s.
Status Update(core::State& s, const StackCaller& caller, StackKind kind, const std::string& id,
              const Checked& c, store::Batch& batch);
// Deletes the groups `o` replaced that still run (they go with what replaced them).
void DeleteRetiring(core::State& s, const StackCaller& caller, const core::StackObjectRecord& o,
                    store::Batch& batch);

}  // namespace tessera::api::stack_internal
