// The server's Prometheus metrics: API requests by route and status, requests refused before
// authentication, the HTTP layer's connections and limits, a histogram of scheduling latency,
// and gauges of instances and GPUs read from the core's state at scrape time. Rendered in the
// Prometheus text exposition format (version 0.0.4).
// Thread-safety: the counters are locked; Render's state argument must be read on the core thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/http.h"
#include "core/state.h"

namespace tessera::api {

class Metrics {
 public:
  // Counts one API request under its route pattern (not the raw path, to bound cardinality).
  void CountRequest(const std::string& method, const std::string& route, int status);

  // Counts a request refused before it reached a route's operation, by why: "unauthenticated"
  // (no valid token), "disabled" (a disabled tenant's token).
  void CountRefusal(const std::string& reason);

  // Counts a refused request the audit log did not record (its caller was over its rate).
  void CountUnrecordedAudit();

  // The whole exposition. `state` is read on the core thread by the caller; `http` is the HTTP
  // layer's counters.
  std::string Render(const core::State& state, const HttpStats& http) const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, int64_t> requests_;  // Guarded by mu_.
  std::map<std::string, int64_t> refusals_;                                // Guarded by mu_.
  int64_t unrecorded_audit_ = 0;                                           // Guarded by mu_.
};

// The method as tessera_api_requests_total labels it: one HTTP defines and Tessera serves, else
// "other", so made-up methods never add series.
std::string_view MethodLabel(std::string_view method);

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string EscapeLabel(const std::string& v);

}  // namespace tessera::api
