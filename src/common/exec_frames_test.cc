#include "common/exec_frames.h"

#include <gtest/gtest.h>

namespace tessera::exec {
namespace {

TEST(ExecFramesTest, FramesCutFromAStreamInAnyPiecesComeOutWhole) {
  const std::string stream =
      Encode(Frame::kStdout, "hello") + Encode(Frame::kStdinEnd, "") + Encode(Frame::kExit, "7");
  EXPECT_EQ(stream.substr(0, 5), std::string("o\0\0\0\5", 5));
  FrameReader reader;
  std::vector<std::pair<Frame, std::string>> got;
  for (char c : stream) {  // One byte at a time: the worst a socket can do.
    reader.Feed(std::string_view(&c, 1));
    for (;;) {
      auto f = reader.Next();
      ASSERT_TRUE(f.ok()) << f.status().message();
      if (!*f) break;
      got.push_back(**f);
    }
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], std::make_pair(Frame::kStdout, std::string("hello")));
  EXPECT_EQ(got[1], std::make_pair(Frame::kStdinEnd, std::string()));
  EXPECT_EQ(got[2], std::make_pair(Frame::kExit, std::string("7")));
}

TEST(ExecFramesTest, AnUnknownTypeOrAnOversizedFrameBreaksTheStreamSayingWhy) {
  FrameReader unknown;
  unknown.Feed(std::string("z\0\0\0\0", 5));
  auto bad = unknown.Next();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("0x7a"), std::string::npos) << bad.status().message();
  FrameReader huge;
  huge.Feed(std::string("o\xff\xff\xff\xff", 5));
  auto over = huge.Next();
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("4294967295"), std::string::npos);
}

TEST(ExecFramesTest, ATerminalSizeIsTwoNumbersWithinBounds) {
  EXPECT_EQ(ParseSize("120 40"), std::make_optional(std::make_pair(120, 40)));
  for (const char* bad : {"", "120", "120 ", "0 40", "120 1001", "-1 40", "12x 40", "120  40"}) {
    EXPECT_FALSE(ParseSize(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace tessera::exec
