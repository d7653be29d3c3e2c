// Metering: an instance's billable run as ledger lines (docs/billing.md). An instance is billed
// from the moment its agent reports it running until it leaves `running`, per second, at the rate
// in force when the interval opened. Each start pays at least one minute, unless the platform
// ended it (preemption, node loss). Lines never cross a UTC day, so usage by day and invoices by
// month add whole lines: an interval that spans midnight is cut there, and a running instance's
// open interval is cut at each midnight by the day's roll.
// Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/money.h"
#include "store/store.h"

namespace tessera::billing {

inline constexpr int64_t kSecondsPerDay = 86'400;
inline constexpr int64_t kMinimumSeconds = 60;

// Unix seconds of `t`, rounded down.
int64_t UnixSeconds(Time t);
// The UTC midnight at or before Unix second `t`.
inline int64_t DayStart(int64_t t) {
  return t - ((t % kSecondsPerDay) + kSecondsPerDay) % kSecondsPerDay;
}
// The first second of the UTC month holding Unix second `t`, and of the month after it.
int64_t MonthStart(int64_t t);
int64_t NextMonthStart(int64_t t);
// "YYYY-MM" of the month holding `t`; and the month start of a "YYYY-MM" (nullopt if malformed).
std::string MonthName(int64_t t);
std::optional<int64_t> ParseMonth(std::string_view yyyy_mm);

// An instance's open billing interval.
struct Meter {
  int64_t since = 0;   // Unix second the open stretch starts (the start, or the last midnight).
  int64_t billed = 0;  // Seconds already billed for this start (stretches before `since`).
  Money rate;          // Per hour, as in force when the interval opened.
  // GPU utilization measured since the last line: percent x seconds over the seconds that had
  // readings, and when the last reading counted.
  int64_t util_pct_seconds = 0;
  int64_t util_observed = 0;
  int64_t util_at = 0;
};

// Counts a reading of `util_pct` percent at Unix second `at` into the meter: it stands for the
// time since the previous reading (or the interval's start), at most `max_gap` seconds.
void Observe(Meter& meter, double util_pct, int64_t at, int64_t max_gap);

// Who the lines are for.
struct Payer {
  std::string tenant, instance, instance_type, billing, reservation;
  int64_t gpu_milli = 0;
  std::string user = "";  // The user who made the instance, for its lines.
};

// How an interval stops.
enum class Ending {
  kRoll,      // Midnight: the interval goes on, its next stretch from `end`.
  kCustomer,  // Deleted, or the workload ended: the one-minute minimum applies.
  kPlatform,  // Preempted, or its node was lost: billed to the second.
};

// Appends the lines for [meter.since, end), one per UTC day it touches, and moves meter.since to
// `end` (meter.billed grows by what was billed). Nothing is appended for an empty stretch, except
// the minimum's top-up when a customer ends a start that ran under a minute. The utilization
// measured since the last line goes on the last line appended.
void Close(Meter& meter, const Payer& payer, int64_t end, Ending how,
           std::vector<store::LedgerRecord>& out);

// The amount of `seconds` at `rate` per hour, exact to the micro-dollar (half to even).
inline Money Amount(Money rate, int64_t seconds) { return rate.MulDiv(seconds, 3600); }

}  // namespace tessera::billing
