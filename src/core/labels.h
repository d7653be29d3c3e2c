// Labels and annotations on instances, in Kubernetes' rules, and label selectors. Labels are
// short key=value pairs to select by (team=ml); annotations are free text for tools. Both are
// bounded so that no request can make an instance large.
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera::core {

inline constexpr size_t kMaxLabels = 64;
inline constexpr size_t kMaxLabelValue = 63;
inline constexpr size_t kMaxAnnotations = 64;
inline constexpr size_t kMaxAnnotationBytes = 64 << 10;  // Keys and values together.

// A key is [prefix/]name: the prefix a DNS subdomain of at most 253 characters, the name 1-63 of
// [A-Za-z0-9._-] starting and ending with a letter or digit. InvalidArgument naming `field`.
Status ValidateLabelKey(std::string_view key, std::string_view field);
// At most kMaxLabels; values empty or 1-63 characters as a key's name. Errors name the key.
Status ValidateLabels(const std::map<std::string, std::string>& labels);
// At most kMaxAnnotations, keys as labels' keys, kMaxAnnotationBytes in all.
Status ValidateAnnotations(const std::map<std::string, std::string>& annotations);

struct LabelRequirement {
  enum class Op { kEquals, kNotEquals, kExists, kNotExists };
  std::string key;
  Op op = Op::kExists;
  std::string value;
};
using LabelSelector = std::vector<LabelRequirement>;

// Parses "team=ml,env!=prod,gpu,!spot" (also "=="); an error names the requirement at fault.
Result<LabelSelector> ParseLabelSelector(std::string_view text);
// True when every requirement holds (an empty selector matches everything).
bool Matches(const LabelSelector& selector, const std::map<std::string, std::string>& labels);

}  // namespace tessera::core
