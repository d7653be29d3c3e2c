#include "api/target.h"

#include <fmt/format.h>

#include "common/text.h"

namespace tessera::api {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decodes `text` (and '+' as a space when `plus_is_space`), then checks the result.
// `what` names the part for errors ("the path", "query parameter 'state'").
Result<std::string> Decode(std::string_view text, bool plus_is_space, const std::string& what) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%') {
      const int hi = i + 2 < text.size() ? HexValue(text[i + 1]) : -1;
      const int lo = i + 2 < text.size() ? HexValue(text[i + 2]) : -1;
      if (hi < 0 || lo < 0) {
        return Status::InvalidArgument(
            fmt::format("{}: '%' at byte {} is not followed by two hex digits", what, i));
      }
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  if (auto bad = FindInvalidUtf8(out)) {
    return Status::InvalidArgument(
        fmt::format("{} is not valid UTF-8 (byte {} of the decoded text)", what, *bad));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const auto c = static_cast<unsigned char>(out[i]);
    if (c < 0x20 || c == 0x7f) {
      return Status::InvalidArgument(
          fmt::format("{} holds a control character (byte {} of the decoded text)", what, i));
    }
  }
  return out;
}

}  // namespace

const std::string* Target::Param(std::string_view name) const {
  for (const auto& [k, v] : query) {
    if (k == name) return &v;
  }
  return nullptr;
}

Result<Target> ParseTarget(std::string_view target) {
  if (target.empty() || target.front() != '/') {
    return Status::InvalidArgument("the request target must be a path starting with '/'");
  }
  if (target.find('#') != std::string_view::npos) {
    return Status::InvalidArgument("the request target must not carry a fragment ('#')");
  }
  const size_t q = target.find('?');
  Target out;
  TESSERA_ASSIGN_OR_RETURN(out.path, Decode(target.substr(0, q), false, "the path"));
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    TESSERA_ASSIGN_OR_RETURN(std::string name,
                             Decode(pair.substr(0, eq), true, "a query parameter's name"));
    const std::string what = fmt::format("query parameter '{}'", name);
    std::string value;
    if (eq != std::string_view::npos) {
      TESSERA_ASSIGN_OR_RETURN(value, Decode(pair.substr(eq + 1), true, what));
    }
    if (out.Param(name)) return Status::InvalidArgument(what + " is given twice");
    out.query.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

std::vector<std::string_view> PathSegments(std::string_view path) {
  std::vector<std::string_view> out;
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  for (;;) {
    const size_t slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

}  // namespace tessera::api
