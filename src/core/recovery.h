// Recovery: what the core's memory becomes at start-up, rebuilt from the store against a fleet
// file and a catalog the operator may have changed since. It never refuses to start over such a
// change. An instance whose node or GPU left the fleet, whose MIG profile left its model's table,
// whose GPU model left the catalog, or whose capacity can no longer be booked (a node with fewer
// CPUs, a GPU in another mode) is marked failed with the reason and releases its quota: it fails
// closed, never running somewhere it did not ask for. Drained nodes keep their work. Only a
// record that is itself corrupt stops the start, naming it.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "catalog/catalog.h"
#include "core/instance.h"

namespace tessera::core {

// What was rebuilt and what was reconciled, for the log.
struct RecoveryReport {
  size_t tenants = 0;
  size_t instances = 0;             // Loaded into memory (active and recently ended).
  size_t rebooked = 0;              // Active instances holding their capacity again.
  size_t queued = 0;                // Pending instances back in the queue.
  std::vector<std::string> failed;  // "inst-000007: node 'n1' left the fleet", one per instance.
  std::string Summary() const;
};

// Why a stored active instance cannot come back as it was, or "" when nothing stands in its way
// before its capacity is booked: its GPU model or MIG profile left the catalog, or its stored
// assignment no longer names the fleet (`stored.binding`).
std::string WhyNotRestorable(const StoredInstance& stored, const catalog::Catalog& catalog);

}  // namespace tessera::core
