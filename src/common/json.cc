#include "common/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace tessera {

Result<nlohmann::json> ParseJson(std::string_view text, std::string_view where) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Re-parse with a callback-free sax pass to find where it broke, without exceptions.
    struct Locator : nlohmann::json_sax<nlohmann::json> {
      size_t pos = 0;
      std::string token;
      bool null() override { return true; }
      bool boolean(bool) override { return true; }
      bool number_integer(number_integer_t) override { return true; }
      bool number_unsigned(number_unsigned_t) override { return true; }
      bool number_float(number_float_t, const string_t&) override { return true; }
      bool string(string_t&) override { return true; }
      bool binary(binary_t&) override { return true; }
      bool start_object(std::size_t) override { return true; }
      bool key(string_t&) override { return true; }
      bool end_object() override { return true; }
      bool start_array(std::size_t) override { return true; }
      bool end_array() override { return true; }
      bool parse_error(std::size_t p, const std::string& t,
                       const nlohmann::detail::exception&) override {
        pos = p;
        token = t;
        return false;
      }
    } locator;
    nlohmann::json::sax_parse(text, &locator, nlohmann::json::input_format_t::json, false);
    return Status::InvalidArgument(
        fmt::format("{}: malformed JSON at byte {} near '{}'", where, locator.pos, locator.token));
  }
  return j;
}

std::string_view JsonTypeName(const nlohmann::json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

JsonFields::JsonFields(const nlohmann::json& j, std::string where)
    : j_(j), where_(std::move(where)) {
  if (!j_.is_object()) {
    errors_.push_back(fmt::format("{}: expected an object, found {}", where_, JsonTypeName(j_)));
  }
}

void JsonFields::Fail(std::string_view key, std::string_view what) {
  errors_.push_back(fmt::format("{}: field '{}': {}", where_, key, what));
}

const nlohmann::json* JsonFields::Get(std::string_view key, bool required) {
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end()) {
    if (required) Fail(key, "is required");
    return nullptr;
  }
  return &*it;
}

std::string JsonFields::String(std::string_view key, bool required, std::string fallback) {
  const nlohmann::json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_string()) {
    Fail(key, fmt::format("expected a string, found {}", JsonTypeName(*v)));
    return fallback;
  }
  return v->get<std::string>();
}

int64_t JsonFields::Int(std::string_view key, int64_t min, int64_t max, bool required,
                        int64_t fallback) {
  const nlohmann::json* v = Get(key, required);
  if (!v) return fallback;
  int64_t x = 0;
  if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>() &&
             std::abs(v->get<double>()) < 9e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    Fail(key, fmt::format("expected an integer, found {}", JsonTypeName(*v)));
    return fallback;
  }
  if (x < min || x > max) {
    Fail(key, fmt::format("{} is out of range [{}, {}]", x, min, max));
    return fallback;
  }
  return x;
}

double JsonFields::Number(std::string_view key, double min, double max, bool required,
                          double fallback) {
  const nlohmann::json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_number()) {
    Fail(key, fmt::format("expected a number, found {}", JsonTypeName(*v)));
    return fallback;
  }
  const double x = v->get<double>();
  if (!(x >= min && x <= max)) {
    Fail(key, fmt::format("{} is out of range [{}, {}]", x, min, max));
    return fallback;
  }
  return x;
}

bool JsonFields::Bool(std::string_view key, bool required, bool fallback) {
  const nlohmann::json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    Fail(key, fmt::format("expected true or false, found {}", JsonTypeName(*v)));
    return fallback;
  }
  return v->get<bool>();
}

std::vector<std::string> JsonFields::Strings(std::string_view key, bool required) {
  std::vector<std::string> out;
  const nlohmann::json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_array()) {
    Fail(key, fmt::format("expected an array of strings, found {}", JsonTypeName(*v)));
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& e = (*v)[i];
    if (!e.is_string()) {
      Fail(key, fmt::format("item {}: expected a string, found {}", i, JsonTypeName(e)));
      continue;
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

void JsonFields::RejectUnknown(std::initializer_list<std::string_view> known) {
  if (!j_.is_object()) return;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      Fail(it.key(), "is not a known field");
    }
  }
}

Status JsonFields::status() const {
  if (errors_.empty()) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}", fmt::join(errors_, "\n")));
}

}  // namespace tessera
