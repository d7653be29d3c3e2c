// Key rotation (docs/secrets.md): every value sealed at rest lives in a record the state holds (a
// secret; a live instance's env literals and registry password, which an instance that ended no
// longer keeps; a live group's template; an alert rule's webhook URLs), so a rotation walks
// memory, a bounded step a round, and re-seals into the round's batch what is not under the
// keyring's current key. Nothing else is written: the store then holds no value under the old key.
// Thread-safety: none; the core thread calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "common/result.h"
#include "core/group_table.h"
#include "core/instance_table.h"
#include "core/monitoring.h"
#include "core/secrets.h"
#include "fleet/fleet.h"
#include "store/store.h"

namespace tessera::core {

class KeyRotation {
 public:
  // Where a walk over every sealed value has got to.
  struct Cursor {
    int kind = 0;      // Secrets, instances, groups, alert rules; 4: done.
    std::string text;  // The last key seen (secrets, groups, rules).
    int64_t seq = 0;   // The last instance seen.
    bool done() const { return kind >= 4; }
  };

  // The parts must outlive this. An instance's record is written as the state writes it
  // (StoredRecord, with its document unless `instance_documents` is false).
  KeyRotation(TenantSecrets* secrets, InstanceTable* instances, GroupTable* groups,
              Monitoring* monitoring, const fleet::Fleet* fleet, bool instance_documents)
      : secrets_(secrets),
        instances_(instances),
        groups_(groups),
        monitoring_(monitoring),
        fleet_(fleet),
        instance_documents_(instance_documents) {}

  // One step: looks at up to `limit` records after `cursor` and re-seals, into `batch`, the
  // values not sealed under `key_id`; moves `cursor` on. An ended instance or group is skipped
  // (it keeps no values).
  Result<ResealStep> Step(const std::string& key_id, Cursor& cursor, size_t limit,
                          store::Batch& batch);
  // How many records hold a value sealed under each key id (a record with values under two keys
  // counts under both; "?" for a sealed value that names no key).
  std::map<std::string, int64_t> SealedKeys() const;

 private:
  TenantSecrets* secrets_;
  InstanceTable* instances_;
  GroupTable* groups_;
  Monitoring* monitoring_;
  const fleet::Fleet* fleet_;
  bool instance_documents_;
};

}  // namespace tessera::core
