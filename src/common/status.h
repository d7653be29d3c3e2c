// Status is how Tessera reports failure: our code does not throw. A Status is either OK or carries
// a code and a human-readable message that names the field, file or line at fault.
// Thread-safety: a Status is a value; distinct objects may be used from distinct threads.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace tessera {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // The caller's input is malformed or out of range.
  kNotFound,            // A named entity (id, file, model) does not exist.
  kAlreadyExists,       // The entity to create exists already.
  kFailedPrecondition,  // The system is not in a state where the operation is allowed.
  kResourceExhausted,   // Capacity or quota does not suffice.
  kPermissionDenied,    // Authenticated, but not allowed.
  kUnauthenticated,     // No valid credentials.
  kUnavailable,         // Transient: try again later.
  kDataLoss,            // Stored data is corrupt.
  kInternal,            // An invariant broke; a bug.
};

// Returns the canonical lower-case name of a code, e.g. "invalid_argument".
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK.
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status PermissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status Unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "<prefix>: <message>", keeping the code. Used to add the
  // file or field context as an error travels up.
  Status WithPrefix(std::string_view prefix) const;

  // A copy carrying `reason`, a machine-readable refinement of the code that the API answers in
  // place of the code's name ("no_reservation", "budget_exceeded").
  Status WithReason(std::string reason) const {
    Status s = *this;
    s.reason_ = std::move(reason);
    return s;
  }
  const std::string& reason() const { return reason_; }

  // "OK" or "<code name>: <message>".
  std::string ToString() const;

  friend bool operator==(const Status&, const Status&) = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string reason_;
};

}  // namespace tessera

// Returns early from the enclosing function with the Status of `expr` when it is not OK.
#define TESSERA_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::tessera::Status tessera_status_ = (expr);        \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (false)
