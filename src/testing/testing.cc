#include "testing/testing.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

namespace tessera::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::random_device rd;
  const fs::path base = fs::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path p = base / ("tessera-test-" + std::to_string(rd()));
    if (fs::create_directory(p)) {
      path_ = p.string();
      return;
    }
  }
  std::abort();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& name, const std::string& content) const {
  const std::string p = File(name);
  fs::create_directories(fs::path(p).parent_path());
  std::ofstream(p, std::ios::binary) << content;
  return p;
}

std::string SourceDir() {
  if (const char* env = std::getenv("TESSERA_SOURCE_DIR"); env && *env) return env;
  return TESSERA_SOURCE_DIR;
}

std::optional<std::string> DatasetsDir() {
  if (const char* env = std::getenv("TESSERA_DATASETS"); env && *env) {
    if (fs::is_directory(env)) return std::string(env);
    return std::nullopt;
  }
  const fs::path p = fs::path(SourceDir()) / ".." / "shared" / "datasets";
  if (fs::is_directory(p)) return fs::canonical(p).string();
  return std::nullopt;
}

std::string DatasetsMissingMessage() {
  return "public traces not found: put them in ../shared/datasets or set TESSERA_DATASETS "
         "(see README.md, 'Public traces')";
}

std::string TesseraBinary() {
  if (const char* env = std::getenv("TESSERA_BIN"); env && *env) return env;
  return (fs::path(SourceDir()) / "build" / "release" / "tessera").string();
}

}  // namespace tessera::testing
