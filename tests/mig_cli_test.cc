// End-to-end checks of `tessera mig check` and `tessera mig plan`: exit codes 0 (valid / planned),
// 1 (invalid / no room) and 2 (bad usage, unknown names), and exactly what they print.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace tessera {
namespace {

using testing::RunTessera;

struct CliCase {
  std::vector<std::string> args;
  int exit_code;
  std::string out;  // Exact stdout.
  std::string err;  // Exact stderr when `err_contains` is empty.
  std::string err_contains = "";
};

void Expect(const CliCase& c) {
  std::string line;
  for (const std::string& a : c.args) line += " " + a;
  testing::CommandResult r = RunTessera(c.args);
  EXPECT_EQ(r.exit_code, c.exit_code) << line << "\n" << r.out << r.err;
  EXPECT_EQ(r.out, c.out) << line;
  if (c.err_contains.empty()) {
    EXPECT_EQ(r.err, c.err) << line;
  } else {
    EXPECT_NE(r.err.find(c.err_contains), std::string::npos) << line << "\n" << r.err;
  }
}

const char* kH100Profiles = "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb";
const char* kMigModels =
    "A100-40GB, A100-80GB, H100-80GB, H100-NVL-94GB, H200-141GB, B200-180GB, A30-24GB";

TEST(MigCliTest, Check) {
  const std::vector<CliCase> cases = {
      {{"mig", "check", "--gpu", "H100-80GB", "4g.40gb@0", "3g.40gb@4"}, 0, "valid\n", ""},
      {{"mig", "check", "--gpu", "A30-24GB", "2g.12gb+me@0", "1g.6gb@2", "1g.6gb@3"},
       0,
       "valid\n",
       ""},
      {{"mig", "check", "--gpu", "H100-80GB", "3g.40gb@4", "1g.10gb@5"},
       1,
       "invalid: memory slices overlap: 3g.40gb@4 and 1g.10gb@5\n",
       ""},
      {{"mig", "check", "--gpu", "H100-80GB", "3g.40gb@3"},
       1,
       "invalid: start 3 is not valid for 3g.40gb (valid: 0, 4)\n",
       ""},
      {{"mig", "check", "--gpu", "A100-40GB", "1g.5gb+me@0", "1g.5gb+me@6"},
       1,
       "invalid: more than one +me instance: 1g.5gb+me@0 1g.5gb+me@6\n",
       ""},
      {{"mig", "check", "--gpu", "H100-80GB", "3g.40gb@x"},
       2,
       "",
       "tessera mig check: '3g.40gb@x': start 'x' is not a memory-slice index (0, 1, 2, ...)\n"},
      {{"mig", "check", "--gpu", "H100-80GB", "3g.40gb"},
       2,
       "",
       "tessera mig check: '3g.40gb' is not PROFILE@START (for example 1g.10gb@0)\n"},
      {{"mig", "check", "--gpu", "H100-80GB", "3g.20gb@0"},
       2,
       "",
       std::string("tessera mig check: unknown MIG profile '3g.20gb' on H100-80GB; valid: ") +
           kH100Profiles + "\n"},
      {{"mig", "check", "--gpu", "H999", "3g.40gb@0"},
       2,
       "",
       std::string("tessera mig check: unknown GPU model 'H999'; MIG-capable models: ") +
           kMigModels + "\n"},
      {{"mig", "check", "3g.40gb@0"}, 2, "", "", "--gpu is required"},
      {{"mig", "check", "--gpu", "H100-80GB"}, 2, "", "", "instances is required"},
      {{"mig"}, 2, "", "", "A subcommand is required"},
  };
  for (const CliCase& c : cases) Expect(c);
}

TEST(MigCliTest, Plan) {
  const std::vector<CliCase> cases = {
      // The example from the docs: the 2g takes 0 and the 1g goes to 3, leaving slice 2 free.
      {{"mig", "plan", "--gpu", "H100-80GB", "--existing", "3g.40gb@4", "1g.10gb", "2g.20gb"},
       0,
       "3g.40gb@4 1g.10gb@3 2g.20gb@0\n",
       ""},
      // A lone 1g keeps off slices 0-3, so 4g@0 stays possible.
      {{"mig", "plan", "--gpu", "H100-80GB", "1g.10gb"}, 0, "1g.10gb@6\n", ""},
      {{"mig", "plan", "--gpu", "H100-80GB", "3g.40gb", "4g.40gb"}, 0, "3g.40gb@4 4g.40gb@0\n", ""},
      {{"mig", "plan", "--gpu", "H100-80GB", "4g.40gb", "3g.40gb"}, 0, "4g.40gb@0 3g.40gb@4\n", ""},
      {{"mig", "plan", "--gpu", "A30-24GB", "--existing", "1g.6gb@0", "2g.12gb", "1g.6gb"},
       0,
       "1g.6gb@0 2g.12gb@2 1g.6gb@1\n",
       ""},
      // --existing may be repeated, and profiles may come before it.
      {{"mig", "plan", "--gpu", "H100-80GB", "2g.20gb", "--existing", "4g.40gb@0", "--existing",
        "1g.10gb@6"},
       0,
       "4g.40gb@0 1g.10gb@6 2g.20gb@4\n",
       ""},
      {{"mig", "plan", "--gpu", "H100-80GB", "--existing", "1g.10gb@2", "4g.40gb"},
       1,
       "",
       "tessera mig plan: no room for 4g.40gb: 4g.40gb@0 overlaps 1g.10gb@2\n"},
      {{"mig", "plan", "--gpu", "H100-80GB", "3g.40gb", "3g.40gb", "3g.40gb"},
       1,
       "",
       "tessera mig plan: no room for 3g.40gb beside the other new instances in any "
       "arrangement; with the best one (3g.40gb@0 3g.40gb@4): at most 2 3g.40gb fit on one "
       "GPU\n"},
      {{"mig", "plan", "--gpu", "H100-80GB", "--existing", "3g.40gb@4", "1g.10gb@5", "1g.10gb"},
       1,
       "",
       "tessera mig plan: existing instances: memory slices overlap: 3g.40gb@4 and "
       "1g.10gb@5\n"},
      {{"mig", "plan", "--gpu", "H100-80GB", "--existing", "3g.40gb@x", "1g.10gb"},
       2,
       "",
       "tessera mig plan: '3g.40gb@x': start 'x' is not a memory-slice index (0, 1, 2, ...)\n"},
      {{"mig", "plan", "--gpu", "H100-80GB", "5g.50gb"},
       2,
       "",
       std::string("tessera mig plan: unknown MIG profile '5g.50gb' on H100-80GB; valid: ") +
           kH100Profiles + "\n"},
      {{"mig", "plan", "--gpu", "V100-32GB", "1g.10gb"}, 2, "", "", "MIG-capable models: "},
      {{"mig", "plan", "--gpu", "H100-80GB", "3g.40gb@4", "1g.10gb"},
       2,
       "",
       "tessera mig plan: '3g.40gb@4' names a start; list existing instances after "
       "--existing\n"},
      {{"mig", "plan", "--gpu", "H100-80GB", "--existing", "3g.40gb@4"},
       2,
       "",
       "tessera mig plan: no profiles to add; name at least one PROFILE\n"},
      {{"mig", "plan", "1g.10gb"}, 2, "", "", "--gpu is required"},
      {{"mig", "plan", "--gpu", "H100-80GB"}, 2, "", "", "profiles is required"},
  };
  for (const CliCase& c : cases) Expect(c);
}

TEST(MigCliTest, HelpExplainsTheArguments) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"mig", "--help"},
                                               {"mig", "check", "--help"},
                                               {"mig", "plan", "--help"}}) {
    testing::CommandResult r = RunTessera(args);
    EXPECT_EQ(r.exit_code, 0) << args.size();
    for (const char* want : {"MODEL is a catalog GPU model id", "PROFILE is NVIDIA's profile name",
                             "nvidia-smi mig -lgipp"}) {
      EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
    }
  }
  testing::CommandResult plan = RunTessera({"mig", "plan", "--help"});
  EXPECT_NE(plan.out.find("--existing"), std::string::npos) << plan.out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --catalog reads the tables from a directory: in this copy of the catalog, H100-80GB's 3g.40gb
