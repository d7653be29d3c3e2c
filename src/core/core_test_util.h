// Shared by the core's tests: the embedded catalog, loaded once.
#pragma once

#include <cstdlib>
#include <memory>
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
