// The keyring a server seals values at rest with (docs/secrets.md): a keyring file (--kek-file),
// a KMS plugin command (--kms-command), or, for the SQLite store without either, a keyring file
// the server makes in its data directory at the first start (DATA/keyring, 0600: it guards a
// copy of the database, not a copy of the whole disk). A server on PostgreSQL without either
// stores no sealed value, and refuses to start on a store that holds one.
// Thread-safety: call from main() before the server serves; the reload function may be called
// from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/envelope.h"
#include "common/result.h"

namespace tessera::cli {

struct KeyringFlags {
  std::string kek_file;     // --kek-file
  std::string kms_command;  // --kms-command: a program and its arguments, split at spaces.
};

struct ServerKeyring {
  std::shared_ptr<const Keyring> keyring;  // Null: no keyring.
  Sealer::Reload reload;                   // Reads it again (a file's new keys); null for none.
  std::string description;                 // "keyring file F", "KMS command 'C'", or "none".
};

// The keyring `flags` name; `data_dir` is where the SQLite store's default keyring lives, and
// `sqlite` whether the store is SQLite. InvalidArgument when both flags are given, or naming the
// file (its mode, its line) or the command when they cannot be used.
Result<ServerKeyring> OpenServerKeyring(const KeyringFlags& flags, const std::string& data_dir,
                                        bool sqlite);

}  // namespace tessera::cli
