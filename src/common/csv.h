// CsvReader reads small, comma-separated tables such as the openb traces and fleet files, and
// turns every defect into an error of the form "file:line: what is wrong". Quoted fields
// ("a,b" and "" escapes) are supported; a row with the wrong number of fields is an error.
// Thread-safety: one reader per thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera {

// Reads a whole file; NotFound names the path when it cannot be opened.
Result<std::string> ReadFile(const std::string& path);

// Writes a whole file, replacing it. Errors name the path.
Status WriteFile(const std::string& path, std::string_view content);

class CsvReader {
 public:
  // `name` labels errors (usually the file path); `text` is the file's content.
  CsvReader(std::string name, std::string text);

  // Opens `path` and reads it whole.
  static Result<CsvReader> Open(const std::string& path);

  // Reads the header line. `required` columns must all be present, in any order; `optional`
  // ones may be. Unknown columns and a column named twice are errors, so a typo is caught
  // instead of ignored.
  Status ReadHeader(const std::vector<std::string>& required,
                    const std::vector<std::string>& optional = {});

  // Advances to the next non-blank row. Returns false at the end of the input, or on a
  // malformed row, in which case status() says why.
  bool Next();
  const Status& status() const { return status_; }

  // The column's position in the header, or -1 when the header lacks it.
  int Column(std::string_view name) const;
  bool Has(std::string_view name) const { return Column(name) >= 0; }

  // The header's column names as ReadHeader trimmed them; empty before ReadHeader.
  const std::vector<std::string>& header() const { return header_; }
  // The current row's fields in column order (before ReadHeader, the fields of any line).
  const std::vector<std::string>& fields() const { return fields_; }

  // The current row's field under `column` ("" for an optional column absent from the header).
  std::string_view Field(std::string_view column) const;

  // Parses the field as an integer in [min, max]. An error names file, line, column and text.
  Result<int64_t> Int(std::string_view column, int64_t min = INT64_MIN,
                      int64_t max = INT64_MAX) const;

  // An error "file:line: message" at the current row.
  Status Error(std::string_view message) const;

  int line() const { return line_; }
  const std::string& name() const { return name_; }

 private:
  bool SplitLine(std::string_view line);

  std::string name_;
  std::string text_;
  size_t pos_ = 0;
  int line_ = 0;
  std::vector<std::string> header_;
  std::vector<std::string> fields_;
  Status status_;
};

}  // namespace tessera
