// Result<T> holds either a value of T or a non-OK Status, in the style of absl::StatusOr.
// Thread-safety: a value type, as Status.
#pragma once

#include <cstdlib>
#include <optional>
#include <utility>

#include "common/status.h"

namespace tessera {

template <typename T>
class [[nodiscard]] Result {
 public:
  // Implicit on purpose, so a function returns either `value` or `Status::X(...)`.
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) status_ = Status::Internal("Result built from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  // The value. Calling these on an error is a bug, and aborts rather than reading garbage.
  T& value() & { return Checked(); }
  const T& value() const& { return const_cast<Result*>(this)->Checked(); }
  T&& value() && { return std::move(Checked()); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &value(); }

 private:
  T& Checked() {
    if (!value_) std::abort();
    return *value_;
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace tessera

#define TESSERA_CONCAT_INNER_(a, b) a##b
#define TESSERA_CONCAT_(a, b) TESSERA_CONCAT_INNER_(a, b)

// TESSERA_ASSIGN_OR_RETURN(auto x, F()); binds x to F()'s value or returns F()'s Status.
#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL_(TESSERA_CONCAT_(tessera_result_, __LINE__), lhs, expr)
#define TESSERA_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
