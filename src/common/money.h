// Money is an exact amount of US dollars held as an int64 count of micro-USD (1e-6 USD). It is
// never a binary float: prices parse from decimal strings such as "3.06" and print back exactly.
// The range, about +/-9.2e12 USD, is far beyond any bill. Arithmetic that would overflow aborts,
// because a wrong amount of money is worse than a crash.
// Thread-safety: a value type.
#pragma once

#include <compare>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera {

class Money {
 public:
  static constexpr int64_t kMicrosPerDollar = 1'000'000;

  constexpr Money() = default;
  static constexpr Money FromMicros(int64_t micros) { return Money(micros); }
  static Money FromCents(int64_t cents);

  // Parses a decimal string: an optional '-', digits, and at most 6 digits after a '.', e.g.
  // "3.06", "-0.5", "12", "0.000001". Anything else, more than 6 decimals included, is an error
  // naming the text; nothing is rounded.
  static Result<Money> Parse(std::string_view text);

  constexpr int64_t micros() const { return micros_; }

  // The decimal form with at least `min_decimals` (0..6) and at most 6 decimals, trailing zeros
  // beyond min_decimals dropped: 3.06 -> "3.06", 3 -> "3.00", 1e-6 -> "0.000001".
  std::string ToString(int min_decimals = 2) const;

  // Rounds to whole cents, half away from zero, for invoices.
  Money RoundedToCents() const;

  // this * numerator / denominator, rounded half to even, computed in 128 bits so rating
  // "price per hour x seconds / 3600" is exact to the micro-dollar. Aborts when denominator is 0.
  Money MulDiv(int64_t numerator, int64_t denominator) const;

  Money operator+(Money o) const;
  Money operator-(Money o) const;
  Money operator*(int64_t k) const;
  Money& operator+=(Money o) { return *this = *this + o; }
  Money& operator-=(Money o) { return *this = *this - o; }
  Money operator-() const { return Money(0) - *this; }
  friend constexpr auto operator<=>(Money, Money) = default;

 private:
  constexpr explicit Money(int64_t micros) : micros_(micros) {}
  int64_t micros_ = 0;
};

}  // namespace tessera
