// The catalog data files compiled into the binary (see cmake/embed_files.cmake), so `tessera`
// carries its default catalog and runs from any directory.
#pragma once

#include <string_view>
#include <vector>

namespace tessera::catalog {

struct EmbeddedFile {
  std::string_view path;     // Relative to the catalog/ directory, e.g. "gpus.json".
  std::string_view content;  // The file's bytes.
};

// Every embedded file, sorted by path.
const std::vector<EmbeddedFile>& EmbeddedFiles();

}  // namespace tessera::catalog
