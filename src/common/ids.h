// Typed ids. Every entity has a short, readable id with a fixed prefix, such as "inst-000042" or
// "node-a100-03"; the type system keeps an instance id from being passed where a node id belongs.
// Hot paths use Index<Tag>, a dense typed integer, instead of strings.
// Thread-safety: value types.
#pragma once

#include <fmt/format.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera {

// True when `s` is a valid id body: 1..63 characters of [a-z0-9._-], starting with a letter or
// digit. Shared by every id type so that ids are safe in URLs, file names and label values.
bool IsValidIdBody(std::string_view s);
// What a name that must pass IsValidIdBody may hold, as errors say it.
inline constexpr std::string_view kNameRule =
    "must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit";

template <typename Tag>
class Id {
 public:
  Id() = default;

  // "<prefix>-<n, zero-padded to 6 digits>", e.g. Id<InstanceTag>::FromNumber(42) = "inst-000042".
  static Id FromNumber(int64_t n) { return Id(fmt::format("{}-{:06d}", Tag::kPrefix, n)); }

  // Accepts "<prefix>-<body>" where body passes IsValidIdBody; otherwise an error naming the text.
  static Result<Id> Parse(std::string_view s) {
    const std::string_view prefix = Tag::kPrefix;
    if (s.size() <= prefix.size() + 1 || s.substr(0, prefix.size()) != prefix ||
        s[prefix.size()] != '-' || !IsValidIdBody(s.substr(prefix.size() + 1))) {
      return Status::InvalidArgument(
          fmt::format("'{}' is not a valid {} id (expected {}-<letters, digits, '-'>)", s,
                      Tag::kPrefix, Tag::kPrefix));
    }
    return Id(std::string(s));
  }

  // Wraps a name as is, without the prefix rule. For ids that come from outside, such as the
  // node names of an openb trace ("openb-node-0001").
  static Id Unchecked(std::string s) { return Id(std::move(s)); }

  const std::string& str() const { return value_; }
  bool empty() const { return value_.empty(); }
  friend auto operator<=>(const Id&, const Id&) = default;

 private:
  explicit Id(std::string v) : value_(std::move(v)) {}
  std::string value_;
};

// A dense index into a table, typed by what it indexes. kInvalid marks "none".
template <typename Tag>
struct Index {
  static constexpr uint32_t kInvalid = UINT32_MAX;
  uint32_t value = kInvalid;

  constexpr Index() = default;
  constexpr explicit Index(uint32_t v) : value(v) {}
  constexpr bool valid() const { return value != kInvalid; }
  friend constexpr auto operator<=>(Index, Index) = default;
};

struct TenantTag {
  static constexpr std::string_view kPrefix = "tenant";
};
struct InstanceTag {
  static constexpr std::string_view kPrefix = "inst";
};
struct NodeTag {
  static constexpr std::string_view kPrefix = "node";
};
struct GpuTag {
  static constexpr std::string_view kPrefix = "gpu";
};

using TenantId = Id<TenantTag>;
using InstanceId = Id<InstanceTag>;
using NodeId = Id<NodeTag>;

}  // namespace tessera

template <typename Tag>
struct std::hash<tessera::Id<Tag>> {
  size_t operator()(const tessera::Id<Tag>& id) const { return std::hash<std::string>()(id.str()); }
};
