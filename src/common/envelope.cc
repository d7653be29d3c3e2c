#include "common/envelope.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <optional>
#include <utility>

#include "common/secret_env.h"
#include "common/text.h"

namespace tessera {
namespace {

constexpr std::string_view kPrefix = "enc:v1:";
constexpr size_t kNonceBytes = 12;
constexpr size_t kTagBytes = 16;
constexpr size_t kSaltBytes = 32;
// HKDF's info: what the derived key is for.
constexpr std::string_view kDekInfo = "tessera-envelope:v1 data key";
// Additional authenticated data labels, so a wrapped DEK never opens as a value, nor back.
constexpr std::string_view kValueLabel = "tessera-envelope:v1";
constexpr std::string_view kWrapLabel = "tessera-kek-wrap:v1";
constexpr size_t kMaxPluginInput = 32 * 1024;
constexpr size_t kMaxPluginOutput = 64 * 1024;
constexpr size_t kMaxPluginStderr = 4 * 1024;
constexpr size_t kStderrInMessage = 200;

// Overwrites a string holding key material when it goes out of scope.
class Cleanse {
 public:
  explicit Cleanse(std::string& s) : s_(s) {}
  ~Cleanse() { OPENSSL_cleanse(s_.data(), s_.size()); }
  Cleanse(const Cleanse&) = delete;
  Cleanse& operator=(const Cleanse&) = delete;

 private:
  std::string& s_;
};

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

const unsigned char* Bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}
unsigned char* Bytes(std::string& s) { return reinterpret_cast<unsigned char*>(s.data()); }

// Key ids hold no NUL, so label, id and context (last, any bytes) cannot run into each other.
std::string Aad(std::string_view label, std::string_view key_id, std::string_view context) {
  std::string aad;
  aad.reserve(label.size() + key_id.size() + context.size() + 2);
  aad.append(label).append(1, '\0').append(key_id).append(1, '\0').append(context);
  return aad;
}

// nonce | ciphertext | tag of `plaintext` under the 32-byte `key`, with a fresh random nonce.
Result<std::string> GcmSeal(std::string_view key, std::string_view aad,
                            std::string_view plaintext) {
  std::string out(kNonceBytes + plaintext.size() + kTagBytes, '\0');
  if (RAND_bytes(Bytes(out), static_cast<int>(kNonceBytes)) != 1) {
    return Status::Internal("the system random generator failed");
  }
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int n = 0;
  int final_n = 0;
  unsigned char* body = Bytes(out) + kNonceBytes;
  if (!ctx ||
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(key), Bytes(out)) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, Bytes(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), body, &n, Bytes(plaintext),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), body + n, &final_n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes),
                          body + plaintext.size()) != 1) {
    OPENSSL_cleanse(out.data(), out.size());
    return Status::Internal("AES-256-GCM encryption failed");
  }
  return out;
}

// The plaintext of `sealed` (as GcmSeal makes it), or nullopt when it fails authentication.
std::optional<std::string> GcmOpen(std::string_view key, std::string_view aad,
                                   std::string_view sealed) {
  if (sealed.size() < kNonceBytes + kTagBytes) return std::nullopt;
  const std::string_view body = sealed.substr(kNonceBytes, sealed.size() - kNonceBytes - kTagBytes);
  std::string tag(sealed.substr(sealed.size() - kTagBytes));
  std::string out(body.size(), '\0');
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int n = 0;
  int final_n = 0;
  const bool ok =
      ctx &&
      EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, Bytes(key), Bytes(sealed)) == 1 &&
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, Bytes(aad), static_cast<int>(aad.size())) == 1 &&
      EVP_DecryptUpdate(ctx.get(), Bytes(out), &n, Bytes(body), static_cast<int>(body.size())) ==
          1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes),
                          tag.data()) == 1 &&
      EVP_DecryptFinal_ex(ctx.get(), Bytes(out) + n, &final_n) == 1;
  if (!ok) {
    // GCM decrypts before it checks the tag: what it wrote must not outlive the failure.
    OPENSSL_cleanse(out.data(), out.size());
    return std::nullopt;
  }
  return out;
}

