// A one-line progress counter for long simulations on a terminal: "runs 12/60, 1.2M pods, 450k
// pods/s", redrawn in place a few times a second by a background thread, and erased when done.
// The caller decides whether to show it (normally only when stderr is a TTY), so logs and pipes
// stay clean.
// Thread-safety: the object is driven by one thread; its worker only reads GridProgress atomics.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"
#include "sim/run.h"

namespace tessera::sim {

// The line for `runs_done` of `runs_total` runs and `pods` pods in `seconds`.
std::string ProgressText(int64_t runs_done, int64_t runs_total, int64_t pods, double seconds);

class ProgressLine {
 public:
  // Starts drawing on `out` when `enabled`; otherwise does nothing. `progress` and `clock` must
  // outlive this object.
  ProgressLine(const GridProgress* progress, int64_t runs_total, const Clock* clock, bool enabled,
               std::FILE* out = stderr);
  // Stops the thread and erases the line.
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

 private:
  void Loop();
  void Draw(bool final);

  const GridProgress* progress_;
  int64_t runs_total_;
  const Clock* clock_;
  std::FILE* out_;
  Time start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // Guarded by mu_.
  std::thread thread_;
};

}  // namespace tessera::sim
