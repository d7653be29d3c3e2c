#include "fleet/fleet_file.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "catalog/catalog_testing.h"
#include "common/csv.h"
#include "common/json.h"
#include "testing/testing.h"

namespace tessera::fleet {
namespace {

using ::testing::StartsWith;

const catalog::Catalog& TestCatalog() { return catalog::EmbeddedCatalogForTest(); }

// A one-line summary of a node's shape, for comparing fleets.
std::string Shape(const Fleet& f, const Node& n) {
  std::string out =
      fmt::format("{} {} cpu={} mem={}", n.name,
                  n.model.valid() ? f.catalog().gpu(n.model).id : "-", n.cpu_milli, n.memory_mib);
  for (const Gpu& g : n.gpus) {
    out += fmt::format(" {}/{}", catalog::SharingModeName(g.mode), g.island);
  }
  return out;
}

std::vector<std::string> Shapes(const Fleet& f) {
  std::vector<std::string> out;
  for (const Node& n : f.nodes()) out.push_back(Shape(f, n));
  return out;
}

TEST(FleetJsonTest, BuildsNodesFromShapes) {
  const std::string text = R"({
    "name": "lab", "description": "two shapes",
    "shapes": [
      {"name": "h100", "count": 2, "gpu_model": "H100-80GB", "gpus": 8, "vcpus": 192,
       "memory_gib": 2048, "nvlink": [[0, 1, 2, 3], [4, 5, 6, 7]], "gpu_mode": "mig"},
      {"name": "mix", "count": 1, "gpu_model": "V100M32", "gpus": 3, "vcpus": 8,
       "memory_gib": 64, "nvlink": "all", "gpu_modes": ["shared", "exclusive", "shared"]},
      {"name": "cpu", "count": 1, "vcpus": 4, "memory_gib": 16}
    ]})";
  Result<Fleet> f = ParseFleetJson(TestCatalog(), text, "lab.json");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->name(), "lab");
  EXPECT_EQ(Shapes(*f),
            (std::vector<std::string>{
                "node-h100-01 H100-80GB cpu=192000 mem=2097152 mig/0 mig/0 mig/0 "
                "mig/0 mig/1 mig/1 mig/1 mig/1",
                "node-h100-02 H100-80GB cpu=192000 mem=2097152 mig/0 mig/0 mig/0 "
                "mig/0 mig/1 mig/1 mig/1 mig/1",
                "node-mix-01 V100-32GB cpu=8000 mem=65536 shared/0 exclusive/0 shared/0",
                "node-cpu-01 - cpu=4000 mem=16384",
            }));
  EXPECT_EQ(f->total_gpus(), 19);
  EXPECT_EQ(f->node(NodeIndex(2)).gpus[0].free_memory_mib, 32768);
}

TEST(FleetJsonTest, NodeNumbersWidenWithTheCount) {
  const std::string text =
      R"({"name": "big", "shapes": [{"name": "t4", "count": 120, "gpu_model": "T4", "gpus": 1,
          "vcpus": 8, "memory_gib": 32, "nvlink": "all"}]})";
  Result<Fleet> f = ParseFleetJson(TestCatalog(), text, "big.json");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->size(), 120u);
  EXPECT_EQ(f->nodes().front().name, "node-t4-001");
  EXPECT_EQ(f->nodes().back().name, "node-t4-120");
  EXPECT_EQ(f->nodes().front().gpus[0].island, -1);  // "all" of one GPU is no island.
  EXPECT_EQ(f->nodes().front().gpus[0].mode, SharingMode::kExclusive);
}

struct JsonErrorCase {
  std::string name;
  std::string text;
  std::string want;  // The whole message.
};

// A fleet file around one shape's fields.
std::string OneShape(const std::string& fields) {
  return R"({"name": "f", "shapes": [{"name": "a", "count": 1, )" + fields + "}]}";
}
const std::string kGpuShape = R"("gpu_model": "H100-80GB", "gpus": 4, "vcpus": 8, "memory_gib": 8)";
const std::string kT4Shape = R"("gpu_model": "T4", "gpus": 2, "vcpus": 8, "memory_gib": 8)";
const std::string kIdRule =
    "must be 1-63 characters of [a-z0-9._-], starting with a letter or digit";

