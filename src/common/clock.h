// Clock injects time. No code calls now() directly: the server uses SystemClock, the simulator a
// virtual clock, and tests a FakeClock that only moves when told to, so tests never sleep.
// Thread-safety: every Clock here is safe to call from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera {

using Duration = std::chrono::microseconds;
using Time = std::chrono::sys_time<Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  // The current time, microsecond resolution.
  virtual Time Now() const = 0;
};

// Wall-clock time from the operating system.
class SystemClock final : public Clock {
 public:
  Time Now() const override;
  // A process-wide instance; it holds no state.
  static SystemClock& Get();
};

// A clock that stands still until Set or Advance moves it.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(Time start = Time(std::chrono::seconds(1'767'225'600)))  // 2026-01-01Z
      : now_us_(start.time_since_epoch().count()) {}
  Time Now() const override { return Time(Duration(now_us_.load(std::memory_order_acquire))); }
  void Set(Time t) { now_us_.store(t.time_since_epoch().count(), std::memory_order_release); }
  void Advance(Duration d) { now_us_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<int64_t> now_us_;
};

// RFC 3339 in UTC with second or sub-second precision, e.g. "2026-11-30T01:27:33Z" or
// "2026-11-30T01:27:33.250Z" (milliseconds are printed only when non-zero).
std::string FormatRfc3339(Time t);

// A duration in seconds, for messages.
inline double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

// Parses the UTC forms FormatRfc3339 writes, plus numeric offsets such as "+02:00".
Result<Time> ParseRfc3339(std::string_view s);

}  // namespace tessera
