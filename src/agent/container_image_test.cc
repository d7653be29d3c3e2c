#include "agent/container_image.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "agent/container_registry.h"
#include "agent/container_test_support.h"
#include "common/clock.h"
#include "testing/testing.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_support::RunTool;

TEST(ParsePullPolicyTest, Table) {
  EXPECT_EQ(ParsePullPolicy("if_not_present").value(), PullPolicy::kIfNotPresent);
  EXPECT_EQ(ParsePullPolicy("").value(), PullPolicy::kIfNotPresent);
  EXPECT_EQ(ParsePullPolicy("always").value(), PullPolicy::kAlways);
  EXPECT_EQ(ParsePullPolicy("never").value(), PullPolicy::kNever);
  auto bad = ParsePullPolicy("sometimes");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("\"sometimes\""));
}

// Podman 4.3.1's own words, as captured on this machine kind.
TEST(ClassifyPullFailureTest, Table) {
  const std::string image = "127.0.0.1:5000/team/train:1";
  const struct {
    std::string err;
    bool creds;
    bool timed_out;
    StatusCode code;
    std::string reason;
    std::string message;
  } cases[] = {
      {"Trying to pull 127.0.0.1:5000/team/train:1...\nError: initializing source "
       "docker://127.0.0.1:5000/team/train:1: reading manifest 1 in 127.0.0.1:5000/team/train: "
       "manifest unknown: manifest unknown\n",
       false, false, StatusCode::kNotFound, "image_not_found", "not found in its registry"},
      {"Error: initializing source docker://x: reading manifest 1 in x: unauthorized: "
       "authentication required\n",
       false, false, StatusCode::kUnauthenticated, "registry_unauthorized",
       "unauthorized: the registry wants credentials and none were given"},
      {"Error: initializing source docker://x: reading manifest 1 in x: unauthorized: "
       "authentication required\n",
       true, false, StatusCode::kUnauthenticated, "registry_unauthorized",
       "unauthorized: the registry refused the credentials"},
      {"Error: writing blob: storing blob to file \"/var/tmp/storage1/1\": write /var/tmp/"
       "storage1/1: no space left on device\n",
       false, false, StatusCode::kResourceExhausted, "disk_full", "no space left on device"},
      {"time=\"...\" level=warning msg=\"Failed, retrying in 1s ... (1/3). Error: ...\"\nError: "
       "initializing source docker://127.0.0.1:1/a:1: pinging container registry 127.0.0.1:1: "
       "Get \"http://127.0.0.1:1/v2/\": dial tcp 127.0.0.1:1: connect: connection refused\n",
       false, false, StatusCode::kUnavailable, "registry_unreachable", "connection refused"},
      {"", false, true, StatusCode::kUnavailable, "pull_timeout", "did not finish in time"},
      {"Error: something new\n", false, false, StatusCode::kUnavailable, "pull_failed",
       "pull failed: something new"},
  };
  for (const auto& c : cases) {
    const Status s = ClassifyPullFailure(image, c.err, c.creds, c.timed_out);
    EXPECT_EQ(s.code(), c.code) << c.err;
    EXPECT_EQ(s.reason(), c.reason) << c.err;
    EXPECT_THAT(s.message(), HasSubstr(image)) << c.err;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.err;
  }
}

// Pulls from Debian's docker-registry on loopback, with images built here: no outside registry.
class ImagePodmanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string missing = testing_support::PodmanMissing();
    if (missing.empty()) missing = testing_support::RegistryMissing();
    if (!missing.empty()) GTEST_SKIP() << missing;
  }
  void TearDown() override {
    for (const auto& image : pulled_) RunTool({"podman", "rmi", "--force", "--ignore", image});
  }

  // A registry (with htpasswd auth when `user` is set) holding a fresh image at
  // `path` (one per tag in `tags`), each with `payload` random bytes; the local copies are
  // removed so a pull really downloads.
  std::unique_ptr<testing_support::LocalRegistry> StartRegistry(
      const std::vector<std::string>& paths, size_t payload, const std::string& user = "",
      const std::string& password = "") {
    auto registry = std::make_unique<testing_support::LocalRegistry>(user, password);
    EXPECT_TRUE(registry->ready()) << registry->log();
    for (const auto& path : paths) {
      testing_support::BusyboxImage local(
          "localhost/" + testing_support::UniqueName("tessera-image-test") + ":1", payload);
      EXPECT_TRUE(local.ok()) << local.error();
      EXPECT_EQ(registry->Push(local.reference(), path, user, password), "");
      pulled_.push_back(registry->host() + "/" + path);
    }
    return registry;
  }

  std::unique_ptr<ImageStore> Store(const std::vector<std::string>& insecure, int64_t cap = 0) {
    ImageStore::Options options;
    options.state_dir = dir_.path() + "/state";
    options.insecure_registries = insecure;
    options.cache_limit_bytes = cap;
    options.clock = &clock_;
    options.pull_deadline = std::chrono::seconds(120);
    auto store = ImageStore::Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }

  bool Present(const std::string& image) {
    return RunTool({"podman", "image", "exists", image}).exit_code == 0;
  }

  tessera::testing::TempDir dir_;
  FakeClock clock_;
  std::vector<std::string> pulled_;
};

