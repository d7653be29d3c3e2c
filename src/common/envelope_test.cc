#include "common/envelope.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/text.h"
#include "testing/testing.h"

namespace tessera {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A keyring line with a fixed key of 32 copies of `fill`.
std::string KeyLine(const std::string& id, char fill) {
  return id + " " + Base64Encode(std::string(kDataKeyBytes, fill));
}

std::unique_ptr<Keyring> Ring(const std::string& text) {
  Result<std::unique_ptr<Keyring>> ring = KeyringFromText(text, "test-keys");
  EXPECT_TRUE(ring.ok()) << ring.status().ToString();
  return ring.ok() ? std::move(ring).value() : nullptr;
}

TEST(EnvelopeTest, RoundTripsValuesOfEverySize) {
  std::string binary("a\0b\xff\n:", 6);
  std::string mebibyte(1 << 20, '\0');
  for (size_t i = 0; i < mebibyte.size(); ++i) mebibyte[i] = static_cast<char>(i * 7 + i / 251);
  const std::unique_ptr<Keyring> ring = Ring(KeyLine("k1", 'a'));
  for (const std::string& plaintext : {std::string(), std::string("x"), binary, mebibyte}) {
    SCOPED_TRACE(plaintext.size());
    Result<std::string> sealed = Seal(*ring, plaintext, "instances/i-1/env");
    ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
    EXPECT_TRUE(sealed->starts_with("enc:v1:k1:"));
    EXPECT_TRUE(IsPrintableAscii(*sealed));
    EXPECT_TRUE(IsSealed(*sealed));
    EXPECT_EQ(SealedKeyId(*sealed).value(), "k1");
    Result<std::string> opened = Open(*ring, *sealed, "instances/i-1/env");
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_TRUE(*opened == plaintext);
  }
}

TEST(EnvelopeTest, TwoSealsOfOnePlaintextDiffer) {
  const std::unique_ptr<Keyring> ring = Ring(KeyLine("k1", 'a'));
  const std::string a = Seal(*ring, "same", "ctx").value();
  const std::string b = Seal(*ring, "same", "ctx").value();
  EXPECT_NE(a, b);
  // Fresh data key and fresh nonce: neither field repeats.
  const std::vector<std::string_view> fa = Split(a, ':'), fb = Split(b, ':');
  ASSERT_EQ(fa.size(), 5u);
  ASSERT_EQ(fb.size(), 5u);
  EXPECT_NE(fa[3], fb[3]);
  EXPECT_NE(fa[4], fb[4]);
}

TEST(EnvelopeTest, AnotherContextDoesNotOpen) {
  const std::unique_ptr<Keyring> ring = Ring(KeyLine("k1", 'a'));
  const std::string sealed = Seal(*ring, "attack at dawn", "users/u-1/totp").value();
  for (const char* context : {"users/u-2/totp", "", "users/u-1/totp\n"}) {
    Result<std::string> opened = Open(*ring, sealed, context);
    ASSERT_FALSE(opened.ok()) << context;
    EXPECT_EQ(opened.status().code(), StatusCode::kDataLoss);
    EXPECT_THAT(opened.status().message(), HasSubstr("fails authentication"));
  }
}

TEST(EnvelopeTest, EveryTamperedByteFails) {
  const std::unique_ptr<Keyring> ring = Ring(KeyLine("k1", 'a') + "\n" + KeyLine("k2", 'b'));
  // 14 bytes make a 74-byte payload (salt, nonce, text, tag), whose base64 ends in one '='.
  const std::string sealed = Seal(*ring, "attack at dawn", "ctx").value();
  ASSERT_TRUE(sealed.ends_with("=") && !sealed.ends_with("=="));
  std::vector<std::string> tampered = {sealed.substr(0, sealed.size() - 1), sealed + "A",
                                       sealed + ":", ""};
  // The last bits of the last character before '=' encode no byte: base64 that decodes to the
  // same bytes, which is not the stored form.
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string same_bytes = sealed;
  char& last = same_bytes[same_bytes.size() - 2];
  last = alphabet[alphabet.find(last) ^ 1];
  ASSERT_EQ(Base64Decode(Split(same_bytes, ':')[4]), Base64Decode(Split(sealed, ':')[4]));
  tampered.push_back(same_bytes);
  for (size_t i = 0; i < sealed.size(); ++i) {
    for (char c : {'A', 'B', '=', ':'}) {
      if (sealed[i] == c) continue;
      std::string t = sealed;
      t[i] = c;
      tampered.push_back(t);
    }
  }
  for (const std::string& t : tampered) {
    Result<std::string> opened = Open(*ring, t, "ctx");
    ASSERT_FALSE(opened.ok()) << t;
    EXPECT_THAT(opened.status().message(), Not(HasSubstr("attack"))) << t;
  }
}

TEST(EnvelopeTest, AValueRelabelledWithAnotherKeyIdFails) {
  const std::unique_ptr<Keyring> ring = Ring(KeyLine("k1", 'a') + "\n" + KeyLine("k2", 'a'));
  std::string sealed = Seal(*ring, "secret", "ctx").value();
  sealed.replace(sealed.find(":k1:"), 4, ":k2:");
  Result<std::string> opened = Open(*ring, sealed, "ctx");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(opened.status().message(), HasSubstr("key 'k2'"));
}

TEST(EnvelopeTest, AnUnknownKeyIdIsNamed) {
  const std::string sealed = Seal(*Ring(KeyLine("old-2025", 'o')), "secret", "ctx").value();
  Result<std::string> opened = Open(*Ring(KeyLine("new-2026", 'n')), sealed, "ctx");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(opened.status().message(),
              HasSubstr("key 'old-2025' is not in the keyring test-keys"));
}

TEST(EnvelopeTest, TellsSealedValuesFromOthers) {
  struct Case {
    std::string value;
    bool sealed;
  };
  const Case cases[] = {
      {"enc:v1:k1:QUJD:QUJD", true}, {"enc:v2:anything", true}, {"enc:v17:", true},
      {"plain text", false},         {"enc:", false},           {"enc:v:k1", false},
      {"enc:vx:k1", false},          {"ENC:v1:k1:a:b", false},  {"", false},
  };
  for (const Case& c : cases) EXPECT_EQ(IsSealed(c.value), c.sealed) << c.value;

  const std::unique_ptr<Keyring> ring = Ring(KeyLine("k1", 'a'));
  Result<std::string> v2 = Open(*ring, "enc:v2:k1:QUJD:QUJD", "");
  EXPECT_EQ(v2.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(v2.status().message(), HasSubstr("format v2"));
  for (const char* bad : {"plain", "enc:v1:k1:QUJD", "enc:v1:k/1:QUJD:QUJD", "enc:v1:k1::QUJD"}) {
    EXPECT_EQ(SealedKeyId(bad).status().code(), StatusCode::kDataLoss) << bad;
    EXPECT_EQ(Open(*ring, bad, "").status().code(), StatusCode::kDataLoss) << bad;
  }
}

TEST(KeyringTest, TheFirstKeyEncryptsAndEveryKeyDecrypts) {
  const std::string k1 = KeyLine("k1", 'a'), k2 = KeyLine("k2", 'b');
  const std::unique_ptr<Keyring> rotated = Ring(k1 + "\n" + k2);
  const std::unique_ptr<Keyring> before = Ring(k2 + "\n" + k1);
  EXPECT_EQ(rotated->CurrentKeyId().value(), "k1");
  EXPECT_EQ(before->CurrentKeyId().value(), "k2");
  const std::string old_value = Seal(*before, "old", "ctx").value();
  const std::string new_value = Seal(*rotated, "new", "ctx").value();
  EXPECT_EQ(SealedKeyId(old_value).value(), "k2");
  EXPECT_EQ(SealedKeyId(new_value).value(), "k1");
  for (Keyring* ring : {rotated.get(), before.get()}) {
    EXPECT_EQ(Open(*ring, old_value, "ctx").value(), "old");
    EXPECT_EQ(Open(*ring, new_value, "ctx").value(), "new");
  }
}

TEST(KeyringTest, ParsesCommentsBlankLinesAndLineEnds) {
  const std::string text = "# keys for tessera\n\n  \t\n" + KeyLine("prod.2026-01_a", 'a') +
                           "\r\n  # retired\n\t" + KeyLine("k0", 'b') + "  \n";
  const std::unique_ptr<Keyring> ring = Ring(text);
  ASSERT_NE(ring, nullptr);
  EXPECT_EQ(ring->CurrentKeyId().value(), "prod.2026-01_a");
  const std::string sealed = Seal(*Ring(KeyLine("k0", 'b')), "v", "").value();
  EXPECT_EQ(Open(*ring, sealed, "").value(), "v");
}

TEST(KeyringTest, EveryFileErrorNamesTheFileAndLine) {
  std::string non_canonical = Base64Encode(std::string(kDataKeyBytes, 'a'));
  non_canonical[non_canonical.size() - 2] = 'F';  // Bits after the last byte.
  struct Case {
    std::string text;
    std::string error;
  };
  const Case cases[] = {
      {"k1 short", "keys.txt:1: key 'k1' is not valid base64"},
      {"k1 " + non_canonical, "keys.txt:1: key 'k1' is not valid base64"},
      {"k1 " + Base64Encode(std::string(16, 'a')), "keys.txt:1: key 'k1' is 16 bytes"},
      {"# c\n" + KeyLine("k1", 'a') + "\n\n" + KeyLine("k1", 'b'),
       "keys.txt:4: duplicate key id 'k1' (first on line 2)"},
      {KeyLine("k/1", 'a'), "keys.txt:1: key id 'k/1' is not 1 to 64 of [A-Za-z0-9._-]"},
      {KeyLine("k:1", 'a'), "keys.txt:1: key id 'k:1' is not"},
      {KeyLine(std::string(65, 'a'), 'a'), "keys.txt:1: key id 'aaaa"},
      {KeyLine("k1", 'a') + "\nk2", "keys.txt:2: want \"ID BASE64_OF_32_BYTES\""},
      {KeyLine("k1", 'a') + " extra", "keys.txt:1: want \"ID BASE64_OF_32_BYTES\""},
      {"", "keys.txt: holds no keys"},
      {"# only a comment\n\n", "keys.txt: holds no keys"},
  };
  for (const Case& c : cases) {
    Result<std::unique_ptr<Keyring>> ring = KeyringFromText(c.text, "keys.txt");
    ASSERT_FALSE(ring.ok()) << c.text;
    EXPECT_EQ(ring.status().code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(ring.status().message(), HasSubstr(c.error)) << c.text;
    EXPECT_THAT(ring.status().message(), Not(HasSubstr("YWFh"))) << "key material in a message";
  }
}

TEST(KeyringTest, LoadsAPrivateFileAndRefusesAnOpenOne) {
  testing::TempDir dir;
  const std::string path = testing::WritePrivateFile(dir.File("kek"), KeyLine("k1", 'a') + "\n");
  Result<std::unique_ptr<Keyring>> ring = LoadKeyringFile(path);
  ASSERT_TRUE(ring.ok()) << ring.status().ToString();
  EXPECT_EQ((*ring)->CurrentKeyId().value(), "k1");

  ASSERT_EQ(chmod(path.c_str(), 0644), 0);
  Result<std::unique_ptr<Keyring>> open = LoadKeyringFile(path);
  ASSERT_FALSE(open.ok());
  EXPECT_EQ(open.status().code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(open.status().message(), HasSubstr(path + ": permissions 0644 are too open"));

  const std::string bad = testing::WritePrivateFile(dir.File("bad"), KeyLine("k1", 'a') + "\nx\n");
  EXPECT_THAT(LoadKeyringFile(bad).status().message(), HasSubstr(bad + ":2: want"));
  EXPECT_THAT(LoadKeyringFile(dir.File("missing")).status().message(),
              HasSubstr(dir.File("missing")));
}

TEST(KeyringTest, NewKeyLinesParseAndDiffer) {
  const std::string a = NewKeyLine("k-2026").value();
  const std::string b = NewKeyLine("k-2027").value();
  EXPECT_TRUE(a.starts_with("k-2026 "));
  EXPECT_NE(a.substr(7), b.substr(7));
  const std::unique_ptr<Keyring> ring = Ring(a + "\n" + b);
  EXPECT_EQ(Open(*ring, Seal(*ring, "v", "").value(), "").value(), "v");
  EXPECT_EQ(NewKeyLine("bad id").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NewKeyLine("").status().code(), StatusCode::kInvalidArgument);
}

// Counts a keyring's calls, forwarding them to `inner`.
class CountingKeyring final : public Keyring {
 public:
  explicit CountingKeyring(std::unique_ptr<Keyring> inner) : inner_(std::move(inner)) {}
  Result<std::string> CurrentKeyId() const override { return inner_->CurrentKeyId(); }
  Result<WrappedKey> Wrap(std::string_view dek) const override {
    ++wraps;
    return inner_->Wrap(dek);
  }
  Result<std::string> Unwrap(std::string_view key_id, std::string_view wrapped) const override {
    ++unwraps;
    return inner_->Unwrap(key_id, wrapped);
  }
  mutable int wraps = 0, unwraps = 0;

 private:
  std::unique_ptr<Keyring> inner_;
};

// A Sealer wraps one seed for any number of values, each still under a data key of its own, and
// unwraps each seed once however many values it opens: a KMS plugin runs per seed, not per value.
TEST(SealerTest, OneKeyringCallPerSeedNotPerValue) {
  auto ring =
      std::make_shared<CountingKeyring>(Ring(KeyLine("k1", 'a') + "\n" + KeyLine("k0", 'c')));
  Sealer sealer(ring);
  std::vector<std::string> sealed;
  for (int i = 0; i < 1000; ++i) {
    sealed.push_back(sealer.Seal("value " + std::to_string(i), "rec/" + std::to_string(i)).value());
  }
  EXPECT_EQ(ring->wraps, 1);
  EXPECT_NE(Split(sealed[0], ':')[4], Split(sealed[1], ':')[4]);
  EXPECT_EQ(Split(sealed[0], ':')[3], Split(sealed[1], ':')[3]) << "one wrapped seed";
  // Another sealer (a restarted server) opens them all with one unwrap.
  Sealer reader(ring);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(reader.Open(sealed[static_cast<size_t>(i)], "rec/" + std::to_string(i)).value(),
              "value " + std::to_string(i));
  }
  EXPECT_EQ(ring->unwraps, 1);
  // The free functions open what a Sealer sealed, and the other way round.
  EXPECT_EQ(Open(*ring, sealed[7], "rec/7").value(), "value 7");
  EXPECT_EQ(reader.Open(Seal(*ring, "x", "c").value(), "c").value(), "x");
  EXPECT_EQ(reader.Open(sealed[7], "rec/8").status().code(), StatusCode::kDataLoss);
}

// A new keyring (its file read again with a new first key) makes the sealer seal under the new
// key at once; values under the old key still open while the keyring has it, and fail closed,
// naming the key, once it does not.
TEST(SealerTest, ANewKeyringSealsUnderItsCurrentKeyAndOpensWhatItHolds) {
  Sealer sealer(Ring(KeyLine("k1", 'a')));
  const std::string old = sealer.Seal("v", "c").value();
  EXPECT_EQ(sealer.CurrentKeyId().value(), "k1");
  sealer.SetKeyring(Ring(KeyLine("k2", 'b') + "\n" + KeyLine("k1", 'a')));
  EXPECT_EQ(sealer.CurrentKeyId().value(), "k2");
  const std::string fresh = sealer.Seal("v", "c").value();
  EXPECT_EQ(SealedKeyId(fresh).value(), "k2");
  EXPECT_EQ(sealer.Open(old, "c").value(), "v");
  Sealer without_k1(Ring(KeyLine("k2", 'b')));
  const Result<std::string> lost = without_k1.Open(old, "c");
  EXPECT_EQ(lost.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(lost.status().message(), HasSubstr("key 'k1' is not in the keyring"));
  EXPECT_EQ(without_k1.Open(fresh, "c").value(), "v");
}

// A fake KMS plugin: it "wraps" a data key by prefixing "wrapped:" to its base64 (its crypto is
// its own business) and knows only key kms-1.
constexpr const char* kFakeKms = R"sh(#!/bin/sh
case "$1" in
  wrap)
    read -r dek
    printf 'kms-1 %s\n' "$(printf 'wrapped:%s' "$dek" | base64 -w0)" ;;
  unwrap)
    if [ "$2" != kms-1 ]; then echo "unknown key $2" >&2; exit 3; fi
    read -r w
    printf '%s' "$w" | base64 -d | sed 's/^wrapped://'
    echo ;;
  *) echo "usage: $0 wrap|unwrap KEY_ID" >&2; exit 2 ;;
esac
)sh";