// The bytes of canonical base64 `text`. text.h's decoder accepts non-zero bits after the last
// byte, so two texts would decode alike; a stored value has exactly one form.
std::optional<std::string> DecodeCanonical(std::string_view text) {
  std::optional<std::string> bytes = Base64Decode(text);
  if (!bytes) return std::nullopt;
  std::string again = Base64Encode(*bytes);
  const bool canonical = again == text;
  OPENSSL_cleanse(again.data(), again.size());  // It may be a key, in base64.
  if (!canonical) {
    OPENSSL_cleanse(bytes->data(), bytes->size());
    return std::nullopt;
  }
  return bytes;
}

Result<std::string> RandomBytes(size_t n) {
  std::string key(n, '\0');
  if (RAND_bytes(Bytes(key), static_cast<int>(key.size())) != 1) {
    return Status::Internal("the system random generator failed");
  }
  return key;
}

Result<std::string> RandomKey() { return RandomBytes(kDataKeyBytes); }

// The data key HKDF-SHA256 derives from `seed` and `salt` (RFC 5869); the caller cleanses it.
Result<std::string> DeriveDek(std::string_view seed, std::string_view salt) {
  // Fetched once: a fetch looks the algorithm up in the provider's tables.
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  std::unique_ptr<EVP_KDF_CTX, decltype(&EVP_KDF_CTX_free)> ctx(
      kdf ? EVP_KDF_CTX_new(kdf) : nullptr, &EVP_KDF_CTX_free);
  std::string digest = "SHA256";
  std::string key(seed), salt_copy(salt), info(kDekInfo);
  Cleanse cleanse_key(key);
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest.data(), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, key.data(), key.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt_copy.data(), salt_copy.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  std::string dek(kDataKeyBytes, '\0');
  if (!ctx || EVP_KDF_derive(ctx.get(), Bytes(dek), dek.size(), params) != 1) {
    return Status::Internal("HKDF-SHA256 failed");
  }
  return dek;
}

// The payload of a sealed value (salt | nonce | ciphertext | tag) of `plaintext` under `seed`.
Result<std::string> SealWithSeed(std::string_view seed, std::string_view aad,
                                 std::string_view plaintext) {
  TESSERA_ASSIGN_OR_RETURN(std::string salt, RandomBytes(kSaltBytes));
  TESSERA_ASSIGN_OR_RETURN(std::string dek, DeriveDek(seed, salt));
  Cleanse cleanse(dek);
  TESSERA_ASSIGN_OR_RETURN(std::string sealed, GcmSeal(dek, aad, plaintext));
  return salt + sealed;
}

// The plaintext of a payload SealWithSeed made, or nullopt when it fails authentication.
Result<std::optional<std::string>> OpenWithSeed(std::string_view seed, std::string_view aad,
                                                std::string_view payload) {
  if (payload.size() < kSaltBytes + kNonceBytes + kTagBytes) return std::optional<std::string>();
  TESSERA_ASSIGN_OR_RETURN(std::string dek, DeriveDek(seed, payload.substr(0, kSaltBytes)));
  Cleanse cleanse(dek);
  return GcmOpen(dek, aad, payload.substr(kSaltBytes));
}

// ---- File keyring ----

// A key-encryption key, cleansed when it dies, wherever that is (a keyring, a half-parsed file).
struct Kek {
  Kek(std::string id_in, std::string secret_in)
      : id(std::move(id_in)), secret(std::move(secret_in)) {}
  Kek(Kek&&) = default;
  Kek& operator=(Kek&&) = default;
  ~Kek() { OPENSSL_cleanse(secret.data(), secret.size()); }
  std::string id;
  std::string secret;
};

class FileKeyring final : public Keyring {
 public:
  FileKeyring(std::vector<Kek> keys, std::string origin)
      : keys_(std::move(keys)), origin_(std::move(origin)) {}