TEST_F(ImagePodmanTest, PullReportsProgressToAHundredAndIfNotPresentPullsOnce) {
  auto registry = StartRegistry({"tessera/progress:1"}, 24 << 20);
  const std::string image = registry->host() + "/tessera/progress:1";
  auto store = Store({registry->host()});
  ASSERT_TRUE(store);
  std::vector<PullProgress> seen;
  const Status s = store->Pull(image, PullPolicy::kIfNotPresent, std::nullopt,
                               [&](const PullProgress& p) { seen.push_back(p); });
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(Present(image));
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen.front().phase, "resolving");
  const PullProgress& last = seen.back();
  EXPECT_EQ(last.phase, "done");
  EXPECT_EQ(last.percent, 100);
  EXPECT_EQ(last.image, image);
  // The registry's own account of the image: config plus the one layer, past the payload.
  auto size = FetchImageSize(ParseImageReference(image).value(), true, std::nullopt,
                             std::chrono::seconds(5));
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_GT(*size, 24 << 20);
  EXPECT_EQ(last.bytes_total, *size);
  EXPECT_EQ(last.bytes_done, *size);
  int downloading = 0;
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GE(seen[i].bytes_done, seen[i - 1].bytes_done);
    EXPECT_GE(seen[i].percent, seen[i - 1].percent);
    EXPECT_LE(seen[i].bytes_done, *size);
    if (seen[i].phase == "downloading" && seen[i].bytes_done > 0) ++downloading;
  }
  std::cout << "progress reports with bytes while downloading: " << downloading << "\n";

  // With the registry gone, if_not_present still succeeds: it did not pull again.
  registry.reset();
  seen.clear();
  EXPECT_TRUE(store
                  ->Pull(image, PullPolicy::kIfNotPresent, std::nullopt,
                         [&](const PullProgress& p) { seen.push_back(p); })
                  .ok());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].percent, 100);
  // And always does try, and says the registry is unreachable, naming the image.
  const Status again = store->Pull(image, PullPolicy::kAlways, std::nullopt);
  EXPECT_EQ(again.code(), StatusCode::kUnavailable) << again.ToString();
  EXPECT_EQ(again.reason(), "registry_unreachable") << again.ToString();
  EXPECT_THAT(again.message(), HasSubstr(image));
}

TEST_F(ImagePodmanTest, NeverWithAMissingImageFailsNamingIt) {
  auto store = Store({});
  ASSERT_TRUE(store);
  const std::string image = "127.0.0.1:1/tessera/" + testing_support::UniqueName("absent") + ":1";
  const Status s = store->Pull(image, PullPolicy::kNever, std::nullopt);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.reason(), "image_not_present");
  EXPECT_THAT(s.message(), HasSubstr(image));
}

TEST_F(ImagePodmanTest, AMissingTagOrRepositoryFailsNamingTheImage) {
  auto registry = StartRegistry({"tessera/tags:1"}, 0);
  auto store = Store({registry->host()});
  ASSERT_TRUE(store);
  for (const std::string path : {"tessera/tags:2", "tessera/nothing:1"}) {
    const std::string image = registry->host() + "/" + path;
    const Status s = store->Pull(image, PullPolicy::kIfNotPresent, std::nullopt);
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
    EXPECT_EQ(s.reason(), "image_not_found");
    EXPECT_THAT(s.message(), HasSubstr(image));
  }
}

TEST_F(ImagePodmanTest, CredentialsAreCheckedAndNeverLeak) {
  auto registry = StartRegistry({"tessera/private:1"}, 0, "tenant", "right-pass");
  const std::string image = registry->host() + "/tessera/private:1";
  auto store = Store({registry->host()});
  ASSERT_TRUE(store);
  const Status none = store->Pull(image, PullPolicy::kIfNotPresent, std::nullopt);
  EXPECT_EQ(none.code(), StatusCode::kUnauthenticated) << none.ToString();
  EXPECT_EQ(none.reason(), "registry_unauthorized");
  EXPECT_THAT(none.message(), HasSubstr(image));
  EXPECT_THAT(none.message(), HasSubstr("unauthorized"));
  EXPECT_THAT(none.message(), HasSubstr("none were given"));

  const Status wrong =
      store->Pull(image, PullPolicy::kIfNotPresent, RegistryCredentials{"tenant", "wrong-pass"});
  EXPECT_EQ(wrong.code(), StatusCode::kUnauthenticated) << wrong.ToString();
  EXPECT_THAT(wrong.message(), HasSubstr(image));
  EXPECT_THAT(wrong.message(), HasSubstr("unauthorized: the registry refused the credentials"));
  EXPECT_THAT(wrong.message(), Not(HasSubstr("wrong-pass")));
  EXPECT_FALSE(Present(image));

  std::vector<PullProgress> seen;
  const Status right =
      store->Pull(image, PullPolicy::kIfNotPresent, RegistryCredentials{"tenant", "right-pass"},
                  [&](const PullProgress& p) { seen.push_back(p); });
  EXPECT_TRUE(right.ok()) << right.ToString();
  EXPECT_TRUE(Present(image));
  ASSERT_FALSE(seen.empty());
  EXPECT_GT(seen.back().bytes_total, 0) << "the manifest was read with the credentials";
  // No auth file is left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/state")) {
    EXPECT_EQ(e.path().filename().string().rfind("auth-", 0), std::string::npos) << e.path();
  }
}