class CommandKeyringTest : public ::testing::Test {
 protected:
  // Writes an executable script `body` and returns its path.
  std::string Script(const std::string& name, const std::string& body) {
    const std::string path = dir_.Write(name, body);
    EXPECT_EQ(chmod(path.c_str(), 0700), 0);
    return path;
  }
  testing::TempDir dir_;
};

TEST_F(CommandKeyringTest, RoundTripsThroughThePlugin) {
  const std::unique_ptr<Keyring> kms = NewCommandKeyring({Script("kms", kFakeKms)});
  Result<std::string> id = kms->CurrentKeyId();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(*id, "kms-1");
  const std::string sealed = Seal(*kms, "secret", "ctx").value();
  EXPECT_EQ(SealedKeyId(sealed).value(), "kms-1");
  EXPECT_EQ(Open(*kms, sealed, "ctx").value(), "secret");
  EXPECT_EQ(Open(*kms, sealed, "other").status().code(), StatusCode::kDataLoss);
}

// A plugin whose current key moves (a KMS rotated it): the Sealer keeps sealing under the seed
// it has until RenewSeed, which learns the new key from the plugin's answer; values under the old
// key still open.
TEST_F(CommandKeyringTest, ASealerLearnsThePluginsNewKeyWhenItRenewsItsSeed) {
  const std::string current = dir_.Write("current", "kms-1");
  const std::string path = Script("kms", testing::FakeKmsScript(current));
  Sealer sealer(NewCommandKeyring({path}));
  const std::string old = sealer.Seal("v", "c").value();
  EXPECT_EQ(SealedKeyId(old).value(), "kms-1");
  dir_.Write("current", "kms-2");
  EXPECT_EQ(SealedKeyId(sealer.Seal("v", "c").value()).value(), "kms-1") << "the seed in use";
  EXPECT_EQ(sealer.RenewSeed().value(), "kms-2");
  EXPECT_EQ(sealer.CurrentKeyId().value(), "kms-2");
  EXPECT_EQ(SealedKeyId(sealer.Seal("v", "c").value()).value(), "kms-2");
  EXPECT_EQ(sealer.Open(old, "c").value(), "v");
}

