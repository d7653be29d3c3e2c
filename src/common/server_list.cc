#include "common/server_list.h"

#include <fmt/format.h>

#include "common/text.h"

namespace tessera {

Result<ServerList> ServerList::Parse(std::string_view urls, std::string_view flag) {
  ServerList out;
  for (std::string_view url : Split(urls, ',')) {
    while (!url.empty() && url.front() == ' ') url.remove_prefix(1);
    while (!url.empty() && (url.back() == ' ' || url.back() == '/')) url.remove_suffix(1);
    const size_t scheme = url.starts_with("https://") ? 8 : url.starts_with("http://") ? 7 : 0;
    if (scheme == 0 || url.size() == scheme || url.find('/', scheme) != std::string_view::npos) {
      return Status::InvalidArgument(
          fmt::format("{}: '{}' is not a server URL (http://HOST:PORT or https://HOST:PORT; "
                      "several, for the replicas of one control plane, separated by commas)",
                      flag, Quote(url)));
    }
    out.urls_.emplace_back(url);
  }
  return out;
}

bool ServerList::Follow(std::string_view location) {
  for (size_t i = 0; i < urls_.size(); ++i) {
    const std::string& u = urls_[i];
    if (location.starts_with(u) && (location.size() == u.size() || location[u.size()] == '/')) {
      at_ = i;
      return true;
    }
  }
  return false;
}

}  // namespace tessera
