// Test helpers for the mig module: the real tables from catalog/mig.json (read directly, since the
// catalog module depends on this one), and a shape notation that lets one test table run on every
// 8-slice model, whose profiles differ only in name.
// Thread-safety: for use from one test thread.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/csv.h"
#include "common/json.h"
#include "mig/mig.h"
#include "testing/testing.h"

namespace tessera::mig::testutil {

// Every table in catalog/mig.json, parsed once. A load error fails the calling test.
inline std::vector<Table> LoadCatalogTables() {
  std::vector<Table> out;
  Result<std::string> text = ReadFile(testing::SourceDir() + "/catalog/mig.json");
  if (!text.ok()) return out;
  Result<nlohmann::json> j = ParseJson(*text, "mig.json");
  if (!j.ok() || !j->contains("tables") || !(*j)["tables"].is_array()) return out;
  for (const nlohmann::json& t : (*j)["tables"]) {
    Result<Table> table = ParseTable(t, "mig.json");
    if (!table.ok()) ADD_FAILURE() << table.status().ToString();
    if (table.ok()) out.push_back(std::move(*table));
  }
  return out;
}

// Every table in catalog/mig.json, parsed once. A load error fails the calling test.
inline const std::vector<Table>& CatalogTables() {
  static const std::vector<Table> tables = LoadCatalogTables();
  if (tables.size() != 7) ADD_FAILURE() << "catalog/mig.json gave " << tables.size() << " tables";
  return tables;
}

// The catalog table of `model`; fails the test and returns an empty table when absent.
inline const Table& CatalogTable(std::string_view model) {
  for (const Table& t : CatalogTables()) {
    if (t.model == model) return t;
  }
  ADD_FAILURE() << "no MIG table for " << model;
  static const Table kEmpty;
  return kEmpty;
}

inline std::vector<const Table*> EightSliceTables() {
  std::vector<const Table*> out;
  for (const Table& t : CatalogTables()) {
    if (t.memory_slices == 8) out.push_back(&t);
  }
  return out;
}

// The profile of an 8-slice table with the given shape: "1g" (one memory slice), "1g+me",
// "1g.2s" (two memory slices), "2g", "3g", "4g" or "7g". Identified by slices, not by name.
inline const Profile* ByShape(const Table& t, std::string_view shape) {
  static const std::map<std::string, std::pair<int, int>, std::less<>> kShapes = {
      {"1g", {1, 1}}, {"1g+me", {1, 1}}, {"1g.2s", {1, 2}}, {"2g", {2, 2}},
      {"3g", {3, 4}}, {"4g", {4, 4}},    {"7g", {7, 8}}};
  auto it = kShapes.find(shape);
  if (it == kShapes.end()) return nullptr;
  const bool me = shape == "1g+me";
  for (const Profile& p : t.profiles) {
    if (p.compute_slices == it->second.first && p.memory_slices == it->second.second &&
        p.media_extensions == me) {
      return &p;
    }
  }
  return nullptr;
}

// "3g@4 1g@0" in shape notation, as placements on `t`.
inline std::vector<Placement> Shapes(const Table& t, std::string_view text) {
  std::vector<Placement> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view token = text.substr(pos, end - pos);
    pos = end + 1;
    if (token.empty()) continue;
    const size_t at = token.find('@');
    const Profile* p = ByShape(t, token.substr(0, at));
    if (p == nullptr || at == std::string_view::npos) {
      ADD_FAILURE() << "bad shape token " << token;
      continue;
    }
    out.push_back({p, std::stoi(std::string(token.substr(at + 1)))});
  }
  return out;
}

// Replaces each "{shape}" in `text` with the shape's profile name on `t`.
inline std::string Render(const Table& t, std::string text) {
  for (const char* shape : {"1g+me", "1g.2s", "1g", "2g", "3g", "4g", "7g"}) {
    const std::string key = std::string("{") + shape + "}";
    const Profile* p = ByShape(t, shape);
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key)) {
      text.replace(at, key.size(), p ? p->name : "?");
    }
  }
  return text;
}

}  // namespace tessera::mig::testutil