  Result<std::string> CurrentKeyId() const override { return keys_.front().id; }

  Result<WrappedKey> Wrap(std::string_view dek) const override {
    const Kek& key = keys_.front();
    TESSERA_ASSIGN_OR_RETURN(std::string wrapped,
                             GcmSeal(key.secret, Aad(kWrapLabel, key.id, ""), dek));
    return WrappedKey{key.id, std::move(wrapped)};
  }

  Result<std::string> Unwrap(std::string_view key_id, std::string_view wrapped) const override {
    auto key =
        std::find_if(keys_.begin(), keys_.end(), [&](const Kek& k) { return k.id == key_id; });
    if (key == keys_.end()) {
      return Status::NotFound(
          fmt::format("key '{}' is not in the keyring {}", Quote(key_id), origin_));
    }
    std::optional<std::string> dek = GcmOpen(key->secret, Aad(kWrapLabel, key->id, ""), wrapped);
    if (!dek) {
      return Status::DataLoss(fmt::format(
          "the data key wrapped under key '{}' fails authentication with that key of {}: it was "
          "altered, or wrapped by another key of the same id",
          key->id, origin_));
    }
    return std::move(*dek);
  }

 private:
  std::vector<Kek> keys_;  // Not empty; the first is the current key.
  std::string origin_;
};

// One keyring line's key, or an error naming `where` ("FILE:LINE").
Result<Kek> ParseKeyLine(std::string_view line, const std::string& where) {
  constexpr std::string_view kBlank = " \t";
  const size_t id_end = line.find_first_of(kBlank);
  const size_t key_start = line.find_first_not_of(kBlank, id_end);
  if (id_end == std::string_view::npos || key_start == std::string_view::npos ||
      line.find_first_of(kBlank, key_start) != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("{}: want \"ID BASE64_OF_32_BYTES\", two fields", where));
  }
  Kek key(std::string(line.substr(0, id_end)), "");
  if (!IsValidKeyId(key.id)) {
    return Status::InvalidArgument(
        fmt::format("{}: key id '{}' is not 1 to 64 of [A-Za-z0-9._-]", where, Quote(key.id)));
  }
  std::optional<std::string> secret = DecodeCanonical(line.substr(key_start));
  if (!secret) {
    return Status::InvalidArgument(fmt::format("{}: key '{}' is not valid base64", where, key.id));
  }
  if (secret->size() != kDataKeyBytes) {
    const size_t size = secret->size();
    OPENSSL_cleanse(secret->data(), secret->size());
    return Status::InvalidArgument(fmt::format("{}: key '{}' is {} bytes; an AES-256 key is {}",
                                               where, key.id, size, kDataKeyBytes));
  }
  key.secret = std::move(*secret);
  return key;
}

// ---- Command (KMS plugin) keyring ----

// The two ends of a pipe, closed when it dies.
struct Pipe {
  int fd[2] = {-1, -1};
  ~Pipe() {
    Close(0);
    Close(1);
  }
  void Close(int end) {
    if (fd[end] >= 0) close(fd[end]);
    fd[end] = -1;
  }
};

struct PluginRun {
  int exit_code = -1;  // 128+N when signal N ended it.
  bool timed_out = false;
  std::string out;  // Up to kMaxPluginOutput + 1 bytes: one more means too long.
  std::string err;  // Up to kMaxPluginStderr bytes.
};

// Starts `argv` on the given stdin, stdout and stderr, every other descriptor closed, with
// default signal handling, in a process group of its own (so a timeout kills its children too).
// Returns posix_spawn's error number, 0 when it started.
int Spawn(const std::vector<std::string>& argv, int in, int out, int err, pid_t& pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in, 0);
  posix_spawn_file_actions_adddup2(&actions, out, 1);
  posix_spawn_file_actions_adddup2(&actions, err, 2);
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  std::vector<char*> ptrs;
  for (const std::string& arg : argv) ptrs.push_back(const_cast<char*>(arg.c_str()));
  ptrs.push_back(nullptr);
  const int rc = posix_spawnp(&pid, argv[0].c_str(), &actions, &attr, ptrs.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return rc;
}

