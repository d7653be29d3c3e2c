#include "common/text.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(TextTest, FindsTheFirstByteThatBreaksUtf8) {
  struct Case {
    std::string text;
    std::optional<size_t> bad;
  };
  const std::vector<Case> cases = {
      {"", std::nullopt},
      {"plain ascii", std::nullopt},
      {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", std::nullopt},  // é € 😀
      {"\xff", 0},
      {"ab\xc3", 2},            // Truncated sequence.
      {"\xc0\x80", 0},          // Overlong NUL.
      {"\xe0\x80\xaf", 0},      // Overlong slash.
      {"\xed\xa0\x80", 0},      // A surrogate.
      {"\xf4\x90\x80\x80", 0},  // Above U+10FFFF.
      {"ok\x80", 2},            // A lone continuation byte.
      {"\xe2\x82", 0},          // Truncated at the end.
      {"x\xf0\x9f\x98\x80y", std::nullopt},
  };
  for (const Case& c : cases) EXPECT_EQ(FindInvalidUtf8(c.text), c.bad) << c.text;
}

TEST(TextTest, SplitKeepsEmptyFields) {
  EXPECT_EQ(Split("a,,b", ','), (std::vector<std::string_view>{"a", "", "b"}));
  EXPECT_EQ(Split("", ','), (std::vector<std::string_view>{""}));
  EXPECT_EQ(Split("0 14 * * 1-5", ' ').size(), 5u);
  EXPECT_EQ(Split("x,", ','), (std::vector<std::string_view>{"x", ""}));
}

TEST(TextTest, HostAddressesAreLiteralsOrDnsNames) {
  for (const char* ok : {"10.0.0.5", "fd00::1", "::1", "gpu-07", "gpu-07.dc1.example.com"}) {
    EXPECT_TRUE(IsHostAddress(ok)) << ok;
  }
  for (const char* bad : {"", "-gpu", "gpu-", "a..b", "gpu_07", "10.0.0.5:80", "a b", "[fd00::1]",
                          "\xff", "http://x"}) {
    EXPECT_FALSE(IsHostAddress(bad)) << bad;
  }
  EXPECT_FALSE(IsHostAddress(std::string(254, 'a')));
  EXPECT_EQ(HostPort("10.0.0.5", 29500), "10.0.0.5:29500");
  EXPECT_EQ(HostPort("fd00::1", 29500), "[fd00::1]:29500");
  // Before the port is known, a placeholder the agent fills in.
  EXPECT_EQ(HostPort("fd00::1", "{port}"), "[fd00::1]:{port}");
  EXPECT_EQ(HostPort("node-a.example", "{port}"), "node-a.example:{port}");
}

TEST(TextTest, EscapesWhatATerminalWouldActOn) {
  EXPECT_EQ(EscapeForTerminal("train-01"), "train-01");
  EXPECT_EQ(EscapeForTerminal("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(EscapeForTerminal("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(EscapeForTerminal("\x1b[31mred\x1b[0m"), "\\e[31mred\\e[0m");
  EXPECT_EQ(EscapeForTerminal(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(EscapeForTerminal("del\x7f"), "del\\x7f");
  EXPECT_EQ(EscapeForTerminal("back\\slash"), "back\\\\slash");
  EXPECT_EQ(EscapeForTerminal("\xc2\x9b"
                              "2J"),
            "\\u009b2J");  // C1 CSI.
  EXPECT_EQ(EscapeForTerminal("abc\xe2\x80\xae"
                              "cba"),
            "abc\\u202ecba");  // Bidi override.
  EXPECT_EQ(EscapeForTerminal("x\xffy"), "x\\xffy");
  // Whatever goes in, nothing a terminal acts on comes out.
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (const char c : EscapeForTerminal(all)) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_FALSE(u < 0x20 || u == 0x7f) << int(u);
  }
  EXPECT_FALSE(FindInvalidUtf8(EscapeForTerminal(all)));
}

}  // namespace
}  // namespace tessera
