// ParseTable: one model's MIG table from the catalog's JSON. Every problem is collected, so a
// catalog author sees all of them at once, each naming the entry, the profile and the field.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/json.h"
#include "mig/mig.h"

namespace tessera::mig {
namespace {

// The planner keeps occupied memory slices in a 64-bit mask.
constexpr int64_t kMaxSlices = 64;
constexpr int64_t kMaxProfileId = 1'000'000;
constexpr int64_t kMaxMemoryMib = int64_t{1} << 30;  // 1 PiB: a typo guard, not a real limit.
constexpr std::string_view kMeSuffix = "+me";

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Reads "starts": a non-empty array of distinct integers in [0, table_slices - size]. Bounds
// are checked only when both sizes parsed, so one bad number does not cascade into many errors.
std::vector<int> ParseStarts(JsonFields& f, int table_slices, int size) {
  std::vector<int> starts;
  const nlohmann::json* v = f.Get("starts");
  if (!v) return starts;
  if (!v->is_array() || v->empty()) {
    f.Fail("starts", v->is_array() ? "must list at least one start"
                                   : fmt::format("expected an array of integers, found {}",
                                                 JsonTypeName(*v)));
    return starts;
  }
  const bool bounded = table_slices > 0 && size > 0;
  const int max_start = table_slices - size;
  for (size_t i = 0; i < v->size(); ++i) {
    const nlohmann::json& e = (*v)[i];
    if (!e.is_number_integer()) {
      f.Fail("starts", fmt::format("item {}: expected an integer, found {}", i, JsonTypeName(e)));
      continue;
    }
    const int64_t s = e.get<int64_t>();
    if (s < 0 || (bounded && s > max_start) || s >= kMaxSlices) {
      f.Fail("starts", bounded
                           ? fmt::format("item {}: {} is out of range [0, {}] (the profile takes "
                                         "{} of the GPU's {} memory slices)",
                                         i, s, max_start, size, table_slices)
                           : fmt::format("item {}: {} is out of range", i, s));
      continue;
    }
    if (std::find(starts.begin(), starts.end(), static_cast<int>(s)) != starts.end()) {
      f.Fail("starts", fmt::format("item {}: start {} is listed twice", i, s));
      continue;
    }
    starts.push_back(static_cast<int>(s));
  }
  std::sort(starts.begin(), starts.end());
  return starts;
}

// Where a profile's errors point: its name when it has a usable one, else its index.
std::string ProfileWhere(const nlohmann::json& p, size_t index, std::string_view where) {
  if (p.is_object()) {
    auto it = p.find("name");
    if (it != p.end() && it->is_string() && !it->get<std::string>().empty()) {
      return fmt::format("{}: profile '{}'", where, it->get<std::string>());
    }
  }
  return fmt::format("{}: profiles[{}]", where, index);
}

Profile ParseProfile(const nlohmann::json& p, const std::string& where, const Table& t,
                     std::vector<std::string>& errors) {
  JsonFields f(p, where);
  f.RejectUnknown({"name", "id", "compute_slices", "memory_slices", "media_extensions", "starts",
                   "max_count", "memory_mib"});
  Profile out;
  out.name = f.String("name");
  if (p.is_object() && p.contains("name") && p["name"].is_string()) {
    if (out.name.empty()) {
      f.Fail("name", "must not be empty");
    } else if (out.name.find_first_of("@ \t\n") != std::string::npos) {
      // '@' separates PROFILE from START on the command line and in the API.
      f.Fail("name", fmt::format("'{}' must not contain '@' or spaces", out.name));
    }
  }
  out.id = static_cast<int>(f.Int("id", 0, kMaxProfileId));
  const int max_compute = t.compute_slices > 0 ? t.compute_slices : static_cast<int>(kMaxSlices);
  const int max_memory = t.memory_slices > 0 ? t.memory_slices : static_cast<int>(kMaxSlices);
  out.compute_slices = static_cast<int>(f.Int("compute_slices", 1, max_compute));
  out.memory_slices = static_cast<int>(f.Int("memory_slices", 1, max_memory));
  out.media_extensions = f.Bool("media_extensions", /*required=*/false, false);
  if (!out.name.empty() && out.media_extensions != EndsWith(out.name, kMeSuffix)) {
    f.Fail("media_extensions", out.media_extensions ? "is true but the name does not end in '+me'"
                                                    : "is false but the name ends in '+me'");
  }
  out.starts = ParseStarts(f, t.memory_slices, out.memory_slices);
  out.max_count = static_cast<int>(f.Int("max_count", 1, max_memory));
  out.memory_mib = f.Int("memory_mib", 1, kMaxMemoryMib);
  errors.insert(errors.end(), f.errors().begin(), f.errors().end());
  return out;
}

// Names and ids must each be unique within a table: names because users and the catalog refer
// to profiles by name, ids because `nvidia-smi mig -cgi ID` does.
void CheckUnique(const Table& t, std::string_view where, std::vector<std::string>& errors) {
  std::map<std::string, int> names;
  std::map<int, std::string> ids;
  for (const Profile& p : t.profiles) {
    if (p.name.empty()) continue;
    if (++names[p.name] == 2) {
      errors.push_back(
          fmt::format("{}: profile '{}': field 'name': is listed twice", where, p.name));
    }
    auto [it, inserted] = ids.emplace(p.id, p.name);
    if (!inserted && it->second != p.name) {
      errors.push_back(fmt::format("{}: profile '{}': field 'id': {} is also the id of '{}'", where,
                                   p.name, p.id, it->second));
    }
  }
}

}  // namespace

Result<Table> ParseTable(const nlohmann::json& j, std::string_view where) {
  JsonFields f(j, std::string(where));
  f.RejectUnknown({"model", "memory_slices", "compute_slices", "profiles"});
  Table t;
  t.model = f.String("model");
  if (j.is_object() && j.contains("model") && j["model"].is_string() && t.model.empty()) {
    f.Fail("model", "must not be empty");
  }
  // 0 on error, which tells ParseProfile to skip the checks that depend on the table's size.
  t.memory_slices = static_cast<int>(f.Int("memory_slices", 1, kMaxSlices, true, 0));
  t.compute_slices = static_cast<int>(f.Int("compute_slices", 1, kMaxSlices, true, 0));
  const nlohmann::json* profiles = f.Get("profiles");
  if (profiles && (!profiles->is_array() || profiles->empty())) {
    f.Fail("profiles", profiles->is_array() ? "must list at least one profile"
                                            : fmt::format("expected an array of objects, found {}",
                                                          JsonTypeName(*profiles)));
    profiles = nullptr;
  }
  std::vector<std::string> errors = f.errors();
  if (profiles) {
    for (size_t i = 0; i < profiles->size(); ++i) {
      const nlohmann::json& p = (*profiles)[i];
      t.profiles.push_back(ParseProfile(p, ProfileWhere(p, i, where), t, errors));
    }
    CheckUnique(t, where, errors);
  }
  if (!errors.empty()) {
    return Status::InvalidArgument(fmt::format("{}", fmt::join(errors, "\n")));
  }
  return t;
}

}  // namespace tessera::mig
