// Fuzzes the seed-list parser of `tessera sim --seeds` (sim::ParseSeeds, src/sim/run.h): "42",
// "42-51", "1,5,9" or a mix. An accepted list has 1 to 100,000 seeds, each piece's seeds in
// order; a rejected one gets a message. Hangs and runaway memory are what libFuzzer's -timeout and
// -rss_limit_mb catch here.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "sim/run.h"

namespace tessera::fuzz {
namespace {

// An input longer than this is a list of many pieces, which says nothing new.
constexpr size_t kMaxText = 256;

void FuzzOne(std::string_view text) {
  if (text.size() > kMaxText) return;
  Result<std::vector<uint64_t>> seeds = sim::ParseSeeds(text);
  if (!seeds.ok()) {
    Check(!seeds.status().message().empty(), "ParseSeeds failed without a message");
    return;
  }
  Check(!seeds->empty() && seeds->size() <= 100'000, "ParseSeeds returned too few or many seeds");
  // Each single seed of the text is in the list.
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view piece = text.substr(start, end - start);
    uint64_t v = 0;
    const auto [ptr, ec] = std::from_chars(piece.data(), piece.data() + piece.size(), v);
    if (ec == std::errc() && ptr == piece.data() + piece.size()) {
      bool found = false;
      for (uint64_t s : *seeds) found = found || s == v;
      Check(found, "a listed seed is missing");
    }
    start = end + 1;
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
