// LogTails: instances' output as their agents shipped it, the newest kTailBytes of each, for
// `tessera logs` and `logs -f`. It joins what each agent sends at the offsets it names: an
// attempt's restart is marked and starts again at offset 0, bytes the agent dropped are said to
// be missing, and bytes already held are not appended twice. Its memory: one tail per instance
// until the state erases it, with the instance, at eviction.
// Thread-safety: none; the core thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/agents.h"

namespace tessera::core {

class LogTails {
 public:
  // The newest bytes kept of an instance's output.
  static constexpr size_t kTailBytes = 256 << 10;

  // Appends what `log` ships of `instance`'s output.
  void Append(const std::string& instance, const WorkloadLog& log);

  struct Slice {
    std::string text;
    int64_t end = 0;  // The offset after the last byte: pass it as `after` to follow.
  };
  // The last `tail` lines, or with `after` the bytes after that offset that are still kept;
  // empty for an instance with no output.
  Slice Read(std::string_view instance, size_t tail, std::optional<int64_t> after) const;
  // Where `instance`'s agent resumes shipping attempt `attempt`: the end held of it, 0 for an
  // attempt not held.
  int64_t ResumeAt(std::string_view instance, int attempt) const;
  void Erase(std::string_view instance) { tails_.erase(std::string(instance)); }
  size_t size() const { return tails_.size(); }  // Instances whose output is held.

 private:
  struct Tail {
    int attempt = 0;
    int64_t end = 0;  // Offset after the last byte received.
    std::string data;
  };
  std::unordered_map<std::string, Tail> tails_;
};

}  // namespace tessera::core
