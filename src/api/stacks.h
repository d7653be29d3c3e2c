// Declarative stacks (docs/stacks.md). A stack is a list of objects, each what a user would have
// sent to the API (an instance's create body, a group's, a reservation's, an alert rule's, a
// budget's) under a kind and a name. A plan compares each with what the stack's record says it
// last applied and with what the server holds now; an apply converges them in the order their
// references need, and records what it made (core/stacks.h). Both run as one operation on the
// core thread, so an apply acts on exactly the state it planned against.
// Thread-safety: none; called on the core thread.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "core/state.h"
#include "store/store.h"

namespace tessera::api {

enum class StackKind { kInstance, kGroup, kReservation, kAlertRule, kBudget, kVolume };

// `${ref:KIND/NAME.FIELD}` in one of an object's strings: another object's output.
struct StackRef {
  StackKind kind = StackKind::kInstance;
  std::string name;
  std::string field;  // A dotted path into the object as the API shows it: "node", "id".
};

struct StackObject {
  size_t index = 0;  // Its place in the request's `objects`.
  StackKind kind = StackKind::kInstance;
  std::string name;
  // The API's fields: the object without `kind` and `lifecycle` (and, for the kinds whose API
  // has no name, without `name`).
  nlohmann::json spec;
  bool prevent_destroy = false;  // lifecycle.prevent_destroy.
  std::vector<StackRef> refs;
  // What must be applied first, as "kind/name": what it references, and the stack's volumes it
  // mounts.
  std::vector<std::string> needs;
};

struct StackRequest {
  std::vector<StackObject> objects;  // Ordered so that every object follows what it references.
  std::string plan_digest;           // An apply's: the plan it must still match ("": none).
  bool adopt = false;                // Take over existing objects of the same names.
};

// What the routes pass on from the caller.
struct StackCaller {
  const core::Tenant* tenant = nullptr;
  std::string user;  // The user who asks ("" when not known).
  // Reservations and budgets commit the tenant's money: they need an owner, as their routes do.
  core::Role role = core::Role::kViewer;
  bool allow_private_receivers = false;
};

// POST /v1/stacks/{name}/plan and /apply: {objects: [...], plan_digest?, adopt?}. Errors name the
// object as "objects[I] (KIND 'NAME')" and then the field; a reference cycle names it.
Result<StackRequest> ParseStackRequest(const nlohmann::json& body);

// The plan: each object's action with the fields that changed or force a replacement, changes
// made outside the stack, the monthly cost change, and the digest an apply must match.
// InvalidArgument for an object the API would refuse; AlreadyExists for a name the stack does
// not own (unless adopt); FailedPrecondition for a plan that would destroy a protected object.
Result<nlohmann::json> PlanStack(core::State& s, const StackCaller& caller,
                                 const std::string& stack, const StackRequest& req);
// Plans, checks req.plan_digest (FailedPrecondition when what the server holds changed since),
// then converges. What fails (no capacity, quota) is reported with what was done, and the next
// apply continues from there.
Result<nlohmann::json> ApplyStack(core::State& s, const StackCaller& caller,
                                  const std::string& stack, const StackRequest& req,
                                  store::Batch& batch);
// Deletes what the stack owns, last applied first, and forgets the stack once all is gone.
Result<nlohmann::json> DestroyStack(core::State& s, const StackCaller& caller,
                                    const std::string& stack, store::Batch& batch);
// GET /v1/stacks/{name}: what the stack owns, each object's id and whether it still exists.
Result<nlohmann::json> StackStateJson(const core::State& s, const core::Tenant& caller,
                                      const std::string& stack);
// GET /v1/stacks: the caller's stacks.
nlohmann::json StackListJson(const core::State& s, const core::Tenant& caller);
// Adds "stack" to `j`, an instance's or a group's API form: the name of the stack that owns it,
// when one does.
void AddStackOwner(const core::State& s, std::string_view kind, nlohmann::json& j);

}  // namespace tessera::api
