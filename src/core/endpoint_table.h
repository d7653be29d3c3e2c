// EndpointTable: where running instances' ports are reached, kept as they change, and the
// snapshot of it (with groups' services) that the core publishes for the proxies on the API's I/O
// threads (endpoint_index.h). A snapshot is made afresh only when something changed since the
// last one, so a round that changes nothing publishes nothing new.
// Its memory: one entry per instance that has endpoints, until it has none.
// Thread-safety: none; the core thread owns it. Snapshots are immutable once made.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/endpoint_index.h"
#include "core/group.h"
#include "core/instance.h"

namespace tessera::core {

class EndpointTable {
 public:
  // Makes the table say what `inst` holds now: its endpoints, served while it runs.
  void Index(const Instance& inst);
  // The table as of now, with the services of `groups` that have not ended.
  std::shared_ptr<const EndpointIndex> Snapshot(const std::map<std::string, Group>& groups);

 private:
  std::map<std::string, EndpointsOf, std::less<>> instances_;  // By instance id.
  std::shared_ptr<const EndpointIndex> snapshot_ = std::make_shared<const EndpointIndex>();
  bool changed_ = false;
};

}  // namespace tessera::core