// Waits for `pid` while reading its stdout and stderr into `run`; at `deadline` its process group
// gets SIGKILL. The exit is noticed by waitpid, not by the pipes closing (a child the plugin
// left behind may hold them), so the polls are short.
void Wait(pid_t pid, int out, int err, Duration deadline, PluginRun& run) {
  pollfd fds[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
  auto drain = [&](int i) {
    std::string& to = i == 0 ? run.out : run.err;
    const size_t max = i == 0 ? kMaxPluginOutput + 1 : kMaxPluginStderr;
    char buf[4096];
    const ssize_t got = read(fds[i].fd, buf, sizeof buf);
    if (got > 0) to.append(buf, std::min(static_cast<size_t>(got), max - std::min(to.size(), max)));
    OPENSSL_cleanse(buf, sizeof buf);  // It may have held a data key.
    if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) fds[i].fd = -1;
  };
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  while (true) {
    if (std::chrono::steady_clock::now() - start >= deadline) {
      run.timed_out = true;
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    if (poll(fds, 2, 10) > 0) {
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd >= 0 && fds[i].revents != 0) drain(i);
      }
    }
    if (waitpid(pid, &status, WNOHANG) == pid) {
      for (int i = 0; i < 2; ++i) {  // What it wrote just before it exited.
        while (fds[i].fd >= 0 && poll(&fds[i], 1, 0) > 0) drain(i);
      }
      break;
    }
  }
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.exit_code = 128 + WTERMSIG(status);
}

