// The core's own invariants (capacity booked exactly once, a search's promise kept). One that
// breaks is a bug: the round fails, nothing of it is committed, and the core rebuilds its state
// from the store (Core::RunRound). The server goes on; it never aborts for it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string_view>

#include "common/status.h"

namespace tessera::core {

[[noreturn]] inline void InvariantBroken(std::string_view what) {
  throw std::logic_error(fmt::format("invariant broken: {}", what));
}

// InvariantBroken unless `s` is ok, naming `what` was attempted.
inline void CheckInvariant(const Status& s, std::string_view what) {
  if (!s.ok()) InvariantBroken(fmt::format("{}: {}", what, s.message()));
}

}  // namespace tessera::core
