// The servers a client may ask: the replicas of one control plane (docs/ha.md), given as a
// comma-separated list of URLs (--server, --url, TESSERA_URL). The client asks one; a follower
// answers 307 to the leader, which the client follows only to a listed URL (a node or tenant
// token goes nowhere else), and a replica that cannot be reached, or knows no leader yet, sends
// the client on to the next.
// Thread-safety: one thread at a time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace tessera {

class ServerList {
 public:
  // Parses "URL[,URL...]"; each http:// or https:// with a host. Errors name `flag`.
  static Result<ServerList> Parse(std::string_view urls, std::string_view flag);

  const std::string& current() const { return urls_[at_]; }
  size_t index() const { return at_; }
  const std::vector<std::string>& urls() const { return urls_; }

  // After a 307 from current(): switches to the listed URL `location` begins with and returns
  // true; false (staying put) when it names none of them.
  bool Follow(std::string_view location);
  // After current() could not be reached, or answered that no replica leads: the next one.
  void Next() { at_ = (at_ + 1) % urls_.size(); }

 private:
  std::vector<std::string> urls_;
  size_t at_ = 0;
};

}  // namespace tessera
