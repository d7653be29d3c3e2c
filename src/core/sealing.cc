#include "core/sealing.h"

#include <fmt/format.h>

#include "common/envelope.h"

namespace tessera::core {

Status NoKeyring(std::string_view what) {
  return Status::FailedPrecondition(fmt::format(
      "{} is stored encrypted, and this server has no key-encryption key: start it with "
      "--kek-file or --kms-command (docs/secrets.md)",
      what));
}

Result<std::string> SealValue(Sealer* sealer, std::string_view value, std::string_view context,
                              std::string_view what) {
  if (sealer == nullptr) return NoKeyring(what);
  auto sealed = sealer->Seal(value, context);
  if (!sealed.ok()) return sealed.status().WithPrefix(fmt::format("sealing {}", what));
  return sealed;
}

Result<std::string> OpenValue(Sealer* sealer, std::string_view sealed, std::string_view context,
                              std::string_view where) {
  if (!IsSealed(sealed)) return Status::DataLoss(fmt::format("{} is not a sealed value", where));
  if (sealer == nullptr) {
    auto key = SealedKeyId(sealed);
    return Status::FailedPrecondition(
        fmt::format("{} is sealed under key '{}', and this server has no keyring (--kek-file or "
                    "--kms-command)",
                    where, key.ok() ? *key : "?"));
  }
  auto opened = sealer->Open(sealed, context);
  if (!opened.ok()) return opened.status().WithPrefix(where);
  return opened;
}

}  // namespace tessera::core
