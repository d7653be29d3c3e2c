// Image references, pull policies and registry credentials as a create request gives them
// (image.cc): table tests of the reference rules, errors that name the field and never quote a
// credential, and the JSON forms with and without the password.
#include "core/image.h"

#include <gtest/gtest.h>

#include "common/json.h"

namespace tessera::core {
namespace {

using nlohmann::json;

const std::string kDigest =
    "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

TEST(ImageRefTest, ValidReferencesPass) {
  for (const std::string& ref : {
           std::string("busybox"),
           std::string("library/busybox:1.36"),
           std::string("registry.example.com/team/train:1.4"),
           std::string("registry.example.com:5000/team/train"),
           std::string("localhost:5000/busybox:latest"),
           std::string("localhost/busybox"),
           std::string("ghcr.io/org/a.b_c-d/e__f:V1.2_rc-3"),
           std::string("busybox@") + kDigest,
           std::string("registry.example.com/team/train:1.4@") + kDigest,
           std::string("127.0.0.1:5000/x"),
           std::string("a:") + std::string(128, 't'),
           std::string(255, 'a'),
       }) {
    EXPECT_TRUE(ValidateImageRef(ref).ok()) << ref << ": " << ValidateImageRef(ref).message();
  }
}

TEST(ImageRefTest, InvalidReferencesSayWhatIsWrong) {
  struct Case {
    std::string ref;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "is empty"},
      {std::string(256, 'a'), "is 256 bytes; at most 255"},
      {"team/train 1.4", "holds whitespace or a control character"},
      {"team/train\t", "holds whitespace or a control character"},
      {std::string("team/\0x", 7), "holds whitespace or a control character"},
      {"team/tr\x7f", "holds whitespace or a control character"},
      {"team/tr\xc3\xa4in", "holds a character that is not ASCII"},
      {"Team/train",
       "path component 'Team' may hold only lowercase letters, digits, '.', '_' and '-'"},
      {"team/train$",
       "path component 'train$' may hold only lowercase letters, digits, '.', "
       "'_' and '-'"},
      {"team//train", "has an empty path component ('//' or a '/' at an end)"},
      {"/train", "has an empty path component ('//' or a '/' at an end)"},
      {"team/", "has an empty path component ('//' or a '/' at an end)"},
      {"team/../train", "path component '..' must start and end with a lowercase letter or digit"},
      {"team/-train",
       "path component '-train' must start and end with a lowercase letter or digit"},
      {"Registry.example.com/train",
       "registry host 'Registry.example.com' must be lowercase letters, digits and '-', in labels "
       "separated by '.'"},
      {"registry..example.com/train",
       "registry host 'registry..example.com' must be lowercase letters, digits and '-', in "
       "labels separated by '.'"},
      {"registry.example.com:0/train", "registry port '0' is not a number from 1 to 65535"},
      {"registry.example.com:65536/train", "registry port '65536' is not a number from 1 to 65535"},
      {"registry.example.com:http/train", "registry port 'http' is not a number from 1 to 65535"},
      {"registry.example.com:/train", "registry port '' is not a number from 1 to 65535"},
      {"train:", "tag '' must be 1-128 of [A-Za-z0-9_.-], starting with a letter, digit or '_'"},
      {"train:.1",
       "tag '.1' must be 1-128 of [A-Za-z0-9_.-], starting with a letter, digit or '_'"},
      {"train:a+b",
       "tag 'a+b' must be 1-128 of [A-Za-z0-9_.-], starting with a letter, digit or '_'"},
      {"a:" + std::string(129, 't'),
       "tag '" + std::string(64, 't') +
           "...' must be 1-128 of [A-Za-z0-9_.-], starting with a letter, digit or '_'"},
      {"train@sha256:abc", "digest must be '@sha256:' and 64 lowercase hex digits"},
      {"train@md5:0123456789abcdef0123456789abcdef",
       "digest must be '@sha256:' and 64 lowercase hex digits"},
      {"train@" + std::string("sha256:") + std::string(64, 'A'),
       "digest must be '@sha256:' and 64 lowercase hex digits"},
      {"train@", "digest must be '@sha256:' and 64 lowercase hex digits"},
  };
  for (const Case& c : cases) {
    const Status s = ValidateImageRef(c.ref);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.ref;
    EXPECT_EQ(s.message(), c.message) << c.ref;
  }
}

// Reads a create request's image fields the way ReadCreateInstance does.
Result<ImageSpec> Read(const json& body) {
  JsonFields f(body, "body");
  ImageSpec spec;
  ReadImageSpec(f, body, spec);
  TESSERA_RETURN_IF_ERROR(f.body_error());
  return spec;
}

TEST(ImageSpecTest, FieldsAreReadAndEveryErrorNamesItsField) {
  auto plain = Read(json::object());
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->empty());
  auto full = Read({{"image", "registry.example.com/team/train:1.4"},
                    {"pull_policy", "always"},
                    {"registry_auth", {{"username", "robot"}, {"password", "s3cret"}}}});
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(full->ref, "registry.example.com/team/train:1.4");
  EXPECT_EQ(full->pull_policy, PullPolicy::kAlways);
  ASSERT_TRUE(full->auth.has_value());
  EXPECT_EQ(full->auth->username, "robot");
  EXPECT_EQ(full->auth->password, "s3cret");
  EXPECT_EQ(Read({{"image", "busybox"}})->pull_policy, PullPolicy::kIfNotPresent);
  EXPECT_EQ(Read({{"image", "busybox"}, {"pull_policy", "never"}})->pull_policy,
            PullPolicy::kNever);

