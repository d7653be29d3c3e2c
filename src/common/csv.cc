#include "common/csv.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace tessera {

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: cannot open file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::DataLoss(fmt::format("{}: read error", path));
  return ss.str();
}

Status WriteFile(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::NotFound(fmt::format("{}: cannot create file", path));
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) return Status::DataLoss(fmt::format("{}: write error", path));
  return Status::Ok();
}

CsvReader::CsvReader(std::string name, std::string text)
    : name_(std::move(name)), text_(std::move(text)) {}

Result<CsvReader> CsvReader::Open(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return CsvReader(path, std::move(text));
}

Status CsvReader::ReadHeader(const std::vector<std::string>& required,
                             const std::vector<std::string>& optional) {
  if (!Next()) {
    if (!status_.ok()) return status_;
    return Status::InvalidArgument(fmt::format("{}: empty file, expected a header line", name_));
  }
  header_ = fields_;
  for (auto& h : header_) {
    // Tolerate a UTF-8 byte-order mark and surrounding spaces in header names.
    if (h.rfind("\xEF\xBB\xBF", 0) == 0) h.erase(0, 3);
    h.erase(0, h.find_first_not_of(' '));
    h.erase(h.find_last_not_of(' ') + 1);
  }
  for (const auto& r : required) {
    if (!Has(r)) {
      return Error(
          fmt::format("header lacks column '{}' (expected {})", r, fmt::join(required, ",")));
    }
  }
  // Field() reads the first column of a name, so a second one would be ignored silently.
  for (size_t i = 0; i < header_.size(); ++i) {
    for (size_t k = 0; k < i; ++k) {
      if (header_[k] == header_[i]) {
        return Error(fmt::format("column '{}' appears twice in header", header_[i]));
      }
    }
  }
  for (const auto& h : header_) {
    const bool known = std::find(required.begin(), required.end(), h) != required.end() ||
                       std::find(optional.begin(), optional.end(), h) != optional.end();
    if (!known) return Error(fmt::format("unexpected column '{}' in header", h));
  }
  return Status::Ok();
}

bool CsvReader::Next() {
  if (!status_.ok()) return false;
  while (pos_ < text_.size()) {
    size_t end = text_.find('\n', pos_);
    if (end == std::string::npos) end = text_.size();
    std::string_view line(text_.data() + pos_, end - pos_);
    pos_ = end + 1;
    ++line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (!SplitLine(line)) return false;
    if (!header_.empty() && fields_.size() != header_.size()) {
      status_ = Error(fmt::format("expected {} fields, found {}", header_.size(), fields_.size()));
      return false;
    }
    return true;
  }
  return false;
}

bool CsvReader::SplitLine(std::string_view line) {
  fields_.clear();
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"' && field.empty()) {
      quoted = true;
    } else if (c == ',') {
      fields_.push_back(std::move(field));
      field.clear();
    } else {
      field += c;
    }
  }
  if (quoted) {
    status_ = Error("unterminated quoted field");
    return false;
  }
  fields_.push_back(std::move(field));
  return true;
}

int CsvReader::Column(std::string_view name) const {
  for (size_t i = 0; i < header_.size(); ++i) {
    if (header_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string_view CsvReader::Field(std::string_view column) const {
  const int c = Column(column);
  if (c < 0 || static_cast<size_t>(c) >= fields_.size()) return {};
  return fields_[static_cast<size_t>(c)];
}

Result<int64_t> CsvReader::Int(std::string_view column, int64_t min, int64_t max) const {
  const std::string_view f = Field(column);
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
  if (f.empty() || ec != std::errc() || ptr != f.data() + f.size()) {
    return Error(fmt::format("column '{}': '{}' is not an integer", column, f));
  }
  if (v < min || v > max) {
    return Error(fmt::format("column '{}': {} is out of range [{}, {}]", column, v, min, max));
  }
  return v;
}

Status CsvReader::Error(std::string_view message) const {
  return Status::InvalidArgument(fmt::format("{}:{}: {}", name_, line_, message));
}

}  // namespace tessera
