#include "core/batch_window.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

namespace tessera::core {

void BatchWindow::Hold(std::string id) {
  if (held_.empty()) since_ = clock_.Now();
  held_.push_back(std::move(id));
}

bool BatchWindow::Holds(std::string_view id) const {
  return std::find(held_.begin(), held_.end(), id) != held_.end();
}

void BatchWindow::Forget(std::string_view id) {
  std::erase_if(held_, [id](const std::string& h) { return h == id; });
}

Duration BatchWindow::DueIn() const {
  if (held_.empty()) return Duration::max();
  if (held_.size() >= size_) return Duration::zero();
  const auto waited = std::chrono::duration_cast<Duration>(clock_.Now() - since_);
  // A wall clock stepped back (NTP) closes the window rather than holding it shut.
  if (waited < Duration::zero() || waited >= wait_) return Duration::zero();
  return wait_ - waited;
}

std::vector<std::string> BatchWindow::TakeDue() {
  if (DueIn() > Duration::zero()) return {};
  return std::exchange(held_, {});
}

std::string BatchWindow::Reason() const {
  return fmt::format("in the batch window: placed with up to {} others within {} ms", size_ - 1,
                     std::chrono::duration_cast<std::chrono::milliseconds>(wait_).count());
}

}  // namespace tessera::core
