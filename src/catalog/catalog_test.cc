#include "catalog/catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "common/csv.h"
#include "testing/testing.h"

namespace tessera::catalog {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string SourceCatalogDir() { return tessera::testing::SourceDir() + "/catalog"; }

// The source catalog's files, by name, as text.
using Texts = std::map<std::string, std::string>;

Texts SourceTexts() {
  Texts texts;
  for (const std::string& name : Catalog::DataFiles()) {
    auto text = ReadFile(SourceCatalogDir() + "/" + name);
    EXPECT_TRUE(text.ok()) << text.status().ToString();
    if (text.ok()) texts[name] = *text;
  }
  return texts;
}

// Parses texts[file], lets `edit` change it and writes it back.
void Edit(Texts& texts, const std::string& file, const std::function<void(json&)>& edit) {
  json j = json::parse(texts.at(file));
  edit(j);
  texts[file] = j.dump(1);
}

// The entry of `list` in `file` whose `key` is `id`.
json& Entry(json& j, const std::string& list, const std::string& key, const std::string& id) {
  for (json& e : j[list]) {
    if (e[key] == id) return e;
  }
  ADD_FAILURE() << "no entry " << id << " in " << list;
  static json none;
  return none;
}

json& Gpu(json& j, const std::string& id) { return Entry(j, "gpus", "id", id); }
json& Type(json& j, const std::string& id) { return Entry(j, "instance_types", "id", id); }
json& PriceOf(json& j, const std::string& id) { return Entry(j, "prices", "instance_type", id); }

// Writes `texts` into a fresh directory and validates it.
std::vector<std::string> Validate(const Texts& texts) {
  tessera::testing::TempDir dir;
  for (const auto& [name, text] : texts) dir.Write(name, text);
  return Catalog::ValidateDir(dir.path());
}

std::string Lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

TEST(CatalogTest, SourceCatalogIsValid) {
  EXPECT_EQ(Lines(Catalog::ValidateDir(SourceCatalogDir())), "");
}

struct BreakCase {
  std::string name;
  std::function<void(Texts&)> do_break;
  std::string want;  // One error, in full or as a distinctive part of it.
  size_t want_count = 1;
};

void PrintTo(const BreakCase& c, std::ostream* os) { *os << c.name; }

class CatalogBreakTest : public ::testing::TestWithParam<BreakCase> {};

TEST_P(CatalogBreakTest, ReportsTheError) {
  const BreakCase& c = GetParam();
  Texts texts = SourceTexts();
  c.do_break(texts);
  const std::vector<std::string> errors = Validate(texts);
  EXPECT_EQ(errors.size(), c.want_count) << Lines(errors);
  EXPECT_THAT(Lines(errors), HasSubstr(c.want));
}

const BreakCase kBreakCases[] = {
    {"MalformedJson", [](Texts& t) { t["gpus.json"] = R"({"source": "x", "gpus": [})"; },
     "gpus.json: malformed JSON at byte 26 near "},
    {"TopLevelNotAnObject", [](Texts& t) { t["prices.json"] = "[]"; },
     "prices.json: expected an object, found array\n"},
    {"WrongType",
     [](Texts& t) {
       Edit(t, "gpus.json", [](json& j) { Gpu(j, "A100-40GB")["memory_mib"] = "40960"; });
     },
     "gpus.json: entry 'A100-40GB': field 'memory_mib': expected an integer, found string\n"},
    {"UnknownField",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.1xt4")["gpu_count"] = 1; });
     },
     "instance_types.json: entry 'gpu.1xt4': field 'gpu_count': is not a known field\n"},
    {"MissingField",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.1xl4").erase("vcpus"); });
     },
     "instance_types.json: entry 'gpu.1xl4': field 'vcpus': is required\n"},
    {"OutOfRange",
     [](Texts& t) { Edit(t, "gpus.json", [](json& j) { Gpu(j, "T4-16GB")["tdp_watts"] = -70; }); },
     "gpus.json: entry 'T4-16GB': field 'tdp_watts': -70 is out of range [0, 100000]\n"},
    {"UnknownVendor",
     [](Texts& t) {
       Edit(t, "gpus.json", [](json& j) { Gpu(j, "T4-16GB")["vendor"] = "NVIDIA"; });
     },
     "gpus.json: entry 'T4-16GB': field 'vendor': 'NVIDIA' is not one of nvidia, amd, intel, "
     "undisclosed\n"},
    {"EntryWithoutId",
     [](Texts& t) { Edit(t, "gpus.json", [](json& j) { j["gpus"].push_back(json::object()); }); },
     "gpus.json: gpus[20]: field 'id': is required\n", 14},
    {"UnknownGpuModel",
     [](Texts& t) {
       Edit(t, "instance_types.json",
            [](json& j) { Type(j, "gpu.1xt4")["gpu_model"] = "T5-16GB"; });
     },
     "instance_types.json: entry 'gpu.1xt4': field 'gpu_model': unknown GPU model 'T5-16GB' (not "
     "in gpus.json)\n"},
    {"GpuModelByAlias",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.1xt4")["gpu_model"] = "T4"; });
     },
     "instance_types.json: entry 'gpu.1xt4': field 'gpu_model': 'T4' is an alias; name the model "
     "by its id 'T4-16GB'\n"},
    {"UnknownMigProfile",
     [](Texts& t) {
       Edit(t, "instance_types.json",
            [](json& j) { Type(j, "mig.h100.1g.10gb")["mig_profile"] = "1g.5gb"; });
     },
     "instance_types.json: entry 'mig.h100.1g.10gb': field 'mig_profile': '1g.5gb' is not a MIG "
     "profile of H100-80GB (it has 1g.10gb, "},
    {"MigProfileOnNonMigModel",
     [](Texts& t) {
       Edit(t, "instance_types.json",
            [](json& j) { Type(j, "mig.h100.1g.10gb")["gpu_model"] = "L4-24GB"; });
     },
     "instance_types.json: entry 'mig.h100.1g.10gb': field 'mig_profile': GPU model 'L4-24GB' has "
     "no MIG table\n"},
    {"FieldOfAnotherSharingMode",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "mig.h100.1g.10gb")["gpus"] = 1; });
     },
     "instance_types.json: entry 'mig.h100.1g.10gb': field 'gpus': applies only to sharing "
     "'exclusive'\n"},
    {"MilliGpuOutOfRange",
     [](Texts& t) {
       Edit(t, "instance_types.json",
            [](json& j) { Type(j, "shared.t4.quarter")["milli_gpu"] = 1000; });
     },
     "instance_types.json: entry 'shared.t4.quarter': field 'milli_gpu': 1000 is out of range [1, "
     "999]\n"},
    {"MemoryCapAboveTheGpu",
     [](Texts& t) {
       Edit(t, "instance_types.json",
            [](json& j) { Type(j, "shared.t4.quarter")["gpu_memory_mib"] = 20000; });
     },
     "instance_types.json: entry 'shared.t4.quarter': field 'gpu_memory_mib': 20000 MiB is more "
     "than the 16384 MiB of a T4-16GB\n"},
    {"ExclusiveWithoutGpus",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.1xt4")["gpus"] = 0; });
     },
     "instance_types.json: entry 'gpu.1xt4': field 'gpus': 0 is out of range [1, 64]\n"},
    {"NvlinkOnPcieModel",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.4xl4")["nvlink"] = true; });
     },
     "instance_types.json: entry 'gpu.4xl4': field 'nvlink': GPU model 'L4-24GB' has no NVLink\n"},
    {"NvlinkOnOneGpu",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.1xh100")["nvlink"] = true; });
     },
     "instance_types.json: entry 'gpu.1xh100': field 'nvlink': needs more than one GPU\n"},
    {"UnknownSharingMode",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.1xt4")["sharing"] = "vgpu"; });
     },
     "instance_types.json: entry 'gpu.1xt4': field 'sharing': 'vgpu' is not one of exclusive, mig, "
     "shared\n"},
    {"InvalidInstanceTypeId",
     [](Texts& t) {
       Edit(t, "instance_types.json", [](json& j) { Type(j, "gpu.1xt4")["id"] = "GPU 1xT4"; });
       Edit(t, "prices.json",
            [](json& j) { PriceOf(j, "gpu.1xt4")["instance_type"] = "GPU 1xT4"; });
     },
     "instance_types.json: entry 'GPU 1xT4': field 'id': 'GPU 1xT4' is not a valid instance type "
     "id",
     2},
    {"DuplicateInstanceType",
     [](Texts& t) {
       Edit(t, "instance_types.json",
            [](json& j) { j["instance_types"].push_back(Type(j, "gpu.1xt4")); });
     },
     "instance_types.json: entry 'gpu.1xt4': field 'id': is listed twice\n"},
    {"UnpricedInstanceType",
     [](Texts& t) {
       Edit(t, "prices.json", [](json& j) {
         auto& list = j["prices"];
         list.erase(std::find(list.begin(), list.end(), PriceOf(j, "gpu.1xt4")));
       });
     },
     "instance_types.json: entry 'gpu.1xt4': field 'id': has no price in prices.json\n"},
    {"PriceTwice",
     [](Texts& t) {
       Edit(t, "prices.json", [](json& j) { j["prices"].push_back(PriceOf(j, "gpu.1xt4")); });
     },
     "prices.json: entry 'gpu.1xt4': field 'instance_type': is priced twice\n"},
    {"PriceForUnknownType",
     [](Texts& t) {
       Edit(t, "prices.json", [](json& j) {
         json p = PriceOf(j, "gpu.1xt4");
         p["instance_type"] = "gpu.9xt4";
         j["prices"].push_back(p);
       });
     },
     "prices.json: entry 'gpu.9xt4': field 'instance_type': unknown instance type 'gpu.9xt4' (not "
     "in instance_types.json)\n"},
    {"ReservedAboveOnDemand",
     [](Texts& t) {
       Edit(t, "prices.json",
            [](json& j) { PriceOf(j, "gpu.1xt4")["reserved_1y_per_hour"] = "0.60"; });
     },
     "prices.json: entry 'gpu.1xt4': field 'reserved_1y_per_hour': 0.60 is above "
     "on_demand_per_hour 0.526\n"},
    {"ThreeYearAboveOneYear",
     [](Texts& t) {
       Edit(t, "prices.json",
            [](json& j) { PriceOf(j, "gpu.1xt4")["reserved_3y_per_hour"] = "0.4"; });
     },
     "prices.json: entry 'gpu.1xt4': field 'reserved_3y_per_hour': 0.40 is above "
     "reserved_1y_per_hour 0.33138\n"},
    {"SpotAboveOnDemand",
     [](Texts& t) {
       Edit(t, "prices.json", [](json& j) { PriceOf(j, "gpu.1xt4")["spot_per_hour"] = "1"; });
     },
     "prices.json: entry 'gpu.1xt4': field 'spot_per_hour': 1.00 is above on_demand_per_hour "
     "0.526\n"},
    {"PriceAsBinaryFloat",
     [](Texts& t) {
       Edit(t, "prices.json", [](json& j) { PriceOf(j, "gpu.1xt4")["spot_per_hour"] = 0.2; });
     },
     "prices.json: entry 'gpu.1xt4': field 'spot_per_hour': expected a decimal string such as "
     "\"3.06\", found number\n"},
    {"PriceWithSevenDecimals",
     [](Texts& t) {
       Edit(t, "prices.json",
            [](json& j) { PriceOf(j, "gpu.1xt4")["spot_per_hour"] = "0.2104001"; });
     },
     "prices.json: entry 'gpu.1xt4': field 'spot_per_hour': '0.2104001' is not a money amount: "
     "more than 6 decimal places\n"},
    {"ZeroPrice",
     [](Texts& t) {
       Edit(t, "prices.json", [](json& j) { PriceOf(j, "gpu.1xt4")["spot_per_hour"] = "0"; });
     },
     "prices.json: entry 'gpu.1xt4': field 'spot_per_hour': 0.00 must be above zero\n"},
    {"DuplicateAlias",
     [](Texts& t) { Edit(t, "gpus.json", [](json& j) { Gpu(j, "G2")["aliases"] = {"T4"}; }); },
     "gpus.json: entry 'G2': field 'aliases': 'T4' is already a name of 'T4-16GB'\n"},
    {"IdClashesWithAlias",
     [](Texts& t) {
       Edit(t, "gpus.json", [](json& j) {
         json g = Gpu(j, "G3");
         g["id"] = "V100M16";
         j["gpus"].push_back(g);
       });
     },
     "gpus.json: entry 'V100M16': field 'id': 'V100M16' is already a name of 'V100-16GB'\n"},
    {"MigTableForUnknownModel",
     [](Texts& t) {
       Edit(t, "mig.json", [](json& j) {
         json table = j["tables"][0];
         table["model"] = "Z100-80GB";
         j["tables"].push_back(table);
       });
     },
     "mig.json: entry 'Z100-80GB': field 'model': unknown GPU model 'Z100-80GB' (not in "
     "gpus.json)\n"},
    {"MigTableForNonMigModel",
     [](Texts& t) {
       Edit(t, "mig.json", [](json& j) {
         json table = j["tables"][0];
         table["model"] = "L4-24GB";
         j["tables"].push_back(table);
       });
     },
     "mig.json: entry 'L4-24GB': field 'model': GPU model 'L4-24GB' is not MIG-capable in "
     "gpus.json (its \"mig\" is false)\n"},
    {"MigModelWithoutTable",
     [](Texts& t) {
       Edit(t, "mig.json", [](json& j) {
         auto& tables = j["tables"];
         tables.erase(std::find_if(tables.begin(), tables.end(),
                                   [](const json& e) { return e["model"] == "A30-24GB"; }));
       });
     },
     "gpus.json: entry 'A30-24GB': field 'mig': is true but mig.json has no table for it\n"},
    {"BrokenMigTable",
     [](Texts& t) {
       Edit(t, "mig.json", [](json& j) { j["tables"][0]["memory_slices"] = "eight"; });
     },
     "mig.json: entry 'A100-40GB': field 'memory_slices': expected an integer, found string\n"},
    {"MissingFile", [](Texts& t) { t.erase("prices.json"); }, "/prices.json: cannot open file\n"},
};