// Runs `argv` with `input` as its whole stdin, until it exits or `deadline` passes.
Result<PluginRun> RunPlugin(const std::vector<std::string>& argv, std::string_view input,
                            Duration deadline) {
  auto failed = [](const char* step) {
    return Status::Unavailable(fmt::format("{}: {}", step, strerror(errno)));
  };
  // Written whole before the plugin starts, so it must fit in the pipe (64 KiB on Linux).
  if (input.size() > kMaxPluginInput) return Status::InvalidArgument("the input is too long");
  Pipe in, out, err;
  if (pipe2(in.fd, O_CLOEXEC) != 0 || pipe2(out.fd, O_CLOEXEC) != 0 ||
      pipe2(err.fd, O_CLOEXEC) != 0) {
    return failed("pipe");
  }
  if (write(in.fd[1], input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
    return failed("write");
  }
  in.Close(1);  // So the plugin sees the input end.
  pid_t pid = -1;
  const int rc = Spawn(argv, in.fd[0], out.fd[1], err.fd[1], pid);
  in.Close(0);
  out.Close(1);
  err.Close(1);
  if (rc != 0) {
    errno = rc;
    return failed("cannot start");
  }
  PluginRun run;
  run.out.reserve(kMaxPluginOutput + 1);  // No reallocation leaves a copy of a key behind.
  Wait(pid, out.fd[0], err.fd[0], deadline, run);
  return run;
}

// `s` without the line end (and spaces) a plugin prints after its answer.
std::string_view TrimAnswer(std::string_view s) {
  const size_t end = s.find_last_not_of(" \t\r\n");
  return end == std::string_view::npos ? std::string_view() : s.substr(0, end + 1);
}

class CommandKeyring final : public Keyring {
 public:
  CommandKeyring(std::vector<std::string> argv, Duration deadline)
      : argv_(std::move(argv)), deadline_(deadline) {
    for (const std::string& arg : argv_) name_ += (name_.empty() ? "" : " ") + arg;
  }

  Result<std::string> CurrentKeyId() const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!current_id_.empty()) return current_id_;
    }
    TESSERA_ASSIGN_OR_RETURN(std::string throwaway, RandomKey());
    Cleanse cleanse(throwaway);
    TESSERA_ASSIGN_OR_RETURN(WrappedKey wrapped, Wrap(throwaway));
    return wrapped.key_id;
  }

  Result<WrappedKey> Wrap(std::string_view dek) const override {
    std::string input = Base64Encode(dek) + "\n";
    Cleanse cleanse(input);
    TESSERA_ASSIGN_OR_RETURN(std::string out, Run({"wrap"}, input, "wrap"));
    const std::string_view answer = TrimAnswer(out);
    const size_t space = answer.find(' ');
    WrappedKey key;
    std::optional<std::string> wrapped;
    if (space != std::string_view::npos) {
      key.key_id = std::string(answer.substr(0, space));
      wrapped = DecodeCanonical(answer.substr(space + 1));
    }
    if (!IsValidKeyId(key.key_id) || !wrapped || wrapped->empty()) {
      return Status::Internal(fmt::format(
          "{}: malformed answer: want \"KEY_ID BASE64_WRAPPED\" on stdout, the id 1 to 64 of "
          "[A-Za-z0-9._-]",
          Name("wrap")));
    }
    key.wrapped = std::move(*wrapped);
    std::lock_guard<std::mutex> lock(mu_);
    current_id_ = key.key_id;
    return key;
  }

  Result<std::string> Unwrap(std::string_view key_id, std::string_view wrapped) const override {
    const std::string what = fmt::format("unwrap of key '{}'", Quote(key_id));
    if (!IsValidKeyId(key_id)) {
      return Status::InvalidArgument(fmt::format("{}: not a valid key id", Name(what)));
    }
    TESSERA_ASSIGN_OR_RETURN(
        std::string out, Run({"unwrap", std::string(key_id)}, Base64Encode(wrapped) + "\n", what));
    Cleanse cleanse(out);
    std::optional<std::string> dek = DecodeCanonical(TrimAnswer(out));
    if (!dek || dek->size() != kDataKeyBytes) {
      if (dek) OPENSSL_cleanse(dek->data(), dek->size());
      return Status::Internal(
          fmt::format("{}: malformed answer: want the {}-byte data key in base64 on stdout",
                      Name(what), kDataKeyBytes));
    }
    return std::move(*dek);
  }

 private:
  std::string Name(std::string_view what) const {
    return fmt::format("kms command '{}' ({})", Quote(name_, 200), what);
  }

  // The plugin's stdout when run with `args` and `input`; the caller cleanses it. Errors name
  // the command and `what`, with the start of its stderr, but never show its stdout.
  Result<std::string> Run(std::vector<std::string> args, std::string_view input,
                          std::string_view what) const {
    // Checked before the arguments go on: else "wrap" would be the program run.
    if (argv_.empty() || argv_[0].empty()) {
      return Status::InvalidArgument(fmt::format("{}: the command is empty", Name(what)));
    }
    std::vector<std::string> argv = argv_;
    argv.insert(argv.end(), args.begin(), args.end());
    Result<PluginRun> run = RunPlugin(argv, input, deadline_);
    if (!run.ok()) return run.status().WithPrefix(Name(what));
    std::string detail;
    if (run->timed_out) {
      detail = fmt::format("no answer within {:g} s; killed", Seconds(deadline_));
    } else if (run->exit_code != 0) {
      detail = fmt::format("exit status {}", run->exit_code);
    } else if (run->out.size() > kMaxPluginOutput) {
      detail = fmt::format("answered more than {} bytes", kMaxPluginOutput);
    } else {
      return std::move(run->out);
    }
    OPENSSL_cleanse(run->out.data(), run->out.size());
    const std::string_view err = TrimAnswer(run->err);
    if (!err.empty()) detail += fmt::format("; stderr: {}", Quote(err, kStderrInMessage));
    return Status::Unavailable(fmt::format("{}: {}", Name(what), detail));
  }

  const std::vector<std::string> argv_;
  const Duration deadline_;
  std::string name_;  // argv_ joined, for messages.
  mutable std::mutex mu_;
  mutable std::string current_id_;  // GUARDED_BY(mu_); the id of the latest wrap.
};

