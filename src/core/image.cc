#include "core/image.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <vector>

#include "common/text.h"
#include "core/env.h"
#include "core/sealing.h"

namespace tessera::core {

namespace {

constexpr std::array<std::string_view, 3> kPullPolicyNames = {"if_not_present", "always", "never"};
constexpr size_t kMaxTagBytes = 128;
constexpr size_t kDigestHexDigits = 64;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A path component: [a-z0-9._-], starting and ending with a letter or digit. The ends rule out
// "." and "..", so no component of a reference can climb out of a directory named after it.
Status CheckComponent(std::string_view c) {
  if (c.empty()) {
    return Status::InvalidArgument("has an empty path component ('//' or a '/' at an end)");
  }
  for (const char ch : c) {
    if (!IsLowerAlnum(ch) && ch != '.' && ch != '_' && ch != '-') {
      return Status::InvalidArgument(fmt::format(
          "path component '{}' may hold only lowercase letters, digits, '.', '_' and '-'",
          Quote(c)));
    }
  }
  if (!IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) {
    return Status::InvalidArgument(fmt::format(
        "path component '{}' must start and end with a lowercase letter or digit", Quote(c)));
  }
  return Status::Ok();
}

// A registry: a host of dotted lowercase labels (or `localhost`) and an optional `:port`.
Status CheckRegistry(std::string_view registry) {
  const size_t colon = registry.find(':');
  const std::string_view host = registry.substr(0, colon);
  if (colon != std::string_view::npos) {
    const std::string_view port = registry.substr(colon + 1);
    int number = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    const bool digits = !port.empty() && std::all_of(port.begin(), port.end(), IsDigit);
    if (!digits || ec != std::errc() || end != port.data() + port.size() || number < 1 ||
        number > 65535) {
      return Status::InvalidArgument(
          fmt::format("registry port '{}' is not a number from 1 to 65535", Quote(port)));
    }
  }
  for (const std::string_view label : Split(host, '.')) {
    const bool ok =
        !label.empty() && IsLowerAlnum(label.front()) && IsLowerAlnum(label.back()) &&
        std::all_of(label.begin(), label.end(), [](char c) { return IsLowerAlnum(c) || c == '-'; });
    if (!ok) {
      return Status::InvalidArgument(
          fmt::format("registry host '{}' must be lowercase letters, digits and '-', in labels "
                      "separated by '.'",
                      Quote(host)));
    }
  }
  return Status::Ok();
}

Status CheckTag(std::string_view tag) {
  const auto word = [](char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z') || c == '_'; };
  const bool ok =
      !tag.empty() && tag.size() <= kMaxTagBytes && word(tag.front()) &&
      std::all_of(tag.begin(), tag.end(), [&](char c) { return word(c) || c == '.' || c == '-'; });
  if (ok) return Status::Ok();
  return Status::InvalidArgument(
      fmt::format("tag '{}' must be 1-128 of [A-Za-z0-9_.-], starting with a letter, digit or '_'",
                  Quote(tag)));
}

Status CheckDigest(std::string_view digest) {
  constexpr std::string_view kAlgorithm = "sha256:";
  const bool ok = digest.substr(0, kAlgorithm.size()) == kAlgorithm &&
                  digest.size() == kAlgorithm.size() + kDigestHexDigits &&
                  std::all_of(digest.begin() + kAlgorithm.size(), digest.end(),
                              [](char c) { return IsDigit(c) || (c >= 'a' && c <= 'f'); });
  if (ok) return Status::Ok();
  return Status::InvalidArgument("digest must be '@sha256:' and 64 lowercase hex digits");
}

// A registry username or password: a string of 1-1024 bytes of UTF-8 without NUL. The error
// never quotes it.
void ReadCredential(JsonFields& auth, std::string_view key, std::string& out) {
  out = auth.String(key);
  if (!auth.ok()) return;
  if (out.empty()) {
    auth.Fail(key, "is empty");
  } else if (out.size() > kMaxRegistryAuthBytes) {
    auth.Fail(key, fmt::format("is {} bytes; at most {}", out.size(), kMaxRegistryAuthBytes));
  } else if (!IsValidUtf8(out)) {
    auth.Fail(key, "is not valid UTF-8");
  } else if (out.find('\0') != std::string::npos) {
    auth.Fail(key, "holds a NUL character");
  }
}

}  // namespace

std::string_view PullPolicyName(PullPolicy p) { return kPullPolicyNames[static_cast<size_t>(p)]; }

std::optional<PullPolicy> ParsePullPolicy(std::string_view s) {
  for (size_t i = 0; i < kPullPolicyNames.size(); ++i) {
    if (kPullPolicyNames[i] == s) return static_cast<PullPolicy>(i);
  }
  return std::nullopt;
}

Status ValidateImageRef(std::string_view ref) {
  if (ref.empty()) return Status::InvalidArgument("is empty");
  if (ref.size() > kMaxImageRefBytes) {
    return Status::InvalidArgument(
        fmt::format("is {} bytes; at most {}", ref.size(), kMaxImageRefBytes));
  }
  for (const char c : ref) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7f) {
      return Status::InvalidArgument("holds whitespace or a control character");
    }
    if (u >= 0x80) return Status::InvalidArgument("holds a character that is not ASCII");
  }
  std::string_view name = ref;
  if (const size_t at = name.find('@'); at != std::string_view::npos) {
    TESSERA_RETURN_IF_ERROR(CheckDigest(name.substr(at + 1)));
    name = name.substr(0, at);
  }
  // A ':' after the last '/' starts the tag; one before it is the registry's port.
  const size_t slash = name.rfind('/');
  if (const size_t colon = name.find(':', slash == std::string_view::npos ? 0 : slash);
      colon != std::string_view::npos) {
    TESSERA_RETURN_IF_ERROR(CheckTag(name.substr(colon + 1)));
    name = name.substr(0, colon);
  }
  std::vector<std::string_view> components = Split(name, '/');
  // The first of several components names a registry when it looks like a host, as Docker reads
  // it: with a '.' or a port, or `localhost`.
  const std::string_view first = components.front();
  if (components.size() > 1 &&
      (first.find_first_of(".:") != std::string_view::npos || first == "localhost")) {
    TESSERA_RETURN_IF_ERROR(CheckRegistry(first));
    components.erase(components.begin());
  }
  for (const std::string_view c : components) TESSERA_RETURN_IF_ERROR(CheckComponent(c));
  return Status::Ok();
}