TEST(FleetJsonTest, RejectsBadFilesNamingFileShapeAndField) {
  const std::vector<JsonErrorCase> cases = {
      {"unknown top-level field",
       R"({"name": "f", "colour": "red", "shapes": [{"name": "a", "count": 1, "vcpus": 1,
           "memory_gib": 1}]})",
       "f.json: field 'colour': is not a known field"},
      {"no shapes", R"({"name": "f"})", "f.json: field 'shapes': is required"},
      {"empty shapes", R"({"name": "f", "shapes": []})",
       "f.json: field 'shapes': expected a non-empty list of node shapes"},
      {"shapes not a list", R"({"name": "f", "shapes": {"a": 1}})",
       "f.json: field 'shapes': expected a non-empty list of node shapes"},
      {"bad fleet name", R"({"name": "My Fleet", "shapes": [{"name": "a", "count": 1,
           "vcpus": 1, "memory_gib": 1}]})",
       "f.json: field 'name': " + kIdRule},
      {"top level not an object", "[1, 2]", "f.json: expected an object, found array"},
      {"shape not an object", R"({"name": "f", "shapes": [7]})",
       "f.json: shape 0: expected an object, found integer"},
      {"shape without a name", R"({"name": "f", "shapes": [{"count": 1, "vcpus": 1,
           "memory_gib": 1}]})",
       "f.json: shape 0: field 'name': is required"},
      {"bad shape name", R"({"name": "f", "shapes": [{"name": "A B", "count": 1, "vcpus": 1,
           "memory_gib": 1}]})",
       "f.json: shape 'A B': field 'name': " + kIdRule},
      {"typo in a shape field", OneShape(R"("gpu": 2, "vcpus": 1, "memory_gib": 1)"),
       "f.json: shape 'a': field 'gpu': is not a known field"},
      {"count zero",
       R"({"name": "f", "shapes": [{"name": "a", "count": 0, "gpus": 0, "vcpus": 1,
           "memory_gib": 1}]})",
       "f.json: shape 'a': field 'count': 0 is out of range [1, 100000]"},
      {"too many gpus", OneShape(R"("gpu_model": "T4", "gpus": 17, "vcpus": 1, "memory_gib": 1)"),
       "f.json: shape 'a': field 'gpus': 17 is out of range [0, 16]"},
      {"vcpus as text", OneShape(R"("gpus": 0, "vcpus": "many", "memory_gib": 1)"),
       "f.json: shape 'a': field 'vcpus': expected an integer, found string"},
      {"negative memory", OneShape(R"("gpus": 0, "vcpus": 1, "memory_gib": -4)"),
       "f.json: shape 'a': field 'memory_gib': -4 is out of range [1, 16777216]"},
      {"unknown model", OneShape(R"("gpu_model": "Z100", "gpus": 1, "vcpus": 1, "memory_gib": 1)"),
       "f.json: shape 'a': field 'gpu_model': unknown GPU model 'Z100'"},
      {"gpus without a model", OneShape(R"("gpus": 1, "vcpus": 1, "memory_gib": 1)"),
       "f.json: shape 'a': field 'gpu_model': is required"},
      {"model on a CPU-only shape",
       OneShape(R"("gpu_model": "T4", "gpus": 0, "vcpus": 1, "memory_gib": 1)"),
       "f.json: shape 'a': field 'gpu_model': given for a shape without GPUs"},
      {"mode on a CPU-only shape",
       OneShape(R"("gpus": 0, "vcpus": 1, "memory_gib": 1, "gpu_mode": "shared", "nvlink": "all")"),
       "f.json: shape 'a': field 'gpu_mode': given for a shape without GPUs\n"
       "f.json: shape 'a': field 'nvlink': given for a shape without GPUs"},
      {"unknown mode", OneShape(kT4Shape + R"(, "gpu_mode": "time-slice")"),
       "f.json: shape 'a': field 'gpu_mode': 'time-slice' is not one of exclusive, mig, shared"},
      {"mode not a string", OneShape(kT4Shape + R"(, "gpu_mode": 1)"),
       "f.json: shape 'a': field 'gpu_mode': expected a string, found integer"},
      {"too few modes", OneShape(kT4Shape + R"(, "gpu_modes": ["shared"])"),
       "f.json: shape 'a': field 'gpu_modes': 1 entries for 2 GPUs"},
      {"bad mode in the list", OneShape(kT4Shape + R"(, "gpu_modes": ["shared", "mps"])"),
       "f.json: shape 'a': field 'gpu_modes': item 1: 'mps' is not one of exclusive, mig, "
       "shared"},
      {"both mode fields",
       OneShape(kT4Shape + R"(, "gpu_mode": "shared", "gpu_modes": ["shared", "shared"])"),
       "f.json: shape 'a': field 'gpu_modes': give either gpu_mode or gpu_modes, not both"},
      {"mig on a model without MIG", OneShape(kT4Shape + R"(, "gpu_mode": "mig")"),
       "f.json: shape 'a': field 'gpu_mode': mig mode needs a model with MIG; T4-16GB has none"},
      {"mig in the list on a model without MIG",
       OneShape(kT4Shape + R"(, "gpu_modes": ["exclusive", "mig"])"),
       "f.json: shape 'a': field 'gpu_modes': mig mode needs a model with MIG; T4-16GB has none"},
      {"nvlink word", OneShape(kGpuShape + R"(, "nvlink": "some")"),
       "f.json: shape 'a': field 'nvlink': expected \"all\", \"none\" or a list of islands such "
       "as [[0, 1], [2, 3]], found 'some'"},
      {"nvlink number", OneShape(kGpuShape + R"(, "nvlink": 4)"),
       "f.json: shape 'a': field 'nvlink': expected \"all\", \"none\" or a list of islands such "
       "as [[0, 1], [2, 3]], found integer"},
      {"nvlink index out of range", OneShape(kGpuShape + R"(, "nvlink": [[0, 1], [2, 4]])"),
       "f.json: shape 'a': field 'nvlink': island 1: 4 is not a GPU index in [0, 3]"},
      {"nvlink index not a number", OneShape(kGpuShape + R"(, "nvlink": [[0, "1"]])"),
       "f.json: shape 'a': field 'nvlink': island 0: string is not a GPU index in [0, 3]"},
      {"nvlink islands overlap", OneShape(kGpuShape + R"(, "nvlink": [[0, 1, 2], [2, 3]])"),
       "f.json: shape 'a': field 'nvlink': island 1: gpu 2 is in two islands"},
      {"nvlink island of one", OneShape(kGpuShape + R"(, "nvlink": [[0], [1, 2]])"),
       "f.json: shape 'a': field 'nvlink': island 0: expected a list of at least 2 GPU indices"},
      {"duplicate shape names",
       R"({"name": "f", "shapes": [{"name": "a", "count": 1, "gpus": 0, "vcpus": 1,
           "memory_gib": 1}, {"name": "a", "count": 2, "gpus": 0, "vcpus": 1, "memory_gib": 1}]})",
       "f.json: shape 'a': field 'name': is used by another shape"},
      {"every shape's errors at once",
       R"({"name": "f", "shapes": [{"name": "a", "count": -1, "gpus": 0, "vcpus": 1,
           "memory_gib": 1}, {"name": "b", "count": 1, "gpus": 0, "vcpus": 0, "memory_gib": 1}]})",
       "f.json: shape 'a': field 'count': -1 is out of range [1, 100000]\n"
       "f.json: shape 'b': field 'vcpus': 0 is out of range [1, 100000]"},
      {"node names too long",
       fmt::format(R"({{"name": "f", "shapes": [{{"name": "{}",
           "count": 1, "gpus": 0, "vcpus": 1, "memory_gib": 1}}]}})",
                   std::string(56, 'x')),
       fmt::format("f.json: shape '{0}': node 'node-{0}-01': name: {1}", std::string(56, 'x'),
                   kIdRule)},
  };
  for (const JsonErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<Fleet> f = ParseFleetJson(TestCatalog(), c.text, "f.json");
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(f.status().message(), c.want);
  }
}

