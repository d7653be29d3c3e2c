#include "core/cron.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <vector>

#include "common/text.h"

namespace tessera::core {

namespace {

std::optional<int> Number(std::string_view s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Sets in `bits` each value the field allows, within [lo, hi]. `any` says whether it was `*`.
template <size_t N>
Status ParseField(std::string_view text, const char* name, int lo, int hi, std::bitset<N>& bits,
                  bool& any) {
  any = text == "*";
  for (std::string_view part : Split(text, ',')) {
    auto bad = [&](const std::string& why) {
      return Status::InvalidArgument(fmt::format("{}: '{}' {}", name, Quote(part, 32), why));
    };
    int step = 1;
    std::string_view range = part;
    if (size_t slash = part.find('/'); slash != std::string_view::npos) {
      auto s = Number(part.substr(slash + 1));
      if (!s || *s < 1) return bad("has a step that is not a positive number");
      step = *s;
      range = part.substr(0, slash);
    }
    int from = lo, to = hi;
    if (range != "*") {
      const size_t dash = range.find('-');
      auto a = Number(range.substr(0, dash));
      auto b = dash == std::string_view::npos ? a : Number(range.substr(dash + 1));
      if (!a || !b) return bad("is not *, a number, a range a-b or a step */n");
      if (*a < lo || *a > hi || *b < lo || *b > hi) {
        return bad(fmt::format("is out of range [{}, {}]", lo, hi));
      }
      if (*b < *a) return bad("is a range that ends before it starts");
      from = *a;
      // A lone number with a step ("5/15") runs to the end, as in cron.
      to = dash == std::string_view::npos && step > 1 ? hi : *b;
    }
    for (int v = from; v <= to; v += step) bits.set(static_cast<size_t>(v));
  }
  return Status::Ok();
}

}  // namespace

Result<Cron> Cron::Parse(std::string_view text) {
  std::vector<std::string_view> fields;
  for (std::string_view f : Split(text, ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  if (fields.size() != 5) {
    return Status::InvalidArgument(fmt::format(
        "'{}' has {} fields; a cron expression has 5: minute hour day-of-month month day-of-week",
        Quote(text, 64), fields.size()));
  }
  Cron c;
  c.text_ = std::string(text);
  bool any = false;
  TESSERA_RETURN_IF_ERROR(ParseField(fields[0], "minute", 0, 59, c.minute_, any));
  TESSERA_RETURN_IF_ERROR(ParseField(fields[1], "hour", 0, 23, c.hour_, any));
  TESSERA_RETURN_IF_ERROR(ParseField(fields[2], "day of month", 1, 31, c.day_, c.any_day_));
  TESSERA_RETURN_IF_ERROR(ParseField(fields[3], "month", 1, 12, c.month_, any));
  std::bitset<8> weekday;
  TESSERA_RETURN_IF_ERROR(ParseField(fields[4], "day of week", 0, 7, weekday, c.any_weekday_));
  for (size_t d = 0; d < 7; ++d) c.weekday_[d] = weekday[d] || (d == 0 && weekday[7]);
  return c;
}

bool Cron::Matches(Time t) const {
  using namespace std::chrono;
  const auto day = floor<days>(t);
  const year_month_day ymd(day);
  const hh_mm_ss hms(floor<minutes>(t - day));
  const auto wd = static_cast<size_t>(weekday(day).c_encoding());
  if (!minute_[static_cast<size_t>(hms.minutes().count())] ||
      !hour_[static_cast<size_t>(hms.hours().count())] ||
      !month_[static_cast<unsigned>(ymd.month())]) {
    return false;
  }
  const bool day_ok = day_[static_cast<unsigned>(ymd.day())];
  const bool weekday_ok = weekday_[wd];
  if (any_day_ || any_weekday_) return day_ok && weekday_ok;
  return day_ok || weekday_ok;
}

std::optional<Time> Cron::Previous(Time t, Duration horizon) const {
  using namespace std::chrono;
  const Time earliest = t - horizon;
  Time m = floor<minutes>(t);
  while (m >= earliest) {
    // Whole hours and days that cannot match are skipped at once.
    const auto day = floor<days>(m);
    const year_month_day ymd(day);
    const auto wd = static_cast<size_t>(weekday(day).c_encoding());
    const bool day_ok =
        month_[static_cast<unsigned>(ymd.month())] &&
        (any_day_ || any_weekday_ ? day_[static_cast<unsigned>(ymd.day())] && weekday_[wd]
                                  : day_[static_cast<unsigned>(ymd.day())] || weekday_[wd]);
    if (!day_ok) {
      m = Time(day) - minutes(1);
      continue;
    }
    const auto hour = floor<hours>(m);
    if (!hour_[static_cast<size_t>(duration_cast<hours>(hour - day).count())]) {
      m = hour - minutes(1);
      continue;
    }
    if (minute_[static_cast<size_t>(duration_cast<minutes>(m - hour).count())]) return m;
    m -= minutes(1);
  }
  return std::nullopt;
}

}  // namespace tessera::core
