// Admission: what a create request becomes before it may wait or run. The shape is resolved from
// the catalog (an instance type, or a custom shape checked field by field), priced, and checked
// against the fleet as built: a shape that no node could host even when empty is refused with
// InvalidArgument (400) saying why; one that a node could host only in another GPU sharing mode
// than any GPU has now is refused with FailedPrecondition (409), since an operator can change the
// mode. So nothing that can never run waits in the queue, holds quota, or costs a queue pass.
// Verdicts are cached per shape until the fleet's GPU modes or nodes change.
// Admission also writes the reason a pending instance waits, from the fleet as it is now.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <map>
#include <string>

#include "catalog/catalog.h"
#include "common/json.h"
#include "common/money.h"
#include "core/env.h"
#include "core/image.h"
#include "core/instance.h"
#include "fleet/fleet.h"
#include "sched/scheduler.h"

namespace tessera::core {

// What POST /v1/instances asks for, already type-checked by the API layer.
struct CreateInstanceRequest {
  Billing billing = Billing::kOnDemand;
  std::string name;
  std::string command;
  bool restart = true;
  // The core may stop it, with notice, and restart it on another GPU to make room for waiting
  // work (docs/core.md, "Repacking"): a milli_gpu share outside a group, with no volumes.
  bool migratable = false;
  int stop_grace_seconds = 10;                     // 0..3600.
  std::map<std::string, std::string> labels;       // Validated (ValidateLabels).
  std::map<std::string, std::string> annotations;  // Validated (ValidateAnnotations).
  std::string instance_type;                       // Either this...
  Shape shape;  // ...or this, field by field (instance_type empty).
  // An OCI image to run (its own entrypoint when `command` is empty); empty for a bare process.
  ImageSpec image;
  // Its environment: literals and references to the tenant's secrets (core/env.h).
  Env env;
  // The tenant's volumes it mounts, and where (core/volumes.h).
  std::vector<VolumeMount> volumes;
  // The ports it serves on: its agent maps each to a free port of the node.
  std::vector<int> ports;
  // The user who asks (core/users.h): it is recorded with the instance and counts against that
  // user's quota. "" when not known (the tenant's first owner in stores before users existed).
  std::string user;
};

// The most a `command` may hold.
inline constexpr size_t kMaxCommandBytes = 64 << 10;

// Reads a create request from `body` (POST /v1/instances, a group's template): its errors go to
// `f`, named by field; InvalidArgument also for malformed labels or annotations. `form` kStored
// reads the store's form (sealed values).
Result<CreateInstanceRequest> ReadCreateInstance(JsonFields& f, const nlohmann::json& body,
                                                 Secrets form = Secrets::kHidden);
// The request as ReadCreateInstance reads it back: under Secrets::kStored (the store's form) with
// the sealed registry password and env literals (REQUIRES: sealed), under kHidden without the
// password.
nlohmann::json ToJson(const CreateInstanceRequest& r, Secrets secrets);

struct Admitted {
  Shape shape;
  Money price_per_hour;
};

// True when a unit of instance type `t` covers `shape`, for `billing: reserved`: the type itself,
// or a custom shape that fits inside one unit (the same GPU model and mode, no more GPUs, share or
// vCPUs and memory, and NVLink only from a type that has it).
bool UnitCovers(const catalog::InstanceType& t, const Shape& shape);

class Admission {
 public:
  // `catalog` and `fleet` must outlive this.
  // `whole_on_shared`: a whole-GPU shape may also take a shared-mode GPU that holds no share, as
  // HAMi and openb's cluster allow (StateOptions::whole_gpus_on_shared); otherwise whole GPUs come
  // from exclusive-mode GPUs only.
  Admission(const catalog::Catalog* catalog, const fleet::Fleet* fleet,
            bool whole_on_shared = false)
      : catalog_(catalog), fleet_(fleet), whole_on_shared_(whole_on_shared) {}

  // The request's shape and price, or why it can never be placed on this fleet. Errors name the
  // field (instance_type, gpu_model, mig_profile, gpus, vcpus, memory_mib, ...).
  Result<Admitted> Admit(const CreateInstanceRequest& req);
  // OK, or why no node of the fleet could ever host `shape` (InvalidArgument), or could only in
  // another GPU mode (FailedPrecondition). Cached per shape.
  Status CheckShape(const Shape& shape);
  // Forgets cached verdicts: call when GPU modes change or nodes join or leave.
  void FleetChanged() { verdicts_.clear(); }

  // REQUIRES: `inst` is pending.
  // Why `inst` waits, as the fleet is now, e.g. "waiting for 3 x H100-80GB with 16
  // vCPUs and 65536 MiB on one node; the best node has 2 free; 4 spot instances preemptible".
  // `preemptible` is what preemption could take for it (0 for spot work, which preempts nothing).
  std::string PendingReason(const Instance& inst, size_t preemptible) const;

  // The catalog's hourly price of `shape` under `billing`; a custom shape pays its share of the
  // model's cheapest whole-GPU price.
  Result<Money> PriceOf(const Shape& shape, Billing billing) const;

  // The scheduler's request for a shape and billing mode.
  sched::Request RequestFor(const Shape& shape, Billing billing) const;

 private:
  Result<Shape> Resolve(const CreateInstanceRequest& req) const;
  // OK, or why no node could ever host `shape` (see the header).
  Status Check(const Shape& shape) const;

  const catalog::Catalog* catalog_;
  const fleet::Fleet* fleet_;
  bool whole_on_shared_;
  std::map<std::string, Status> verdicts_;  // By a shape's text form.
};

}  // namespace tessera::core
