// Envelope encryption for values stored at rest (issue 29 §3; Kubernetes KMS v2 and dstack are
// the models). Each value is sealed with AES-256-GCM under a data key (DEK) of its own and a fresh
// 96-bit nonce. As in KMS v2, the DEK is derived, not wrapped one by one: a random 256-bit seed is
// wrapped by a key-encryption key (KEK) that a Keyring holds and names by an id, and each value's
// DEK is HKDF-SHA256(seed, a fresh random 256-bit salt). So every value has a key of its own,
// while a KMS plugin is called once per seed (a Sealer keeps one seed until its keyring's current
// key changes, and caches seeds it unwrapped), not once per value. A keyring is a private file of
// keys (--kek-file) or an external KMS plugin (--kms-command). The sealed text form, printable
// ASCII only, is
//
//   enc:v1:<key_id>:<base64 of wrapped seed>:<base64 of salt(32) | nonce(12) | ciphertext |
//   tag(16)>
//
// with standard padded base64 (RFC 4648), accepted only in its canonical form. The version, the
// key id and a caller's context (such as "instances/i-123/env") are the GCM additional
// authenticated data, so a value moved to another record or relabelled with another key id does
// not open. A file keyring wraps a seed with AES-256-GCM too, under the KEK, with a random nonce
// and the key id as AAD: 60 bytes (nonce, wrapped key, tag). Random nonces bound one KEK to about
// 2^32 wraps (NIST SP 800-38D), and a DEK encrypts one value, so neither limit is near. Seeds and
// DEKs are cleansed after use.
// Thread-safety: every function, keyring and Sealer here is safe to call from any thread at once.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"

namespace tessera {

// A data key's (and a seed's) length: AES-256.
inline constexpr size_t kDataKeyBytes = 32;
// The largest plaintext Seal takes. Values at rest are records, not files.
inline constexpr size_t kMaxSealedPlaintextBytes = 256 * 1024 * 1024;
// How long a KMS plugin may take for one wrap or unwrap before it is killed.
inline constexpr Duration kDefaultKmsDeadline = std::chrono::seconds(5);

// A data key wrapped by a keyring: the id of the KEK, and the wrapped bytes (opaque; raw, not
// base64).
struct WrappedKey {
  std::string key_id;
  std::string wrapped;
};

// Holds key-encryption keys by id. One of them, the current key, wraps new data keys; any of them
// unwraps. Implementations are safe to call from any thread.
class Keyring {
 public:
  virtual ~Keyring() = default;

  // The id of the key that wraps new data keys. A plugin keyring learns it from its first wrap
  // (made on a throwaway key if need be) and then answers the id of its latest wrap.
  virtual Result<std::string> CurrentKeyId() const = 0;

  // `dek` wrapped under the current key, with that key's id. Errors name the key id or the
  // plugin; nothing of `dek` appears in them.
  virtual Result<WrappedKey> Wrap(std::string_view dek) const = 0;

