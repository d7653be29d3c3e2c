#include "sim/progress.h"

#include <fmt/format.h>

#include <chrono>

namespace tessera::sim {

namespace {

// 1234 -> "1234", 12345 -> "12.3k", 1234567 -> "1.23M".
std::string Short(double v) {
  if (v >= 1e6) return fmt::format("{:.2f}M", v / 1e6);
  if (v >= 1e4) return fmt::format("{:.1f}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

std::string ProgressText(int64_t runs_done, int64_t runs_total, int64_t pods, double seconds) {
  const double rate = seconds > 0 ? static_cast<double>(pods) / seconds : 0;
  return fmt::format("tessera sim: runs {}/{}, {} pods, {} pods/s, {:.0f} s", runs_done, runs_total,
                     Short(static_cast<double>(pods)), Short(rate), seconds);
}

ProgressLine::ProgressLine(const GridProgress* progress, int64_t runs_total, const Clock* clock,
                           bool enabled, std::FILE* out)
    : progress_(progress), runs_total_(runs_total), clock_(clock), out_(out) {
  if (!enabled) return;
  start_ = clock_->Now();
  thread_ = std::thread([this] { Loop(); });
}

ProgressLine::~ProgressLine() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Draw(/*final=*/true);
}

void ProgressLine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) {
    Draw(/*final=*/false);
  }
}

void ProgressLine::Draw(bool final) {
  if (final) {
    std::fputs("\r\033[K", out_);  // Erase the line; the summary follows on stdout.
  } else {
    const double seconds = std::chrono::duration<double>(clock_->Now() - start_).count();
    const std::string line =
        ProgressText(progress_->runs_done.load(std::memory_order_relaxed), runs_total_,
                     progress_->pods_done.load(std::memory_order_relaxed), seconds);
    std::fprintf(out_, "\r\033[K%s", line.c_str());
  }
  std::fflush(out_);
}

}  // namespace tessera::sim
