// A stack file (docs/stacks.md): YAML documents separated by `---`, each an object
// {kind, name, ...the API's fields}, from one file or a directory of them; `${var}` variables
// with defaults (a document of `variables:` only) and --var; `$${` for a literal `${`. It becomes
// the body of POST /v1/stacks/{name}/plan, and remembers where each object and field came from,
// so an error the server names by object and field is shown at its file, line and column.
// Thread-safety: value types.
#pragma once

#include <cstddef>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"

namespace tessera::cli {

// Where a value came from: 1-based, as editors count.
struct SourceMark {
  std::string file;
  int line = 0, column = 0;
};

struct StackSource {
  nlohmann::json objects = nlohmann::json::array();  // The request's `objects`.
  std::vector<SourceMark> object_marks;              // objects[i]'s document.
  // objects[i]'s fields, by the path the API names them with: "vcpus", "template.gpus",
  // "notify[0].webhook".
  std::vector<std::map<std::string, SourceMark>> field_marks;

  // "FILE:LINE:COL: " for the server's message `message` when it names "objects[I]" (and the
  // field: "field 'F'"), else "".
  std::string Locate(const std::string& message) const;
};

// Reads `path` (a file, or a directory's *.yaml and *.yml files by name) with `vars` ("k=v") over
// the file's defaults. Errors name the file, line and column.
Result<StackSource> LoadStack(const std::string& path, const std::vector<std::string>& vars);

// The stack's default name: the file's name without its extension, or the directory's name.
std::string DefaultStackName(const std::string& path);

}  // namespace tessera::cli
