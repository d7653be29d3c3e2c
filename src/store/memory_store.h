// A Store in memory: the same contract as the SQLite store except durability (a batch applies
// whole or not at all, and reads see what was committed). For tests of the core's parts, and for
// runs that need the core's state machine without a disk (the dynamic simulator).
// Thread-safety: as Store: one thread at a time.
#pragma once

#include <memory>

#include "store/store.h"

namespace tessera::store {

std::unique_ptr<Store> NewMemoryStore();

}  // namespace tessera::store