INSTANTIATE_TEST_SUITE_P(Cases, CatalogBreakTest, ::testing::ValuesIn(kBreakCases),
                         [](const auto& test_info) { return test_info.param.name; });

TEST(CatalogTest, ReportsEveryErrorAtOnce) {
  Texts texts = SourceTexts();
  Edit(texts, "gpus.json", [](json& j) { Gpu(j, "L4-24GB")["tdp_watts"] = "72"; });
  Edit(texts, "instance_types.json", [](json& j) { Type(j, "gpu.1xl4")["vcpus"] = 0; });
  Edit(texts, "prices.json", [](json& j) { PriceOf(j, "gpu.1xl4")["spot_per_hour"] = "x"; });
  const std::vector<std::string> want = {
      "gpus.json: entry 'L4-24GB': field 'tdp_watts': expected an integer, found string",
      "instance_types.json: entry 'gpu.1xl4': field 'vcpus': 0 is out of range [1, 4096]",
      "prices.json: entry 'gpu.1xl4': field 'spot_per_hour': 'x' is not a money amount: expected "
      "digits, as in \"3.06\"",
  };
  EXPECT_EQ(Validate(texts), want);
}

// Whatever one field of an entry is replaced by, the loader names that field and does not crash.
TEST(CatalogTest, EveryFieldIsChecked) {
  const Texts source = SourceTexts();
  const std::pair<std::string, std::string> lists[] = {
      {"gpus.json", "gpus"}, {"instance_types.json", "instance_types"}, {"prices.json", "prices"}};
  for (const auto& [file, list] : lists) {
    const json doc = json::parse(source.at(file));
    for (const json& entry : doc[list]) {
      for (const auto& [key, value] : entry.items()) {
        Texts texts = source;
        Edit(texts, file, [&](json& j) {
          for (json& e : j[list]) {
            if (e == entry) e[key] = json::object();
          }
        });
        const std::string errors = Lines(Validate(texts));
        EXPECT_THAT(errors, HasSubstr("field '" + key + "': expected"))
            << file << " " << entry.dump().substr(0, 60);
      }
    }
  }
}

