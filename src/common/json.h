// JSON in and out. ParseJson is strict where nlohmann::json is lenient: a key given twice in one
// object and nesting deeper than kMaxJsonDepth are errors (which copy would a later reader
// take?), and errors name the field or the byte. JsonFields reads typed fields out of one
// object and collects every problem as "<where>: field '<path>': <what>", so loaders report all
// errors at once and the API can answer 400 naming the field; nested objects are read with
// Object(), and their fields are named by their dotted path ("quota.gpus"). DumpJson never
// throws: text that is not valid UTF-8 (an old stored row, say) is replaced, not fatal.
// Nothing here throws; nlohmann::json's exceptions stay inside.
// Thread-safety: one reader per thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera {

inline constexpr size_t kMaxJsonDepth = 64;

// Parses JSON text; an error names `where` and the byte offset of the defect, or the field
// given twice, or the depth.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view where);

// Compact JSON text; invalid UTF-8 in strings is replaced with U+FFFD rather than thrown on.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

class JsonFields {
 public:
  // `where` prefixes every error, e.g. "gpus.json: entry 'A100-40GB'". `j` must outlive this.
  JsonFields(const nlohmann::json& j, std::string where);
  JsonFields(const JsonFields&) = delete;
  JsonFields& operator=(const JsonFields&) = delete;

  // Each getter returns the field's value, or `fallback` when the field is absent and optional.
  // A missing required field, a wrong type or a value out of range adds an error; an integer out
  // of range is reported as sent (18446744073709551615), never wrapped.
  std::string String(std::string_view key, bool required = true, std::string fallback = "");
  int64_t Int(std::string_view key, int64_t min, int64_t max, bool required = true,
              int64_t fallback = 0);
  double Number(std::string_view key, double min, double max, bool required = true,
                double fallback = 0);
  bool Bool(std::string_view key, bool required = true, bool fallback = false);
  std::vector<std::string> Strings(std::string_view key, bool required = true);
  // An object whose values are all strings, e.g. labels.
  std::map<std::string, std::string> StringMap(std::string_view key, bool required = true);
  // The raw field, or nullptr when absent (an error too when `required`).
  const nlohmann::json* Get(std::string_view key, bool required = true);
  // The fields of a nested object, which report into this reader's errors under "key.field".
  // When the field is absent (optional) or not an object (an error), the reader returned reads
  // nothing and adds no errors of its own.
  JsonFields Object(std::string_view key, bool required = true);

  // Adds an error for every key of the object not in `known`, so typos are caught.
  void RejectUnknown(std::initializer_list<std::string_view> known);
  // Adds an error about `key` in this object's context.
  void Fail(std::string_view key, std::string_view what);

  bool ok() const { return sink_->empty(); }
  const std::vector<std::string>& errors() const { return *sink_; }
  // InvalidArgument listing the errors one per line, or OK.
  Status status() const;
  // InvalidArgument on one line: the first error and how many more, or OK. For answers that
  // must be one line (an API error, a log line).
  Status first_error() const;
  // first_error() without this reader's `where` prefix: what an API answers about a request
  // body, which the caller knows is the body ("field 'x': ...").
  Status body_error() const;
  const std::string& where() const { return where_; }
  // True when this reader stands for an absent or mistyped object (see Object).
  bool absent() const { return absent_; }

 private:
  JsonFields(const nlohmann::json& j, std::string where, std::string prefix,
             std::vector<std::string>* sink, bool absent);

  const nlohmann::json& j_;
  std::string where_;
  std::string prefix_;  // "quota." for a nested object's fields.
  std::vector<std::string> errors_;
  std::vector<std::string>* sink_;  // errors_, or the outermost reader's.
  bool absent_ = false;
};

// The JSON type name as a user would say it: "string", "integer", "number", "object", ...
std::string_view JsonTypeName(const nlohmann::json& j);

}  // namespace tessera
