// The groups tests' fixture (group_service_test.cc, group_autoscale_test.cc): the core's state on
// a fake clock with nodes joined by agents, and groups made, read and driven through it.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "common/json.h"
#include "core/core.h"
#include "core/core_test_util.h"
#include "core/state.h"
#include "store/memory_store.h"

namespace tessera::core {

using namespace std::chrono_literals;
using nlohmann::json;

// A node of `gpus` H100s whose NVLink islands are `islands` (each a list of GPU indices).
inline json Inventory(const std::string& node, int gpus,
                      const std::vector<std::vector<int>>& islands) {
  json list = json::array();
  for (int i = 0; i < gpus; ++i) {
    list.push_back(
        {{"index", i}, {"uuid", fmt::format("GPU-{}-{}", node, i)}, {"model", "H100-80GB"}});
  }
  return {
      {"cpu_milli", 256000}, {"memory_mib", 2097152}, {"gpus", list}, {"nvlink_islands", islands}};
}

inline std::vector<std::vector<int>> OneIsland(int gpus) {
  std::vector<int> all;
  for (int i = 0; i < gpus; ++i) all.push_back(i);
  return {all};
}

inline CreateInstanceRequest H100s(int gpus, Billing billing = Billing::kOnDemand) {
  CreateInstanceRequest r;
  r.billing = billing;
  r.command = "train";
  r.shape.gpu_model = "H100-80GB";
  r.shape.gpus = gpus;
  r.shape.vcpus = 8;
  r.shape.memory_mib = 1024;
  r.shape.nvlink = gpus > 1;
  return r;
}

inline GroupRequest Gang(int size, int gpus, Topology topology = Topology::kNvlink,
                         Placement placement = Placement::kPack) {
  GroupRequest g;
  g.name = "train";
  g.member = H100s(gpus);
  g.size = size;
  g.min_available = size;
  g.topology = topology;
  g.placement = placement;
  return g;
}

class GroupsTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    StateOptions o;
    o.node_timeout = 10s;
    o.spot_notice = 5s;
    MakeState(o, 1'000'000);
  }

  void Join(const std::string& name, int gpus, std::vector<std::vector<int>> islands) {
    ASSERT_TRUE(JoinNode(name, Inventory(name, gpus, islands), agent_).ok());
    nodes_[name] = {gpus, islands};
  }

  GroupStatus Create(const GroupRequest& g) {
    state_->BeginRound();
    auto out = state_->groups().Create(Acme(), g, batch_);
    state_->EndRound(batch_);
    EXPECT_TRUE(out.ok()) << out.status().message();
    return out.ok() ? *out : GroupStatus{};
  }

  GroupStatus Get(const std::string& id) {
    auto g = state_->groups().Get(Acme(), id);
    EXPECT_TRUE(g.ok());
    return g.ok() ? *g : GroupStatus{};
  }

  Instance Member(const GroupStatus& group, int rank) {
    return *state_->views().Get(Acme(), group.members[static_cast<size_t>(rank)].instance);
  }

  // The group's record as the API shows it (the template's registry password left out), with its
  // placed members, for a failure's message.
  static std::string Dump(const GroupStatus& g) {
    return ToJson(g.group, Secrets::kHidden).dump() + " placed " + std::to_string(g.placed);
  }

  // The node's agent reports `reports` in one round.
  void Sync(const std::string& node, std::vector<AgentReport> reports = {}) {
    const Status s = SyncRound(*state_, node, agent_, ++seq_[node], std::move(reports), batch_);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  AgentReport Report(const Instance& inst, InstanceState to, std::optional<int> exit_code = {}) {
    AgentReport r;
    r.instance = inst.id.str();
    r.attempt = inst.restarts;
    if (to == InstanceState::kRunning) {
      r.started_at = clock_.Now();
    } else {
      r.state = to;
      r.exit_code = exit_code;
    }
    return r;
  }

  // A one-year reservation of `count` gpu.1xh100 for acme, starting now.
  void ReserveH100s(int count) {
    billing::ReservationRequest r;
    r.instance_type = "gpu.1xh100";
    r.count = count;
    r.term = "1y";
    ASSERT_TRUE(state_->accounts().CreateReservation(Acme(), r, batch_).ok());
  }

  // What the instance's agent is told of it: none when it is not listed.
  std::optional<DesiredWorkload> Workload(const Instance& inst) {
    return Told(state_->agent_hub().DesiredState(inst.node), inst.id.str());
  }

  // Free whole GPUs on `node`.
  int FreeGpus(const std::string& node) {
    int free = 0;
    for (const fleet::Node& n : state_->fleet().nodes()) {
      if (n.name != node) continue;
      for (const fleet::Gpu& g : n.gpus) free += g.free_milli == fleet::kMilliPerGpu;
    }
    return free;
  }

  std::set<std::string> NodesOf(const GroupStatus& group) {
    std::set<std::string> nodes;
    for (const GroupMemberStatus& m : group.members) {
      if (!m.node.empty()) nodes.insert(m.node);
    }
    return nodes;
  }

  void Commit() {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
  }

  // On two 8-GPU nodes, 10,000 instances and 1,000 gangs of two, 16 at a time, each member
  // printing a 200-byte line and exiting 0. With `keep`, each step is committed to the store;
  // else the batch is dropped (a test of the state's own memory).
  void RunThroughTheirLives(bool keep) {
    Join("n1", 8, OneIsland(8));
    Join("n2", 8, OneIsland(8));
    // Each starts, prints a line and exits 0, in a round per node per step.
    auto live = [&](const std::vector<Instance>& insts) {
      for (const bool start : {true, false}) {
        std::map<std::string, AgentSync> by_node;
        for (const Instance& i : insts) {
          AgentSync& s = by_node[i.node];
          s.reports.push_back(start ? Report(i, InstanceState::kRunning)
                                    : Report(i, InstanceState::kTerminated, 0));
          if (!start) s.logs.push_back({i.id.str(), i.restarts, 0, std::string(200, 'x') + "\n"});
        }
        for (auto& [node, s] : by_node) {
          s.agent_id = agent_;
          s.seq = ++seq_[node];
          ASSERT_TRUE(SyncNode(node, s).ok());
        }
      }
    };
    auto step = [&] {
      if (keep) {
        Commit();
      } else {
        batch_ = {};
      }
    };
    for (int done = 0; done < 10'000; done += 16) {
      std::vector<Instance> insts;
      for (int i = 0; i < 16; ++i) {
        auto inst = CreateInRound(TestH100(1));
        ASSERT_TRUE(inst.ok()) << inst.status().message();
        insts.push_back(*state_->views().Get(Acme(), inst->id.str()));
      }
      live(insts);
      step();
    }
    for (int done = 0; done < 1'000; done += 8) {
      std::vector<Instance> members;
      for (int i = 0; i < 8; ++i) {
        const GroupStatus g = Create(Gang(2, 1, Topology::kAny));
        members.push_back(Member(g, 0));
        members.push_back(Member(g, 1));
      }
      live(members);
      step();
    }
  }

  // The server restarts from its store, and every node's agent registers again.
  void Restart() {
    Commit();
    state_ = NewState();
    seq_.clear();
    agent_ += "'";
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
    for (const auto& [name, node] : nodes_) {
      ASSERT_TRUE(state_->agent_hub()
                      .Register(name, {agent_, Inventory(name, node.first, node.second)}, batch_)
                      .ok());
    }
  }

  std::map<std::string, int64_t> seq_;
  std::map<std::string, std::pair<int, std::vector<std::vector<int>>>> nodes_;
};

}  // namespace tessera::core