TEST(CatalogTest, MissingDirectory) {
  tessera::testing::TempDir dir;
  const std::string missing = dir.File("nope");
  EXPECT_EQ(Catalog::ValidateDir(missing),
            std::vector<std::string>{missing + ": no such directory"});
  auto c = Catalog::LoadDir(missing);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), missing + ": no such directory");
}

TEST(CatalogTest, LoadDirListsEveryErrorInTheStatus) {
  Texts texts = SourceTexts();
  Edit(texts, "gpus.json", [](json& j) { Gpu(j, "L4-24GB")["colour"] = "green"; });
  texts.erase("mig.json");
  tessera::testing::TempDir dir;
  for (const auto& [name, text] : texts) dir.Write(name, text);
  auto c = Catalog::LoadDir(dir.path());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "gpus.json: entry 'L4-24GB': field 'colour': is not a known field\n" + dir.path() +
                "/mig.json: cannot open file");
}

TEST(CatalogTest, ParseTextsReadsFilesFromMemory) {
  const Texts source = SourceTexts();
  const std::map<std::string, std::string, std::less<>> texts(source.begin(), source.end());
  auto c = Catalog::ParseTexts(texts);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto dir = Catalog::LoadDir(SourceCatalogDir());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_EQ(c->gpus().size(), dir->gpus().size());
  EXPECT_EQ(c->mig_table_count(), dir->mig_table_count());
  EXPECT_EQ(c->instance_types().size(), dir->instance_types().size());
  EXPECT_EQ(c->prices().size(), dir->prices().size());
}

