// A main() for fuzz targets built without libFuzzer: runs every file under the directories (or
// the files) named on the command line through LLVMFuzzerTestOneInput, in name order, so a seed
// corpus and the inputs that once crashed replay as a plain test under any compiler. A missing
// directory is skipped (a target may have no regressions yet), but finding no input at all fails,
// so a wrong path cannot pass silently. A crashing input aborts, and the name printed just before
// says which one it was.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// The regular files under `path` (recursively), or `path` itself when it is a file.
std::vector<fs::path> InputsUnder(const fs::path& path) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return {path};
  if (!fs::is_directory(path, ec)) return out;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(path, ec)) {
    if (e.is_regular_file(ec)) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    for (const fs::path& input : InputsUnder(argv[i])) {
      std::ifstream in(input, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "replay: cannot read %s\n", input.c_str());
        return 1;
      }
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      std::fprintf(stderr, "replay: %s (%zu bytes)\n", input.c_str(), bytes.size());
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++count;
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "replay: no inputs found under the paths given\n");
    return 1;
  }
  std::fprintf(stderr, "replay: %d inputs ran without a crash\n", count);
  return 0;
}