TEST(FleetJsonTest, MalformedJsonNamesTheFile) {
  Result<Fleet> f = ParseFleetJson(TestCatalog(), R"({"name": "f",)", "f.json");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), StartsWith("f.json: malformed JSON at byte"));
}

constexpr std::string_view kOpenbHeader = "sn,cpu_milli,memory_mib,gpu,model\n";

TEST(OpenbCsvTest, EachRowIsASharedNode) {
  const std::string text = std::string(kOpenbHeader) +
                           "openb-node-0000,32000,262144,0,\n"
                           "openb-node-0001,96000,393216,8,G2\n"
                           "\n"
                           "openb-node-0002,104000,524288,2,T4\r\n"
                           "openb-node-0003,8000,32768,1,V100M16\n";
  Result<Fleet> f = ParseOpenbNodeCsv(TestCatalog(), text, "nodes.csv");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(Shapes(*f), (std::vector<std::string>{
                            "openb-node-0000 - cpu=32000 mem=262144",
                            "openb-node-0001 G2 cpu=96000 mem=393216 shared/-1 shared/-1 "
                            "shared/-1 shared/-1 shared/-1 shared/-1 shared/-1 shared/-1",
                            "openb-node-0002 T4-16GB cpu=104000 mem=524288 shared/-1 shared/-1",
                            "openb-node-0003 V100-16GB cpu=8000 mem=32768 shared/-1",
                        }));
  EXPECT_EQ(f->total_gpus(), 11);
  EXPECT_EQ(f->node(NodeIndex(2)).gpus[1].free_memory_mib, 16384);
  EXPECT_EQ(*f->Find("openb-node-0003"), NodeIndex(3));
}

