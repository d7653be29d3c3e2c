// End-to-end checks of the command line as a whole.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <thread>

#include "testing/testing.h"

namespace tessera {
namespace {

using testing::RunTessera;
using testing::TempDir;

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

// `tessera server --demo` (make run) shows its admin token at every start, the same one after a
// restart, kept 0600 in the data directory.
TEST(CliTest, TheDemoKeepsItsAdminTokenAcrossARestart) {
  TempDir dir;
  auto token_of = [&](std::string* out) {
    testing::ServerProcess server;
    ASSERT_TRUE(server.Start({"--demo", "--data", dir.File("data")}, "")) << server.output();
    const std::string marker = "admin token: ";
    for (int i = 0; i < 200 && server.output().find("tessera demo") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const std::string& o = server.output();
    const size_t at = o.find(marker);
    ASSERT_NE(at, std::string::npos) << o;
    *out = o.substr(at + marker.size(), o.find('\n', at) - at - marker.size());
    const auto who = testing::RunTessera({"nodes", "list", "--url", server.url(), "--token", *out});
    EXPECT_EQ(who.exit_code, 0) << who.err;
  };
  std::string first, second;
  ASSERT_NO_FATAL_FAILURE(token_of(&first));
  ASSERT_NO_FATAL_FAILURE(token_of(&second));
  EXPECT_EQ(first.size(), 68u) << first;
  EXPECT_EQ(first, second);
  struct stat st {};
  ASSERT_EQ(stat(dir.File("data/demo-admin-token").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(CliTest, UnknownSubcommandIsAUsageError) {
  auto r = RunTessera({"no-such-command"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no-such-command"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tessera
