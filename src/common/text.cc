#include "common/text.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/evp.h>

#include <cctype>

namespace tessera {

namespace {

// The length of the valid UTF-8 sequence that starts at s[i], or 0 when none does.
size_t SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // The allowed range of the second byte.
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;  // Overlong.
    if (b0 == 0xed) hi = 0x9f;  // Surrogates.
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;  // Overlong.
    if (b0 == 0xf4) hi = 0x8f;  // Above U+10FFFF.
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return n;
}

// U+2028 and U+2029 (line and paragraph separators) and the bidirectional overrides and
// isolates (U+202A..U+202E, U+2066..U+2069), which reorder what a terminal shows.
bool IsInvisibleControl(std::string_view seq) {
  const auto b1 = static_cast<unsigned char>(seq[1]);
  const auto b2 = static_cast<unsigned char>(seq[2]);
  if (static_cast<unsigned char>(seq[0]) != 0xe2) return false;
  return (b1 == 0x80 && b2 >= 0xa8 && b2 <= 0xae) || (b1 == 0x81 && b2 >= 0xa6 && b2 <= 0xa9);
}

}  // namespace

std::optional<size_t> FindInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

std::string EscapeForTerminal(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = SequenceLength(s, i);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (n == 1) {
      switch (c) {
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case 0x1b:
          out += "\\e";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            out += fmt::format("\\x{:02x}", c);
          } else {
            out += static_cast<char>(c);
          }
      }
    } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) {
      // U+0080..U+009F: the C1 controls, which include CSI.
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
    } else if (n == 3 && IsInvisibleControl(s.substr(i, 3))) {
      const auto b1 = static_cast<unsigned>(static_cast<unsigned char>(s[i + 1]));
      const auto b2 = static_cast<unsigned>(static_cast<unsigned char>(s[i + 2]));
      out += fmt::format("\\u{:04x}", 0x2000u | ((b1 & 0x3fu) << 6) | (b2 & 0x3fu));
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string_view CutUtf8(std::string_view s, size_t max) {
  if (s.size() <= max) return s;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;  // 10xxxxxx
  return s.substr(0, cut);
}

std::string Quote(std::string_view s, size_t max) {
  if (s.size() <= max) return EscapeForTerminal(s);
  return EscapeForTerminal(CutUtf8(s, max)) + "...";
}

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const bool pad_ok =
        c == '=' && i + 2 >= text.size() && (i + 1 == text.size() || text[i + 1] == '=');
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '/' && !pad_ok) {
      return std::nullopt;
    }
  }
  std::string out(3 * (text.size() / 4), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  size_t len = static_cast<size_t>(n);
  // EVP_DecodeBlock counts the padding as zero bytes.
  for (size_t i = text.size(); i > 0 && text[i - 1] == '='; --i) --len;
  out.resize(len);
  return out;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (size_t at = 0;;) {
    const size_t next = s.find(sep, at);
    out.push_back(s.substr(at, next - at));
    if (next == std::string_view::npos) return out;
    at = next + 1;
  }
}

bool IsHostAddress(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  const std::string text(s);
  in6_addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) return true;
  for (std::string_view label : Split(s, '.')) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    }
  }
  return true;  // Dotted IPv4 is a name of digit labels too.
}

std::string HostPort(std::string_view host, std::string_view port) {
  return host.find(':') != std::string_view::npos ? fmt::format("[{}]:{}", host, port)
                                                  : fmt::format("{}:{}", host, port);
}

std::string HostPort(std::string_view host, int port) {
  return HostPort(host, std::string_view(std::to_string(port)));
}

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ContainsToken(std::string_view list, std::string_view token) {
  for (std::string_view item : Split(list, ',')) {
    if (IEquals(TrimSpace(item), token)) return true;
  }
  return false;
}

}  // namespace tessera
