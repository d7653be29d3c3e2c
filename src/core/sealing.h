// Values sealed at rest in the state's records (docs/secrets.md): the one way a field's value is
// sealed and opened again, with the errors a server without a keyring gives. Secrets, env
// literals, registry passwords and webhook URLs all go through these two functions.
// Thread-safety: as the Sealer's (safe from any thread).
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera {
class Sealer;
}  // namespace tessera

namespace tessera::core {

// The error a server without a keyring gives when it must seal `what` ("env.HF_HOME").
Status NoKeyring(std::string_view what);

// `value` sealed under `context` for the field `what`: NoKeyring without a sealer; the sealer's
// errors prefixed "sealing <what>". Never quotes the value.
Result<std::string> SealValue(Sealer* sealer, std::string_view value, std::string_view context,
                              std::string_view what);

// The value `sealed` holds, opened under `context`. `where` names the record and the field
// ("instance/inst-000042: env.HF_HOME") in every error: DataLoss when it is not a sealed value;
// FailedPrecondition naming the key id without a sealer (the server must not start without
// it); the sealer's errors (a key the keyring lacks, a value that fails authentication).
Result<std::string> OpenValue(Sealer* sealer, std::string_view sealed, std::string_view context,
                              std::string_view where);

}  // namespace tessera::core