// ---- The sealed form ----

struct SealedFields {
  std::string_view key_id;
  std::string_view wrapped;
  std::string_view payload;
};

Result<SealedFields> ParseSealed(std::string_view sealed) {
  if (!IsSealed(sealed)) return Status::DataLoss("not a sealed value (want \"enc:v1:...\")");
  if (sealed.substr(0, kPrefix.size()) != kPrefix) {
    const std::string_view version = Split(sealed, ':')[1];
    return Status::FailedPrecondition(
        fmt::format("the value is sealed in format {}, which this build cannot open (it knows v1)",
                    Quote(version)));
  }
  const std::vector<std::string_view> fields = Split(sealed.substr(kPrefix.size()), ':');
  if (fields.size() != 3 || !IsValidKeyId(fields[0]) || fields[1].empty() || fields[2].empty()) {
    return Status::DataLoss(
        "the sealed value is malformed: want \"enc:v1:KEY_ID:BASE64_WRAPPED:BASE64_DATA\"");
  }
  return SealedFields{fields[0], fields[1], fields[2]};
}

}  // namespace

bool IsValidKeyId(std::string_view id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

Result<std::unique_ptr<Keyring>> KeyringFromText(std::string_view text, std::string_view origin) {
  std::vector<Kek> keys;
  std::vector<size_t> lines;  // Where each key was.
  const std::vector<std::string_view> all = Split(text, '\n');
  for (size_t i = 0; i < all.size(); ++i) {
    std::string_view line = all[i];
    const size_t start = line.find_first_not_of(" \t\r");
    if (start == std::string_view::npos || line[start] == '#') continue;
    line = line.substr(start, line.find_last_not_of(" \t\r") + 1 - start);
    const std::string where = fmt::format("{}:{}", origin, i + 1);
    TESSERA_ASSIGN_OR_RETURN(Kek key, ParseKeyLine(line, where));
    for (size_t k = 0; k < keys.size(); ++k) {
      if (keys[k].id == key.id) {
        return Status::InvalidArgument(
            fmt::format("{}: duplicate key id '{}' (first on line {})", where, key.id, lines[k]));
      }
    }
    keys.push_back(std::move(key));
    lines.push_back(i + 1);
  }
  if (keys.empty()) return Status::InvalidArgument(fmt::format("{}: holds no keys", origin));
  return std::unique_ptr<Keyring>(
      std::make_unique<FileKeyring>(std::move(keys), std::string(origin)));
}

Result<std::unique_ptr<Keyring>> LoadKeyringFile(const std::string& path) {
  // ReadSecretFile refuses a file group or others may access, naming it and its mode.
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadSecretFile(path));
  Cleanse cleanse(text);
  return KeyringFromText(text, path);
}

std::unique_ptr<Keyring> NewCommandKeyring(std::vector<std::string> argv, Duration deadline) {
  return std::make_unique<CommandKeyring>(std::move(argv), deadline);
}

Result<std::string> NewKeyLine(std::string_view id) {
  if (!IsValidKeyId(id)) {
    return Status::InvalidArgument(
        fmt::format("key id '{}' is not 1 to 64 of [A-Za-z0-9._-]", Quote(id)));
  }
  TESSERA_ASSIGN_OR_RETURN(std::string key, RandomKey());
  Cleanse cleanse(key);
  return fmt::format("{} {}", id, Base64Encode(key));
}

