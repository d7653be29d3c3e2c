#include "common/json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/text.h"

namespace tessera {

namespace {

using nlohmann::json;

// Builds the document from the parser's events, refusing what nlohmann::json would accept
// silently: a key given twice in one object (it keeps the last), and unbounded nesting.
class StrictBuilder final : public nlohmann::json_sax<json> {
 public:
  json root;
  std::string semantic_error;  // A duplicate key or the depth; empty when none.
  size_t error_pos = 0;        // A syntax error's byte offset and token.
  std::string error_token;

  bool null() override { return Put(nullptr); }
  bool boolean(bool v) override { return Put(v); }
  bool number_integer(number_integer_t v) override { return Put(v); }
  bool number_unsigned(number_unsigned_t v) override { return Put(v); }
  bool number_float(number_float_t v, const string_t&) override { return Put(v); }
  bool string(string_t& v) override { return Put(std::move(v)); }
  bool binary(binary_t& v) override { return Put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return Open(json::object()); }
  bool start_array(std::size_t) override { return Open(json::array()); }
  bool end_object() override { return Close(); }
  bool end_array() override { return Close(); }

  bool key(string_t& k) override {
    if (stack_.back()->contains(k)) {
      semantic_error = fmt::format("field '{}': appears more than once", Path(k));
      return false;
    }
    key_ = std::move(k);
    return true;
  }

  bool parse_error(std::size_t pos, const std::string& token,
                   const nlohmann::detail::exception&) override {
    error_pos = pos;
    error_token = token;
    return false;
  }

 private:
  // Where the next value goes: the root, the end of an array, or the object's pending key.
  json* Slot() {
    if (stack_.empty()) return &root;
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(nullptr);
      return &top.back();
    }
    return &top[key_];
  }

  bool Put(json v) {
    *Slot() = std::move(v);
    return true;
  }

  bool Open(json empty) {
    if (stack_.size() >= kMaxJsonDepth) {
      semantic_error = fmt::format("nested deeper than {} levels", kMaxJsonDepth);
      return false;
    }
    std::string name;
    if (!stack_.empty()) {
      name = stack_.back()->is_array() ? fmt::format("[{}]", stack_.back()->size()) : key_;
    }
    json* slot = Slot();
    *slot = std::move(empty);
    stack_.push_back(slot);
    names_.push_back(std::move(name));
    return true;
  }

  bool Close() {
    stack_.pop_back();
    names_.pop_back();
    return true;
  }

  // "quota.gpus", "items[2].name": the dotted path of key `k` in the innermost object.
  std::string Path(const std::string& k) const {
    std::string path;
    for (size_t i = 1; i < names_.size(); ++i) {
      if (!path.empty() && names_[i].front() != '[') path += '.';
      path += names_[i];
    }
    if (!path.empty()) path += '.';
    return Quote(path + k, 120);
  }

  std::vector<json*> stack_;  // The open containers; each stays put while it is open.
  std::vector<std::string> names_;
  std::string key_;
};

}  // namespace

Result<json> ParseJson(std::string_view text, std::string_view where) {
  StrictBuilder builder;
  const bool ok = json::sax_parse(text, &builder, json::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/false);
  if (ok) return std::move(builder.root);
  if (!builder.semantic_error.empty()) {
    return Status::InvalidArgument(fmt::format("{}: {}", where, builder.semantic_error));
  }
  std::string token = Quote(builder.error_token, 40);
  return Status::InvalidArgument(
      fmt::format("{}: malformed JSON at byte {} near '{}'", where, builder.error_pos, token));
}

