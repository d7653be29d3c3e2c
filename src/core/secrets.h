// Secrets: a tenant's named values for its workloads (docs/secrets.md): a model hub token, a
// database password, registry credentials. A workload's `env` refers to one by name
// ({"secret": "hf-token"}), and the value reaches only the agent of the node that runs that
// workload, in that workload's environment. Nobody reads a value back through the API: it
// answers metadata only (name, when, by whom, a version that counts changes).
//
// In memory a value is held in the clear, for the agents. At rest it is sealed (envelope
// encryption, common/envelope.h) under the context "secret/<tenant>/<name>", in the setting
// "secret/<tenant>/<name>"; a record whose key the keyring lacks fails Restore, naming the key, so
// a server never serves with a secret it cannot open.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "core/env.h"
#include "core/image.h"
#include "store/store.h"

namespace tessera {
class Sealer;
}  // namespace tessera

namespace tessera::core {

// What one step of a rotation did: records looked at and re-sealed, and whether it reached the
// end of what it walks.
struct ResealStep {
  size_t examined = 0;
  size_t resealed = 0;
  bool done = false;
};

struct Secret {
  std::string tenant;  // Tenant id.
  std::string name;
  std::string value;   // In the clear: memory only.
  std::string sealed;  // As stored.
  Time created_at, updated_at;
  std::string created_by, updated_by;  // Users' ids ("" when not known).
  int64_t version = 1;                 // 1 at creation, one more at every change of value.
};

class TenantSecrets {
 public:
  static constexpr std::string_view kPrefix = "secret/";
  static constexpr size_t kMaxPerTenant = 1000;
  static constexpr size_t kMaxValueBytes = 64 << 10;

  // `clock` must outlive this; `sealer` may be null (then no secret can be stored) and, if not,
  // must outlive this.
  TenantSecrets(const Clock* clock, Sealer* sealer) : clock_(clock), sealer_(sealer) {}

  // Creates secret `name` of `tenant` (`replace` false: AlreadyExists when it exists) or replaces
  // its value (`replace` true: NotFound when it does not). InvalidArgument naming 'name' or
  // 'value' (never quoting the value); ResourceExhausted past kMaxPerTenant; FailedPrecondition
  // without a keyring.
  Result<Secret> Put(const std::string& tenant, const std::string& name, std::string value,
                     const std::string& user, bool replace, store::Batch& batch);
  // The secret, or nullptr.
  const Secret* Find(std::string_view tenant, std::string_view name) const;
  // `tenant`'s secrets by name ("" lists every tenant's).
  std::vector<const Secret*> List(std::string_view tenant) const;
  // NotFound naming the secret.
  Status Delete(const std::string& tenant, const std::string& name, store::Batch& batch);
  size_t size() const { return by_key_.size(); }

  // Rebuilds from the stored records, opening every value. DataLoss naming the record when one is
  // malformed or fails authentication; NotFound or FailedPrecondition naming the key id when the
  // keyring lacks it or there is none.
  // REQUIRES: nothing was put or restored before.
  Status Restore(const std::vector<std::pair<std::string, std::string>>& records);

  // One step of a rotation: looks at up to `limit` secrets after `cursor` (in key order; "" from
  // the first) and re-seals, into `batch`, those not sealed under `key_id`. Moves `cursor` on.
  Result<ResealStep> Reseal(const std::string& key_id, std::string& cursor, size_t limit,
                            store::Batch& batch);
  // How many values each key id seals.
  void CountKeys(std::map<std::string, int64_t>& by_key) const;

  // The values a workload carries (an instance's, or a group's template): its env, whose entries
  // are literals or references to `tenant`'s secrets, and its registry credentials.
  // The names of the secrets they refer to: the env's, and the registry password's.
  static std::vector<std::string> RefsOf(const Env& env, const ImageSpec& image);
  // OK, or InvalidArgument naming the field (`field` prefixes it: "template." for a group's) that
  // refers to a secret `tenant` does not have.
  Status CheckRefs(std::string_view tenant, const Env& env, const ImageSpec& image,
                   std::string_view field = "") const;
  // The first secret they refer to that `tenant` no longer has; "" when none.
  std::string Missing(std::string_view tenant, const Env& env, const ImageSpec& image) const;
  // What a workload's agent is told: each of `env`'s variables that `out` lacks (Tessera's own
  // win), a reference resolved to its secret's value (one deleted since is left out).
  void Resolve(std::string_view tenant, const Env& env,
               std::map<std::string, std::string>& out) const;
  // A registry password that refers to one of `tenant`'s secrets takes its value ("" for one
  // deleted since).
  void ResolvePassword(std::string_view tenant, ImageSpec& image) const;
  // The records values are sealed under: an instance's own, and a group's template.
  static std::string InstanceRecord(std::string_view id);
  static std::string TemplateRecord(std::string_view group);
  // Seals the env literals and the registry password of record `record` not sealed yet.
  Status SealValues(std::string_view record, Env& env, ImageSpec& image) const;
  // Opens them (a restore). A registry password stored in the clear before envelope encryption
  // is dropped when the work `ended`, else sealed (kept as it was without a keyring). True when
  // that changed the record, which must then be saved again.
  Result<bool> OpenValues(std::string_view record, bool ended, Env& env, ImageSpec& image) const;
  // Drops the env literals and the registry password (the work ended for good); references to
  // secrets stay.
  static void DropValues(Env& env, ImageSpec& image);

 private:
  static std::string Key(std::string_view tenant, std::string_view name);
  void Save(const Secret& s, store::Batch& batch) const;

  const Clock* clock_;
  Sealer* sealer_;
  std::map<std::string, Secret, std::less<>> by_key_;  // By "<tenant>/<name>".
  std::map<std::string, size_t, std::less<>> per_tenant_;
};

// The API form: metadata only, never the value.
nlohmann::json ToJson(const Secret& s);

}  // namespace tessera::core