namespace {

Status CheckSize(std::string_view plaintext) {
  if (plaintext.size() > kMaxSealedPlaintextBytes) {
    return Status::InvalidArgument(fmt::format("a value to seal is {} bytes; the most is {}",
                                               plaintext.size(), kMaxSealedPlaintextBytes));
  }
  return Status::Ok();
}

// A new seed wrapped by `keyring`'s current key.
Result<WrappedKey> NewSeed(const Keyring& keyring, std::string& seed) {
  TESSERA_ASSIGN_OR_RETURN(seed, RandomKey());
  TESSERA_ASSIGN_OR_RETURN(WrappedKey wrapped, keyring.Wrap(seed));
  if (!IsValidKeyId(wrapped.key_id)) {
    return Status::Internal(
        fmt::format("the keyring wrapped under a bad key id '{}'", Quote(wrapped.key_id)));
  }
  return wrapped;
}

std::string Format(const WrappedKey& wrapped, std::string_view payload) {
  return fmt::format("{}{}:{}:{}", kPrefix, wrapped.key_id, Base64Encode(wrapped.wrapped),
                     Base64Encode(payload));
}

// A sealed value's fields decoded: its key id, wrapped seed and payload.
struct Decoded {
  std::string key_id, wrapped, payload;
};

Result<Decoded> Decode(std::string_view sealed) {
  TESSERA_ASSIGN_OR_RETURN(SealedFields fields, ParseSealed(sealed));
  std::optional<std::string> wrapped = DecodeCanonical(fields.wrapped);
  std::optional<std::string> payload = DecodeCanonical(fields.payload);
  if (!wrapped || !payload || payload->size() < kSaltBytes + kNonceBytes + kTagBytes) {
    return Status::DataLoss(
        fmt::format("the value sealed under key '{}' is malformed: bad base64", fields.key_id));
  }
  return Decoded{std::string(fields.key_id), std::move(*wrapped), std::move(*payload)};
}

// The plaintext of `d` under `seed`.
Result<std::string> OpenDecoded(const Decoded& d, std::string_view seed, std::string_view context) {
  if (seed.size() != kDataKeyBytes) {
    return Status::Internal(
        fmt::format("key '{}': the keyring gave a seed of {} bytes", d.key_id, seed.size()));
  }
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> plaintext,
                           OpenWithSeed(seed, Aad(kValueLabel, d.key_id, context), d.payload));
  if (!plaintext) {
    return Status::DataLoss(fmt::format(
        "the value sealed under key '{}' fails authentication: it was altered, or it belongs to "
        "another record than '{}'",
        d.key_id, Quote(context)));
  }
  return std::move(*plaintext);
}

}  // namespace

Result<std::string> Seal(const Keyring& keyring, std::string_view plaintext,
                         std::string_view context) {
  TESSERA_RETURN_IF_ERROR(CheckSize(plaintext));
  std::string seed;
  Cleanse cleanse(seed);
  TESSERA_ASSIGN_OR_RETURN(WrappedKey wrapped, NewSeed(keyring, seed));
  TESSERA_ASSIGN_OR_RETURN(
      std::string payload,
      SealWithSeed(seed, Aad(kValueLabel, wrapped.key_id, context), plaintext));
  return Format(wrapped, payload);
}

Result<std::string> Open(const Keyring& keyring, std::string_view sealed,
                         std::string_view context) {
  TESSERA_ASSIGN_OR_RETURN(Decoded d, Decode(sealed));
  TESSERA_ASSIGN_OR_RETURN(std::string seed, keyring.Unwrap(d.key_id, d.wrapped));
  Cleanse cleanse(seed);
  return OpenDecoded(d, seed, context);
}

// ---- Sealer ----

struct Sealer::Seed {
  WrappedKey wrapped;
  std::string secret;
  ~Seed() { OPENSSL_cleanse(secret.data(), secret.size()); }
};

namespace {
std::string CacheKey(std::string_view key_id, std::string_view wrapped) {
  std::string key(key_id);
  key.append(1, '\0').append(wrapped);
  return key;
}
}  // namespace

Sealer::Sealer(std::shared_ptr<const Keyring> keyring) : keyring_(std::move(keyring)) {}
Sealer::~Sealer() = default;

std::shared_ptr<const Keyring> Sealer::keyring() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keyring_;
}

void Sealer::SetKeyring(std::shared_ptr<const Keyring> keyring) {
  std::lock_guard<std::mutex> lock(mu_);
  keyring_ = std::move(keyring);
  current_.reset();
}

