// The balancer behind groups' services (docs/volumes.md, "A group's service"): which members are
// healthy, checked on their health path every second by a thread of its own, and which member a
// request goes to: a healthy, running one with the fewest requests outstanding, then in turn.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "core/endpoint_index.h"

namespace tessera::core {
class Core;
}  // namespace tessera::core

namespace tessera::api {

class ServiceBalancer {
 public:
  ServiceBalancer() = default;
  ~ServiceBalancer() { Stop(); }
  ServiceBalancer(const ServiceBalancer&) = delete;
  ServiceBalancer& operator=(const ServiceBalancer&) = delete;

  // Checks the members of every service `core` publishes until Stop. `core` must outlive it.
  void Start(core::Core* core);
  void Stop();

  struct Pick {
    std::string key;  // The member's instance id and host port: what Begin and End count.
    core::Endpoint endpoint;
  };
  // The member of `service` a request goes to, counted as outstanding (End it); nullopt when no
  // member is healthy and running.
  std::optional<Pick> Choose(const core::ServiceOf& service, const core::EndpointIndex& index);
  void End(const Pick& pick);
  // Whether the member `key` passed its last check.
  bool Healthy(const std::string& key) const;

 private:
  void Loop(core::Core* core);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                           // Guarded by mu_.
  std::map<std::string, bool> healthy_;         // Guarded by mu_.
  std::map<std::string, int64_t> outstanding_;  // Guarded by mu_.
  size_t turn_ = 0;                             // Guarded by mu_.
  std::thread thread_;
};

// The member's key: "<instance>@<host port>".
std::string MemberKey(const std::string& instance, const core::Endpoint& e);

}  // namespace tessera::api
