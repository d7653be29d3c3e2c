// End-to-end checks of `tessera catalog list` and `tessera catalog validate`.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using testing::RunTessera;
namespace fs = std::filesystem;

const char* const kDataFiles[] = {"gpus.json", "mig.json", "instance_types.json", "prices.json"};

std::string SourceCatalog() { return testing::SourceDir() + "/catalog"; }

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// How many entries `list` of the source catalog's `file` holds.
size_t Count(const std::string& file, const std::string& list) {
  return nlohmann::json::parse(Slurp(SourceCatalog() + "/" + file))[list].size();
}

// Copies the source catalog into `dir`.
void CopyCatalog(const testing::TempDir& dir) {
  for (const char* f : kDataFiles) dir.Write(f, Slurp(SourceCatalog() + "/" + f));
}

// The output line whose first column is `first`, split on runs of spaces; empty when absent.
std::vector<std::string> Row(const std::string& out, const std::string& first) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string w; words >> w;) row.push_back(w);
    if (!row.empty() && row[0] == first) return row;
  }
  return {};
}

// The line whose first column is `first`, as printed.
std::string Line(const std::string& out, const std::string& first) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(first + " ", 0) == 0) return line;
  }
  return "";
}

TEST(CatalogCliTest, ListGpusIsTheDefaultAndAligned) {
  auto r = RunTessera({"catalog", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string header = Line(r.out, "ID");
  ASSERT_FALSE(header.empty()) << r.out;
  const size_t vendor = header.find("VENDOR");
  const size_t mig = header.find("MIG");
  ASSERT_NE(vendor, std::string::npos);
  const std::string t4 = Line(r.out, "T4-16GB");
  ASSERT_FALSE(t4.empty()) << r.out;
  EXPECT_EQ(t4.substr(vendor, 6), "nvidia") << header << "\n" << t4;
  EXPECT_EQ(Row(r.out, "V100-16GB")[1], "V100M16,V100-16GB-SXM2");
  EXPECT_EQ(Line(r.out, "H100-80GB").substr(mig), "yes (7 profiles)");
  EXPECT_EQ(Line(r.out, "L4-24GB").substr(mig), "no");
  EXPECT_EQ(Row(r.out, "G2")[2], "undisclosed");
  EXPECT_EQ(Row(r.out, "H200-141GB")[4], "141");  // MEM_GIB.
  auto explicit_kind = RunTessera({"catalog", "list", "--kind", "gpus"});
  EXPECT_EQ(explicit_kind.out, r.out);
}

TEST(CatalogCliTest, ListInstanceTypes) {
  auto r = RunTessera({"catalog", "list", "--kind", "instance-types"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Row(r.out, "gpu.8xh100"),
            (std::vector<std::string>{"gpu.8xh100", "compute", "exclusive", "H100-80GB", "8", "yes",
                                      "96", "1900"}));
  EXPECT_EQ(Row(r.out, "mig.h100.1g.10gb"),
            (std::vector<std::string>{"mig.h100.1g.10gb", "mig", "mig", "H100-80GB", "1g.10gb",
                                      "no", "4", "32"}));
  EXPECT_EQ(Row(r.out, "shared.l40s.half"),
            (std::vector<std::string>{"shared.l40s.half", "shared", "shared", "L40S-48GB", "500m,",
                                      "24", "GiB", "cap", "no", "2", "16"}));
  EXPECT_EQ(r.out.substr(0, 4), "ID  ") << r.out;
}

TEST(CatalogCliTest, ListPrices) {
  auto r = RunTessera({"catalog", "list", "--kind", "prices"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(
      Row(r.out, "gpu.1xa100-40gb"),
      (std::vector<std::string>{"gpu.1xa100-40gb", "3.673385", "2.314205", "1.285712", "1.92802"}));
  // Money prints exactly, with at least two decimals.
  EXPECT_EQ(Row(r.out, "gpu.4xrtx-a6000")[1], "3.20");
  EXPECT_THAT(r.out, HasSubstr("ON_DEMAND_USD/H"));
}

TEST(CatalogCliTest, ListFromADirectoryMatchesTheEmbeddedCatalog) {
  for (const char* kind : {"gpus", "instance-types", "prices"}) {
    auto embedded = RunTessera({"catalog", "list", "--kind", kind});
    auto dir = RunTessera({"catalog", "list", "--kind", kind, "--catalog", SourceCatalog()});
    EXPECT_EQ(dir.exit_code, 0) << dir.err;
    EXPECT_EQ(dir.out, embedded.out) << kind;
  }
}

TEST(CatalogCliTest, ListFromABrokenDirectoryFails) {
  testing::TempDir dir;
  CopyCatalog(dir);
  dir.Write("gpus.json", "{");
  auto r = RunTessera({"catalog", "list", "--catalog", dir.path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("gpus.json: malformed JSON at byte 2"));
  EXPECT_EQ(r.out, "");
}

TEST(CatalogCliTest, UnknownKindIsAUsageError) {
  auto r = RunTessera({"catalog", "list", "--kind", "nodes"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "tessera catalog list: unknown kind 'nodes' (valid kinds: gpus, instance-types, "
            "prices)\n");
  EXPECT_EQ(r.out, "");
}

TEST(CatalogCliTest, ValidateTheRepositoryCatalog) {
  auto r = RunTessera({"catalog", "validate", SourceCatalog()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "catalog " + SourceCatalog() +
                " is valid: " + std::to_string(Count("gpus.json", "gpus")) + " GPU models, " +
                std::to_string(Count("mig.json", "tables")) + " MIG tables, " +
                std::to_string(Count("instance_types.json", "instance_types")) +
                " instance types, " + std::to_string(Count("prices.json", "prices")) + " prices\n");
  EXPECT_EQ(r.err, "");
}

TEST(CatalogCliTest, ValidatePrintsEveryError) {
  testing::TempDir dir;
  CopyCatalog(dir);
  auto types = nlohmann::json::parse(Slurp(dir.File("instance_types.json")));
  for (auto& t : types["instance_types"]) {
    if (t["id"] == "gpu.1xt4") t["gpu_model"] = "T5-16GB";
    if (t["id"] == "gpu.4xl4") t["vcpus"] = "48";
  }
  dir.Write("instance_types.json", types.dump());
  auto r = RunTessera({"catalog", "validate", dir.path()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "instance_types.json: entry 'gpu.4xl4': field 'vcpus': expected an integer, found "
            "string\n"
            "instance_types.json: entry 'gpu.1xt4': field 'gpu_model': unknown GPU model "
            "'T5-16GB' (not in gpus.json)\n"
            "catalog " +
                dir.path() + " is invalid: 2 errors\n");
  EXPECT_EQ(r.out, "");
}

TEST(CatalogCliTest, ValidateAMissingDirectory) {
  testing::TempDir dir;
  const std::string missing = dir.File("no-such-catalog");
  auto r = RunTessera({"catalog", "validate", missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr(missing + ": no such directory\n"));
}

// Runs `tessera catalog validate` without arguments from inside `cwd`.
testing::CommandResult ValidateFrom(const std::string& cwd) {
  std::error_code ec;
  const fs::path before = fs::current_path(ec);
  fs::current_path(cwd, ec);
  EXPECT_FALSE(ec) << ec.message();
  auto r = RunTessera({"catalog", "validate"});
  fs::current_path(before, ec);
  return r;
}

TEST(CatalogCliTest, ValidateDefaultsToTheCatalogDirectoryOfTheWorkingDirectory) {
  testing::TempDir with;
  fs::create_directory(with.File("catalog"));
  for (const char* f : kDataFiles)
    with.Write(std::string("catalog/") + f, Slurp(SourceCatalog() + "/" + f));
  auto ok = ValidateFrom(with.path());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("catalog catalog is valid: "));

  testing::TempDir without;
  auto missing = ValidateFrom(without.path());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("catalog: no such directory"));
}

TEST(CatalogCliTest, HelpOnEachCommand) {
  auto list = RunTessera({"catalog", "list", "--help"});
  EXPECT_EQ(list.exit_code, 0);
  EXPECT_THAT(list.out, HasSubstr("--kind"));
  EXPECT_THAT(list.out, HasSubstr("--catalog"));
  auto validate = RunTessera({"catalog", "validate", "--help"});
  EXPECT_EQ(validate.exit_code, 0);
  EXPECT_THAT(validate.out, HasSubstr("catalog directory"));
  auto catalog = RunTessera({"catalog", "--help"});
  EXPECT_EQ(catalog.exit_code, 0);
  EXPECT_THAT(catalog.out, HasSubstr("validate"));
}

}  // namespace
}  // namespace tessera