Result<std::string> Sealer::CurrentKeyId() { return keyring()->CurrentKeyId(); }

void Sealer::SetReload(Reload reload) {
  std::lock_guard<std::mutex> lock(mu_);
  reload_ = std::move(reload);
}

Status Sealer::ReloadKeyring() {
  Reload reload;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reload = reload_;
  }
  if (!reload) return Status::FailedPrecondition("this keyring cannot be read again");
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const Keyring> keyring, reload());
  SetKeyring(std::move(keyring));
  return Status::Ok();
}

Result<std::string> Sealer::Seal(std::string_view plaintext, std::string_view context) {
  TESSERA_RETURN_IF_ERROR(CheckSize(plaintext));
  std::shared_ptr<const Seed> seed;
  std::shared_ptr<const Keyring> keyring;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seed = current_;
    keyring = keyring_;
  }
  if (!seed) {
    TESSERA_ASSIGN_OR_RETURN(seed, MakeSeed(keyring));
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::string payload,
      SealWithSeed(seed->secret, Aad(kValueLabel, seed->wrapped.key_id, context), plaintext));
  return Format(seed->wrapped, payload);
}

Result<std::shared_ptr<const Sealer::Seed>> Sealer::MakeSeed(
    std::shared_ptr<const Keyring> keyring) {
  // Made outside the lock: a plugin's wrap may take a while. Two threads may both make one; the
  // last stays current and both seal correctly.
  auto made = std::make_shared<Seed>();
  TESSERA_ASSIGN_OR_RETURN(made->wrapped, NewSeed(*keyring, made->secret));
  std::lock_guard<std::mutex> lock(mu_);
  if (keyring_ == keyring) current_ = made;
  if (cache_.size() >= kSeedsCached) cache_.erase(cache_.begin());
  cache_[CacheKey(made->wrapped.key_id, made->wrapped.wrapped)] = made;
  return std::shared_ptr<const Seed>(std::move(made));
}

Result<std::string> Sealer::RenewSeed() {
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const Seed> seed, MakeSeed(keyring()));
  return seed->wrapped.key_id;
}

Result<std::shared_ptr<const Sealer::Seed>> Sealer::Unwrapped(std::string_view key_id,
                                                              std::string_view wrapped) {
  const std::string key = CacheKey(key_id, wrapped);
  std::shared_ptr<const Keyring> keyring;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    keyring = keyring_;
  }
  auto seed = std::make_shared<Seed>();
  Result<std::string> unwrapped = keyring->Unwrap(key_id, wrapped);
  if (unwrapped.status().code() == StatusCode::kNotFound && ReloadKeyring().ok()) {
    unwrapped = this->keyring()->Unwrap(key_id, wrapped);  // Its file may have gained the key.
  }
  TESSERA_ASSIGN_OR_RETURN(seed->secret, std::move(unwrapped));
  seed->wrapped = {std::string(key_id), std::string(wrapped)};
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() >= kSeedsCached) cache_.erase(cache_.begin());
  cache_[key] = seed;
  return std::shared_ptr<const Seed>(std::move(seed));
}

Result<std::string> Sealer::Open(std::string_view sealed, std::string_view context) {
  TESSERA_ASSIGN_OR_RETURN(Decoded d, Decode(sealed));
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const Seed> seed, Unwrapped(d.key_id, d.wrapped));
  return OpenDecoded(d, seed->secret, context);
}

bool IsSealed(std::string_view value) {
  if (value.substr(0, 5) != "enc:v") return false;
  const size_t colon = value.find(':', 5);
  return colon != std::string_view::npos && colon > 5 &&
         std::all_of(value.begin() + 5, value.begin() + static_cast<std::ptrdiff_t>(colon),
                     [](char c) { return c >= '0' && c <= '9'; });
}

Result<std::string> SealedKeyId(std::string_view sealed) {
  TESSERA_ASSIGN_OR_RETURN(SealedFields fields, ParseSealed(sealed));
  return std::string(fields.key_id);
}

}  // namespace tessera
