#include "common/clock.h"

#include <fmt/format.h>

#include <cstdio>

#include "common/text.h"

namespace tessera {

Time SystemClock::Now() const {
  return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now());
}

SystemClock& SystemClock::Get() {
  static SystemClock clock;
  return clock;
}

std::string FormatRfc3339(Time t) {
  const auto day = std::chrono::floor<std::chrono::days>(t);
  const std::chrono::year_month_day ymd(day);
  const std::chrono::hh_mm_ss hms(t - day);
  std::string s = fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}", int(ymd.year()),
                              unsigned(ymd.month()), unsigned(ymd.day()), hms.hours().count(),
                              hms.minutes().count(), hms.seconds().count());
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(hms.subseconds()).count();
  if (ms != 0) s += fmt::format(".{:03d}", ms);
  s += 'Z';
  return s;
}

namespace {

// Reads exactly `width` digits at s[pos...] into out; false when any is not a digit.
bool ReadDigits(std::string_view s, size_t pos, size_t width, int& out) {
  if (pos + width > s.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + width; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

}  // namespace

Result<Time> ParseRfc3339(std::string_view s) {
  auto bad = [&] {
    // Quoted: the text may be a client's, control characters and all.
    return Status::InvalidArgument(fmt::format("'{}' is not an RFC 3339 time", Quote(s, 40)));
  };
  int y, mo, d, h, mi, sec;
  if (!ReadDigits(s, 0, 4, y) || s.size() < 20 || s[4] != '-' || !ReadDigits(s, 5, 2, mo) ||
      s[7] != '-' || !ReadDigits(s, 8, 2, d) || (s[10] != 'T' && s[10] != 't') ||
      !ReadDigits(s, 11, 2, h) || s[13] != ':' || !ReadDigits(s, 14, 2, mi) || s[16] != ':' ||
      !ReadDigits(s, 17, 2, sec)) {
    return bad();
  }
  const std::chrono::year_month_day ymd{std::chrono::year(y), std::chrono::month(unsigned(mo)),
                                        std::chrono::day(unsigned(d))};
  if (!ymd.ok() || h > 23 || mi > 59 || sec > 60) return bad();
  size_t pos = 19;
  int64_t micros = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int64_t scale = 100000;
    const size_t start = pos;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      micros += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return bad();
  }
  int offset_minutes = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!ReadDigits(s, pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !ReadDigits(s, pos + 4, 2, om)) {
      return bad();
    }
    offset_minutes = (s[pos] == '+' ? 1 : -1) * (oh * 60 + om);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != s.size()) return bad();
  Time t = std::chrono::sys_days(ymd) + std::chrono::hours(h) + std::chrono::minutes(mi) +
           std::chrono::seconds(sec) + Duration(micros);
  return t - std::chrono::minutes(offset_minutes);
}

}  // namespace tessera
