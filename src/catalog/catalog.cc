#include "catalog/catalog.h"

#include <fmt/format.h>

#include <filesystem>
#include <system_error>

#include "catalog/embedded.h"
#include "common/csv.h"

namespace tessera::catalog {
namespace {

using FileMap = std::map<std::string, Result<std::string>, std::less<>>;

Status JoinErrors(const std::vector<std::string>& errors) {
  return Status::InvalidArgument(fmt::format("{}", fmt::join(errors, "\n")));
}

// Reads every data file of `dir`; a file that cannot be read maps to its error, which the
// parser reports in its place.
FileMap ReadDir(const std::string& dir) {
  FileMap files;
  for (const std::string& name : Catalog::DataFiles()) {
    files.emplace(name, ReadFile(dir + "/" + name));
  }
  return files;
}

// An error for `dir` itself when it is not a readable directory, so the user is told that
// rather than that each of its files is missing.
std::optional<std::string> CheckDir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return fmt::format("{}: no such directory", dir);
  if (!std::filesystem::is_directory(dir, ec)) return fmt::format("{}: not a directory", dir);
  return std::nullopt;
}

}  // namespace

std::string_view SharingModeName(SharingMode m) {
  switch (m) {
    case SharingMode::kExclusive:
      return "exclusive";
    case SharingMode::kMig:
      return "mig";
    case SharingMode::kShared:
      return "shared";
  }
  return "unknown";
}

std::optional<SharingMode> ParseSharingMode(std::string_view s) {
  for (SharingMode m : {SharingMode::kExclusive, SharingMode::kMig, SharingMode::kShared}) {
    if (SharingModeName(m) == s) return m;
  }
  return std::nullopt;
}

const std::vector<std::string>& Catalog::DataFiles() {
  // mig.json comes after gpus.json because its tables attach to the models.
  static const std::vector<std::string> kFiles = {"gpus.json", "mig.json", "instance_types.json",
                                                  "prices.json"};
  return kFiles;
}

Result<Catalog> Catalog::LoadDir(const std::string& dir) {
  if (auto bad = CheckDir(dir)) return Status::InvalidArgument(*bad);
  std::vector<std::string> errors;
  Catalog c = Parse(ReadDir(dir), errors);
  if (!errors.empty()) return JoinErrors(errors);
  return c;
}

Result<Catalog> Catalog::LoadEmbedded() {
  FileMap files;
  for (const std::string& name : DataFiles()) {
    files.emplace(name, Status::NotFound(fmt::format("{}: not embedded in the binary", name)));
  }
  for (const EmbeddedFile& f : EmbeddedFiles()) {
    auto it = files.find(f.path);
    if (it != files.end()) it->second = std::string(f.content);
  }
  std::vector<std::string> errors;
  Catalog c = Parse(files, errors);
  if (!errors.empty()) return JoinErrors(errors);
  return c;
}

std::vector<std::string> Catalog::ValidateDir(const std::string& dir) {
  if (auto bad = CheckDir(dir)) return {*bad};
  std::vector<std::string> errors;
  (void)Parse(ReadDir(dir), errors);
  return errors;
}

Result<Catalog> Catalog::ParseTexts(const std::map<std::string, std::string, std::less<>>& texts) {
  FileMap files;
  for (const std::string& name : DataFiles()) {
    if (auto it = texts.find(name); it != texts.end()) files.emplace(name, it->second);
  }
  std::vector<std::string> errors;
  Catalog c = Parse(files, errors);
  if (!errors.empty()) return JoinErrors(errors);
  return c;
}

std::optional<GpuModelIndex> Catalog::FindGpuIndex(std::string_view id_or_alias) const {
  auto it = gpu_index_.find(id_or_alias);
  if (it == gpu_index_.end()) return std::nullopt;
  return it->second;
}

const GpuModel* Catalog::FindGpu(std::string_view id_or_alias) const {
  auto i = FindGpuIndex(id_or_alias);
  return i ? &gpus_[i->value] : nullptr;
}

const InstanceType* Catalog::FindInstanceType(std::string_view id) const {
  auto it = instance_type_index_.find(id);
  return it == instance_type_index_.end() ? nullptr : &instance_types_[it->second];
}

const Price* Catalog::FindPrice(std::string_view instance_type) const {
  auto it = price_index_.find(instance_type);
  return it == price_index_.end() ? nullptr : &prices_[it->second];
}

}  // namespace tessera::catalog
