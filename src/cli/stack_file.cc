#include "cli/stack_file.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/text.h"

namespace tessera::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A stack file larger than this is refused: the server takes 1 MiB of objects.
constexpr uintmax_t kMaxFileBytes = 4 << 20;

std::string At(const SourceMark& m) { return fmt::format("{}:{}:{}", m.file, m.line, m.column); }

SourceMark MarkOf(const std::string& file, const YAML::Mark& m) {
  return {file, m.line < 0 ? 0 : m.line + 1, m.column < 0 ? 0 : m.column + 1};
}

Status Fail(const SourceMark& m, const std::string& what) {
  return Status::InvalidArgument(At(m) + ": " + what);
}

bool IsVarName(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// A plain YAML scalar as the JSON value it reads as: null, a boolean, an integer, a number, or
// text (YAML 1.2's core schema).
json PlainScalar(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  int64_t i = 0;
  const char* begin = s.data() + (s[0] == '+' ? 1 : 0);
  auto [end, ec] = std::from_chars(begin, s.data() + s.size(), i);
  if (ec == std::errc() && end == s.data() + s.size()) return i;
  if (s.find_first_of("0123456789") != std::string::npos &&
      s.find_first_not_of("0123456789+-.eE") == std::string::npos) {
    char* stop = nullptr;
    errno = 0;
    const double d = std::strtod(s.c_str(), &stop);
    if (stop == s.c_str() + s.size() && errno == 0 && std::isfinite(d)) return d;
  }
  return s;
}

class Reader {
 public:
  Reader(const std::string& file, const std::map<std::string, json>& vars,
         std::map<std::string, SourceMark>& marks)
      : file_(file), vars_(vars), marks_(marks) {}

  // `node` as JSON; `path` is the API's name for it.
  Result<json> Read(const YAML::Node& node, const std::string& path) {
    const SourceMark m = MarkOf(file_, node.Mark());
    switch (node.Type()) {
      case YAML::NodeType::Null:
      case YAML::NodeType::Undefined:
        return json(nullptr);
      case YAML::NodeType::Scalar:
        return Scalar(node, m);
      case YAML::NodeType::Sequence: {
        json out = json::array();
        for (size_t i = 0; i < node.size(); ++i) {
          const std::string at = fmt::format("{}[{}]", path, i);
          marks_[at] = MarkOf(file_, node[i].Mark());
          TESSERA_ASSIGN_OR_RETURN(json v, Read(node[i], at));
          out.push_back(std::move(v));
        }
        return out;
      }
      case YAML::NodeType::Map: {
        json out = json::object();
        for (auto it = node.begin(); it != node.end(); ++it) {
          const SourceMark km = MarkOf(file_, it->first.Mark());
          if (!it->first.IsScalar()) return Fail(km, "a key must be text");
          const std::string key = it->first.Scalar();
          if (!IsValidUtf8(key)) return Fail(km, "a key is not valid UTF-8");
          const std::string at = path.empty() ? key : path + "." + key;
          if (out.contains(key)) {
            return Fail(km, fmt::format("field '{}': is given twice", EscapeForTerminal(at)));
          }
          marks_[at] = km;
          TESSERA_ASSIGN_OR_RETURN(json v, Read(it->second, at));
          out[key] = std::move(v);
        }
        return out;
      }
    }
    return json(nullptr);
  }

 private:
  Result<json> Scalar(const YAML::Node& node, const SourceMark& m) {
    const std::string& s = node.Scalar();
    if (auto bad = FindInvalidUtf8(s)) {
      return Fail(m, fmt::format("text is not valid UTF-8 (byte {})", *bad));
    }
    const bool quoted = node.Tag() == "!";
    // `${name}` whole takes the variable's type; within text, its text.
    std::string out;
    bool whole = false;
    json whole_value;
    for (size_t i = 0; i < s.size();) {
      if (s.compare(i, 3, "$${") == 0) {
        out += "${";
        i += 3;
        continue;
      }
      if (s.compare(i, 2, "${") != 0 || s.compare(i, 6, "${ref:") == 0) {
        out += s[i++];
        continue;
      }
      const size_t end = s.find('}', i);
      if (end == std::string::npos) {
        return Fail(m, fmt::format("'{}' is not closed (write $${{ for a literal ${{)",
                                   EscapeForTerminal(s.substr(i, 40))));
      }
      const std::string name = s.substr(i + 2, end - i - 2);
      if (!IsVarName(name)) {
        return Fail(m, fmt::format("'${{{}}}' is not a variable (a name of letters, digits and "
                                   "'_'; $${{ is a literal ${{)",
                                   EscapeForTerminal(name)));
      }
      auto v = vars_.find(name);
      if (v == vars_.end()) {
        return Fail(m, fmt::format("variable '{}' is not defined: give --var {}=VALUE, or a "
                                   "default under `variables:` (write $${{ for a literal ${{)",
                                   name, name));
      }
      if (i == 0 && end + 1 == s.size() && !quoted) {
        whole = true;
        whole_value = v->second;
      }
      out += v->second.is_string() ? v->second.get<std::string>() : v->second.dump();
      i = end + 1;
    }
    if (whole) return whole_value;
    if (quoted || out != s) return json(out);
    return PlainScalar(s);
  }

  const std::string& file_;
  const std::map<std::string, json>& vars_;
  std::map<std::string, SourceMark>& marks_;
};

Result<std::vector<YAML::Node>> Documents(const std::string& file) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(file, ec);
  if (ec) return Status::NotFound(fmt::format("{}: {}", file, ec.message()));
  if (size > kMaxFileBytes) {
    return Status::InvalidArgument(
        fmt::format("{}: is {} bytes; a stack file holds at most {}", file, size, kMaxFileBytes));
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("{}: {}", file, std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  try {
    return YAML::LoadAll(text.str());
  } catch (const YAML::Exception& e) {
    return Fail(MarkOf(file, e.mark), e.msg);
  }
}

}  // namespace

std::string StackSource::Locate(const std::string& message) const {
  const size_t at = message.find("objects[");
  if (at == std::string::npos) return "";
  size_t index = 0;
  const char* begin = message.data() + at + 8;
  auto [end, ec] = std::from_chars(begin, message.data() + message.size(), index);
  if (ec != std::errc() || *end != ']' || index >= object_marks.size()) return "";
  SourceMark where = object_marks[index];
  const size_t field = message.find("field '", at);
  if (field != std::string::npos) {
    const size_t close = message.find('\'', field + 7);
    std::string path = message.substr(field + 7, close - field - 7);
    // The nearest named part of the path: "template.gpus", else "template".
    while (!path.empty()) {
      auto it = field_marks[index].find(path);
      if (it != field_marks[index].end()) {
        where = it->second;
        break;
      }
      const size_t cut = path.find_last_of(".[");
      path = cut == std::string::npos ? "" : path.substr(0, cut);
    }
  }
  return At(where) + ": ";
}

std::string DefaultStackName(const std::string& path) {
  fs::path p(path);
  if (fs::is_directory(p)) {
    p = fs::weakly_canonical(p);
    return p.filename().empty() ? p.parent_path().filename().string() : p.filename().string();
  }
  return p.stem().string();
}

Result<StackSource> LoadStack(const std::string& path, const std::vector<std::string>& vars) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string ext = entry.path().extension().string();
      if (entry.is_regular_file() && (ext == ".yaml" || ext == ".yml")) {
        files.push_back(entry.path().string());
      }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
      return Status::NotFound(fmt::format("{}: holds no .yaml or .yml file", path));
    }
  } else if (!fs::exists(path, ec)) {
    return Status::NotFound(fmt::format("{}: no such file or directory", path));
  } else {
    files.push_back(path);
  }
  // First pass: the variables' defaults, from documents of `variables:` only.
  std::map<std::string, json> values;
  std::vector<std::vector<YAML::Node>> docs;
  for (const std::string& file : files) {
    TESSERA_ASSIGN_OR_RETURN(auto nodes, Documents(file));
    for (const YAML::Node& doc : nodes) {
      if (!doc.IsMap() || doc.size() != 1 || !doc["variables"]) continue;
      const YAML::Node v = doc["variables"];
      const SourceMark m = MarkOf(file, v.Mark());
      if (!v.IsMap()) return Fail(m, "`variables:` must map names to default values");
      std::map<std::string, SourceMark> ignored;
      const std::map<std::string, json> none;
      Reader reader(file, none, ignored);
      for (auto it = v.begin(); it != v.end(); ++it) {
        const std::string name = it->first.Scalar();
        const SourceMark km = MarkOf(file, it->first.Mark());
        if (!IsVarName(name)) {
          return Fail(km, fmt::format("'{}' is not a variable's name (letters, digits and '_')",
                                      EscapeForTerminal(name)));
        }
        if (values.contains(name)) {
          return Fail(km, fmt::format("variable '{}' has a default already", name));
        }
        TESSERA_ASSIGN_OR_RETURN(json value, reader.Read(it->second, name));
        values[name] = std::move(value);
      }
    }
    docs.push_back(std::move(nodes));
  }
  for (const std::string& kv : vars) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || !IsVarName(kv.substr(0, eq))) {
      return Status::InvalidArgument(
          fmt::format("--var '{}': expected NAME=VALUE, NAME of letters, digits and '_'",
                      EscapeForTerminal(kv)));
    }
    const std::string value = kv.substr(eq + 1);
    if (!IsValidUtf8(value)) {
      return Status::InvalidArgument(
          fmt::format("--var {}: the value is not valid UTF-8", kv.substr(0, eq)));
    }
    values[kv.substr(0, eq)] = PlainScalar(value);
  }
  StackSource out;
  for (size_t f = 0; f < files.size(); ++f) {
    for (const YAML::Node& doc : docs[f]) {
      const SourceMark m = MarkOf(files[f], doc.Mark());
      if (doc.IsNull()) continue;  // An empty document (a trailing ---).
      if (doc.IsMap() && doc.size() == 1 && doc["variables"]) continue;
      if (!doc.IsMap()) {
        return Fail(m, "a document must be an object {kind, name, ...}");
      }
      std::map<std::string, SourceMark> marks;
      Reader reader(files[f], values, marks);
      TESSERA_ASSIGN_OR_RETURN(json object, reader.Read(doc, ""));
      if (!object.contains("kind")) return Fail(m, "field 'kind': is missing");
      if (!object.contains("name")) {
        return Fail(m, "field 'name': is missing (every object has a name)");
      }
      out.objects.push_back(std::move(object));
      out.object_marks.push_back(m);
      out.field_marks.push_back(std::move(marks));
    }
  }
  if (out.objects.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: holds no object (each document is {{kind, name, ...}}; `tessera destroy` deletes a "
        "whole stack)",
        path));
  }
  return out;
}

}  // namespace tessera::cli