// may start only at slice 0.
TEST(MigCliTest, CatalogDirectoryIsUsed) {
  const std::string src = testing::SourceDir() + "/catalog";
  testing::TempDir dir;
  for (const char* name : {"gpus.json", "instance_types.json", "prices.json"}) {
    dir.Write(name, ReadAll(src + "/" + name));
  }
  std::string mig = ReadAll(src + "/mig.json");
  const size_t h100 = mig.find(R"("model": "H100-80GB")");
  ASSERT_NE(h100, std::string::npos);
  const std::string starts = R"("starts": [0, 4])";
  const size_t at = mig.find(starts, h100);
  ASSERT_NE(at, std::string::npos);
  mig.replace(at, starts.size(), R"("starts": [0])");
  dir.Write("mig.json", mig);

  Expect(
      {{"mig", "plan", "--gpu", "H100-80GB", "--catalog", src, "3g.40gb"}, 0, "3g.40gb@4\n", ""});
  Expect({{"mig", "plan", "--gpu", "H100-80GB", "--catalog", dir.path(), "3g.40gb"},
          0,
          "3g.40gb@0\n",
          ""});
  Expect({{"mig", "check", "--gpu", "H100-80GB", "--catalog", dir.path(), "3g.40gb@4"},
          1,
          "invalid: start 4 is not valid for 3g.40gb (valid: 0)\n",
          ""});
  Expect({{"mig", "check", "--gpu", "H100-80GB", "--catalog", dir.path() + "/nope", "7g.80gb@0"},
          1,
          "",
          "",
          "cannot load the catalog"});
}

}  // namespace
}  // namespace tessera