void ReadImageSpec(JsonFields& f, const nlohmann::json& body, ImageSpec& out, Secrets form) {
  out.ref = f.String("image", false);
  const bool given = body.is_object() && body.contains("image");
  if (given && f.ok()) {
    if (Status s = ValidateImageRef(out.ref); !s.ok()) f.Fail("image", s.message());
  }
  const bool has_policy = body.is_object() && body.contains("pull_policy");
  const std::string policy = f.String("pull_policy", false, "if_not_present");
  if (auto p = ParsePullPolicy(policy)) {
    out.pull_policy = *p;
  } else {
    f.Fail("pull_policy",
           fmt::format("'{}' is not if_not_present, always or never", Quote(policy, 32)));
  }
  if (has_policy && !given) f.Fail("pull_policy", "applies only with an image");
  JsonFields auth = f.Object("registry_auth", false);
  if (auth.absent()) return;
  if (!given) {
    f.Fail("registry_auth", "applies only with an image");
    return;
  }
  auth.RejectUnknown({"username", "password"});
  RegistryAuth a;
  ReadCredential(auth, "username", a.username);
  const nlohmann::json* password = auth.Get("password", false);
  if (password != nullptr && password->is_object()) {
    JsonFields p = auth.Object("password");
    if (form == Secrets::kStored && password->contains("sealed")) {
      p.RejectUnknown({"sealed"});
      a.sealed = p.String("sealed");
    } else {
      p.RejectUnknown({"secret"});
      a.password_secret = p.String("secret");
      if (p.ok() && !IsValidSecretName(a.password_secret)) {
        p.Fail("secret", fmt::format("'{}' is not a secret's name", Quote(a.password_secret)));
      }
    }
  } else if (password != nullptr || form != Secrets::kStored) {
    ReadCredential(auth, "password", a.password);
  }  // A stored record without one: its work ended, and the password was dropped.
  out.auth = std::move(a);
}

namespace {
std::string PasswordContext(std::string_view record) {
  return fmt::format("{}/registry_auth/password", record);
}
}  // namespace

Status SealImageAuth(Sealer* sealer, std::string_view record, ImageSpec& image) {
  if (!HoldsPlainPassword(image)) return Status::Ok();  // A reference, sealed already, or none.
  TESSERA_ASSIGN_OR_RETURN(
      image.auth->sealed,
      SealValue(sealer, image.auth->password, PasswordContext(record), "registry_auth.password"));
  return Status::Ok();
}

Status OpenImageAuth(Sealer* sealer, std::string_view record, ImageSpec& image) {
  if (!image.auth || image.auth->sealed.empty()) return Status::Ok();
  TESSERA_ASSIGN_OR_RETURN(image.auth->password,
                           OpenValue(sealer, image.auth->sealed, PasswordContext(record),
                                     fmt::format("{}: registry_auth.password", record)));
  return Status::Ok();
}

bool HoldsPlainPassword(const ImageSpec& image) {
  return image.auth && image.auth->password_secret.empty() && image.auth->sealed.empty() &&
         !image.auth->password.empty();
}

void AddImageJson(const ImageSpec& image, Secrets secrets, nlohmann::json& j) {
  if (image.empty()) return;
  j["image"] = image.ref;
  j["pull_policy"] = PullPolicyName(image.pull_policy);
  if (!image.auth) return;
  nlohmann::json auth = {{"username", image.auth->username}};
  if (!image.auth->password_secret.empty() && secrets != Secrets::kIncluded) {
    auth["password"] = {{"secret", image.auth->password_secret}};
  } else if (secrets == Secrets::kStored && !image.auth->sealed.empty()) {
    auth["password"] = {{"sealed", image.auth->sealed}};
  } else if (secrets == Secrets::kStored && !image.auth->password.empty()) {
    // One a server without a keyring restored as it was stored before envelope encryption; it is
    // sealed as soon as a keyring is given. (Empty: dropped, with the work it was for.)
    auth["password"] = image.auth->password;
  } else if (secrets == Secrets::kIncluded) {
    auth["password"] = image.auth->password;
  }
  j["registry_auth"] = std::move(auth);
}

nlohmann::json PullJson(const PullProgress& pull, const std::string& image) {
  return {{"bytes", pull.bytes},
          {"total_bytes", pull.total_bytes},
          {"percent", pull.percent},
          {"image", image}};
}

}  // namespace tessera::core
