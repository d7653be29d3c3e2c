// Helpers shared by the fuzz targets. Check() states an invariant: when it fails it prints what
// broke and aborts, which libFuzzer reports as a crash (saving the input) and which fails the
// replay test. The targets are built by libFuzzer under clang and by replay_main.cc under any
// compiler, so nothing here depends on either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/text.h"

namespace tessera::fuzz {

// Aborts with `what` when `ok` is false.
inline void Check(bool ok, std::string_view what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

// The fuzzer's bytes as text.
inline std::string AsText(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A loader's error: not OK, with a non-empty message that starts with `prefix` (the name the input
// was given, so the user can tell which file is at fault).
inline void CheckError(const Status& s, std::string_view prefix) {
  Check(!s.ok(), "an error status is OK");
  Check(!s.message().empty(), "an error has an empty message");
  if (s.message().substr(0, prefix.size()) != prefix) {
    std::fprintf(stderr, "message: %s\n", s.message().c_str());
    Check(false, "an error message does not start with the input's name");
  }
}

// An error an API answers: one line of valid UTF-8 without control characters, bounded whatever
// was sent, since it goes into a JSON answer, the audit log and an operator's terminal.
inline void CheckMessage(const Status& s) {
  Check(!s.ok(), "an error status is OK");
  const std::string& m = s.message();
  Check(!m.empty(), "an error has an empty message");
  Check(IsValidUtf8(m), "an error message is not valid UTF-8");
  for (const char c : m) {
    const auto u = static_cast<unsigned char>(c);
    Check(u >= 0x20 && u != 0x7f, "an error message holds a control character");
  }
  Check(m.size() < 4096, "an error message grew with the input");
}

// One CSV line for `fields` as CsvReader reads it back: a field is quoted (with "" for a quote)
// when it holds a comma, a quote or a carriage return, and a lone field when the line would
// otherwise be blank and skipped.
inline std::string CsvLine(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    const bool blank = f.find_first_not_of(" \t") == std::string::npos;
    const bool quote =
        f.find_first_of(",\"\r") != std::string::npos || (fields.size() == 1 && blank);
    if (i > 0) line += ',';
    if (!quote) {
      line += f;
      continue;
    }
    line += '"';
    for (char c : f) {
      if (c == '"') line += '"';
      line += c;
    }
    line += '"';
  }
  return line + "\n";
}

}  // namespace tessera::fuzz
