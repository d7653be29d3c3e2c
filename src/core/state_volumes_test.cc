// The state's volumes on a fake clock: their bill (per GiB-month, a line per UTC day), their end
// (at once, or once the node's agent removed the data), where the instances and gangs that mount
// them go, and what a restart brings back. And instances' endpoints, as their agents report them.
#include <gtest/gtest.h>

#include "core/core.h"
#include "core/core_test_util.h"

namespace tessera::core {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class StateVolumesTest : public ::testing::Test, protected AgentNodeFixture {
 protected:
  void SetUp() override {
    MakeState(StateOptions{});
    ASSERT_TRUE(JoinNode("n1", TestInventory(4), agent_).ok());
    ASSERT_TRUE(JoinNode("n2", TestInventory(2, "H100-80GB", "b"), agent_).ok());
    ASSERT_TRUE(JoinNode("n3", TestInventory(2, "H100-80GB", "c"), agent_).ok());
  }

  Volume MakeVolume(const std::string& name, int64_t gib, const std::string& node = "",
                    bool shared = false) {
    auto v = state_->CreateVolume(Acme(), {name, gib, node, shared}, "", batch_);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? *v : Volume{};
  }

  CreateInstanceRequest Mounting(std::vector<std::string> names, int gpus = 1) {
    CreateInstanceRequest r = TestH100(gpus);
    for (const std::string& n : names) r.volumes.push_back({n, "/" + n});
    return r;
  }

  // The ledger lines of volume `id` in the batch so far.
  std::vector<store::LedgerRecord> Lines(const std::string& id) {
    std::vector<store::LedgerRecord> out;
    for (const auto& l : batch_.ledger) {
      if (l.instance == id) out.push_back(l);
    }
    return out;
  }

  AgentSync Holding(std::vector<std::string> ids) {
    AgentSync s;
    s.agent_id = agent_;
    s.seq = ++seq_;
    s.volumes = VolumeReport{true, "", {}};
    for (const std::string& id : ids) s.volumes->held.push_back({id, {4096, 1 << 30, true}});
    return s;
  }

  void Restart() {
    ASSERT_TRUE(store_->Commit(batch_).ok());
    batch_ = {};
    state_ = NewState();
    ASSERT_TRUE(RestoreFromStore(*state_, *store_, batch_).ok());
  }

  int64_t seq_ = 0;
};

TEST_F(StateVolumesTest, AVolumeIsBilledPerGibMonthOneLinePerDayUntilItIsDeleted) {
  clock_.Advance(12h);  // 2026-01-01T12:00Z.
  const Volume v = MakeVolume("ckpt", 100);
  // 100 GiB at $0.08 a GiB-month, over 730 hours: $0.010959 an hour.
  EXPECT_EQ(v.meter.rate, Money::FromMicros(10'959));
  clock_.Advance(30h);  // 2026-01-02T18:00Z: the midnight roll cuts the first day.
  state_->BeginRound();
  state_->EndRound(batch_);
  auto lines = Lines(v.id);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].seconds, 12 * 3600);
  EXPECT_EQ(lines[0].amount_micros, 10'959 * 12);
  EXPECT_EQ(lines[0].instance_type, "volume");
  EXPECT_EQ(lines[0].billing, "storage");
  EXPECT_EQ(lines[0].tenant, acme_.id.str());
  // What it accrued since is in a bill read now, as open.
  const BillingSnapshot snap = state_->accounts().Snapshot(*store_, "", 0, INT64_MAX);
  bool open = false;
  for (const auto& l : snap.beyond) open |= l.instance == v.id && l.note == "open";
  EXPECT_TRUE(open);
  // A volume no agent made (its node unknown) goes at once, billed to the second.
  auto gone = state_->DeleteVolume(Acme(), "ckpt", batch_);
  ASSERT_TRUE(gone.ok()) << gone.status().ToString();
  lines = Lines(v.id);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].seconds, 18 * 3600);
  EXPECT_EQ(state_->GetVolume(Acme(), "ckpt").status().code(), StatusCode::kNotFound);
  clock_.Advance(48h);
  state_->BeginRound();
  state_->EndRound(batch_);
  EXPECT_EQ(Lines(v.id).size(), 2u) << "nothing after its deletion";
}

