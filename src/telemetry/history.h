// A short history of every GPU's (and MIG instance's) readings, in memory: what tenants and
// operators read without a Prometheus (GET /v1/instances/{id}/metrics, GET /v1/nodes/{id}).
// Each device keeps the points of the last `keep` (one hour by default), at most `max_points`
// of them, so memory is bounded by devices x max_points x sizeof(Point) (24 bytes).
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "telemetry/sample.h"

namespace tessera::telemetry {

struct Point {
  int64_t t_ms = 0;    // Unix time in milliseconds.
  float gpu_util = 0;  // Percent; a MIG instance's graphics engine activity in percent.
  float fb_used_mib = 0;
  float power_w = 0;        // The GPU's (a MIG instance shows its GPU's).
  float temperature_c = 0;  // The GPU's.
};

class History {
 public:
  explicit History(Duration keep = std::chrono::hours(1), size_t max_points = 1440)
      : keep_(keep), max_points_(max_points) {}

  // Records a node's telemetry taken at `now`: a point per GPU that answered and per MIG
  // instance with readings.
  void Record(const std::string& node, Time now, const Telemetry& t);
  // Forgets a node that left.
  void Forget(const std::string& node) { nodes_.erase(node); }
  // The points of GPU `gpu` (mig_start -1) or of its MIG instance at `mig_start`, taken at or
  // after `since`, oldest first.
  std::vector<Point> Points(const std::string& node, int gpu, int mig_start, Time since) const;
  size_t devices() const;

 private:
  using Key = std::pair<int, int>;  // (GPU index, MIG start or -1).
  void Push(std::deque<Point>& d, const Point& p);

  Duration keep_;
  size_t max_points_;
  std::unordered_map<std::string, std::map<Key, std::deque<Point>>> nodes_;
};

}  // namespace tessera::telemetry