struct CsvErrorCase {
  std::string name;
  std::string text;
  std::string want;
};

TEST(OpenbCsvTest, RejectsBadRowsNamingFileAndLine) {
  const std::string h(kOpenbHeader);
  const std::vector<CsvErrorCase> cases = {
      {"unknown model", h + "n1,1000,1024,1,K80\n", "n.csv:2: unknown GPU model 'K80'"},
      {"non-integer cpu", h + "n1,lots,1024,0,\n",
       "n.csv:2: column 'cpu_milli': 'lots' is not an integer"},
      {"fractional gpu", h + "n1,1000,1024,0.5,T4\n",
       "n.csv:2: column 'gpu': '0.5' is not an integer"},
      {"negative memory", h + "n1,1000,-1,0,\n",
       "n.csv:2: column 'memory_mib': -1 is out of range [0, 17179869184]"},
      // Found by the openb_nodes fuzzer: two nodes of 2^63-1 milli-CPU overflowed the
      // scheduler's fleet-wide free-CPU sum. The limits are the fleet JSON's.
      {"more cpu than 100,000 vCPUs", h + "n1,100000001,1024,0,\n",
       "n.csv:2: column 'cpu_milli': 100000001 is out of range [0, 100000000]"},
      {"more memory than 2^24 GiB", h + "n1,1000,17179869185,0,\n",
       "n.csv:2: column 'memory_mib': 17179869185 is out of range [0, 17179869184]"},
      {"too many gpus", h + "n1,1000,1024,17,T4\n",
       "n.csv:2: column 'gpu': 17 is out of range [0, 16]"},
      {"gpus without a model", h + "n1,1000,1024,2,\n",
       "n.csv:2: node 'n1' has 2 GPUs but no model"},
      {"a model without gpus", h + "n1,1000,1024,0,T4\n",
       "n.csv:2: node 'n1' names model 'T4' but has 0 GPUs"},
      {"duplicate sn", h + "n1,1000,1024,0,\nn2,1000,1024,0,\nn1,1000,1024,0,\n",
       "n.csv:4: duplicate node 'n1' (first on line 2)"},
      {"empty sn", h + ",1000,1024,0,\n", "n.csv:2: column 'sn': is empty"},
      {"sn that is not a node name", h + "Node A,1000,1024,0,\n",
       "n.csv:2: node 'Node A': name: " + kIdRule},
      {"missing column", "sn,cpu_milli,memory_mib,gpu\nn1,1,1,0\n",
       "n.csv:1: header lacks column 'model' (expected sn,cpu_milli,memory_mib,gpu,model)"},
      {"short row", h + "n1,1000,1024,0\n", "n.csv:2: expected 5 fields, found 4"},
      {"no nodes", h, "n.csv: lists no nodes"},
  };
  for (const CsvErrorCase& c : cases) {
    SCOPED_TRACE(c.name);
    Result<Fleet> f = ParseOpenbNodeCsv(TestCatalog(), c.text, "n.csv");
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(f.status().message(), c.want);
  }
}

TEST(LoadFleetFileTest, PicksTheFormatByExtensionOrContent) {
  testing::TempDir dir;
  const std::string json = R"({"name": "f", "shapes": [{"name": "a", "count": 3, "gpus": 0,
      "vcpus": 1, "memory_gib": 1}]})";
  const std::string csv = std::string(kOpenbHeader) + "n1,1000,1024,1,T4\n";
  struct Case {
    std::string file, content;
    size_t nodes;
  };
  for (const Case& c : std::vector<Case>{{"fleet.json", json, 3},
                                         {"fleet.txt", "\n  " + json, 3},
                                         {"nodes.csv", csv, 1},
                                         {"nodes", csv, 1}}) {
    SCOPED_TRACE(c.file);
    Result<Fleet> f = LoadFleetFile(TestCatalog(), dir.Write(c.file, c.content));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->size(), c.nodes);
  }
  // A .json file is read as JSON even when it does not start like JSON, and errors name it.
  const std::string bad = dir.Write("bad.json", csv);
  EXPECT_THAT(LoadFleetFile(TestCatalog(), bad).status().message(),
              StartsWith(bad + ": malformed JSON"));
  const std::string bad_csv = dir.Write("bad.csv", std::string(kOpenbHeader) + "n1,1,1,1,X\n");
  EXPECT_EQ(LoadFleetFile(TestCatalog(), bad_csv).status().message(),
            bad_csv + ":2: unknown GPU model 'X'");
  const Status missing = LoadFleetFile(TestCatalog(), dir.File("absent.json")).status();
  EXPECT_EQ(missing, Status::NotFound(dir.File("absent.json") + ": cannot open file"));
}