TEST_F(CommandKeyringTest, AKeyThePluginRefusesIsNamedWithItsStderr) {
  const std::string path = Script("kms", kFakeKms);
  const std::string sealed = Seal(*Ring(KeyLine("k1", 'a')), "secret", "ctx").value();
  Result<std::string> opened = Open(*NewCommandKeyring({path}), sealed, "ctx");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().message(), "kms command '" + path +
                                           "' (unwrap of key 'k1'): exit status 3; stderr: "
                                           "unknown key k1");
}

TEST_F(CommandKeyringTest, AFailingPluginIsAnErrorWithTheStartOfItsStderr) {
  const std::string path = Script(
      "kms", "#!/bin/sh\necho 'vault is sealed' >&2\nprintf 'x%.0s' $(seq 1000) >&2\nexit 1\n");
  Result<std::string> sealed = Seal(*NewCommandKeyring({path, "--region", "eu"}), "v", "");
  ASSERT_FALSE(sealed.ok());
  EXPECT_EQ(sealed.status().code(), StatusCode::kUnavailable);
  const std::string& message = sealed.status().message();
  EXPECT_THAT(message, HasSubstr("kms command '" + path + " --region eu' (wrap): exit status 1"));
  EXPECT_THAT(message, HasSubstr("stderr: vault is sealed\\n"));
  EXPECT_LT(message.size(), path.size() + 300);
}

