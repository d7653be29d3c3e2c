// Fuzzes the request target parser (src/api/target.h): whatever the client sent as the request
// line's target, either it is refused with a one-line, valid UTF-8 message, or the decoded path
// and every query name and value are valid UTF-8 without control characters (so they may go into
// JSON, the audit log and a terminal as they are), query names are unique, and the path's
// segments join back to the path.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "api/target.h"
#include "common/text.h"
#include "fuzz/fuzz_util.h"

namespace tessera::fuzz {
namespace {

void CheckClean(const std::string& s, std::string_view what) {
  Check(IsValidUtf8(s), what);
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    Check(u >= 0x20 && u != 0x7f, what);
  }
}

}  // namespace
}  // namespace tessera::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::fuzz;
  const std::string text = AsText(data, size);
  auto t = api::ParseTarget(text);
  if (!t.ok()) {
    Check(!t.status().message().empty(), "an error has an empty message");
    CheckClean(t.status().message(), "an error message is not clean one-line UTF-8");
    return 0;
  }
  CheckClean(t->path, "a decoded path is not clean UTF-8");
  Check(!t->path.empty() && t->path.front() == '/', "a path does not start with '/'");
  std::set<std::string> names;
  for (const auto& [k, v] : t->query) {
    CheckClean(k, "a query name is not clean UTF-8");
    CheckClean(v, "a query value is not clean UTF-8");
    Check(names.insert(k).second, "a query name appears twice");
    Check(t->Param(k) == &v, "Param() does not find the parameter");
  }
  std::string joined;
  for (std::string_view seg : api::PathSegments(t->path)) {
    joined += '/';
    joined.append(seg);
  }
  Check(joined == t->path, "the segments do not join back to the path");
  return 0;
}
