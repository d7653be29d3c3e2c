#include "agent/container_registry.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/utsname.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "common/text.h"
#include "testing/http_server.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ParseImageReferenceTest, Table) {
  const struct {
    std::string text;
    std::string canonical;  // "" = an error.
  } cases[] = {
      {"registry.example.com/team/train:1.4", "registry.example.com/team/train:1.4"},
      {"registry.example.com:5000/team/train", "registry.example.com:5000/team/train:latest"},
      {"127.0.0.1:5000/a/b:c", "127.0.0.1:5000/a/b:c"},
      {"localhost/bb:1", "localhost/bb:1"},
      {"ubuntu", "docker.io/library/ubuntu:latest"},
      {"ubuntu:22.04", "docker.io/library/ubuntu:22.04"},
      {"pytorch/pytorch:2.1.0-cuda12.1", "docker.io/pytorch/pytorch:2.1.0-cuda12.1"},
      {"ghcr.io/o/r@sha256:0123abcd", "ghcr.io/o/r@sha256:0123abcd"},
      {"", ""},
      {"Team/Train", ""},
      {"a b", ""},
      {"reg.io/a:b:c", ""},
      {"reg.io/a@nodigest", ""},
      {"reg.io//a", ""},
      {"reg.io/a@sha256:xyz", ""},
  };
  for (const auto& c : cases) {
    auto ref = ParseImageReference(c.text);
    if (c.canonical.empty()) {
      ASSERT_FALSE(ref.ok()) << c.text;
      EXPECT_THAT(ref.status().message(), HasSubstr("image"));
    } else {
      ASSERT_TRUE(ref.ok()) << c.text << ": " << ref.status().ToString();
      EXPECT_EQ(ref->Canonical(), c.canonical) << c.text;
    }
  }
}

// A registry that speaks the token flow most public registries use: 401 with a Bearer challenge,
// a token service that wants Basic credentials, and an index whose platform entry leads to the
// manifest with the sizes.
class TokenRegistry {
 public:
  TokenRegistry() {
    server_.Get("/token", [this](const httplib::Request& req, httplib::Response& res) {
      scope_seen_ = req.get_param_value("scope");
      if (req.get_header_value("Authorization") != "Basic " + Base64Encode("tenant:right-pass")) {
        res.status = 401;
        return;
      }
      res.set_content(R"({"token": "tok-123"})", "application/json");
    });
    server_.Get(R"(/v2/team/train/manifests/(.+))", [this](const httplib::Request& req,
                                                           httplib::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer tok-123") {
        res.status = 401;
        res.set_header("WWW-Authenticate",
                       fmt::format(R"(Bearer realm="http://127.0.0.1:{}/token",)"
                                   R"(service="test",scope="repository:team/train:pull")",
                                   port_));
        return;
      }
      const std::string ref = req.matches[1];
      if (ref == "1.4") {
        res.set_content(Index(), "application/vnd.oci.image.index.v1+json");
      } else if (ref == "sha256:aaaa") {
        res.set_content(Manifest(), "application/vnd.oci.image.manifest.v1+json");
      } else {
        res.status = 404;
      }
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = testing::ServeInBackground(server_);
  }
  ~TokenRegistry() {
    server_.stop();
    thread_.join();
  }
  std::string host() const { return fmt::format("127.0.0.1:{}", port_); }
  std::string scope_seen() const { return scope_seen_; }

 private:
  static std::string Arch() {
    utsname u{};
    uname(&u);
    return std::string(u.machine) == "aarch64" ? "arm64" : "amd64";
  }
  static std::string Index() {
    return nlohmann::json{
        {"schemaVersion", 2},
        {"manifests",
         {{{"digest", "sha256:bbbb"}, {"platform", {{"os", "windows"}, {"architecture", Arch()}}}},
          {{"digest", "sha256:aaaa"}, {"platform", {{"os", "linux"}, {"architecture", Arch()}}}}}}}
        .dump();
  }
  static std::string Manifest() {
    return nlohmann::json{
        {"schemaVersion", 2},
        {"config", {{"digest", "sha256:c"}, {"size", 1000}}},
        {"layers",
         {{{"digest", "sha256:l1"}, {"size", 20000}}, {{"digest", "sha256:l2"}, {"size", 300000}}}}}
        .dump();
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::string scope_seen_;
};

TEST(FetchImageSizeTest, FollowsTheBearerFlowAndTheIndexToTheSizes) {
  TokenRegistry registry;
  const ImageReference ref = ParseImageReference(registry.host() + "/team/train:1.4").value();
  auto size = FetchImageSize(ref, true, RegistryCredentials{"tenant", "right-pass"},
                             std::chrono::seconds(5));
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 1000 + 20000 + 300000);
  EXPECT_EQ(registry.scope_seen(), "repository:team/train:pull");
}

TEST(FetchImageSizeTest, RefusedCredentialsAndMissingTagsNameTheImage) {
  TokenRegistry registry;
  const ImageReference ref = ParseImageReference(registry.host() + "/team/train:1.4").value();
  auto wrong = FetchImageSize(ref, true, RegistryCredentials{"tenant", "wrong-pass"},
                              std::chrono::seconds(5));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnauthenticated);
  EXPECT_THAT(wrong.status().message(), HasSubstr(ref.Canonical()));
  EXPECT_THAT(wrong.status().message(), HasSubstr("unauthorized"));
  EXPECT_THAT(wrong.status().message(), Not(HasSubstr("wrong-pass")));

  const ImageReference missing = ParseImageReference(registry.host() + "/team/train:9.9").value();
  auto none = FetchImageSize(missing, true, RegistryCredentials{"tenant", "right-pass"},
                             std::chrono::seconds(5));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr(missing.Canonical()));
}

TEST(FetchImageSizeTest, AnUnreachableRegistryIsUnavailable) {
  const ImageReference ref = ParseImageReference("127.0.0.1:1/team/train:1").value();
  auto size = FetchImageSize(ref, true, std::nullopt, std::chrono::seconds(2));
  ASSERT_FALSE(size.ok());
  EXPECT_EQ(size.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(size.status().message(), HasSubstr("127.0.0.1:1/team/train:1"));
}

}  // namespace
}  // namespace tessera::agent
