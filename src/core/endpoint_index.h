// Where instances' ports and groups' services are reached: what the proxies on the API's I/O
// threads read (docs/volumes.md), an immutable snapshot the core publishes after each round that
// changed it, as it does the token index (core.h).
// Thread-safety: immutable once published.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/group.h"
#include "core/instance.h"

namespace tessera::core {

struct EndpointsOf {
  std::string tenant;
  std::vector<Endpoint> endpoints;
  bool serving = false;  // Running: a service sends it requests (not while it stops).
};

struct ServiceOf {
  std::string tenant;
  Service service;
  std::vector<std::string> members;  // Its current attempt's instances.
};

struct EndpointIndex {
  std::map<std::string, EndpointsOf, std::less<>> instances;  // By instance id.
  std::map<std::string, ServiceOf, std::less<>> services;     // By group id.
};

}  // namespace tessera::core
