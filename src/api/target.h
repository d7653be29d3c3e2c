// The request target of an HTTP request ("/v1/instances?state=running"), parsed into its
// percent-decoded path and query parameters. Everything that comes out is valid UTF-8 without
// control characters, so later code may put it into JSON, a log line or an error message as is.
// Errors say which part is at fault and where, for a 400 answer.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace tessera::api {

struct Target {
  std::string path;                                        // Decoded: "/v1/instances/inst-1".
  std::vector<std::pair<std::string, std::string>> query;  // Decoded, in order, names unique.

  // The value of query parameter `name`, or nullptr when absent.
  const std::string* Param(std::string_view name) const;
};

// Parses an origin-form target: "/" path ["?" query]. The path and each query name and value are
// percent-decoded ('+' is a space in the query), then must be valid UTF-8 without control
// characters. A parameter given twice, a fragment, or a malformed escape is an error.
Result<Target> ParseTarget(std::string_view target);

// The path's segments between slashes: "/v1/instances/x" -> {"v1", "instances", "x"}. Empty
// segments ("//", a trailing "/") are kept, so "/v1/instances/" does not match "/v1/instances".
std::vector<std::string_view> PathSegments(std::string_view path);

}  // namespace tessera::api