  // The data key that Wrap gave as `wrapped` under `key_id`; the caller cleanses it after use.
  // NotFound naming `key_id` when the keyring lacks it ("key 'old-2025' is not in the keyring
  // ..."); DataLoss when `wrapped` fails authentication.
  virtual Result<std::string> Unwrap(std::string_view key_id, std::string_view wrapped) const = 0;
};

// True for a key id: 1 to 64 of [A-Za-z0-9._-].
bool IsValidKeyId(std::string_view id);

// The keyring in file `path`: one key a line, "ID BASE64_OF_32_BYTES", blank lines and lines
// starting with '#' ignored; the first key is the current one. Refuses, as ssh does for keys, a
// file that group or others may access, naming it and its mode; errors name the file and line.
Result<std::unique_ptr<Keyring>> LoadKeyringFile(const std::string& path);

// The keyring that `text`, in the file format above, describes; errors name `origin` (a file
// name, a flag) and the line. For tests and key rotation tools.
Result<std::unique_ptr<Keyring>> KeyringFromText(std::string_view text, std::string_view origin);

// A keyring that runs a KMS plugin, `argv` (argv[0] a path, or a name looked up in PATH; no
// shell), for every wrap and unwrap, killing it (and its process group) after `deadline`:
//   PROG wrap           stdin: the DEK, base64, one line;         stdout: "KEY_ID BASE64_WRAPPED"
//   PROG unwrap KEY_ID  stdin: the wrapped key, base64, one line; stdout: the DEK, base64
// A non-zero exit, a timeout or malformed output is an error naming the command and key id, with
// the start of the plugin's stderr; its stdout (which may hold a key) never appears in errors.
std::unique_ptr<Keyring> NewCommandKeyring(std::vector<std::string> argv,
                                           Duration deadline = kDefaultKmsDeadline);

// A new keyring file line "ID BASE64" (no newline) holding 32 random bytes, for `tessera keys`.
// InvalidArgument for a bad id; Internal if the system random generator fails.
Result<std::string> NewKeyLine(std::string_view id);

// `plaintext` sealed under a data key derived from a fresh seed wrapped by `keyring`'s current
// key (one keyring call), in the text form above, bound to `context` (which Open must be given
// again). Errors are the keyring's. For many values, a Sealer calls the keyring once.
Result<std::string> Seal(const Keyring& keyring, std::string_view plaintext,
                         std::string_view context);

// The plaintext of `sealed`, which Seal made with `context`. DataLoss when it is malformed, was
// altered or belongs to another context (no partial plaintext is returned); NotFound naming the
// key id when `keyring` lacks it; FailedPrecondition for a format version this build lacks.
Result<std::string> Open(const Keyring& keyring, std::string_view sealed, std::string_view context);

// Seals and opens many values with one keyring: one seed, wrapped once by the keyring's current
// key, serves every Seal until the keyring (or its current key) changes; seeds unwrapped by Open
// are kept (at most kSeedsCached) so a record set sealed under a few seeds costs a few keyring
// calls to open, not one a record.
class Sealer {
 public:
  static constexpr size_t kSeedsCached = 1024;

  explicit Sealer(std::shared_ptr<const Keyring> keyring);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  // As the free Seal and Open above.
  Result<std::string> Seal(std::string_view plaintext, std::string_view context);
  Result<std::string> Open(std::string_view sealed, std::string_view context);
  // The id of the key new values are sealed under: the keyring's current one.
  Result<std::string> CurrentKeyId();
  // Replaces the keyring (a keyring file read again, its new first key now current): the next
  // Seal makes a new seed under it. Seeds already unwrapped stay cached.
  void SetKeyring(std::shared_ptr<const Keyring> keyring);
  std::shared_ptr<const Keyring> keyring() const;
  // How to read the keyring again (its file, say). When set, an Open that meets a key the keyring
  // lacks reads it again once and retries: a replica whose keyring file gained a rotation's new
  // key opens the values its leader sealed under it.
  using Reload = std::function<Result<std::shared_ptr<const Keyring>>()>;
  void SetReload(Reload reload);
  // Reads the keyring again now (SetReload's) and uses it. FailedPrecondition without a reload.
  Status ReloadKeyring();
  // Makes the seed new values are sealed under now, wrapped by the keyring's current key, and
  // returns that key's id. A KMS plugin decides its current key itself: this is how a rotation
  // learns it (the seed in use stays under the key it was wrapped by until then).
  Result<std::string> RenewSeed();

 private:
  struct Seed;
  // A new seed wrapped by `keyring`, current when `keyring` still is, and cached.
  Result<std::shared_ptr<const Seed>> MakeSeed(std::shared_ptr<const Keyring> keyring);
  // The seed `wrapped` under `key_id` unwraps to, from the cache or the keyring.
  Result<std::shared_ptr<const Seed>> Unwrapped(std::string_view key_id, std::string_view wrapped);

  mutable std::mutex mu_;
  std::shared_ptr<const Keyring> keyring_;  // GUARDED_BY(mu_).
  Reload reload_;                           // GUARDED_BY(mu_).
  std::shared_ptr<const Seed> current_;     // GUARDED_BY(mu_); null until the first Seal.
  // Unwrapped seeds by key id and wrapped bytes; GUARDED_BY(mu_).
  std::map<std::string, std::shared_ptr<const Seed>, std::less<>> cache_;
};

// True when `value` has the shape of a sealed value of any version ("enc:v<digits>:..."), so a
// store tells a sealed value from a legacy plaintext one; it says nothing of whether it opens.
bool IsSealed(std::string_view value);

// The id of the key that wraps `sealed`'s data key, for rotation (re-seal values whose id is not
// the keyring's CurrentKeyId). DataLoss when `sealed` is malformed; FailedPrecondition for a
// format version this build lacks.
Result<std::string> SealedKeyId(std::string_view sealed);

}  // namespace tessera
