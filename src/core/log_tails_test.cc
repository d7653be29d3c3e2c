// Log tails alone: what agents ship joined at its offsets (a resend, a gap, a restart), read by
// lines or from an offset, bounded to the newest bytes, and where an agent resumes. The state's
// own test (agent_hub_test.cc) ships them through a real agent's reports.
#include "core/log_tails.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::core {
namespace {

WorkloadLog Shipped(int attempt, int64_t offset, std::string data) {
  WorkloadLog log;
  log.instance = "inst-000001";
  log.attempt = attempt;
  log.offset = offset;
  log.data = std::move(data);
  return log;
}

TEST(LogTailsTest, AResendIsHeldOnceAGapIsSaidAndARestartIsMarked) {
  LogTails logs;
  EXPECT_EQ(logs.Read("inst-000001", 10, std::nullopt).text, "");
  logs.Append("inst-000001", Shipped(0, 0, "one\ntwo\n"));
  logs.Append("inst-000001", Shipped(0, 4, "two\nthree\n"));  // Resent from an older offset.
  EXPECT_EQ(logs.Read("inst-000001", 10, std::nullopt).text, "one\ntwo\nthree\n");
  EXPECT_EQ(logs.ResumeAt("inst-000001", 0), 14);
  logs.Append("inst-000001", Shipped(0, 20, "four\n"));  // Six bytes the agent dropped.
  EXPECT_EQ(logs.Read("inst-000001", 2, std::nullopt).text,
            "[... 6 bytes dropped by the agent ...]\nfour\n");
  EXPECT_EQ(logs.ResumeAt("inst-000001", 1), 0) << "a new attempt starts at its own offset 0";
  logs.Append("inst-000001", Shipped(1, 0, "again\n"));
  const LogTails::Slice last = logs.Read("inst-000001", 2, std::nullopt);
  EXPECT_EQ(last.text, "--- attempt 2 (restart 1) ---\nagain\n");
  EXPECT_EQ(last.end, 6);
  EXPECT_EQ(logs.Read("inst-000001", 0, int64_t{3}).text, "in\n") << "after offset 3";
  EXPECT_EQ(logs.Read("inst-000001", 0, int64_t{6}).text, "") << "nothing new";
}

TEST(LogTailsTest, OnlyTheNewestBytesAreKeptAndErasingFreesThem) {
  LogTails logs;
  const std::string line(1023, 'x');
  for (int i = 0; i < 300; ++i) {
    logs.Append("inst-000002", Shipped(0, static_cast<int64_t>(i) * 1024, line + "\n"));
  }
  const LogTails::Slice all = logs.Read("inst-000002", 1'000'000, std::nullopt);
  EXPECT_EQ(all.text.size(), LogTails::kTailBytes);
  EXPECT_EQ(all.end, 300 * 1024);
  // From an offset older than what is kept: what is kept.
  EXPECT_EQ(logs.Read("inst-000002", 0, int64_t{0}).text.size(), LogTails::kTailBytes);
  EXPECT_EQ(logs.size(), 1u);
  logs.Erase("inst-000002");
  EXPECT_EQ(logs.size(), 0u);
  EXPECT_EQ(logs.ResumeAt("inst-000002", 0), 0);
}

}  // namespace
}  // namespace tessera::core
