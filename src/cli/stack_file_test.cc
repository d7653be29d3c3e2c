// The stack file reader: documents become the request's objects with their types, variables
// take their defaults and --var, and the server's errors come back to the file's line and column.
#include "cli/stack_file.h"

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace tessera::cli {
namespace {

using nlohmann::json;

TEST(StackFileTest, DocumentsBecomeObjectsWithTheirTypesAndVariables) {
  testing::TempDir dir;
  const std::string file = dir.Write("train.yaml", R"(variables:
  gpus: 2
  team: ml
  spot: false
---
kind: instance
name: trainer
gpus: ${gpus}
nvlink: ${spot}
vcpus: 8
price_note: "8"
labels: {team: "${team}-x", version: "1.10"}
command: echo $${HOME} ${ref:instance/db.node}
---
)");
  auto s = LoadStack(file, {"team=research"});
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->objects.size(), 1u);
  const json& o = s->objects[0];
  EXPECT_EQ(o["gpus"], 2);  // A whole ${var} keeps its type.
  EXPECT_EQ(o["nvlink"], false);
  EXPECT_EQ(o["vcpus"], 8);
  EXPECT_EQ(o["price_note"], "8");               // Quoted: text.
  EXPECT_EQ(o["labels"]["team"], "research-x");  // --var over the default, within text.
  EXPECT_EQ(o["labels"]["version"], "1.10");
  // $${ is a literal ${; a reference is left for the server.
  EXPECT_EQ(o["command"], "echo ${HOME} ${ref:instance/db.node}");
  EXPECT_EQ(DefaultStackName(file), "train");

  // --var values read as YAML scalars: a number stays a number.
  auto typed = LoadStack(file, {"gpus=4"});
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ(typed->objects[0]["gpus"], 4);
}

TEST(StackFileTest, ServerErrorsAreShownAtTheirFileLineAndColumn) {
  testing::TempDir dir;
  const std::string file = dir.Write("s.yaml", R"(kind: instance
name: a
billing: on_demand
---
kind: group
name: g
template:
  gpus: 99
notify:
  - webhook: x
)");
  auto s = LoadStack(file, {});
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->Locate("objects[1] (group 'g'): field 'template.gpus': too many"), file + ":8:3: ");
  EXPECT_EQ(s->Locate("objects[1] (group 'g'): field 'notify[0].webhook': bad"), file + ":10:5: ");
  // A field not in the file (a default the server checked): its nearest named parent.
  EXPECT_EQ(s->Locate("objects[1] (group 'g'): field 'template.vcpus': is missing"),
            file + ":7:1: ");
  // No field: the object's document.
  EXPECT_EQ(s->Locate("objects[0] (instance 'a'): quota exceeded"), file + ":1:1: ");
  EXPECT_EQ(s->Locate("objects[7] (instance 'z'): ?"), "");
  EXPECT_EQ(s->Locate("stack 'x' changed"), "");
}

TEST(StackFileTest, BadFilesAreRefusedNamingTheLine) {
  testing::TempDir dir;
  struct Case {
    std::string yaml, says;
  };
  const std::vector<Case> cases = {
      {"kind: instance\nname: a\ngpus: ${n}\n", ":3:7: variable 'n' is not defined"},
      {"kind: instance\nname: a\ncommand: echo ${\n", ":3:10: '${' is not closed"},
      {"kind: instance\nname: a\nname: b\n", ":3:1: field 'name': is given twice"},
      {"- just\n- a list\n", ":1:1: a document must be an object"},
      {"kind: instance\n", ":1:1: field 'name': is missing"},
      {"kind: instance\nname: [unclosed\n", "s.yaml:"},
      {"variables: [1]\n", ":1:12: `variables:` must map names"},
      {"", "holds no object"},
  };
  for (const Case& c : cases) {
    const std::string file = dir.Write("s.yaml", c.yaml);
    auto s = LoadStack(file, {});
    ASSERT_FALSE(s.ok()) << c.yaml;
    EXPECT_NE(s.status().message().find(c.says), std::string::npos) << c.yaml << "\n"
                                                                    << s.status().message();
  }
  EXPECT_EQ(LoadStack(dir.File("none.yaml"), {}).status().code(), StatusCode::kNotFound);
  const std::string ok = dir.Write("ok.yaml", "kind: budget\nname: b\nmonthly_usd: '1'\n");
  auto bad_var = LoadStack(ok, {"no-equals"});
  ASSERT_FALSE(bad_var.ok());
  EXPECT_NE(bad_var.status().message().find("--var 'no-equals': expected NAME=VALUE"),
            std::string::npos);
  const std::string invalid = dir.Write("u.yaml", "kind: budget\nname: \"\xff\"\n");
  auto utf8 = LoadStack(invalid, {});
  ASSERT_FALSE(utf8.ok());
  EXPECT_NE(utf8.status().message().find("not valid UTF-8"), std::string::npos)
      << utf8.status().message();
}

TEST(StackFileTest, ADirectoryIsItsYamlFilesInNameOrder) {
  testing::TempDir dir;
  dir.Write("stack/b.yml", "kind: instance\nname: second\n");
  dir.Write("stack/a.yaml", "variables: {x: 1}\n---\nkind: instance\nname: first\nn: ${x}\n");
  dir.Write("stack/notes.txt", "not yaml: [\n");
  auto s = LoadStack(dir.File("stack"), {});
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->objects.size(), 2u);
  EXPECT_EQ(s->objects[0]["name"], "first");
  EXPECT_EQ(s->objects[0]["n"], 1);
  EXPECT_EQ(s->objects[1]["name"], "second");
  EXPECT_EQ(s->Locate("objects[1] (instance 'second'): x"), dir.File("stack/b.yml") + ":1:1: ");
  EXPECT_EQ(DefaultStackName(dir.File("stack")), "stack");
}

}  // namespace
}  // namespace tessera::cli