  const std::string secret = "hunter2-do-not-echo";
  struct Case {
    json body;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"image", "Busybox"}},
       "field 'image': path component 'Busybox' may hold only lowercase letters, digits, '.', '_' "
       "and '-'"},
      {{{"image", ""}}, "field 'image': is empty"},
      {{{"image", 7}}, "field 'image': expected a string, found integer"},
      {{{"image", "busybox"}, {"pull_policy", "sometimes"}},
       "field 'pull_policy': 'sometimes' is not if_not_present, always or never"},
      {{{"pull_policy", "always"}}, "field 'pull_policy': applies only with an image"},
      {{{"registry_auth", {{"username", "u"}, {"password", secret}}}},
       "field 'registry_auth': applies only with an image"},
      {{{"image", "busybox"}, {"registry_auth", "u:" + secret}},
       "field 'registry_auth': expected an object, found string"},
      {{{"image", "busybox"}, {"registry_auth", {{"username", "u"}}}},
       "field 'registry_auth.password': is required"},
      {{{"image", "busybox"}, {"registry_auth", {{"password", secret}}}},
       "field 'registry_auth.username': is required"},
      {{{"image", "busybox"}, {"registry_auth", {{"username", "u"}, {"password", 42}}}},
       "field 'registry_auth.password': expected a string, found integer"},
      {{{"image", "busybox"}, {"registry_auth", {{"username", "u"}, {"password", ""}}}},
       "field 'registry_auth.password': is empty"},
      {{{"image", "busybox"},
        {"registry_auth", {{"username", "u"}, {"password", std::string(1025, 'p')}}}},
       "field 'registry_auth.password': is 1025 bytes; at most 1024"},
      {{{"image", "busybox"},
        {"registry_auth", {{"username", std::string(1025, 'u')}, {"password", secret}}}},
       "field 'registry_auth.username': is 1025 bytes; at most 1024"},
      {{{"image", "busybox"},
        {"registry_auth", {{"username", "u"}, {"password", secret + std::string(1, '\0')}}}},
       "field 'registry_auth.password': holds a NUL character"},
      {{{"image", "busybox"},
        {"registry_auth", {{"username", "u"}, {"password", std::string("\xff\xfe")}}}},
       "field 'registry_auth.password': is not valid UTF-8"},
      {{{"image", "busybox"},
        {"registry_auth", {{"username", "u"}, {"password", secret}, {"token", secret}}}},
       "field 'registry_auth.token': is not a known field"},
  };
  for (const Case& c : cases) {
    auto r = Read(c.body);
    ASSERT_FALSE(r.ok()) << DumpJson(c.body);
    EXPECT_EQ(r.status().message(), c.message) << DumpJson(c.body);
    EXPECT_EQ(r.status().message().find(secret), std::string::npos)
        << "an error quotes the password";
  }
  EXPECT_TRUE(Read({{"image", "busybox"},
                    {"registry_auth", {{"username", "u"}, {"password", std::string(1024, 'p')}}}})
                  .ok());
}

TEST(ImageSpecTest, TheApiFormShowsTheUsernameOnlyAndTheStoredFormReadsBack) {
  ImageSpec spec;
  spec.ref = "registry.example.com/team/train:1.4";
  spec.pull_policy = PullPolicy::kNever;
  spec.auth = RegistryAuth{.username = "robot", .password = "s3cret"};
  json shown = json::object();
  AddImageJson(spec, Secrets::kHidden, shown);
  EXPECT_EQ(shown, json({{"image", "registry.example.com/team/train:1.4"},
                         {"pull_policy", "never"},
                         {"registry_auth", {{"username", "robot"}}}}));
  json stored = json::object();
  AddImageJson(spec, Secrets::kIncluded, stored);
  EXPECT_EQ(stored["registry_auth"], json({{"username", "robot"}, {"password", "s3cret"}}));
  auto back = Read(stored);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ref, spec.ref);
  EXPECT_EQ(back->pull_policy, spec.pull_policy);
  EXPECT_EQ(back->auth->password, "s3cret");
  json none = json::object();
  AddImageJson(ImageSpec{}, Secrets::kIncluded, none);
  EXPECT_TRUE(none.empty()) << "an instance without an image shows no image fields";
}

}  // namespace
}  // namespace tessera::core