TEST(CatalogTest, ParseTextsReportsAMissingFileAndIgnoresStrangers) {
  const Texts source = SourceTexts();
  std::map<std::string, std::string, std::less<>> texts(source.begin(), source.end());
  texts.erase("prices.json");
  texts["colours.json"] = "not json";
  auto c = Catalog::ParseTexts(texts);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(), "prices.json: missing");
}

TEST(CatalogTest, EmbeddedCatalogMatchesTheSourceDirectory) {
  auto embedded = Catalog::LoadEmbedded();
  ASSERT_TRUE(embedded.ok()) << embedded.status().ToString();
  auto dir = Catalog::LoadDir(SourceCatalogDir());
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  ASSERT_EQ(embedded->gpus().size(), dir->gpus().size());
  for (size_t i = 0; i < dir->gpus().size(); ++i) {
    EXPECT_EQ(embedded->gpus()[i].id, dir->gpus()[i].id);
    EXPECT_EQ(embedded->gpus()[i].aliases, dir->gpus()[i].aliases);
    EXPECT_EQ(embedded->gpus()[i].memory_mib, dir->gpus()[i].memory_mib);
    EXPECT_EQ(embedded->gpus()[i].mig != nullptr, dir->gpus()[i].mig != nullptr);
  }
  EXPECT_EQ(embedded->mig_table_count(), dir->mig_table_count());
  ASSERT_EQ(embedded->instance_types().size(), dir->instance_types().size());
  for (size_t i = 0; i < dir->instance_types().size(); ++i) {
    EXPECT_EQ(embedded->instance_types()[i].id, dir->instance_types()[i].id);
  }
  ASSERT_EQ(embedded->prices().size(), dir->prices().size());
  for (size_t i = 0; i < dir->prices().size(); ++i) {
    EXPECT_EQ(embedded->prices()[i].instance_type, dir->prices()[i].instance_type);
    EXPECT_EQ(embedded->prices()[i].on_demand_per_hour, dir->prices()[i].on_demand_per_hour);
  }
}