TEST_F(CommandKeyringTest, APluginThatHangsIsKilledAtTheDeadline) {
  const std::string path = Script("kms", "#!/bin/sh\necho starting >&2\nsleep 30\n");
  const auto start = std::chrono::steady_clock::now();
  Result<std::string> sealed =
      Seal(*NewCommandKeyring({path}, std::chrono::milliseconds(200)), "v", "");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(sealed.ok());
  EXPECT_THAT(sealed.status().message(),
              HasSubstr("(wrap): no answer within 0.2 s; killed; stderr: starting"));
}

TEST_F(CommandKeyringTest, GarbageOnStdoutIsMalformed) {
  const std::string wrap_answers[] = {
      "", "kms-1", "kms-1 ", "bad/id QUJD", "kms-1 not*base64", "kms-1 QUJD QUJD"};
  for (const std::string& answer : wrap_answers) {
    const std::string path =
        Script("kms", "#!/bin/sh\ncat >/dev/null\nprintf '%s\\n' '" + answer + "'\n");
    Result<std::string> sealed = Seal(*NewCommandKeyring({path}), "v", "");
    ASSERT_FALSE(sealed.ok()) << answer;
    EXPECT_EQ(sealed.status().code(), StatusCode::kInternal) << answer;
    EXPECT_THAT(sealed.status().message(), HasSubstr("(wrap): malformed answer")) << answer;
  }
  const std::string sealed = Seal(*NewCommandKeyring({Script("kms", kFakeKms)}), "v", "").value();
  const std::string short_key = Base64Encode(std::string(16, 'k'));
  for (const std::string& answer : {std::string("!!"), short_key}) {
    const std::string path = Script("bad", "#!/bin/sh\necho '" + answer + "'\n");
    Result<std::string> opened = Open(*NewCommandKeyring({path}), sealed, "");
    ASSERT_FALSE(opened.ok()) << answer;
    EXPECT_THAT(opened.status().message(),
                HasSubstr("(unwrap of key 'kms-1'): malformed answer: want the 32-byte data key"));
    EXPECT_THAT(opened.status().message(), Not(HasSubstr(answer)));
  }
}

TEST_F(CommandKeyringTest, AMissingProgramOrEmptyCommandIsAnError) {
  Result<std::string> missing = Seal(*NewCommandKeyring({dir_.File("no-such-kms")}), "v", "");
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such-kms' (wrap): cannot start"));
  EXPECT_THAT(Seal(*NewCommandKeyring({}), "v", "").status().message(),
              HasSubstr("the command is empty"));
}

}  // namespace
}  // namespace tessera
