// Aligned text tables for the command line: a header row and data rows, each column padded to
// its widest cell, two spaces apart, as kubectl prints them. Cells are escaped for the terminal
// (control characters, escape sequences, invalid UTF-8), since they may hold what clients sent.
// Thread-safety: a value type.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace tessera::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void AddRow(std::vector<std::string> row);
  size_t size() const { return rows_.size() - 1; }
  // Writes every row, trailing spaces trimmed.
  void Print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tessera::cli
