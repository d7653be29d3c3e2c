#include "api/audit.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "common/text.h"

namespace tessera::api {

namespace {

// `s` cut to at most `max` bytes at a character boundary, ending in "..." when cut.
std::string CutText(std::string s, size_t max) {
  if (s.size() <= max) return s;
  std::string out(CutUtf8(s, max >= 3 ? max - 3 : 0));
  out += "...";
  return out;
}

}  // namespace

std::optional<store::AuditRecord> AuditGate::Admit(store::AuditRecord row, Time now) {
  row.action = CutText(std::move(row.action), kMaxAction);
  row.target = CutText(std::move(row.target), kMaxTarget);
  row.detail = CutText(std::move(row.detail), kMaxDetail);
  int64_t gap = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = buckets_.try_emplace(row.actor);
    Bucket& b = it->second;
    if (fresh) b.refilled = now;
    const double seconds = std::chrono::duration<double>(now - b.refilled).count();
    if (seconds > 0) {
      b.tokens = std::min(kRefusedBurst, b.tokens + seconds * kRefusedPerSecond);
      b.refilled = now;
    }
    if (row.status >= 400) {
      if (b.tokens < 1) {
        ++b.unrecorded;
        return std::nullopt;
      }
      b.tokens -= 1;
    }
    gap = std::exchange(b.unrecorded, 0);
  }
  if (gap > 0) {
    row.detail += fmt::format(
        "{}({} refused requests of this caller before this one were not "
        "recorded: over {} a second)",
        row.detail.empty() ? "" : " ", gap, kRefusedPerSecond);
  }
  return row;
}

}  // namespace tessera::api
