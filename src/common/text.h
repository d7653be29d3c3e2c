// Text checks and escapes for strings that come from outside: UTF-8 validation, and the escape
// that makes any byte string safe to print on a terminal or in a log line.
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// The byte offset of the first byte that breaks UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or nullopt when `s` is valid UTF-8.
std::optional<size_t> FindInvalidUtf8(std::string_view s);
inline bool IsValidUtf8(std::string_view s) { return !FindInvalidUtf8(s); }

// Printable ASCII without spaces (an id, a UUID).
inline bool IsPrintableAscii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}
// Printable ASCII, spaces allowed (a GPU's name: "NVIDIA H100 80GB HBM3").
inline bool IsPrintableText(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// `s` with everything a terminal would act on made visible: C0 controls and DEL as \n, \t, \r,
// \e or \xNN; C1 controls, line separators and bidirectional overrides as \uNNNN; a backslash
// doubled; and every byte of invalid UTF-8 as \xNN. Printable UTF-8 passes through unchanged.
std::string EscapeForTerminal(std::string_view s);

// `s` cut to at most `max` bytes at a UTF-8 character boundary, so the cut makes no invalid
// UTF-8 (nothing is added to mark it).
std::string_view CutUtf8(std::string_view s, size_t max);

// Client text as an error message may show it: escaped as above and cut to at most `max` bytes
// of the original, with "..." when cut, so a megabyte sent cannot make a megabyte of message
// (or of audit log).
std::string Quote(std::string_view s, size_t max = 64);

// Standard base64 (RFC 4648, with padding), for bytes carried in JSON (workload logs).
std::string Base64Encode(std::string_view bytes);
// The bytes `text` encodes, or nullopt when it is not padded standard base64.
std::optional<std::string> Base64Decode(std::string_view text);

// Whether `a` and `b` are equal but for the case of ASCII letters (HTTP's names and tokens).
bool IEquals(std::string_view a, std::string_view b);
// `s` without the spaces and tabs around it.
std::string_view TrimSpace(std::string_view s);
// Whether the comma-separated list `list` (an HTTP header's value, "keep-alive, Upgrade") holds
// `token`, in any case.
bool ContainsToken(std::string_view list, std::string_view token);

// `s` with every byte that breaks UTF-8 replaced by U+FFFD, for output shown as text.
std::string ToValidUtf8(std::string_view s);

// Moves the first line of `buffer` (up to LF, its CR dropped) into `line`; false when `buffer`
// holds no whole line yet. For line protocols read in chunks (SMTP).
inline bool TakeLine(std::string& buffer, std::string& line) {
  const size_t eol = buffer.find('\n');
  if (eol == std::string::npos) return false;
  line = buffer.substr(0, eol);
  buffer.erase(0, eol + 1);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

// The fields of `s` between the separators, empty ones included ("a,,b" -> "a", "", "b"; "" ->
// one empty field). Views into `s`.
std::vector<std::string_view> Split(std::string_view s, char sep);

// An address other machines may dial: an IPv4 or IPv6 literal, or a DNS name of RFC 1123 labels
// (letters, digits, '-', not at a label's ends; at most 253 bytes).
bool IsHostAddress(std::string_view s);
// "host:port", with an IPv6 literal in brackets ("[fd00::1]:29500"); `port` may be a number's
// text or a placeholder ("{port}").
std::string HostPort(std::string_view host, int port);
std::string HostPort(std::string_view host, std::string_view port);

}  // namespace tessera
