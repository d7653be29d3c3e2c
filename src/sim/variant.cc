#include "sim/variant.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace tessera::sim {

namespace {
constexpr std::string_view kBatch = "-batch";
constexpr std::string_view kRepack = "-repack";
}  // namespace

Result<PolicyVariant> ParsePolicyVariant(std::string_view policy) {
  PolicyVariant out;
  std::string_view rest = policy;
  if (rest.size() > kRepack.size() && rest.ends_with(kRepack)) {
    out.repack = true;
    rest.remove_suffix(kRepack.size());
  }
  const size_t at = rest.rfind(kBatch);
  if (at == std::string_view::npos || at == 0) {
    out.base = std::string(rest);
    return out;
  }
  out.base = std::string(rest.substr(0, at));
  out.window = kDefaultBatchWindow;
  const std::string_view digits = rest.substr(at + kBatch.size());
  if (digits.empty()) return out;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out.window);
  if (digits.front() == '0' || ec != std::errc() || ptr != digits.data() + digits.size() ||
      out.window < 1 || out.window > kMaxBatchWindow) {
    return Status::InvalidArgument(
        fmt::format("policy '{}': the batch window '{}' is not a whole number from 1 to {}", policy,
                    digits, kMaxBatchWindow));
  }
  return out;
}

void OrderWindow(const std::vector<Pod>& pods, std::vector<uint32_t>& order, size_t begin,
                 size_t end) {
  std::stable_sort(
      order.begin() + static_cast<std::ptrdiff_t>(begin),
      order.begin() + static_cast<std::ptrdiff_t>(end),
      [&pods](uint32_t a, uint32_t b) { return pods[a].demand_milli() > pods[b].demand_milli(); });
}

}  // namespace tessera::sim