TEST(CatalogTest, HasTheRequiredModels) {
  auto c = Catalog::LoadEmbedded();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  for (const char* id :
       {"A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL-94GB", "H200-141GB", "B200-180GB",
        "A30-24GB", "L40S-48GB", "L4-24GB", "A10-24GB", "A10G-24GB", "T4-16GB", "V100-16GB",
        "V100-32GB", "P100-16GB", "RTX-A6000-48GB", "MI250X-128GB", "MI300X-192GB"}) {
    const GpuModel* g = c->FindGpu(id);
    ASSERT_NE(g, nullptr) << id;
    EXPECT_EQ(g->id, id);
    EXPECT_GT(g->memory_mib, 0) << id;
    EXPECT_GT(g->fp32_tflops, 0) << id;
    EXPECT_FALSE(g->source.empty()) << id;
  }
  std::vector<std::string> mig;
  for (const GpuModel& g : c->gpus()) {
    if (g.mig) {
      mig.push_back(g.id);
      EXPECT_EQ(g.mig->model, g.id);
    }
  }
  EXPECT_EQ(mig, (std::vector<std::string>{"A100-40GB", "A100-80GB", "H100-80GB", "H100-NVL-94GB",
                                           "H200-141GB", "B200-180GB", "A30-24GB"}));
  EXPECT_EQ(c->mig_table_count(), 7u);
}

