#include "billing/meter.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace tessera::billing {

using std::chrono::sys_days;
using std::chrono::year_month_day;

int64_t UnixSeconds(Time t) {
  return std::chrono::floor<std::chrono::seconds>(t).time_since_epoch().count();
}

namespace {

year_month_day Date(int64_t t) {
  return year_month_day(
      std::chrono::floor<std::chrono::days>(std::chrono::sys_seconds(std::chrono::seconds(t))));
}

int64_t Seconds(sys_days d) { return std::chrono::sys_seconds(d).time_since_epoch().count(); }

}  // namespace

int64_t MonthStart(int64_t t) {
  const year_month_day d = Date(t);
  return Seconds(sys_days(d.year() / d.month() / 1));
}

int64_t NextMonthStart(int64_t t) {
  const year_month_day d = Date(t);
  return Seconds(sys_days((d.year() / d.month() / 1) + std::chrono::months(1)));
}

std::string MonthName(int64_t t) {
  const year_month_day d = Date(t);
  return fmt::format("{:04}-{:02}", static_cast<int>(d.year()), static_cast<unsigned>(d.month()));
}

std::optional<int64_t> ParseMonth(std::string_view s) {
  if (s.size() != 7 || s[4] != '-') return std::nullopt;
  int year = 0;
  unsigned month = 0;
  for (size_t i = 0; i < 7; ++i) {
    if (i == 4) continue;
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    if (i < 4)
      year = year * 10 + (s[i] - '0');
    else
      month = month * 10 + static_cast<unsigned>(s[i] - '0');
  }
  if (year < 1970 || month < 1 || month > 12) return std::nullopt;
  return Seconds(sys_days(std::chrono::year(year) / std::chrono::month(month) / 1));
}

void Observe(Meter& meter, double util_pct, int64_t at, int64_t max_gap) {
  const int64_t from = std::max(meter.util_at, meter.since);
  const int64_t dt = std::min(at - from, max_gap);
  meter.util_at = std::max(meter.util_at, at);
  if (dt <= 0 || !(util_pct >= 0)) return;
  meter.util_pct_seconds +=
      static_cast<int64_t>(std::min(util_pct, 100.0) * static_cast<double>(dt) + 0.5);
  meter.util_observed += dt;
}

void Close(Meter& meter, const Payer& payer, int64_t end, Ending how,
           std::vector<store::LedgerRecord>& out) {
  auto line = [&](int64_t from, int64_t to, int64_t seconds, std::string note) {
    store::LedgerRecord l;
    l.tenant = payer.tenant;
    l.instance = payer.instance;
    l.instance_type = payer.instance_type;
    l.billing = payer.billing;
    l.reservation = payer.reservation;
    l.start = from;
    l.end = to;
    l.seconds = seconds;
    l.rate_micros = meter.rate.micros();
    l.amount_micros = Amount(meter.rate, seconds).micros();
    l.note = std::move(note);
    l.gpu_milli = payer.gpu_milli;
    l.user = payer.user;
    out.push_back(std::move(l));
  };
  const size_t first = out.size();
  for (int64_t from = meter.since; from < end;) {
    const int64_t to = std::min(end, DayStart(from) + kSecondsPerDay);
    line(from, to, to - from, how == Ending::kPlatform && to == end ? "ended by the platform" : "");
    meter.billed += to - from;
    from = to;
  }
  meter.since = std::max(meter.since, end);
  if (out.size() > first) {
    out.back().util_pct_seconds = std::exchange(meter.util_pct_seconds, 0);
    out.back().util_observed_seconds = std::exchange(meter.util_observed, 0);
  }
  if (how != Ending::kCustomer || meter.billed >= kMinimumSeconds) return;
  // The minimum's top-up goes on the start's last line.
  const int64_t top_up = kMinimumSeconds - meter.billed;
  meter.billed = kMinimumSeconds;
  if (out.size() == first) {
    line(end, end, top_up, "minimum");
    out.back().util_pct_seconds = std::exchange(meter.util_pct_seconds, 0);
    out.back().util_observed_seconds = std::exchange(meter.util_observed, 0);
    return;
  }
  store::LedgerRecord& last = out.back();
  last.seconds += top_up;
  last.amount_micros = Amount(meter.rate, last.seconds).micros();
  last.note = "minimum";
}

}  // namespace tessera::billing
