// End-to-end checks of the command line as a whole.
#include <gtest/gtest.h>

#include "testing/testing.h"

namespace tessera {
namespace {

using testing::RunTessera;

TEST(CliTest, HelpListsTheJobs) {
  auto r = RunTessera({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("Usage: tessera"), std::string::npos) << r.out;
}

TEST(CliTest, TheVersionIsPrintedAsAFlagAndAsACommand) {
  for (const char* how : {"--version", "version"}) {
    auto r = RunTessera({how});
    EXPECT_EQ(r.exit_code, 0) << how << r.err;
    EXPECT_EQ(r.out, "tessera 0.1.0\n") << how;
  }
}

TEST(CliTest, UnknownFlagIsAUsageErrorNamingIt) {
  auto r = RunTessera({"instances", "list", "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--no-such-flag"), std::string::npos) << r.err;
}

TEST(CliTest, UnknownSubcommandIsAUsageError) {
  auto r = RunTessera({"no-such-command"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no-such-command"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
