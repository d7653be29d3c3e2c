#include "api/service.h"

#include <fmt/format.h>
#include <httplib.h>

#include <set>
#include <vector>

#include "core/core.h"

namespace tessera::api {

namespace {

// Each member's endpoint for its service's port, running or not.
template <typename Fn>
void ForEachMember(const core::ServiceOf& service, const core::EndpointIndex& index, Fn fn) {
  for (const std::string& id : service.members) {
    const auto it = index.instances.find(id);
    if (it == index.instances.end() || it->second.tenant != service.tenant) continue;
    for (const core::Endpoint& e : it->second.endpoints) {
      if (e.port == service.service.port) fn(id, it->second, e);
    }
  }
}

}  // namespace

std::string MemberKey(const std::string& instance, const core::Endpoint& e) {
  return fmt::format("{}@{}", instance, e.host_port);
}

void ServiceBalancer::Start(core::Core* core) {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this, core] { Loop(core); });
}

void ServiceBalancer::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServiceBalancer::Loop(core::Core* core) {
  for (;;) {
    const auto index = core->endpoints();
    std::map<std::string, bool> checked;
    for (const auto& entry : index->services) {
      const core::ServiceOf& service = entry.second;  // Not a binding: the lambda takes it.
      ForEachMember(
          service, *index,
          [&](const std::string& id, const core::EndpointsOf& of, const core::Endpoint& e) {
            if (!of.serving) return;
            httplib::Client c(e.node_address, e.host_port);
            c.set_connection_timeout(1);
            c.set_read_timeout(1);
            auto r = c.Get(service.service.health_path);
            checked[MemberKey(id, e)] = r && r->status >= 200 && r->status < 400;
          });
    }
    std::unique_lock lock(mu_);
    healthy_ = std::move(checked);
    if (cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) return;
  }
}

bool ServiceBalancer::Healthy(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = healthy_.find(key);
  return it != healthy_.end() && it->second;
}

std::optional<ServiceBalancer::Pick> ServiceBalancer::Choose(const core::ServiceOf& service,
                                                             const core::EndpointIndex& index) {
  std::vector<Pick> candidates;
  std::lock_guard lock(mu_);
  ForEachMember(service, index,
                [&](const std::string& id, const core::EndpointsOf& of, const core::Endpoint& e) {
                  const std::string key = MemberKey(id, e);
                  auto h = healthy_.find(key);
                  if (of.serving && h != healthy_.end() && h->second)
                    candidates.push_back({key, e});
                });
  if (candidates.empty()) return std::nullopt;
  // The fewest outstanding; among those, each in turn.
  int64_t fewest = INT64_MAX;
  for (const Pick& p : candidates) fewest = std::min(fewest, outstanding_[p.key]);
  std::vector<const Pick*> least;
  for (const Pick& p : candidates) {
    if (outstanding_[p.key] == fewest) least.push_back(&p);
  }
  const Pick chosen = *least[turn_++ % least.size()];
  ++outstanding_[chosen.key];
  return chosen;
}

void ServiceBalancer::End(const Pick& pick) {
  std::lock_guard lock(mu_);
  auto it = outstanding_.find(pick.key);
  if (it != outstanding_.end() && --it->second <= 0) outstanding_.erase(it);
}

}  // namespace tessera::api