TEST(DemoFleetTest, FileAndEmbeddedCopyAgree) {
  const std::string path = testing::SourceDir() + "/fleets/demo.json";
  Result<Fleet> from_file = LoadFleetFile(TestCatalog(), path);
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  Result<Fleet> embedded = DemoFleet(TestCatalog());
  ASSERT_TRUE(embedded.ok()) << embedded.status().ToString();
  EXPECT_EQ(Shapes(*from_file), Shapes(*embedded));
  Result<std::string> text = ReadFile(path);
  ASSERT_TRUE(text.ok());
  Result<nlohmann::json> file_json = ParseJson(*text, path);
  Result<nlohmann::json> embedded_json = ParseJson(DemoFleetJson(), "embedded");
  ASSERT_TRUE(file_json.ok() && embedded_json.ok());
  EXPECT_EQ(*file_json, *embedded_json)
      << "fleets/demo.json and the embedded copy in fleet_file.cc differ";
}

TEST(DemoFleetTest, HasEveryModeOnTheAgreedShapes) {
  Result<Fleet> f = DemoFleet(TestCatalog());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->name(), "demo");
  EXPECT_EQ(f->size(), 12u);
  EXPECT_EQ(f->total_gpus(), 2 * 8 + 2 * 8 + 4 * 4 + 4 * 2);
  EXPECT_EQ(Shape(*f, f->node(*f->Find("node-a100-02"))),
            "node-a100-02 A100-80GB cpu=96000 mem=1179648 mig/0 mig/0 mig/0 mig/0 exclusive/0 "
            "exclusive/0 exclusive/0 exclusive/0");
  EXPECT_EQ(Shape(*f, f->node(*f->Find("node-l40s-04"))),
            "node-l40s-04 L40S-48GB cpu=48000 mem=393216 shared/-1 shared/-1 exclusive/-1 "
            "exclusive/-1");
  EXPECT_EQ(Shape(*f, f->node(*f->Find("node-t4-01"))),
            "node-t4-01 T4-16GB cpu=32000 mem=131072 shared/-1 exclusive/-1");
  EXPECT_EQ(Shape(*f, f->node(*f->Find("node-h100-01"))),
            "node-h100-01 H100-80GB cpu=192000 mem=2097152 exclusive/0 exclusive/0 exclusive/0 "
            "exclusive/0 exclusive/0 exclusive/0 exclusive/0 exclusive/0");
}

TEST(FleetFilesTest, EveryExampleInFleetsLoads) {
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(testing::SourceDir() + "/fleets")) {
    if (e.path().extension() != ".json") continue;
    SCOPED_TRACE(e.path().string());
    ++files;
    Result<Fleet> f = LoadFleetFile(TestCatalog(), e.path().string());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->name(), e.path().stem().string());
    EXPECT_GT(f->total_gpus(), 0);
  }
  EXPECT_GE(files, 2u);
}

struct OpenbTotals {
  size_t nodes = 0, cpu_only = 0;
  int64_t gpus = 0, vcpus = 0;
};

OpenbTotals Totals(const Fleet& f) {
  OpenbTotals t;
  t.nodes = f.size();
  t.gpus = f.total_gpus();
  int64_t cpu_milli = 0;
  for (const Node& n : f.nodes()) {
    cpu_milli += n.cpu_milli;
    if (n.gpus.empty()) ++t.cpu_only;
  }
  t.vcpus = cpu_milli / 1000;
  return t;
}

TEST(OpenbCsvTest, LoadsThePublicNodeLists) {
  TESSERA_DATASETS_OR_SKIP(datasets);
  Result<Fleet> gpu =
      LoadFleetFile(TestCatalog(), datasets + "/openb/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const OpenbTotals g = Totals(*gpu);
  EXPECT_EQ(g.nodes, 1213u);
  EXPECT_EQ(g.gpus, 6212);
  EXPECT_EQ(g.vcpus, 107018);
  EXPECT_EQ(g.cpu_only, 0u);
  Result<Fleet> all =
      LoadFleetFile(TestCatalog(), datasets + "/openb/openb_node_list_all_node.csv");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const OpenbTotals a = Totals(*all);
  EXPECT_EQ(a.nodes, 1523u);
  EXPECT_EQ(a.cpu_only, 310u);
  EXPECT_EQ(a.gpus, 6212);
  EXPECT_EQ(a.vcpus, 125514);
}

}  // namespace
}  // namespace tessera::fleet
