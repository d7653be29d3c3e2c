#include "sim/batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace tessera::sim {

namespace {
constexpr std::string_view kSuffix = "-batch";
}  // namespace

Result<BatchedPolicy> SplitBatchedPolicy(std::string_view policy) {
  const size_t at = policy.rfind(kSuffix);
  if (at == std::string_view::npos || at == 0) return BatchedPolicy{std::string(policy), 1};
  const std::string_view digits = policy.substr(at + kSuffix.size());
  BatchedPolicy out{std::string(policy.substr(0, at)), kDefaultBatchWindow};
  if (digits.empty()) return out;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out.window);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || out.window < 1 ||
      out.window > kMaxBatchWindow) {
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
