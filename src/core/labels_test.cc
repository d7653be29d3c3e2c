#include "core/labels.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace tessera::core {
namespace {

TEST(LabelsTest, KeysAndValuesFollowKubernetesRules) {
  EXPECT_TRUE(ValidateLabels({{"team", "ml"}, {"tessera.dev/pool", "a100"}, {"empty", ""}}).ok());
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"-team", "x"},
      {"team-", "x"},
      {"", "x"},
      {"a/b/c", "x"},
      {"Upper.Case/x", "x"},
      {std::string(64, 'k'), "x"},
      {"team", "-x"},
      {"team", std::string(64, 'v')},
      {"team", "a b"},
      {"te\x1bm", "x"},
  };
  for (const auto& [k, v] : bad) {
    const Status s = ValidateLabels({{k, v}});
    EXPECT_FALSE(s.ok()) << k << "=" << v;
    EXPECT_EQ(s.message().find('\x1b'), std::string::npos) << "keys are escaped in messages";
  }
  std::map<std::string, std::string> many;
  for (int i = 0; i <= 64; ++i) many.emplace(fmt::format("k{}", i), std::string(1, 'v'));
  EXPECT_EQ(ValidateLabels(many).message(), "field 'labels': 65 labels; at most 64");
}

TEST(LabelsTest, AnnotationsAreBoundedInCountAndBytes) {
  EXPECT_TRUE(ValidateAnnotations({{"note", "any text\nat all"}}).ok());
  EXPECT_EQ(ValidateAnnotations({{"note", std::string(64 << 10, 'x')}}).message(),
            "field 'annotations': 65540 bytes of keys and values; at most 65536");
}

TEST(LabelsTest, SelectorsMatchEqualityInequalityAndExistence) {
  const std::map<std::string, std::string> labels = {{"team", "ml"}, {"env", "prod"}};
  struct Case {
    std::string selector;
    bool match;
  };
  for (const Case& c : std::vector<Case>{{"", true},
                                         {"team=ml", true},
                                         {"team==ml", true},
                                         {"team=ops", false},
                                         {"team!=ops", true},
                                         {"env!=prod", false},
                                         {"team, env=prod", true},
                                         {"gpu", false},
                                         {"!gpu", true},
                                         {"!team", false},
                                         {"missing!=x", true}}) {
    auto s = ParseLabelSelector(c.selector);
    ASSERT_TRUE(s.ok()) << c.selector << ": " << s.status().message();
    EXPECT_EQ(Matches(*s, labels), c.match) << c.selector;
  }
  auto bad = ParseLabelSelector("team=ml,=x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "query parameter 'label_selector': '=x' is not key, !key, key=value or key!=value");
}

}  // namespace
}  // namespace tessera::core