TEST_F(StateVolumesTest, OnAJoinedNodeItsNameStaysTakenUntilTheAgentRemovedItsData) {
  const Volume v = MakeVolume("data", 10, "n1");
  ASSERT_TRUE(state_->DeleteVolume(Acme(), "data", batch_).ok());
  EXPECT_TRUE(state_->GetVolume(Acme(), "data")->deleting);
  EXPECT_EQ(state_->agent_hub().DesiredState("n1").volumes_to_delete,
            std::vector<std::string>{v.id});
  EXPECT_TRUE(state_->agent_hub().DesiredState("n2").volumes_to_delete.empty());
  EXPECT_EQ(state_->CreateVolume(Acme(), {"data", 10, "", false}, "", batch_).status().code(),
            StatusCode::kAlreadyExists);
  ASSERT_TRUE(SyncNode("n1", Holding({v.id})).ok());
  EXPECT_TRUE(state_->GetVolume(Acme(), "data").ok()) << "still on its node";
  ASSERT_TRUE(SyncNode("n2", Holding({})).ok());
  EXPECT_TRUE(state_->GetVolume(Acme(), "data").ok()) << "another node's word is not its node's";
  ASSERT_TRUE(SyncNode("n1", Holding({})).ok());
  EXPECT_EQ(state_->GetVolume(Acme(), "data").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(state_->CreateVolume(Acme(), {"data", 10, "", false}, "", batch_).ok());
}

TEST_F(StateVolumesTest, InstancesGoWhereTheirVolumesAreAndAGangFollowsItsFirstMember) {
  MakeVolume("on-n2", 1, "n2");
  auto pinned = CreateInRound(Mounting({"on-n2"}));
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->node, "n2");
  // n2's other GPU, then nothing: the next waits for n2 although n1 is empty.
  MakeVolume("shared-n2", 1, "n2", /*shared=*/true);
  ASSERT_EQ(CreateInRound(Mounting({"shared-n2"}))->node, "n2");
  auto waits = CreateInRound(Mounting({"shared-n2"}));
  ASSERT_TRUE(waits.ok());
  EXPECT_EQ(waits->state, InstanceState::kPending);
  EXPECT_NE(waits->reason.find("room on node 'n2'"), std::string::npos) << waits->reason;
  // An instance without volumes, identical otherwise, is not held back by it.
  EXPECT_EQ(CreateInRound(TestH100(1))->state, InstanceState::kScheduled);
  // A gang on a volume without a node: its members go where its first member went, although
  // spread would put them on two nodes.
  MakeVolume("team", 1, "", /*shared=*/true);
  GroupRequest g;
  g.name = "train";
  g.member = Mounting({"team"});
  g.size = 2;
  g.min_available = 2;
  g.placement = Placement::kSpread;
  state_->BeginRound();
  auto made = state_->groups().Create(Acme(), g, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::set<std::string> nodes;
  for (const GroupMemberStatus& m : made->members) nodes.insert(m.node.empty() ? "-" : m.node);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_NE(*nodes.begin(), "-");
  EXPECT_EQ(state_->GetVolume(Acme(), "team")->node, *nodes.begin());
  // A volume that is not shared takes one instance at a time.
  MakeVolume("solo", 1);
  g.name = "pair";
  g.member = Mounting({"solo"});
  auto refused = state_->groups().Create(Acme(), g, batch_);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("not shared"), std::string::npos)
      << refused.status().ToString();
  // Two volumes on different nodes cannot be mounted together.
  EXPECT_EQ(CreateInRound(Mounting({"on-n2", "team"})).status().code(),
            StatusCode::kFailedPrecondition);
}

TEST_F(StateVolumesTest, ARestartBringsBackVolumesWithTheirHoldersAndTheirBill) {
  const Volume v = MakeVolume("ckpt", 10);
  auto inst = CreateInRound(Mounting({"ckpt"}));
  ASSERT_TRUE(inst.ok());
  clock_.Advance(25h);
  Restart();
  auto back = state_->GetVolume(Acme(), "ckpt");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, v.id);
  EXPECT_EQ(back->node, inst->node);
  EXPECT_EQ(state_->mounts().Users(acme_.id.str(), "ckpt"),
            std::vector<std::string>{inst->id.str()});
  EXPECT_EQ(state_->DeleteVolume(Acme(), "ckpt", batch_).status().code(),
            StatusCode::kFailedPrecondition);
  // The bill runs from its creation, across the restart: the first day's line comes at the roll.
  state_->BeginRound();
  state_->EndRound(batch_);
  auto lines = Lines(v.id);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].start, billing::UnixSeconds(v.created_at));
  EXPECT_EQ(lines[0].seconds, 24 * 3600);
  // The next volume takes a new id.
  EXPECT_NE(MakeVolume("next", 1).id, v.id);
}

using StateEndpointsTest = StateVolumesTest;

TEST_F(StateEndpointsTest, AnInstanceShowsWhereItsOwnPortsAreWhileItRunsAndNoOthers) {
  CreateInstanceRequest r = TestH100(1);
  r.ports = {8000, 8888};
  auto inst = CreateInRound(r);
  ASSERT_TRUE(inst.ok());
  ASSERT_EQ(state_->agent_hub().DesiredState(inst->node).workloads.size(), 1u);
  EXPECT_EQ(state_->agent_hub().DesiredState(inst->node).workloads[0].ports,
            (std::vector<int>{8000, 8888}));
  AgentReport running;
  running.instance = inst->id.str();
  running.endpoints = {{8000, 31000}, {8888, 31001}, {22, 31002}};  // 22 was not asked for.
  ASSERT_TRUE(SyncRound(*state_, inst->node, agent_, ++seq_, {running}, batch_).ok());
  const Instance& shown = Get(inst->id.str());
  ASSERT_EQ(shown.state, InstanceState::kRunning);
  EXPECT_EQ(shown.endpoints,
            (std::vector<Endpoint>{{8000, inst->node, 31000}, {8888, inst->node, 31001}}));
  EXPECT_EQ(ToJson(shown)["endpoints"][1]["host_port"], 31001);
  // Stored and restored with the instance.
  Restart();
  EXPECT_EQ(Get(inst->id.str()).endpoints.size(), 2u);
  EXPECT_EQ(Get(inst->id.str()).ports, (std::vector<int>{8000, 8888}));
  const json inventory = inst->node == "n1"
                             ? TestInventory(4)
                             : TestInventory(2, "H100-80GB", inst->node == "n2" ? "b" : "c");
  ASSERT_TRUE(state_->agent_hub().Register(inst->node, {agent_, inventory}, batch_).ok());
  AgentReport ended;
  ended.instance = inst->id.str();
  ended.state = InstanceState::kTerminated;
  ended.exit_code = 0;
  ended.reason = "exited";
  const Status synced = SyncRound(*state_, inst->node, agent_, ++seq_, {ended}, batch_);
  ASSERT_TRUE(synced.ok()) << synced.ToString();
  EXPECT_TRUE(Get(inst->id.str()).endpoints.empty());
}

}  // namespace
}  // namespace tessera::core
