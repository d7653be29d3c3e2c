// Fuzzes tessera::ParseJson and JsonFields (src/common/json.h). A parse error names the input and
// the byte; a parsed document dumps and parses back equal. Every getter, on every key of every
// object (three levels down), either returns a value that obeys its range and equals the JSON
// value, with no error, or returns the fallback and adds errors that name the object and field.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "fuzz/fuzz_util.h"

namespace tessera::fuzz {
namespace {

constexpr const char* kName = "fuzz.json";
constexpr int kMaxDepth = 3;
constexpr size_t kMaxKeys = 16;
// Known and reported, not fixed here (src/common/json.cc is being rewritten by its owner):
// JsonFields::Int reads an unsigned integer above INT64_MAX as a negative int64, so
// {"x": 18446744073709551615} gives Int("x", -100, 100) == -1 with no error. Until json.cc is
// fixed such values skip the value check; set this to true to reproduce it with
// corpus/json_fields/all_types.json.
constexpr bool kCheckUnsignedAboveInt64Max = true;
// Known and reported likewise: ParseJson locates the error with a second, non-strict pass that
// stops after the first value, so trailing text ("{} x") is reported "at byte 0 near ''". Until
// json.cc is fixed, the byte is not checked after a whole value; set this to true to check it.
constexpr bool kCheckTrailingTextByte = true;

// Checks the errors `f` added since it had `before`: exactly `want` of them (any number > 0 when
// `want` is -1), each naming the object and the field.
void CheckNewErrors(const JsonFields& f, size_t before, int want, const std::string& key) {
  const size_t added = f.errors().size() - before;
  if (want >= 0) {
    Check(added == static_cast<size_t>(want), "a getter added the wrong number of errors");
  } else {
    Check(added > 0, "a failing getter added no error");
  }
  const std::string prefix = f.where() + ": field '" + key + "': ";
  for (size_t i = before; i < f.errors().size(); ++i) {
    Check(f.errors()[i].substr(0, prefix.size()) == prefix, "an error does not name its field");
    Check(f.errors()[i].size() > prefix.size(), "an error says nothing after the field");
  }
}

// Int(key, min, max) on `v`: a value only when `v` is that integer exactly.
void CheckInt(JsonFields& f, const nlohmann::json& v, const std::string& key, int64_t min,
              int64_t max) {
  const size_t before = f.errors().size();
  const int64_t x = f.Int(key, min, max, /*required=*/true, /*fallback=*/7);
  if (f.errors().size() != before) {
    CheckNewErrors(f, before, 1, key);
    Check(x == 7, "Int() failed but did not return the fallback");
    return;
  }
  Check(x >= min && x <= max, "Int() returned a value out of its range");
  if (v.is_number_unsigned()) {
    if (!kCheckUnsignedAboveInt64Max &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return;
    }
    Check(v.get<uint64_t>() == static_cast<uint64_t>(x) && x >= 0,
          "Int() returned another value than the JSON unsigned integer");
  } else if (v.is_number_integer()) {
    Check(v.get<int64_t>() == x, "Int() returned another value than the JSON integer");
  } else {
    Check(v.is_number_float() && v.get<double>() == static_cast<double>(x),
          "Int() accepted a value that is not an integer");
  }
}

void CheckGetters(JsonFields& f, const nlohmann::json& v, const std::string& key) {
  size_t before = f.errors().size();
  const std::string s = f.String(key, true, "fallback");
  CheckNewErrors(f, before, v.is_string() ? 0 : 1, key);
  Check(s == (v.is_string() ? v.get<std::string>() : "fallback"),
        "String() returned a wrong value");

  CheckInt(f, v, key, -100, 100);
  CheckInt(f, v, key, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());

  before = f.errors().size();
  const double d = f.Number(key, -1e6, 1e6, true, 0.5);
  if (f.errors().size() == before) {
    Check(v.is_number() && d == v.get<double>() && d >= -1e6 && d <= 1e6,
          "Number() returned a value out of range or not the JSON number");
  } else {
    CheckNewErrors(f, before, 1, key);
    Check(d == 0.5, "Number() failed but did not return the fallback");
  }

  before = f.errors().size();
  const bool b = f.Bool(key, true, true);
  CheckNewErrors(f, before, v.is_boolean() ? 0 : 1, key);
  Check(b == (v.is_boolean() ? v.get<bool>() : true), "Bool() returned a wrong value");

  before = f.errors().size();
  const std::vector<std::string> strings = f.Strings(key);
  if (f.errors().size() == before) {
    Check(v.is_array() && strings.size() == v.size(), "Strings() dropped an item silently");
  } else {
    CheckNewErrors(f, before, -1, key);
  }

  before = f.errors().size();
  Check(f.Get(key) == &v, "Get() did not return the field");
  Check(f.errors().size() == before, "Get() of a present field added an error");
}

void FuzzFields(const nlohmann::json& j, const std::string& where, int depth) {
  JsonFields f(j, where);
  if (!j.is_object()) {
    Check(f.errors().size() == 1 && f.errors()[0].substr(0, where.size()) == where,
          "a non-object did not give one error naming it");
    Check(f.Get("x") == nullptr && f.errors().size() == 1, "Get() on a non-object misbehaved");
    return;
  }
  Check(f.ok(), "an object starts with errors");
  size_t n = 0;
  std::string first_key;
  for (auto it = j.begin(); it != j.end() && n < kMaxKeys; ++it, ++n) {
    if (n == 0) first_key = it.key();
    CheckGetters(f, it.value(), it.key());
    if (depth < kMaxDepth && it.value().is_object()) {
      FuzzFields(it.value(), where + ": " + it.key(), depth + 1);
    }
  }
  const std::string absent = "\x01missing";
  if (!j.contains(absent)) {
    size_t before = f.errors().size();
    Check(f.Get(absent, /*required=*/false) == nullptr && f.errors().size() == before,
          "an optional absent field gave an error");
    Check(f.Int(absent, 0, 10, /*required=*/false, 3) == 3, "an absent Int() lost its fallback");
    Check(f.errors().size() == before, "an optional absent field gave an error");
    (void)f.String(absent);
    CheckNewErrors(f, before, 1, absent);
  }
  if (!j.empty()) {
    const size_t before = f.errors().size();
    f.RejectUnknown({first_key});
    Check(f.errors().size() - before == j.size() - 1, "RejectUnknown() miscounted");
  }
  const Status s = f.status();
  Check(s.ok() == f.errors().empty(), "status() disagrees with errors()");
  if (!s.ok()) {
    std::string joined;
    for (const std::string& e : f.errors()) joined += (joined.empty() ? "" : "\n") + e;
    Check(s.message() == joined, "status() does not list the errors one per line");
  }
}

// The byte ParseJson names is the one nlohmann::json's own parse error names.
void CheckErrorByte(const std::string& text, const std::string& message) {
  size_t want = 0;
  bool trailing = false;  // A whole value, then more text.
  try {
    const nlohmann::json parsed = nlohmann::json::parse(text);
    std::fprintf(stderr, "nlohmann::json parsed it as %s\n", parsed.dump().c_str());
    Check(false, "ParseJson failed on text nlohmann::json parses");
  } catch (const nlohmann::json::parse_error& e) {
    want = e.byte;
    trailing = std::string_view(e.what()).find("expected end of input") != std::string_view::npos;
  } catch (const nlohmann::json::exception&) {
    return;  // A number out of range: the exception carries no byte to compare with.
  }
  if (trailing && !kCheckTrailingTextByte) return;
  const std::string said = std::string(kName) + ": malformed JSON at byte " + std::to_string(want);
  if (message.compare(0, said.size(), said) != 0 ||
      !(message.size() == said.size() || message[said.size()] == ' ')) {
    std::fprintf(stderr, "message: %s\nwant byte %zu\n", message.c_str(), want);
    Check(false, "ParseJson names another byte than the parser's error");
  }
}

// The nesting depth of `v`: 0 for a scalar.
size_t Depth(const nlohmann::json& v) {
  size_t deepest = 0;
  if (v.is_structured()) {
    for (const nlohmann::json& e : v) deepest = std::max(deepest, Depth(e));
    return deepest + 1;
  }
  return 0;
}

// The deepest nesting of brackets and braces in JSON text, outside strings.
size_t TextDepth(const std::string& text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// A refusal of the strict rules: a key twice in one object, or nesting past the limit. The
// strict reader reports the first problem it meets, so only for text nlohmann::json parses whole
// is the rule checked against the text.
void CheckStrictRefusal(const std::string& text, const std::string& message) {
  const std::string duplicate = "': appears more than once";
  const std::string field = std::string(kName) + ": field '";
  const bool is_duplicate =
      message.compare(0, field.size(), field) == 0 && message.size() > duplicate.size() &&
      message.compare(message.size() - duplicate.size(), duplicate.size(), duplicate) == 0;
  const bool is_deep = message == std::string(kName) + ": nested deeper than " +
                                      std::to_string(kMaxJsonDepth) + " levels";
  if (!is_duplicate && !is_deep) {
    std::fprintf(stderr, "message: %s\n", message.c_str());
    Check(false, "ParseJson refused JSON for no documented rule");
  }
  if (is_deep && nlohmann::json::accept(text)) {
    Check(TextDepth(text) > kMaxJsonDepth, "ParseJson refused a document within the depth limit");
  }
}

void FuzzOne(const std::string& text) {
  Result<nlohmann::json> j = ParseJson(text, kName);
  if (!j.ok()) {
    const std::string malformed = std::string(kName) + ": malformed JSON at byte ";
    CheckError(j.status(), std::string(kName) + ": ");
    if (j.status().message().compare(0, malformed.size(), malformed) == 0) {
      CheckErrorByte(text, j.status().message());
    } else {
      CheckStrictRefusal(text, j.status().message());
    }
    return;
  }
  Check(Depth(*j) <= kMaxJsonDepth, "ParseJson accepted a document past the depth limit");
  Result<nlohmann::json> again = ParseJson(j->dump(), kName);
  Check(again.ok() && *again == *j, "a parsed document does not dump and parse back equal");
  FuzzFields(*j, kName, 0);
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::FuzzOne(tessera::fuzz::AsText(data, size));
  return 0;
}
