// Writing a file that only its owner may read, whole or not at all.
// Thread-safety: plain functions.
#pragma once

#include <string>

#include "common/result.h"

namespace tessera {

// Writes `content` to `path` through a temporary file in the same directory, created with
// `mode` (O_EXCL, so nothing else holds it open), then renamed over `path`: a reader sees the
// old file or the new one, never a part. With `sync`, the data reaches the disk before the
// rename (a file whose loss loses data: a keyring). Errors name the path.
Status WritePrivateFile(const std::string& path, const std::string& content, unsigned mode = 0600,
                        bool sync = false);

}  // namespace tessera
