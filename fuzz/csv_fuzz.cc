// Fuzzes CsvReader (src/common/csv.h) two ways:
//   - raw rows: every row the reader returns, written back with CsvLine, reads back the same;
//   - with a header of known columns (a required; b, c optional): a header it accepts names each
//     column once, Field() agrees with fields(), and Int() returns a value in range or an error
//     naming the file, the line and the column.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/csv.h"
#include "fuzz/fuzz_util.h"

namespace tessera::fuzz {
namespace {

constexpr const char* kName = "fuzz.csv";

// Every row as the reader splits it, each row's line, and the status the reader stopped with.
struct Rows {
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;
  Status status;
};

Rows ReadRows(const std::string& text) {
  Rows out;
  CsvReader r(kName, text);
  while (r.Next()) {
    out.rows.push_back(r.fields());
    out.lines.push_back(r.line());
  }
  out.status = r.status();
  return out;
}

void FuzzRawRows(const std::string& text) {
  const Rows first = ReadRows(text);
  for (size_t i = 1; i < first.lines.size(); ++i) {
    Check(first.lines[i] > first.lines[i - 1], "line numbers do not increase");
  }
  if (!first.status.ok()) {
    CheckError(first.status, std::string(kName) + ":");
    return;
  }
  std::string again;
  for (const auto& row : first.rows) again += CsvLine(row);
  const Rows second = ReadRows(again);
  Check(second.status.ok(), "rows written back do not read back");
  Check(second.rows == first.rows, "rows written back read back different");
}

void FuzzWithHeader(const std::string& text) {
  CsvReader r(kName, text);
  const Status header = r.ReadHeader({"a"}, {"b", "c"});
  if (!header.ok()) {
    CheckError(header, std::string(kName) + ":");
    return;
  }
  const std::vector<std::string>& columns = r.header();
  for (size_t i = 0; i < columns.size(); ++i) {
    Check(columns[i] == "a" || columns[i] == "b" || columns[i] == "c", "an unknown column passed");
    for (size_t k = 0; k < i; ++k) Check(columns[k] != columns[i], "a column is named twice");
  }
  Check(r.Has("a"), "the required column is missing");
  while (r.Next()) {
    Check(r.fields().size() == columns.size(), "a row's width differs from the header's");
    for (const char* column : {"a", "b", "c"}) {
      const int c = r.Column(column);
      Check(r.Field(column) == (c < 0 ? "" : r.fields()[static_cast<size_t>(c)]),
            "Field() disagrees with fields()");
      const Result<int64_t> v = r.Int(column, -1000, 1000);
      if (v.ok()) {
        Check(*v >= -1000 && *v <= 1000, "Int() returned a value out of range");
      } else {
        CheckError(v.status(), std::string(kName) + ":" + std::to_string(r.line()) + ": column '" +
                                   column + "'");
      }
    }
  }
  if (!r.status().ok()) CheckError(r.status(), std::string(kName) + ":");
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = tessera::fuzz::AsText(data, size);
  tessera::fuzz::FuzzRawRows(text);
  tessera::fuzz::FuzzWithHeader(text);
  return 0;
}
