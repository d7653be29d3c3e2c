// Cron expressions for autoscaling schedules: the five fields of crontab(5), in UTC.
//   minute 0-59, hour 0-23, day of month 1-31, month 1-12, day of week 0-7 (0 and 7 are Sunday);
//   each a `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a comma list of those.
// As in Vixie cron, when both the day of month and the day of week are restricted, a day matching
// either matches.
// Thread-safety: immutable after Parse.
#pragma once

#include <bitset>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/result.h"

namespace tessera::core {

class Cron {
 public:
  // InvalidArgument saying which field is wrong and why, e.g. "hour: 25 is out of range [0, 23]".
  static Result<Cron> Parse(std::string_view text);

  // Whether the minute that holds `t` (UTC) matches.
  bool Matches(Time t) const;
  // The start of the latest matching minute at or before `t`, looking back no further than
  // `horizon`; nullopt when none matched in it.
  std::optional<Time> Previous(Time t, Duration horizon) const;
  const std::string& text() const { return text_; }

 private:
  std::bitset<60> minute_;
  std::bitset<24> hour_;
  std::bitset<32> day_;    // 1-31.
  std::bitset<13> month_;  // 1-12.
  std::bitset<7> weekday_;
  bool any_day_ = true, any_weekday_ = true;
  std::string text_;
};

}  // namespace tessera::core
