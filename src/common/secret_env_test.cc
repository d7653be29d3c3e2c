#include "common/secret_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "testing/testing.h"

namespace tessera {
namespace {

constexpr const char* kSecret = "tsr_secret-in-the-environment-0123456789";
constexpr const char* kDuplicate = "tsr_a-second-entry-of-the-same-name";
constexpr const char* kReplaced = "tsr_the-value-a-setenv-replaced";

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// What another process (ps e, a tenant's workload) would read of this one's environment.
std::string ProcEnviron() { return ReadWhole("/proc/self/environ"); }

// Not a test on its own: SecretsLeaveTheEnvironmentBlock runs it in a child process started with
// the secrets in its environment block, as a server or an agent is.
TEST(SecretEnvTest, DISABLED_ChildTakesItsSecrets) {
  const std::string before = ProcEnviron();
  // The checks below can fail: the secrets are in the block to begin with.
  ASSERT_NE(before.find(kSecret), std::string::npos);
  ASSERT_NE(before.find(kDuplicate), std::string::npos);
  ASSERT_NE(before.find(kReplaced), std::string::npos);

  EXPECT_EQ(TakeSecretEnv("TESSERA_TEST_SECRET"), kSecret);
  EXPECT_EQ(std::getenv("TESSERA_TEST_SECRET"), nullptr);
  // A setenv copies the new value to the heap; the old one stays in the block.
  ASSERT_EQ(setenv("TESSERA_TEST_REPLACED", "tsr_the-new-value", 1), 0);
  EXPECT_EQ(TakeSecretEnv("TESSERA_TEST_REPLACED"), "tsr_the-new-value");
  EXPECT_EQ(TakeSecretEnv("TESSERA_TEST_UNSET"), std::nullopt);

  const std::string after = ProcEnviron();
  EXPECT_EQ(after.find(kSecret), std::string::npos);
  EXPECT_EQ(after.find(kDuplicate), std::string::npos) << "a duplicate entry was left";
  EXPECT_EQ(after.find(kReplaced), std::string::npos) << "the value setenv replaced was left";
  // Its neighbours are untouched.
  EXPECT_NE(after.find("TESSERA_TEST_NEIGHBOUR=keep-me"), std::string::npos);
  EXPECT_STREQ(std::getenv("TESSERA_TEST_NEIGHBOUR"), "keep-me");
  EXPECT_STREQ(std::getenv("TESSERA_TEST_LAST"), "also-kept");
}

TEST(SecretEnvTest, SecretsLeaveTheEnvironmentBlock) {
  testing::TempDir dir;
  const std::string out = dir.File("child.log");
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> args = {self, "--gtest_also_run_disabled_tests",
                                   "--gtest_filter=SecretEnvTest.DISABLED_ChildTakesItsSecrets"};
  std::vector<std::string> env = {
      "TESSERA_TEST_NEIGHBOUR=keep-me",
      std::string("TESSERA_TEST_SECRET=") + kSecret,
      std::string("TESSERA_TEST_REPLACED=") + kReplaced,
      std::string("TESSERA_TEST_SECRET=") + kDuplicate,
      "TESSERA_TEST_LAST=also-kept",
  };
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const std::string log = ReadWhole(out);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << log;
  // A filter that matched nothing would exit 0 too.
  EXPECT_NE(log.find("[       OK ] SecretEnvTest.DISABLED_ChildTakesItsSecrets"), std::string::npos)
      << log;
}

TEST(SecretEnvTest, ReadsAPrivateFileWithoutItsTrailingNewline) {
  testing::TempDir dir;
  struct Case {
    std::string content;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"tsr_abc\n", "tsr_abc"},
      {"tsr_abc", "tsr_abc"},
      {"tsr_abc\r\n", "tsr_abc"},
      {"tsr_abc\n\n", "tsr_abc"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.Write("token", c.content);
    ASSERT_EQ(chmod(path.c_str(), 0600), 0);
    auto got = ReadSecretFile(path);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(*got, c.want);
  }
}

TEST(SecretEnvTest, RefusesAFileOthersMayAccess) {
  testing::TempDir dir;
  const std::vector<mode_t> modes = {0644, 0640, 0604, 0620, 0602, 0601, 0610};
  for (const mode_t mode : modes) {
    const std::string path = dir.Write("token", "tsr_abc\n");
    ASSERT_EQ(chmod(path.c_str(), mode), 0);
    auto got = ReadSecretFile(path);
    ASSERT_FALSE(got.ok()) << std::oct << mode;
    EXPECT_EQ(got.status().code(), StatusCode::kPermissionDenied);
    // As ssh says of a key: the path, the mode, and how to fix it.
    char octal[8];
    std::snprintf(octal, sizeof(octal), "%04o", static_cast<unsigned>(mode));
    EXPECT_NE(got.status().message().find(path), std::string::npos) << got.status().message();
    EXPECT_NE(got.status().message().find(std::string("permissions ") + octal + " are too open"),
              std::string::npos)
        << got.status().message();
    EXPECT_NE(got.status().message().find("chmod 600"), std::string::npos);
  }
  const std::string owner_only = dir.Write("owner-only", "tsr_abc");
  ASSERT_EQ(chmod(owner_only.c_str(), 0400), 0);
  EXPECT_TRUE(ReadSecretFile(owner_only).ok());
}

TEST(SecretEnvTest, RefusesWhatIsNotARegularFile) {
  testing::TempDir dir;
  const std::string fifo = dir.File("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Refused at once: nobody writes to the FIFO, so waiting on it would hang.
  auto got = ReadSecretFile(fifo);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().message(), fifo + " is not a regular file");
  const std::string sub = dir.File("sub");
  ASSERT_TRUE(std::filesystem::create_directory(sub));
  ASSERT_EQ(chmod(sub.c_str(), 0700), 0);
  EXPECT_EQ(ReadSecretFile(sub).status().message(), sub + " is not a regular file");
  auto missing = ReadSecretFile(dir.File("missing"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(dir.File("missing") + ": cannot open"),
            std::string::npos);
  const std::string empty = dir.Write("empty", "\n");
  ASSERT_EQ(chmod(empty.c_str(), 0600), 0);
  EXPECT_EQ(ReadSecretFile(empty).status().message(), empty + " is empty");
}

}  // namespace
}  // namespace tessera
