// Shared by the core's tests: the embedded catalog, loaded once.
#pragma once

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "catalog/catalog.h"
#include "core/state.h"

namespace tessera::core {

inline const catalog::Catalog& TestCatalog() {
  static const catalog::Catalog c = std::move(catalog::Catalog::LoadEmbedded()).value();
  return c;
}

// A state on an empty fleet (nodes join through agents) with the guarded-fgd policy.
inline std::unique_ptr<State> NewTestState(const Clock* clock, const StateOptions& options) {
  auto fleet = std::make_unique<fleet::Fleet>(&TestCatalog());
  auto sched = sched::Scheduler::Create(fleet.get(), {"guarded-fgd", 42, {}});
  if (!sched.ok()) std::abort();
  return std::make_unique<State>(&TestCatalog(), clock, std::move(fleet), std::move(*sched),
                                 options);
}

// An agent's inventory: `gpus` GPUs of `model`, GPU i with uuid `uuid_prefix`+i, on a host of 64
// vCPUs and 512 GiB.
inline nlohmann::json TestInventory(int gpus, const std::string& model = "H100-80GB",
                                    const std::string& uuid_prefix = "u") {
  nlohmann::json list = nlohmann::json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back({{"index", i}, {"uuid", uuid_prefix + std::to_string(i)}, {"model", model}});
  }
  return {{"cpu_milli", 64000}, {"memory_mib", 524288}, {"gpus", list}};
}

// `gpus` whole H100s, 4 vCPUs and 1 GiB, running `sleep 60`.
inline CreateInstanceRequest TestH100(int gpus, Billing billing = Billing::kOnDemand) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.command = "sleep 60";
  r.shape.gpu_model = "H100-80GB";
  r.shape.mode = catalog::SharingMode::kExclusive;
  r.shape.gpus = gpus;
  r.shape.vcpus = 4;
  r.shape.memory_mib = 1024;
  return r;
}

// One round in which `node`'s agent run `agent_id` reports `reports` as its report number `seq`:
// what a sync through the API does.
inline Status SyncRound(State& state, const std::string& node, const std::string& agent_id,
                        int64_t seq, std::vector<AgentReport> reports, store::Batch& batch) {
  AgentSync s;
  s.agent_id = agent_id;
  s.seq = seq;
  s.reports = std::move(reports);
  state.BeginRound();
  auto out = state.SyncAgent(node, s, batch);
  state.EndRound(batch);
  return out.status();
}

}  // namespace tessera::core
