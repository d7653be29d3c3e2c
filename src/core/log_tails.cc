#include "core/log_tails.h"

#include <fmt/format.h>

#include <algorithm>

namespace tessera::core {

void LogTails::Append(const std::string& instance, const WorkloadLog& log) {
  Tail& tail = tails_[instance];
  if (tail.attempt != log.attempt) {
    if (!tail.data.empty()) {
      tail.data += fmt::format("--- attempt {} (restart {}) ---\n", log.attempt + 1, log.attempt);
    }
    tail.attempt = log.attempt;
    tail.end = 0;
  }
  if (log.offset > tail.end) {
    tail.data += fmt::format("[... {} bytes dropped by the agent ...]\n", log.offset - tail.end);
    tail.end = log.offset;
  }
  const int64_t skip = tail.end - log.offset;  // Bytes already held.
  if (skip < static_cast<int64_t>(log.data.size())) {
    tail.data.append(log.data, static_cast<size_t>(skip));
    tail.end = log.offset + static_cast<int64_t>(log.data.size());
  }
  if (tail.data.size() > kTailBytes) tail.data.erase(0, tail.data.size() - kTailBytes);
}

LogTails::Slice LogTails::Read(std::string_view instance, size_t tail,
                               std::optional<int64_t> after) const {
  Slice slice;
  auto it = tails_.find(std::string(instance));
  if (it == tails_.end()) return slice;
  const std::string& data = it->second.data;
  slice.end = it->second.end;
  if (after) {
    const int64_t first = slice.end - static_cast<int64_t>(data.size());  // Oldest byte kept.
    if (*after < slice.end) {
      slice.text = data.substr(static_cast<size_t>(std::max<int64_t>(0, *after - first)));
    }
    return slice;
  }
  // From the end, back over `tail` newlines; a last line without one counts as a line.
  size_t pos = data.size();
  if (pos > 0 && data[pos - 1] == '\n') --pos;
  size_t lines = 0;
  bool whole = false;
  while (lines < tail) {
    const size_t nl = pos == 0 ? std::string::npos : data.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      whole = true;
      break;
    }
    pos = nl;
    ++lines;
  }
  slice.text = data.substr(whole ? 0 : pos + 1);
  return slice;
}

int64_t LogTails::ResumeAt(std::string_view instance, int attempt) const {
  auto it = tails_.find(std::string(instance));
  return it != tails_.end() && it->second.attempt == attempt ? it->second.end : 0;
}

}  // namespace tessera::core
