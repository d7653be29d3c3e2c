// URLs and addresses of receivers, as the notifier checks and uses them.
// Thread-safety: values and pure functions.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace tessera::alerts {

struct Url {
  std::string scheme;  // "http" or "https".
  std::string host;    // A name or a numeric address; IPv6 without brackets.
  int port = 0;
  std::string path;    // Path and query, at least "/"; no fragment.
  std::string origin;  // scheme://host:port, for messages (the path may hold a secret token).
};

// Parses an http or https URL with a host and no user information; the error names what is
// wrong with it (the caller adds the field).
Result<Url> ParseUrl(const std::string& target);
// local@domain, as SMTP takes it.
bool ValidEmail(std::string_view a);

}  // namespace tessera::alerts