std::string DumpJson(const json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::string_view JsonTypeName(const json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

JsonFields::JsonFields(const json& j, std::string where)
    : JsonFields(j, std::move(where), "", nullptr, false) {
  if (!j_.is_object()) {
    sink_->push_back(fmt::format("{}: expected an object, found {}", where_, JsonTypeName(j_)));
  }
}

JsonFields::JsonFields(const json& j, std::string where, std::string prefix,
                       std::vector<std::string>* sink, bool absent)
    : j_(j),
      where_(std::move(where)),
      prefix_(std::move(prefix)),
      sink_(sink ? sink : &errors_),
      absent_(absent) {}

void JsonFields::Fail(std::string_view key, std::string_view what) {
  sink_->push_back(fmt::format("{}: field '{}{}': {}", where_, prefix_, key, what));
}

const json* JsonFields::Get(std::string_view key, bool required) {
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end()) {
    if (required && !absent_) Fail(key, "is required");
    return nullptr;
  }
  return &*it;
}

JsonFields JsonFields::Object(std::string_view key, bool required) {
  static const json kEmpty = json::object();
  const json* v = Get(key, required);
  if (v && !v->is_object()) {
    Fail(key, fmt::format("expected an object, found {}", JsonTypeName(*v)));
    v = nullptr;
  }
  return JsonFields(v ? *v : kEmpty, where_, fmt::format("{}{}.", prefix_, key), sink_, !v);
}

std::string JsonFields::String(std::string_view key, bool required, std::string fallback) {
  const json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_string()) {
    Fail(key, fmt::format("expected a string, found {}", JsonTypeName(*v)));
    return fallback;
  }
  return v->get<std::string>();
}

int64_t JsonFields::Int(std::string_view key, int64_t min, int64_t max, bool required,
                        int64_t fallback) {
  const json* v = Get(key, required);
  if (!v) return fallback;
  const auto out_of_range = [&] {
    Fail(key, fmt::format("{} is out of range [{}, {}]", DumpJson(*v), min, max));
    return fallback;
  };
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return out_of_range();
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::trunc(v->get<double>()) == v->get<double>()) {
    // 1e3 is an integer written as a float; one too large for int64 is out of range.
    if (std::abs(v->get<double>()) >= 9e15) return out_of_range();
    x = static_cast<int64_t>(v->get<double>());
  } else {
    Fail(key, v->is_number() ? fmt::format("expected an integer, found {}", DumpJson(*v))
                             : fmt::format("expected an integer, found {}", JsonTypeName(*v)));
    return fallback;
  }
  if (x < min || x > max) return out_of_range();
  return x;
}

double JsonFields::Number(std::string_view key, double min, double max, bool required,
                          double fallback) {
  const json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_number()) {
    Fail(key, fmt::format("expected a number, found {}", JsonTypeName(*v)));
    return fallback;
  }
  const double x = v->get<double>();
  if (!(x >= min && x <= max)) {
    Fail(key, fmt::format("{} is out of range [{}, {}]", DumpJson(*v), min, max));
    return fallback;
  }
  return x;
}

bool JsonFields::Bool(std::string_view key, bool required, bool fallback) {
  const json* v = Get(key, required);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    Fail(key, fmt::format("expected true or false, found {}", JsonTypeName(*v)));
    return fallback;
  }
  return v->get<bool>();
}

std::vector<std::string> JsonFields::Strings(std::string_view key, bool required) {
  std::vector<std::string> out;
  const json* v = Get(key, required);
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

std::map<std::string, std::string> JsonFields::StringMap(std::string_view key, bool required) {
  std::map<std::string, std::string> out;
  const json* v = Get(key, required);
  if (!v) return out;
  if (!v->is_object()) {
    Fail(key, fmt::format("expected an object of strings, found {}", JsonTypeName(*v)));
    return out;
  }
  for (const auto& [k, e] : v->items()) {
    if (!e.is_string()) {
      Fail(fmt::format("{}.{}", key, Quote(k)),
           fmt::format("expected a string, found {}", JsonTypeName(e)));
      continue;
    }
    out[k] = e.get<std::string>();
  }
  return out;
}

void JsonFields::RejectUnknown(std::initializer_list<std::string_view> known) {
  if (!j_.is_object()) return;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      Fail(Quote(it.key()), "is not a known field");
    }
  }
}

Status JsonFields::status() const {
  if (sink_->empty()) return Status::Ok();
  return Status::InvalidArgument(fmt::format("{}", fmt::join(*sink_, "\n")));
}

Status JsonFields::first_error() const {
  if (sink_->empty()) return Status::Ok();
  std::string msg = sink_->front();
  if (sink_->size() > 1) msg += fmt::format(" (and {} more)", sink_->size() - 1);
  return Status::InvalidArgument(std::move(msg));
}

Status JsonFields::body_error() const {
  if (ok()) return Status::Ok();
  std::string msg = first_error().message();
  const std::string prefix = where_ + ": ";
  if (msg.rfind(prefix, 0) == 0) msg.erase(0, prefix.size());
  return Status::InvalidArgument(std::move(msg));
}

}  // namespace tessera
