// File helpers for the agent's side of the workload files (docs/agent-workloads.md): small reads
// and writes whose errors name the path, the atomic replace (tmp + rename) every control file
// uses, and the reader that stitches the log's segments back into one stream of offsets.
// Thread-safety: pure functions of the file system; safe from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "common/result.h"

namespace tessera::agent {

// The whole file; NotFound when it does not exist, Internal naming the path otherwise.
Result<std::string> ReadTextFile(const std::string& path);

// Replaces `path` with `content` atomically: written to path + ".tmp", then renamed.
Status WriteFileAtomic(const std::string& path, const std::string& content);

// Writes `content` to an existing or new file in place (cgroupfs files cannot be renamed over).
Status WriteTextFile(const std::string& path, const std::string& content);

// Up to max_bytes of the log kept in `dir` (segments "log." + 20 digits, named by the offset of
// their first byte), from `offset`, or from the oldest kept byte when `offset` is older; *next =
// the offset after what was returned. Unavailable when the segments kept rotating under it.
Result<std::string> ReadLogSegments(const std::string& dir, int64_t offset, size_t max_bytes,
                                    int64_t* next);

}  // namespace tessera::agent
