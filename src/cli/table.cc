#include "cli/table.h"

#include <algorithm>

#include "common/text.h"

namespace tessera::cli {

void Table::AddRow(std::vector<std::string> row) {
  for (std::string& cell : row) cell = EscapeForTerminal(cell);
  rows_.push_back(std::move(row));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << '\n';
  }
}

}  // namespace tessera::cli
