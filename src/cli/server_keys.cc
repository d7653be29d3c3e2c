#include "cli/server_keys.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include "common/files.h"
#include "common/text.h"

namespace tessera::cli {

namespace {

// Makes keyring file `path` with one new key, "local-1", unless it exists (0600, on disk before
// the server seals anything with it).
Status MakeDefaultKeyring(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) return Status::Ok();
  TESSERA_ASSIGN_OR_RETURN(std::string line, NewKeyLine("local-1"));
  const std::string text =
      "# Tessera's key-encryption keys: the first seals new values, all open them.\n"
      "# Made by the server at its first start; keep a copy apart from the database.\n" +
      line + "\n";
  TESSERA_RETURN_IF_ERROR(
      WritePrivateFile(path, text, 0600, /*sync=*/true).WithPrefix("making the keyring"));
  spdlog::info("made the keyring {} with key local-1 (values at rest are sealed with it)", path);
  return Status::Ok();
}

Sealer::Reload FileReload(const std::string& path) {
  return [path]() -> Result<std::shared_ptr<const Keyring>> {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Keyring> ring, LoadKeyringFile(path));
    return std::shared_ptr<const Keyring>(std::move(ring));
  };
}

}  // namespace

Result<ServerKeyring> OpenServerKeyring(const KeyringFlags& flags, const std::string& data_dir,
                                        bool sqlite) {
  if (!flags.kek_file.empty() && !flags.kms_command.empty()) {
    return Status::InvalidArgument("give --kek-file or --kms-command, not both");
  }
  ServerKeyring out;
  if (!flags.kms_command.empty()) {
    std::vector<std::string> argv;
    for (std::string_view word : Split(flags.kms_command, ' ')) {
      if (!word.empty()) argv.emplace_back(word);
    }
    if (argv.empty()) return Status::InvalidArgument("--kms-command: empty");
    out.keyring = NewCommandKeyring(argv);
    // The plugin says which key is current: asked now, so a plugin that cannot run stops the
    // start here rather than at the first secret.
    auto current = out.keyring->CurrentKeyId();
    if (!current.ok()) return current.status().WithPrefix("--kms-command");
    out.description = fmt::format("KMS command '{}'", Quote(flags.kms_command, 120));
    return out;
  }
  std::string path = flags.kek_file;
  if (path.empty() && !sqlite) {
    out.description = "none";
    return out;
  }
  if (path.empty()) {
    path = data_dir + "/keyring";
    TESSERA_RETURN_IF_ERROR(MakeDefaultKeyring(path));
  }
  out.reload = FileReload(path);
  TESSERA_ASSIGN_OR_RETURN(out.keyring, out.reload());
  out.description = fmt::format("keyring file {}", path);
  return out;
}

}  // namespace tessera::cli
