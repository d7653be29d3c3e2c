// What one audit row may hold, and how many rows a caller's refused requests may add. A caller
// chooses what its requests carry (an 8 KB id in the path, a long field in the error message)
// and how many it sends, so both are bounded before a row reaches the store: each field is cut to
// a fixed size, and refused requests are recorded at a sustained rate per caller with a burst,
// the rest counted. Accepted requests are always recorded: each is a change that happened.
// Thread-safety: Admit may be called from any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "store/store.h"

namespace tessera::api {

class AuditGate {
 public:
  // The most bytes of each field a row stores (an action is a method and a path).
  static constexpr size_t kMaxAction = 320;
  static constexpr size_t kMaxTarget = 128;
  static constexpr size_t kMaxDetail = 1024;
  // A caller's refused requests: this many recorded at once, then one a second.
  static constexpr double kRefusedBurst = 100;
  static constexpr double kRefusedPerSecond = 1;

  // The row to write for `row`, with its fields cut to size; nullopt for a refusal (status 400
  // and above) past its actor's rate, which is counted instead. The first row the actor gets
  // recorded after such a gap says in its detail how many were not.
  std::optional<store::AuditRecord> Admit(store::AuditRecord row, Time now);

 private:
  struct Bucket {
    double tokens = kRefusedBurst;
    Time refilled;
    int64_t unrecorded = 0;  // Since the actor's last recorded row.
  };
  std::mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_;  // By actor; guarded by mu_.
};

}  // namespace tessera::api
