#include "common/money.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace tessera {

namespace {

// 128-bit intermediates keep products such as price x seconds exact before narrowing.
__extension__ typedef __int128 Int128;
__extension__ typedef unsigned __int128 UInt128;

int64_t CheckedNarrow(Int128 v) {
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min()) {
    std::abort();  // A money overflow is a bug; never wrap.
  }
  return static_cast<int64_t>(v);
}

}  // namespace

Money Money::FromCents(int64_t cents) { return Money(CheckedNarrow(Int128(cents) * 10'000)); }

Result<Money> Money::Parse(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("'{}' is not a money amount: {}", text, why));
  };
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) ++i;
  Int128 whole = 0;
  const size_t whole_start = i;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    whole = whole * 10 + (text[i] - '0');
    if (whole > std::numeric_limits<int64_t>::max() / kMicrosPerDollar) return bad("too large");
  }
  if (i == whole_start) return bad("expected digits, as in \"3.06\"");
  int64_t fraction = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    const size_t frac_start = i;
    int64_t scale = kMicrosPerDollar / 10;
    for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
      if (scale == 0) return bad("more than 6 decimal places");
      fraction += (text[i] - '0') * scale;
      scale /= 10;
    }
    if (i == frac_start) return bad("expected digits after '.'");
  }
  if (i != text.size()) return bad(fmt::format("unexpected '{}'", text[i]));
  // The whole part alone may fit while the fraction carries it past the int64 range, and text is
  // input, so that is an error here rather than CheckedNarrow's abort.
  const Int128 micros =
      negative ? -(whole * kMicrosPerDollar + fraction) : whole * kMicrosPerDollar + fraction;
  if (micros > std::numeric_limits<int64_t>::max() ||
      micros < std::numeric_limits<int64_t>::min()) {
    return bad("too large");
  }
  return Money(static_cast<int64_t>(micros));
}

std::string Money::ToString(int min_decimals) const {
  const bool negative = micros_ < 0;
  const UInt128 abs = negative ? -Int128(micros_) : Int128(micros_);
  const auto whole = static_cast<uint64_t>(abs / kMicrosPerDollar);
  auto frac = static_cast<uint64_t>(abs % kMicrosPerDollar);
  std::string digits = fmt::format("{:06d}", frac);
  size_t keep = digits.size();
  const auto min_keep = static_cast<size_t>(std::clamp(min_decimals, 0, 6));
  while (keep > min_keep && digits[keep - 1] == '0') --keep;
  digits.resize(keep);
  std::string s = negative ? "-" : "";
  s += std::to_string(whole);
  if (!digits.empty()) s += "." + digits;
  return s;
}

Money Money::RoundedToCents() const {
  constexpr int64_t kCent = 10'000;
  const int64_t rem = micros_ % kCent;
  int64_t base = micros_ - rem;
  if (rem >= kCent / 2) base += kCent;
  if (rem <= -kCent / 2) base -= kCent;
  return Money(base);
}

Money Money::MulDiv(int64_t numerator, int64_t denominator) const {
  if (denominator == 0) std::abort();
  Int128 n = Int128(micros_) * numerator;
  Int128 d = denominator;
  if (d < 0) {
    n = -n;
    d = -d;
  }
  Int128 q = n / d;
  Int128 r = n % d;
  if (r < 0) {  // Floor division, so the remainder is in [0, d).
    q -= 1;
    r += d;
  }
  if (2 * r > d || (2 * r == d && (q % 2 != 0))) q += 1;
  return Money(CheckedNarrow(q));
}

Money Money::operator+(Money o) const { return Money(CheckedNarrow(Int128(micros_) + o.micros_)); }
Money Money::operator-(Money o) const { return Money(CheckedNarrow(Int128(micros_) - o.micros_)); }
Money Money::operator*(int64_t k) const { return Money(CheckedNarrow(Int128(micros_) * k)); }

}  // namespace tessera
