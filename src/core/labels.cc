#include "core/labels.h"

#include <fmt/format.h>

#include "common/text.h"

namespace tessera::core {

namespace {

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// 1-63 of [A-Za-z0-9._-], starting and ending with a letter or digit.
bool IsName(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// A DNS subdomain: dot-separated labels of [a-z0-9-], each starting and ending with a letter or
// digit, at most 253 characters in all.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (;;) {
    const size_t dot = s.find('.');
    const std::string_view label = s.substr(0, dot);
    if (label.empty() || label.size() > 63 || !IsAlnum(label.front()) || !IsAlnum(label.back())) {
      return false;
    }
    for (char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    if (dot == std::string_view::npos) return true;
    s.remove_prefix(dot + 1);
  }
}

}  // namespace

Status ValidateLabelKey(std::string_view key, std::string_view field) {
  const size_t slash = key.find('/');
  const bool ok = slash == std::string_view::npos
                      ? IsName(key)
                      : IsDnsSubdomain(key.substr(0, slash)) && IsName(key.substr(slash + 1));
  if (ok) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "field '{}': key '{}' is not [prefix/]name: a name of 1-63 of A-Z a-z 0-9 . _ - starting "
      "and ending with a letter or digit, after an optional DNS subdomain prefix",
      field, Quote(key)));
}

Status ValidateLabels(const std::map<std::string, std::string>& labels) {
  if (labels.size() > kMaxLabels) {
    return Status::InvalidArgument(
        fmt::format("field 'labels': {} labels; at most {}", labels.size(), kMaxLabels));
  }
  for (const auto& [k, v] : labels) {
    TESSERA_RETURN_IF_ERROR(ValidateLabelKey(k, "labels"));
    if (!v.empty() && !IsName(v)) {
      return Status::InvalidArgument(fmt::format(
          "field 'labels': the value of '{}' must be empty or 1-63 of A-Z a-z 0-9 . _ - "
          "starting and ending with a letter or digit",
          Quote(k)));
    }
  }
  return Status::Ok();
}

Status ValidateAnnotations(const std::map<std::string, std::string>& annotations) {
  if (annotations.size() > kMaxAnnotations) {
    return Status::InvalidArgument(fmt::format("field 'annotations': {} annotations; at most {}",
                                               annotations.size(), kMaxAnnotations));
  }
  size_t bytes = 0;
  for (const auto& [k, v] : annotations) {
    TESSERA_RETURN_IF_ERROR(ValidateLabelKey(k, "annotations"));
    bytes += k.size() + v.size();
  }
  if (bytes > kMaxAnnotationBytes) {
    return Status::InvalidArgument(
        fmt::format("field 'annotations': {} bytes of keys and values; at most {}", bytes,
                    kMaxAnnotationBytes));
  }
  return Status::Ok();
}

Result<LabelSelector> ParseLabelSelector(std::string_view text) {
  LabelSelector out;
  auto trim = [](std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
    return s;
  };
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view part = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    LabelRequirement r;
    std::string_view key = part;
    if (const size_t ne = part.find("!="); ne != std::string_view::npos) {
      r.op = LabelRequirement::Op::kNotEquals;
      key = part.substr(0, ne);
      r.value = std::string(trim(part.substr(ne + 2)));
    } else if (const size_t eq = part.find('='); eq != std::string_view::npos) {
      r.op = LabelRequirement::Op::kEquals;
      key = part.substr(0, eq);
      const size_t skip = part.substr(eq).starts_with("==") ? 2 : 1;
      r.value = std::string(trim(part.substr(eq + skip)));
    } else if (part.starts_with('!')) {
      r.op = LabelRequirement::Op::kNotExists;
      key = part.substr(1);
    }
    key = trim(key);
    if (!ValidateLabelKey(key, "label_selector").ok() || (!r.value.empty() && !IsName(r.value))) {
      return Status::InvalidArgument(fmt::format(
          "query parameter 'label_selector': '{}' is not key, !key, key=value or key!=value",
          Quote(part)));
    }
    r.key = std::string(key);
    out.push_back(std::move(r));
  }
  return out;
}

bool Matches(const LabelSelector& selector, const std::map<std::string, std::string>& labels) {
  for (const LabelRequirement& r : selector) {
    auto it = labels.find(r.key);
    const bool has = it != labels.end();
    switch (r.op) {
      case LabelRequirement::Op::kExists:
        if (!has) return false;
        break;
      case LabelRequirement::Op::kNotExists:
        if (has) return false;
        break;
      case LabelRequirement::Op::kEquals:
        if (!has || it->second != r.value) return false;
        break;
      case LabelRequirement::Op::kNotEquals:
        if (has && it->second == r.value) return false;
        break;
    }
  }
  return true;
}

}  // namespace tessera::core