TEST_F(ImagePodmanTest, TheCacheCapEvictsTheLeastRecentlyUsedImageNoContainerUses) {
  auto registry =
      StartRegistry({"tessera/a:1", "tessera/b:1", "tessera/c:1", "tessera/d:1"}, 1 << 20);
  const std::string a = registry->host() + "/tessera/a:1";
  const std::string b = registry->host() + "/tessera/b:1";
  const std::string c = registry->host() + "/tessera/c:1";
  const std::string d = registry->host() + "/tessera/d:1";
  // Room for two images and a half (they are all the same size, busybox plus 1 MiB).
  auto sizer = Store({registry->host()});
  ASSERT_TRUE(sizer->Pull(a, PullPolicy::kAlways, std::nullopt).ok());
  const int64_t one = sizer->CachedBytes().value();
  ASSERT_GT(one, 1 << 20);
  sizer.reset();
  std::filesystem::remove_all(dir_.path() + "/state");
  auto store = Store({registry->host()}, one * 5 / 2);
  ASSERT_TRUE(store);

  ASSERT_TRUE(store->Pull(a, PullPolicy::kAlways, std::nullopt).ok());
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(store->Pull(b, PullPolicy::kAlways, std::nullopt).ok());
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(store->MarkUsed(a).ok());  // a is now more recent than b.
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(store->Pull(c, PullPolicy::kAlways, std::nullopt).ok());
  EXPECT_TRUE(Present(a));
  EXPECT_FALSE(Present(b)) << "b was the least recently used";
  EXPECT_TRUE(Present(c));
  EXPECT_LE(store->CachedBytes().value(), one * 5 / 2);

  // a is now the least recently used, but a container uses it: c goes instead.
  const std::string container = testing_support::UniqueName("tessera-image-user");
  ASSERT_EQ(
      RunTool({"podman", "create", "--runtime=runc", "--name=" + container, a, "true"}).exit_code,
      0);
  clock_.Advance(std::chrono::seconds(1));
  const Status pulled_d = store->Pull(d, PullPolicy::kAlways, std::nullopt);
  RunTool({"podman", "rm", "--force", "--ignore", container});
  ASSERT_TRUE(pulled_d.ok()) << pulled_d.ToString();
  EXPECT_TRUE(Present(a));
  EXPECT_FALSE(Present(c));
  EXPECT_TRUE(Present(d));
}

TEST_F(ImagePodmanTest, AFullDiskFailsTheImageAsDiskFull) {
  auto registry = StartRegistry({"tessera/big:1"}, 4 << 20);
  const std::string image = registry->host() + "/tessera/big:1";
  tessera::testing::TempDir small;
  if (mount("tmpfs", small.path().c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a small tmpfs to fill: " << strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{small.path()};
  ImageStore::Options options;
  options.state_dir = dir_.path() + "/state";
  options.pull_tmp_dir = small.path();
  options.insecure_registries = {registry->host()};
  auto store = ImageStore::Open(options);
  ASSERT_TRUE(store.ok());
  const Status s = (*store)->Pull(image, PullPolicy::kIfNotPresent, std::nullopt);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(s.reason(), "disk_full");
  EXPECT_THAT(s.message(), HasSubstr(image));
  EXPECT_FALSE(Present(image));
}

TEST_F(ImagePodmanTest, ARegistryThatNeverAnswersEndsAtTheDeadline) {
  // Accepts connections (the kernel completes them) and never says a word.
  tessera::testing::TcpListener silent;
  ASSERT_GT(silent.port(), 0);
  const std::string host = fmt::format("127.0.0.1:{}", silent.port());
  const std::string image = host + "/tessera/silent:1";
  ImageStore::Options options;
  options.state_dir = dir_.path() + "/state";
  options.insecure_registries = {host};
  options.pull_deadline = std::chrono::seconds(4);
  options.manifest_timeout = std::chrono::seconds(1);
  auto store = ImageStore::Open(options);
  ASSERT_TRUE(store.ok());
  const auto start = std::chrono::steady_clock::now();
  const Status s = (*store)->Pull(image, PullPolicy::kIfNotPresent, std::nullopt);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(s.reason(), "pull_timeout");
  EXPECT_THAT(s.message(), HasSubstr(image));
  EXPECT_LT(took, std::chrono::seconds(8));
}

}  // namespace
}  // namespace tessera::agent