TEST(CatalogTest, EveryOpenbModelNameResolves) {
  auto c = Catalog::LoadEmbedded();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::pair<const char*, const char*> names[] = {{"P100", "P100-16GB"},
                                                       {"T4", "T4-16GB"},
                                                       {"V100M16", "V100-16GB"},
                                                       {"V100M32", "V100-32GB"},
                                                       {"A10", "A10-24GB"},
                                                       {"G2", "G2"},
                                                       {"G3", "G3"}};
  for (const auto& [name, id] : names) {
    auto index = c->FindGpuIndex(name);
    ASSERT_TRUE(index.has_value()) << name;
    EXPECT_EQ(c->gpu(*index).id, id);
    EXPECT_EQ(c->FindGpu(name), &c->gpu(*index));
  }
  EXPECT_EQ(c->FindGpu("G2")->vendor, "undisclosed");
  EXPECT_EQ(c->FindGpu("G2")->memory_mib, 0);
  EXPECT_FALSE(c->FindGpuIndex("v100m16").has_value());  // Case-sensitive.
  EXPECT_EQ(c->FindGpu("G1"), nullptr);
}

TEST(CatalogTest, EveryInstanceTypeHasAnOrderedPrice) {
  auto c = Catalog::LoadEmbedded();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->prices().size(), c->instance_types().size());
  for (const InstanceType& t : c->instance_types()) {
    const Price* p = c->FindPrice(t.id);
    ASSERT_NE(p, nullptr) << t.id;
    EXPECT_EQ(p->instance_type, t.id);
    EXPECT_GT(p->spot_per_hour, Money());
    EXPECT_LE(p->spot_per_hour, p->on_demand_per_hour) << t.id;
    EXPECT_LE(p->reserved_3y_per_hour, p->reserved_1y_per_hour) << t.id;
    EXPECT_LE(p->reserved_1y_per_hour, p->on_demand_per_hour) << t.id;
    EXPECT_FALSE(p->source.empty()) << t.id;
    EXPECT_EQ(c->FindInstanceType(t.id), &t);
  }
  EXPECT_EQ(c->FindPrice("gpu.1xa100-40gb")->on_demand_per_hour, *Money::Parse("3.673385"));
  EXPECT_EQ(c->FindInstanceType("gpu.none"), nullptr);
  EXPECT_EQ(c->FindPrice("gpu.none"), nullptr);
}

TEST(CatalogTest, ProductMatrix) {
  auto c = Catalog::LoadEmbedded();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const InstanceType* general = c->FindInstanceType("gpu.1xa100-40gb");
  ASSERT_NE(general, nullptr);
  EXPECT_EQ(general->vcpus, 16);
  EXPECT_EQ(general->gpus, 1);
  const InstanceType* big = c->FindInstanceType("gpu.8xh100");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->gpu_model, "H100-80GB");
  EXPECT_EQ(big->vcpus, 96);
  EXPECT_EQ(big->gpus, 8);
  EXPECT_TRUE(big->nvlink);
  const InstanceType* slice = c->FindInstanceType("mig.h100.3g.40gb");
  ASSERT_NE(slice, nullptr);
  EXPECT_EQ(slice->sharing, SharingMode::kMig);
  EXPECT_EQ(slice->mig_profile, "3g.40gb");
  const InstanceType* half = c->FindInstanceType("shared.l40s.half");
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->sharing, SharingMode::kShared);
  EXPECT_EQ(half->milli_gpu, 500);
  EXPECT_EQ(half->gpu_memory_mib, 24 * 1024);
  // A slice costs its share of the whole GPU: 3/7 of gpu.1xh100's on-demand rate.
  EXPECT_EQ(c->FindPrice("mig.h100.3g.40gb")->on_demand_per_hour,
            c->FindPrice("gpu.1xh100")->on_demand_per_hour.MulDiv(3, 7));
}

TEST(CatalogTest, MigTablesSurviveAMove) {
  auto loaded = Catalog::LoadEmbedded();
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  Catalog c = std::move(loaded).value();
  const GpuModel* h100 = c.FindGpu("H100-80GB");
  ASSERT_NE(h100, nullptr);
  ASSERT_NE(h100->mig, nullptr);
  const mig::Profile* p = h100->mig->Find("1g.10gb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->compute_slices, 1);
  EXPECT_EQ(c.FindGpu("L4")->mig, nullptr);
}

TEST(CatalogTest, SharingModeNames) {
  for (SharingMode m : {SharingMode::kExclusive, SharingMode::kMig, SharingMode::kShared}) {
    EXPECT_EQ(ParseSharingMode(SharingModeName(m)), m);
  }
  EXPECT_EQ(SharingModeName(SharingMode::kShared), "shared");
  EXPECT_EQ(ParseSharingMode("Exclusive"), std::nullopt);
}

}  // namespace
}  // namespace tessera::catalog
