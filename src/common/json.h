// JsonFields reads typed fields out of one JSON object and collects every problem as
// "<where>: field '<key>': <what>", so loaders report all errors at once and the API can answer
// 400 naming the field. It never throws: nlohmann::json's exceptions stay inside.
// Thread-safety: one reader per thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera {

// Parses JSON text; an error names `where` and the byte offset of the defect.
Result<nlohmann::json> ParseJson(std::string_view text, std::string_view where);

class JsonFields {
 public:
  // `where` prefixes every error, e.g. "gpus.json: entry 'A100-40GB'". `j` must outlive this.
  JsonFields(const nlohmann::json& j, std::string where);

  // Each getter returns the field's value, or `fallback` when the field is absent and optional.
  // A missing required field, a wrong type or a value out of range adds an error.
  std::string String(std::string_view key, bool required = true, std::string fallback = "");
  int64_t Int(std::string_view key, int64_t min, int64_t max, bool required = true,
              int64_t fallback = 0);
  double Number(std::string_view key, double min, double max, bool required = true,
                double fallback = 0);
  bool Bool(std::string_view key, bool required = true, bool fallback = false);
  std::vector<std::string> Strings(std::string_view key, bool required = true);
  // The raw field, or nullptr when absent (an error too when `required`).
  const nlohmann::json* Get(std::string_view key, bool required = true);

  // Adds an error for every key of the object not in `known`, so typos are caught.
  void RejectUnknown(std::initializer_list<std::string_view> known);
  // Adds an error about `key` in this object's context.
  void Fail(std::string_view key, std::string_view what);

  bool ok() const { return errors_.empty(); }
  const std::vector<std::string>& errors() const { return errors_; }
  // InvalidArgument listing the errors one per line, or OK.
  Status status() const;
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& j_;
  std::string where_;
  std::vector<std::string> errors_;
};

// The JSON type name as a user would say it: "string", "integer", "number", "object", ...
std::string_view JsonTypeName(const nlohmann::json& j);

}  // namespace tessera
