// Shared by the core's tests: the embedded catalog, loaded once, a state on it, agents' inventories
// and syncs, and the fixture parts of a state whose nodes joined through agents. Single-threaded,
// like the tests that use it.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "catalog/catalog.h"
#include "common/clock.h"
#include "common/envelope.h"
#include "common/text.h"
#include "core/state.h"
#include "fleet/fleet_file.h"
#include "store/memory_store.h"

namespace tessera::core {

inline const catalog::Catalog& TestCatalog() {
  static const catalog::Catalog c = std::move(catalog::Catalog::LoadEmbedded()).value();
  return c;
}

// The fleet a fleet file's JSON `text` describes on TestCatalog(); aborts on bad text.
inline std::unique_ptr<fleet::Fleet> TestFleet(const std::string& text) {
  auto f = fleet::ParseFleetJson(TestCatalog(), text, "fleet");
  if (!f.ok()) std::abort();
  return std::make_unique<fleet::Fleet>(std::move(*f));
}

// Instance `seq` (inst-00000N) of `tenant`, in `state`, with nothing else set.
inline Instance TestInstance(int64_t seq, const std::string& tenant, InstanceState state) {
  Instance i;
  i.id = InstanceId::FromNumber(seq);
  i.seq = seq;
  i.tenant = TenantId::Unchecked(tenant);
  i.state = state;
  return i;
}

// A sealer on a fixed test keyring (key "test-1"), for states that store secret values.
inline Sealer* TestSealer() {
  static Sealer* const sealer = [] {
    auto ring = KeyringFromText("test-1 " + Base64Encode(std::string(kDataKeyBytes, 't')), "test");
    if (!ring.ok()) std::abort();
    return new Sealer(std::shared_ptr<const Keyring>(std::move(*ring)));
  }();
  return sealer;
}

// A keyring of `text`'s lines ("ID BASE64KEY", the current key first); aborts on bad text.
inline std::shared_ptr<const Keyring> TestKeyring(const std::string& text) {
  auto ring = KeyringFromText(text, "test");
  if (!ring.ok()) std::abort();
  return std::shared_ptr<const Keyring>(std::move(*ring));
}

// A keyring line: key `id`, every byte `fill`.
inline std::string TestKeyLine(const std::string& id, char fill) {
  return id + " " + Base64Encode(std::string(kDataKeyBytes, fill));
}

// The keys of `batch`'s settings that start with `prefix`, in order.
inline std::vector<std::string> KeysWithPrefix(const store::Batch& batch, std::string_view prefix) {
  std::vector<std::string> out;
  for (const auto& [key, value] : batch.settings) {
    if (key.compare(0, prefix.size(), prefix) == 0) out.push_back(key);
  }
  return out;
}

// The value `batch` sets for `key` last, or none.
inline std::optional<std::string> SettingOf(const store::Batch& batch, const std::string& key) {
  std::optional<std::string> out;
  for (const auto& [k, v] : batch.settings) {
    if (k == key) out = v;
  }
  return out;
}

// Joined node `name`'s record as the state holds it; aborts for an unknown one.
inline const AgentNode& AgentOf(const State& state, const std::string& name) {
  const AgentNode* node = state.agents().Find(name);
  if (!node) std::abort();
  return *node;
}

// What `desired` tells its agent of instance `id`; none when it is not told.
inline std::optional<DesiredWorkload> Told(const DesiredState& desired, const std::string& id) {
  for (const DesiredWorkload& w : desired.workloads) {
    if (w.id == id) return w;
  }
  return std::nullopt;
}

// Whether any workload of `desired` carries `text` in its environment, command or registry
// password: what could leak a value to that node's agent.
inline bool Carries(const DesiredState& desired, std::string_view text) {
  for (const DesiredWorkload& w : desired.workloads) {
    if (w.command.find(text) != std::string::npos) return true;
    for (const auto& [name, value] : w.env) {
      if (value.find(text) != std::string::npos) return true;
    }
    if (w.image.auth && w.image.auth->password.find(text) != std::string::npos) return true;
  }
  return false;
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

// One round in which `node`'s agent sends `sync`: what a sync through the API does.
inline Result<bool> SyncInRound(State& state, const std::string& node, const AgentSync& sync,
                                store::Batch& batch) {
  state.BeginRound();
  auto out = state.agent_hub().Sync(node, sync, batch);
  state.EndRound(batch);
  return out;
}

// One round in which `node`'s agent run `agent_id` reports `reports` as its report number `seq`.
inline Status SyncRound(State& state, const std::string& node, const std::string& agent_id,
                        int64_t seq, std::vector<AgentReport> reports, store::Batch& batch) {
  AgentSync s;
  s.agent_id = agent_id;
  s.seq = seq;
  s.reports = std::move(reports);
  return SyncInRound(state, node, s, batch).status();
}

// What the fixtures of a State with nodes joined by agents share: a fake clock, the in-memory
// store, the state, tenant acme, the batch every round writes to and the agent run's id, with
// helpers that each do in one round what a call through the API does. It does not use gtest (a
// fuzz target includes this header): a fixture derives from ::testing::Test and from this, and
// asserts on what the helpers return.
class AgentNodeFixture {
 protected:
  // Makes the in-memory store, a state with `options` and tenant acme with `quota_milli`.
  void MakeState(const StateOptions& options, int64_t quota_milli = 64000) {
    options_ = options;
    if (!options_.sealer) options_.sealer = TestSealer();
    store_ = store::NewMemoryStore();
    state_ = NewState();
    acme_ = *state_->tenants().Create("acme", quota_milli, "h-acme", batch_);
  }

  // A new state on the fixture's clock with MakeState's options, empty until restored from a
  // store: what a restart of the server starts with.
  std::unique_ptr<State> NewState() const { return NewTestState(&clock_, options_); }

  // Adds node `name`, created in `mode` with the token "token-<name>", and registers its agent
  // run `agent` with `inventory`. The first error stops it.
  Status JoinNode(const std::string& name, const nlohmann::json& inventory,
                  const std::string& agent,
                  catalog::SharingMode mode = catalog::SharingMode::kExclusive) {
    auto node = state_->agent_hub().CreateNode(name, {}, mode, "token-" + name, batch_);
    if (!node.ok()) return node.status();
    return state_->agent_hub().Register(name, {agent, inventory}, batch_);
  }

  // Acme as the state holds it now.
  const Tenant& Acme() { return *state_->tenants().Find(acme_.id.str()); }

  // Creates `r` for `tenant`, as the state holds it now, in one round.
  Result<Instance> CreateInRound(const Tenant& tenant, const CreateInstanceRequest& r) {
    state_->BeginRound();
    auto out = state_->instances().Create(*state_->tenants().Find(tenant.id.str()), r, batch_);
    state_->EndRound(batch_);
    return out;
  }

  // Creates `r` for acme in one round.
  Result<Instance> CreateInRound(const CreateInstanceRequest& r) { return CreateInRound(acme_, r); }

  // One round in which `node`'s agent sends `sync`.
  Result<bool> SyncNode(const std::string& node, const AgentSync& sync) {
    return SyncInRound(*state_, node, sync, batch_);
  }

  // The instance `id`, which the test knows the state holds.
  const Instance& Get(const std::string& id) { return *state_->instances().table().Find(id); }

  FakeClock clock_;
  StateOptions options_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<State> state_;
  Tenant acme_;
  store::Batch batch_;
  std::string agent_ = "a1";
};

}  // namespace tessera::core
