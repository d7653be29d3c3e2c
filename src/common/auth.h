// Bearer tokens for the API. A token is 256 random bits from the operating system's CSPRNG,
// written as "tsr_" plus 64 hex digits. Only its SHA-256 hash is ever stored, and hashes are
// compared in constant time, so neither the store nor response timing reveals a token.
// Thread-safety: all functions are safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera {

// A new random token. Internal error only if the CSPRNG fails.
Result<std::string> GenerateToken();

// Lower-case hex SHA-256 of `token`.
std::string HashToken(std::string_view token);

// True when a == b, taking time independent of where they differ (lengths may leak).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The token of an "Authorization: Bearer <token>" header value, or "" when malformed. The scheme
// is case-insensitive (RFC 7235); one or more spaces may follow it.
std::string_view BearerToken(std::string_view authorization_header);

// True for a token of full strength, as GenerateToken makes them: "tsr_" and 64 lower-case hex
// digits (256 bits).
bool IsFullStrengthToken(std::string_view token);

}  // namespace tessera
