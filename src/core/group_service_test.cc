// Groups on the core's state with a fake clock and nodes joined by agents (group_service.cc,
// group_gangs.cc): gangs placed all or nothing on NVLink islands and nodes, nothing held while
// they wait, no deadlock between gangs, members' rank environment, whole-group restarts, scaling,
// and a restart of the server.
#include <malloc.h>

#include "core/groups_test_util.h"

namespace tessera::core {
namespace {

// Ended work leaves memory after the retention (1 hour): 10,000 short instances with output and
// 1,000 groups, run through their lives, leave no instance, log tail or group behind.
TEST_F(GroupsTest, EndedInstancesTheirLogsAndEndedGroupsLeaveMemoryAfterTheRetention) {
  RunThroughTheirLives(/*keep=*/true);
  EXPECT_EQ(state_->instances().table().size(), 12'000u);
  EXPECT_EQ(state_->log_tails(), 12'000u);
  ASSERT_EQ(state_->groups().all().size(), 1'000u);
  EXPECT_EQ(state_->groups().all().begin()->second.state, GroupState::kSucceeded);
  clock_.Advance(61min);
  for (const auto& [node, shape] : nodes_) Sync(node);
  EXPECT_EQ(state_->instances().table().size(), 0u);
  EXPECT_EQ(state_->log_tails(), 0u) << "log tails leave with their instances";
  EXPECT_EQ(state_->groups().all().size(), 0u) << "ended groups leave like ended instances";
  // A restart does not bring them back.
  Restart();
  EXPECT_EQ(state_->groups().all().size(), 0u);
}

// What the state holds comes back near where it started once the retention passed: the heap's
// bytes in use (glibc's count of allocated chunks, not the resident set, which a kept-mapped
// allocator does not give back), with the store's share left out (its batches are dropped).
TEST_F(GroupsTest, TheHeapInUseReturnsNearItsStartAfterTheRetention) {
  batch_ = {};
  const size_t start = mallinfo2().uordblks;
  RunThroughTheirLives(/*keep=*/false);
  batch_ = {};
  const size_t peak = mallinfo2().uordblks;
  clock_.Advance(61min);
  for (const auto& [node, shape] : nodes_) Sync(node);
  batch_ = {};
  const size_t end = mallinfo2().uordblks;
  ASSERT_GT(peak, start);
  const double kept =
      static_cast<double>(end > start ? end - start : 0) / static_cast<double>(peak - start);
  EXPECT_LT(kept, 0.05) << "of the " << (peak - start) / 1024 << " KiB the lives took, "
                        << (end > start ? end - start : 0) / 1024 << " KiB are still in use";
}

// A member that ended while its group ran is kept as long as the group lists it; once a restart or
// a scale-in drops it, it leaves memory after the retention like any ended instance, even though
// the group itself lives on.
TEST_F(GroupsTest, AMemberKeptForItsGroupLeavesMemoryOnceTheGroupDropsIt) {
  Join("n1", 8, OneIsland(8));
  const GroupStatus g = Create(Gang(3, 1, Topology::kAny));
  ASSERT_EQ(GroupStateName(g.group.state), "running");
  const std::string id = g.group.id;
  auto start = [&](const GroupStatus& group) {
    std::vector<Instance> ms;
    for (int rank = 0; rank < 3; ++rank) ms.push_back(Member(group, rank));
    AgentReport r0 = Report(ms[0], InstanceState::kRunning);
    r0.port = 29500;
    Sync("n1",
         {r0, Report(ms[1], InstanceState::kRunning), Report(ms[2], InstanceState::kRunning)});
    return ms;
  };
  auto kept = [&](const Instance& m) {
    return state_->instances().table().Find(m.id.str()) != nullptr;
  };
  const std::vector<Instance> first = start(g);
  Sync("n1", {Report(first[2], InstanceState::kTerminated, 0)});  // Rank 2 is done early.
  clock_.Advance(61min);
  Sync("n1");
  EXPECT_TRUE(kept(first[2])) << "its group still lists it";
  // Rank 1 fails: the group restarts whole and lists a new attempt.
  Sync("n1", {Report(first[1], InstanceState::kFailed, 1)});
  Sync("n1", {Report(first[0], InstanceState::kTerminated, 0)});
  const GroupStatus again = Get(id);
  ASSERT_EQ(GroupStateName(again.group.state), "running") << Dump(again);
  const std::vector<Instance> second = start(again);
  Sync("n1", {Report(second[2], InstanceState::kTerminated, 0)});
  clock_.Advance(61min);
  Sync("n1");
  for (const Instance& m : first) EXPECT_FALSE(kept(m)) << m.id.str() << " of the last attempt";
  EXPECT_TRUE(kept(second[2]));
  // A scale-in drops the ended rank 2: it goes too, while ranks 0 and 1 run on.
  state_->BeginRound();
  ASSERT_TRUE(state_->groups().Scale(Acme(), id, 2, batch_).ok());
  state_->EndRound(batch_);
  clock_.Advance(61min);
  Sync("n1");
  EXPECT_FALSE(kept(second[2]));
  EXPECT_TRUE(kept(second[0]) && kept(second[1]));
  EXPECT_EQ(state_->instances().table().size(), 2u);
}

// A group that restarts finds its volumes as they were: the new attempt's members go to the
// volumes' node however much room another node has, and a volume that is not shared, mounted by
// the one member of the old attempt, takes the new attempt's (docs/volumes.md).
TEST_F(GroupsTest, ARestartedGroupGoesBackToItsVolumesNode) {
  Join("n1", 2, OneIsland(2));
  Join("n2", 8, OneIsland(8));
  ASSERT_TRUE(state_->CreateVolume(Acme(), {"ckpt", 10, "n1", false}, "", batch_).ok());
  GroupRequest req = Gang(1, 1, Topology::kNode);
  req.member.volumes = {{"ckpt", "/ckpt"}};
  const GroupStatus g = Create(req);
  const std::string id = g.group.id;
  const Instance first = Member(g, 0);
  EXPECT_EQ(first.node, "n1");
  Sync("n1", {Report(first, InstanceState::kRunning)});
  Sync("n1", {Report(first, InstanceState::kFailed, 1)});
  const GroupStatus again = Get(id);
  ASSERT_EQ(again.group.restarts, 1) << Dump(again);
  const Instance second = Member(again, 0);
  EXPECT_NE(second.id, first.id);
  EXPECT_EQ(second.node, "n1") << Dump(again);
  EXPECT_EQ(second.volumes, req.member.volumes);
  EXPECT_EQ(state_->mounts().Users(acme_.id.str(), "ckpt"),
            std::vector<std::string>{second.id.str()});
}

// A gang that uses its owner's whole quota restarts after a failure: the new attempt is admitted
// once the last one's members stopped, not beside them (which the quota would refuse).
TEST_F(GroupsTest, AGangAtItsQuotaRestartsOnceTheLastAttemptStopped) {
  Join("n1", 8, OneIsland(8));
  state_->BeginRound();
  const Tenant small = *state_->tenants().Create("small", 4000, "h-small", batch_);
  state_->EndRound(batch_);
  state_->BeginRound();
  auto created = state_->groups().Create(small, Gang(2, 2, Topology::kNode), batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(created.ok()) << created.status().message();
  const std::string id = created->group.id;
  auto member = [&](const GroupStatus& g, int rank) {
    return *state_->views().Get(small, g.members[static_cast<size_t>(rank)].instance);
  };
  const Instance r0 = member(*created, 0), r1 = member(*created, 1);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29500;
  Sync("n1", {started, Report(r1, InstanceState::kRunning)});
  Sync("n1", {Report(r1, InstanceState::kFailed, 1)});
  Sync("n1", {Report(r0, InstanceState::kTerminated, 143)});
  const GroupStatus after = *state_->groups().Get(small, id);
  EXPECT_EQ(GroupStateName(after.group.state), "running") << Dump(after);
  EXPECT_EQ(after.group.restarts, 1);
  EXPECT_EQ(after.placed, 2) << Dump(after);
}

TEST_F(GroupsTest, AGangOfEightLandsOnOneEightGpuIslandOrWaitsHoldingNothing) {
  Join("split", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}});  // Two islands of four.
  Join("whole", 8, OneIsland(8));
  const GroupStatus g = Create(Gang(8, 1));
  EXPECT_EQ(GroupStateName(g.group.state), "running");
  EXPECT_EQ(NodesOf(g), std::set<std::string>{"whole"}) << Dump(g);
  EXPECT_EQ(FreeGpus("whole"), 0);
  // A second gang of 8 NVLinked GPUs finds no island of 8 (the other node has two of four): it
  // waits, and holds nothing meanwhile.
  const GroupStatus waits = Create(Gang(1, 8));
  EXPECT_EQ(GroupStateName(waits.group.state), "waiting");
  EXPECT_EQ(waits.placed, 0);
  EXPECT_NE(waits.group.reason.find("waiting for room"), std::string::npos) << Dump(waits);
  EXPECT_EQ(FreeGpus("split"), 8) << "never split across islands, never partly held";
}

TEST_F(GroupsTest, TwoGangsThatEachNeedMostOfTheFleetNeverDeadlockAndSmallWorkRuns) {
  Join("n1", 8, OneIsland(8));
  Join("n2", 8, OneIsland(8));
  const GroupStatus a = Create(Gang(3, 4, Topology::kNode));
  const GroupStatus b = Create(Gang(3, 4, Topology::kNode));
  EXPECT_EQ(GroupStateName(a.group.state), "running");
  EXPECT_EQ(GroupStateName(b.group.state), "waiting");
  EXPECT_EQ(b.placed, 0) << "the waiting gang holds nothing";
  EXPECT_EQ(FreeGpus("n1") + FreeGpus("n2"), 4);
  // Small work still runs beside them.
  state_->BeginRound();
  auto small = state_->instances().Create(Acme(), H100s(1), batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->state, InstanceState::kScheduled);
  // The first gang ends: the second takes its place.
  state_->BeginRound();
  ASSERT_TRUE(state_->groups().Delete(Acme(), a.group.id, batch_).ok());
  state_->EndRound(batch_);
  for (int rank = 0; rank < 3; ++rank) {
    const Instance m = Member(a, rank);
    Sync(m.node, {Report(m, InstanceState::kTerminated, 0)});
  }
  EXPECT_EQ(GroupStateName(Get(b.group.id).group.state), "running");
  EXPECT_EQ(Get(b.group.id).placed, 3);
}

TEST_F(GroupsTest, PackFillsFewNodesAndSpreadTakesMany) {
  for (int i = 0; i < 4; ++i) Join(fmt::format("n{}", i), 8, OneIsland(8));
  const GroupStatus packed = Create(Gang(4, 2, Topology::kNode, Placement::kPack));
  EXPECT_EQ(NodesOf(packed).size(), 1u) << Dump(packed);
  const GroupStatus spread = Create(Gang(3, 1, Topology::kAny, Placement::kSpread));
  EXPECT_EQ(NodesOf(spread).size(), 3u) << Dump(spread);
}

TEST_F(GroupsTest, MembersGetTheirRankEnvironmentAndAFailureRestartsTheWholeGroup) {
  Join("n1", 8, OneIsland(8));
  Join("n2", 8, OneIsland(8));
  const GroupStatus g = Create(Gang(3, 4, Topology::kNode));
  ASSERT_EQ(GroupStateName(g.group.state), "running");
  const Instance r0 = Member(g, 0), r1 = Member(g, 1), r2 = Member(g, 2);
  // Rank 0's agent is asked to reserve MASTER_PORT as it starts rank 0; the others wait for it.
  auto w0 = Workload(r0), w1 = Workload(r1);
  ASSERT_TRUE(w0.has_value());
  EXPECT_EQ(w0->reserve_port, "MASTER_PORT");
  EXPECT_FALSE(w0->env.contains("MASTER_PORT"));
  EXPECT_FALSE(w1.has_value()) << "rank 1 starts before its rendezvous port exists";
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29517;
  Sync(r0.node, {started});
  w1 = Workload(r1);
  ASSERT_TRUE(w1.has_value()) << "rank 1 still held back once rank 0 reserved its port";
  const std::map<std::string, std::string>& env = w1->env;
  EXPECT_TRUE(w1->reserve_port.empty());
  EXPECT_EQ(env.at("WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("RANK"), "1");
  EXPECT_EQ(env.at("MASTER_ADDR"), r0.node) << "an agent that gave no address: its node's name";
  EXPECT_EQ(env.at("MASTER_PORT"), "29517");
  EXPECT_EQ(env.at("TESSERA_GROUP"), g.group.id);
  EXPECT_EQ(env.at("LOCAL_RANK"), r0.node == r1.node ? "1" : "0");
  EXPECT_EQ(Workload(r2)->env.at("MASTER_PORT"), "29517");
  // The port survives a restart of the server: rank 0's record keeps it too.
  Restart();
  EXPECT_EQ(Workload(r2)->env.at("MASTER_PORT"), "29517");
  EXPECT_EQ(Workload(r0)->env.at("MASTER_PORT"), "29517");
  for (const Instance& m : {r1, r2}) Sync(m.node, {Report(m, InstanceState::kRunning)});
  // Rank 2 fails: the others are stopped, and the group starts a new attempt, whole.
  Sync(r2.node, {Report(r2, InstanceState::kFailed, 1)});
  GroupStatus after = Get(g.group.id);
  EXPECT_EQ(after.group.restarts, 1);
  EXPECT_EQ(state_->views().Get(Acme(), r0.id.str())->state, InstanceState::kStopping);
  EXPECT_EQ(state_->views().Get(Acme(), r1.id.str())->state, InstanceState::kStopping);
  EXPECT_EQ(GroupStateName(after.group.state), "waiting");
  EXPECT_EQ(after.members.size(), 0u) << "the new attempt waits for the last one to stop";
  EXPECT_EQ(after.group.draining.size(), 2u) << Dump(after);
  // Once the old members have stopped, the new attempt is made and placed.
  if (r1.node != r0.node) {
    Sync(r0.node, {Report(r0, InstanceState::kTerminated, 0)});
    Sync(r1.node, {Report(r1, InstanceState::kTerminated, 0)});
  } else {
    Sync(r0.node,
         {Report(r0, InstanceState::kTerminated, 0), Report(r1, InstanceState::kTerminated, 0)});
  }
  after = Get(g.group.id);
  EXPECT_EQ(GroupStateName(after.group.state), "running") << Dump(after);
  EXPECT_EQ(after.placed, 3);
  EXPECT_EQ(Member(after, 0).group_env.at("TESSERA_GROUP_RESTARTS"), "1");
  // A new attempt meets at a port rank 0's agent reserves anew.
  EXPECT_EQ(Workload(Member(after, 0))->reserve_port, "MASTER_PORT");
  EXPECT_FALSE(Workload(Member(after, 1)).has_value());
}

// MASTER_ADDR is where other nodes reach rank 0's node: the address its agent registered with.
TEST_F(GroupsTest, MasterAddrIsRankZerosAdvertisedAddress) {
  Join("n1", 8, OneIsland(8));
  AgentRegistration bad{agent_, Inventory("n1", 8, OneIsland(8)), "gpu 07"};
  const Status refused = state_->agent_hub().Register("n1", bad, batch_);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("advertise_address"), std::string::npos) << refused.message();
  ASSERT_TRUE(state_->agent_hub()
                  .Register("n1", {agent_, Inventory("n1", 8, OneIsland(8)), "10.0.0.7"}, batch_)
                  .ok());
  EXPECT_EQ(AgentOf(*state_, "n1").address, "10.0.0.7");
  const GroupStatus g = Create(Gang(2, 1, Topology::kNode));
  const Instance r0 = Member(g, 0), r1 = Member(g, 1);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29500;
  Sync("n1", {started});
  EXPECT_EQ(Workload(r1)->env.at("MASTER_ADDR"), "10.0.0.7");
  EXPECT_EQ(Workload(r0)->env.at("MASTER_ADDR"), "10.0.0.7");
  // The members' records keep it across a restart of the server.
  Restart();
  EXPECT_EQ(Workload(r1)->env.at("MASTER_ADDR"), "10.0.0.7");
}

// Rank 0 may end before any report of its agent saw it run (`echo done` on a loaded node): the
// exit names the port it held, and the members it held back start with it. Had it named none,
// they start at the group's own port rather than wait for a rank 0 that is gone.
TEST_F(GroupsTest, MembersHeldForRankZerosPortStartWhenRankZeroEndsBeforeItWasSeenRunning) {
  Join("n1", 8, OneIsland(8));
  const GroupStatus named = Create(Gang(2, 1, Topology::kNode));
  const Instance a0 = Member(named, 0), a1 = Member(named, 1);
  ASSERT_FALSE(Workload(a1).has_value()) << "rank 1 waits for rank 0's port";
  AgentReport ended = Report(a0, InstanceState::kTerminated, 0);
  ended.port = 29533;
  Sync("n1", {ended});
  EXPECT_EQ(state_->views().Get(Acme(), a0.id.str())->state, InstanceState::kSucceeded);
  auto w1 = Workload(a1);
  ASSERT_TRUE(w1.has_value()) << "rank 1 is still held back after rank 0 ended";
  EXPECT_EQ(w1->env.at("MASTER_PORT"), "29533");
  Sync("n1", {Report(a1, InstanceState::kRunning)});
  Sync("n1", {Report(a1, InstanceState::kTerminated, 0)});
  EXPECT_EQ(GroupStateName(Get(named.group.id).group.state), "succeeded")
      << Dump(Get(named.group.id));

  const GroupStatus unnamed = Create(Gang(2, 1, Topology::kNode));
  const Instance b0 = Member(unnamed, 0), b1 = Member(unnamed, 1);
  ASSERT_FALSE(Workload(b1).has_value());
  Sync("n1", {Report(b0, InstanceState::kTerminated, 0)});
  w1 = Workload(b1);
  ASSERT_TRUE(w1.has_value()) << "rank 1 waits forever for a rank 0 that is gone";
  EXPECT_GE(std::stoi(w1->env.at("MASTER_PORT")), 29500);
}

// A template's image, pull policy and registry credentials go to every member's desired state,
// rank 0 included (an image with no command runs its entrypoint, so rank 0's agent reserves the
// rendezvous port); the group's API form shows the username only; a restart keeps them all.
TEST_F(GroupsTest, ATemplatesImageAndCredentialsReachEveryMembersAgentAndNoApiAnswer) {
  Join("n1", 8, OneIsland(8));
  Join("n2", 8, OneIsland(8));
  GroupRequest req = Gang(3, 4, Topology::kNode);
  req.member.command.clear();
  req.member.image.ref = "registry.example.com/team/train:1.4";
  req.member.image.pull_policy = PullPolicy::kNever;
  req.member.image.auth = RegistryAuth{.username = "robot", .password = "s3cret-pw"};
  const GroupStatus g = Create(req);
  ASSERT_EQ(GroupStateName(g.group.state), "running");
  EXPECT_EQ(ToJson(g.group, Secrets::kHidden)["template"]["image"],
            "registry.example.com/team/train:1.4");
  EXPECT_EQ(ToJson(g.group, Secrets::kHidden)["template"]["registry_auth"],
            json({{"username", "robot"}}));
  EXPECT_EQ(Dump(g).find("s3cret-pw"), std::string::npos);
  EXPECT_EQ(Dump(Get(g.group.id)).find("s3cret-pw"), std::string::npos);
  for (const GroupStatus& listed : state_->groups().List(Acme())) {
    EXPECT_EQ(Dump(listed).find("s3cret-pw"), std::string::npos);
  }
  const Instance r0 = Member(g, 0);
  EXPECT_EQ(Workload(r0)->reserve_port, "MASTER_PORT")
      << "rank 0 runs its image's entrypoint: its agent reserves the port";
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29517;
  Sync(r0.node, {started});
  auto check = [&](const char* when) {
    for (int rank = 0; rank < 3; ++rank) {
      const Instance m = Member(Get(g.group.id), rank);
      EXPECT_EQ(ToJson(m).dump().find("s3cret-pw"), std::string::npos) << when;
      const auto w = Workload(m);
      ASSERT_TRUE(w.has_value()) << when << ": rank " << rank;
      EXPECT_EQ(w->image.ref, "registry.example.com/team/train:1.4") << when << ": rank " << rank;
      EXPECT_EQ(w->image.pull_policy, PullPolicy::kNever) << when;
      ASSERT_TRUE(w->image.auth.has_value()) << when << ": rank " << rank;
      EXPECT_EQ(w->image.auth->username, "robot") << when << ": rank " << rank;
      EXPECT_EQ(w->image.auth->password, "s3cret-pw") << when << ": rank " << rank;
      EXPECT_EQ(w->env.at("MASTER_PORT"), "29517") << when;
    }
  };
  check("placed");
  Restart();
  check("after a restart");
  EXPECT_EQ(ToJson(Get(g.group.id).group, Secrets::kHidden)["template"]["registry_auth"],
            json({{"username", "robot"}}));
  // A new attempt's members are made from the stored template: the credentials come with it.
  std::vector<Instance> old;
  for (int rank = 0; rank < 3; ++rank) old.push_back(Member(Get(g.group.id), rank));
  Sync(old[1].node, {Report(old[1], InstanceState::kFailed, 1)});
  for (const Instance& m : old) {
    if (state_->views().Get(Acme(), m.id.str())->state == InstanceState::kStopping) {
      Sync(m.node, {Report(m, InstanceState::kTerminated, 0)});
    }
  }
  const GroupStatus after = Get(g.group.id);
  ASSERT_EQ(after.group.restarts, 1);
  ASSERT_EQ(GroupStateName(after.group.state), "running") << Dump(after);
  const auto w0 = Workload(Member(after, 0));
  ASSERT_TRUE(w0.has_value() && w0->image.auth.has_value());
  EXPECT_EQ(w0->image.auth->password, "s3cret-pw");
}

TEST_F(GroupsTest, WithoutRestartAFailedMemberFailsTheGroup) {
  Join("n1", 8, OneIsland(8));
  GroupRequest req = Gang(2, 1, Topology::kNode);
  req.restart = false;
  const GroupStatus g = Create(req);
  const Instance r0 = Member(g, 0);
  Sync(r0.node, {Report(r0, InstanceState::kRunning)});
  Sync(r0.node, {Report(r0, InstanceState::kFailed, 3)});
  const GroupStatus after = Get(g.group.id);
  EXPECT_EQ(GroupStateName(after.group.state), "failed");
  EXPECT_NE(after.group.reason.find("rank 0"), std::string::npos);
  EXPECT_EQ(state_->views().Get(Acme(), Member(g, 1).id.str())->state, InstanceState::kStopping);
}

// An elastic gang resizes in place: new ranks are placed as a gang, the newest stop first, and no
// member restarts. Its members get torchrun's elastic rendezvous, not a WORLD_SIZE to go stale.
TEST_F(GroupsTest, AnElasticGangResizesInPlaceWithinItsRange) {
  Join("n1", 8, OneIsland(8));
  GroupRequest req = Gang(2, 2, Topology::kNode);
  req.elastic = Elastic{1, 4};
  const GroupStatus g = Create(req);
  const std::string id = g.group.id;
  const Instance r0 = Member(g, 0);
  // Rank 0's agent writes the port it reserves into the endpoint.
  const auto w0 = Workload(r0);
  ASSERT_TRUE(w0.has_value());
  EXPECT_EQ(w0->env.at("PET_RDZV_ENDPOINT"), "n1:{port}");
  EXPECT_EQ(w0->port_env, std::vector<std::string>{"PET_RDZV_ENDPOINT"});
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29501;
  Sync("n1", {started, Report(Member(g, 1), InstanceState::kRunning)});
  const std::map<std::string, std::string> env = Workload(Member(g, 1))->env;
  EXPECT_EQ(env.at("PET_NNODES"), "1:4");
  EXPECT_EQ(env.at("PET_RDZV_BACKEND"), "c10d");
  EXPECT_EQ(env.at("PET_RDZV_ENDPOINT"), "n1:29501");
  EXPECT_EQ(env.at("PET_RDZV_ID"), id + "-0");
  EXPECT_FALSE(env.contains("WORLD_SIZE"));
  EXPECT_FALSE(env.contains("RANK"));
  state_->BeginRound();
  auto grown = state_->groups().Scale(Acme(), id, 4, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(grown.ok()) << grown.status().message();
  EXPECT_EQ(grown->placed, 4);
  EXPECT_EQ(grown->group.restarts, 0);
  EXPECT_EQ(FreeGpus("n1"), 0);
  EXPECT_EQ(Workload(Member(*grown, 3))->env.at("PET_RDZV_ENDPOINT"), "n1:29501")
      << "a new rank meets the running ones";
  EXPECT_EQ(state_->views().Get(Acme(), r0.id.str())->state, InstanceState::kRunning);
  const Instance newest = Member(*grown, 3);
  state_->BeginRound();
  auto shrunk = state_->groups().Scale(Acme(), id, 3, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(shrunk.ok());
  EXPECT_EQ(shrunk->members.size(), 3u);
  EXPECT_EQ(state_->views().Get(Acme(), newest.id.str())->state, InstanceState::kStopping);
  // Outside its range: refused, naming it.
  state_->BeginRound();
  auto outside = state_->groups().Scale(Acme(), id, 5, batch_);
  state_->EndRound(batch_);
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("elastic [min, max] = [1, 4]"), std::string::npos)
      << outside.status().message();
  // A member is not deleted on its own.
  state_->BeginRound();
  auto refused = state_->instances().Delete(Acme(), Member(g, 0).id.str(), batch_);
  state_->EndRound(batch_);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
}

// A gang that is not elastic never runs ranks that disagree on WORLD_SIZE: a resize stops the
// running world and starts a new one, whole, at the new size.
TEST_F(GroupsTest, AResizedGangThatIsNotElasticRestartsWholeAtTheNewSize) {
  Join("n1", 8, OneIsland(8));
  const GroupStatus g = Create(Gang(2, 2, Topology::kNode));
  const std::string id = g.group.id;
  const Instance r0 = Member(g, 0), r1 = Member(g, 1);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29501;
  Sync("n1", {started, Report(r1, InstanceState::kRunning)});
  EXPECT_EQ(Workload(r1)->env.at("WORLD_SIZE"), "2");
  state_->BeginRound();
  auto grown = state_->groups().Scale(Acme(), id, 3, batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(grown.ok()) << grown.status().message();
  EXPECT_EQ(grown->group.restarts, 1);
  EXPECT_EQ(GroupStateName(grown->group.state), "waiting");
  EXPECT_NE(grown->group.reason.find("restarting whole at size 3 (was 2)"), std::string::npos)
      << Dump(*grown);
  for (const Instance& m : {r0, r1}) {
    const Instance now = *state_->views().Get(Acme(), m.id.str());
    EXPECT_EQ(now.state, InstanceState::kStopping);
    EXPECT_NE(now.reason.find("resized from 2 to 3"), std::string::npos) << now.reason;
  }
  Sync("n1",
       {Report(r0, InstanceState::kTerminated, 143), Report(r1, InstanceState::kTerminated, 143)});
  const GroupStatus after = Get(id);
  ASSERT_EQ(GroupStateName(after.group.state), "running") << Dump(after);
  EXPECT_EQ(after.placed, 3);
  const Instance n0 = Member(after, 0);
  AgentReport again = Report(n0, InstanceState::kRunning);
  again.port = 29502;
  Sync("n1", {again});
  for (int rank = 0; rank < 3; ++rank) {
    const std::map<std::string, std::string> env = Workload(Member(after, rank))->env;
    EXPECT_EQ(env.at("WORLD_SIZE"), "3") << rank;
    EXPECT_EQ(env.at("RANK"), std::to_string(rank));
    EXPECT_EQ(env.at("TESSERA_GROUP_RESTARTS"), "1");
  }
  // A resize the quota refuses changes nothing.
  state_->BeginRound();
  auto huge = state_->groups().Scale(Acme(), id, 1024, batch_);
  state_->EndRound(batch_);
  EXPECT_FALSE(huge.ok());
  EXPECT_EQ(Get(id).group.spec.size, 3);
  EXPECT_EQ(Get(id).group.restarts, 1);
}

TEST_F(GroupsTest, AfterARestartAGroupIsWholeOrStillWaitingNeverHalfPlaced) {
  Join("n1", 8, OneIsland(8));
  const GroupStatus placed = Create(Gang(2, 4, Topology::kNode));
  const GroupStatus waiting = Create(Gang(2, 4, Topology::kNode));
  ASSERT_EQ(GroupStateName(waiting.group.state), "waiting");
  Restart();
  Sync("n1");
  EXPECT_EQ(Get(placed.group.id).placed, 2);
  EXPECT_EQ(Get(waiting.group.id).placed, 0);
  EXPECT_EQ(GroupStateName(Get(waiting.group.id).group.state), "waiting");
  EXPECT_EQ(FreeGpus("n1"), 0);
  // A new group gets a new id.
  EXPECT_NE(Create(Gang(1, 1)).group.id, waiting.group.id);
}

TEST_F(GroupsTest, AnOnDemandGangPreemptsTheFewestSpotInstancesAndOnlyIfItThenFitsWhole) {
  Join("n1", 8, OneIsland(8));
  std::vector<Instance> spot;
  for (int i = 0; i < 8; ++i) {
    state_->BeginRound();
    auto inst = state_->instances().Create(Acme(), H100s(1, Billing::kSpot), batch_);
    state_->EndRound(batch_);
    ASSERT_TRUE(inst.ok());
    Sync("n1", {Report(*inst, InstanceState::kRunning)});
    spot.push_back(*state_->views().Get(Acme(), inst->id.str()));
  }
  // A gang that could never fit the node preempts nobody.
  const GroupStatus too_big = Create(Gang(3, 4, Topology::kNode));
  EXPECT_EQ(GroupStateName(too_big.group.state), "waiting");
  // Two members of two GPUs: four victims, not eight, and only because all of it then fits.
  const GroupStatus g = Create(Gang(2, 2, Topology::kNode));
  EXPECT_EQ(GroupStateName(g.group.state), "waiting");
  EXPECT_NE(Get(g.group.id).group.reason.find("4 spot instance(s)"), std::string::npos)
      << Dump(Get(g.group.id));
  std::vector<Instance> noticed;
  for (const Instance& v : spot) {
    const Instance now = *state_->views().Get(Acme(), v.id.str());
    if (now.state == InstanceState::kPreempting) noticed.push_back(now);
  }
  ASSERT_EQ(noticed.size(), 4u);
  EXPECT_EQ(Get(g.group.id).placed, 0) << "nothing is held during the notice";
  // Their agent stops them after the notice; the gang is placed whole.
  clock_.Advance(6s);
  std::vector<AgentReport> stops;
  for (const Instance& v : noticed) stops.push_back(Report(v, InstanceState::kTerminated, 143));
  Sync("n1", stops);
  EXPECT_EQ(GroupStateName(Get(g.group.id).group.state), "running") << Dump(Get(g.group.id));
  EXPECT_EQ(Get(g.group.id).placed, 2);
  int running = 0;
  for (const Instance& v : spot) {
    running += state_->views().Get(Acme(), v.id.str())->state == InstanceState::kRunning;
  }
  EXPECT_EQ(running, 4) << "the other spot work runs on";
}

TEST_F(GroupsTest, APreemptedSpotGangRestartsWhole) {
  Join("n1", 8, OneIsland(8));
  GroupRequest spot = Gang(4, 2, Topology::kNode);
  spot.member.billing = Billing::kSpot;
  const GroupStatus g = Create(spot);
  ASSERT_EQ(g.placed, 4);
  for (int rank = 0; rank < 4; ++rank) {
    const Instance m = Member(g, rank);
    Sync(m.node, {Report(m, InstanceState::kRunning)});
  }
  // On-demand work takes one member's GPUs after the notice.
  state_->BeginRound();
  auto od = state_->instances().Create(Acme(), H100s(2), batch_);
  state_->EndRound(batch_);
  ASSERT_TRUE(od.ok());
  Instance victim;
  for (int rank = 0; rank < 4; ++rank) {
    const Instance m = *state_->views().Get(Acme(), Member(g, rank).id.str());
    if (m.state == InstanceState::kPreempting) victim = m;
  }
  ASSERT_FALSE(victim.id.str().empty());
  clock_.Advance(6s);
  Sync("n1", {Report(victim, InstanceState::kTerminated, 143)});
  const GroupStatus after = Get(g.group.id);
  EXPECT_EQ(after.group.restarts, 1) << Dump(after);
  for (int rank = 0; rank < 4; ++rank) {
    const InstanceState old = state_->views().Get(Acme(), Member(g, rank).id.str())->state;
    EXPECT_TRUE(old == InstanceState::kStopping || old == InstanceState::kPreempted)
        << StateName(old);
  }
  EXPECT_EQ(after.placed, 0) << "the new attempt waits whole";
  // The other members, which the platform stopped, ran 6 s and are billed 6 s: no minimum.
  ASSERT_TRUE(store_->Commit(batch_).ok());
  batch_ = {};
  int lines = 0;
  ASSERT_TRUE(store_
                  ->ScanLedger("", 0, INT64_MAX,
                               [&](const store::LedgerRecord& l) {
                                 if (l.billing != "spot" || l.instance == victim.id.str()) return;
                                 ++lines;
                                 EXPECT_EQ(l.seconds, 6) << l.instance;
                               })
                  .ok());
  EXPECT_EQ(lines, 3);
}

TEST_F(GroupsTest, AnOnDemandGangLeavesReservedCapacityAlone) {
  Join("n1", 8, OneIsland(8));
  ReserveH100s(6);
  const GroupStatus waits = Create(Gang(2, 2, Topology::kNode));  // 4 GPUs; 6 of 8 are reserved.
  EXPECT_EQ(GroupStateName(waits.group.state), "waiting");
  EXPECT_NE(waits.group.reason.find("held for reservations"), std::string::npos) << Dump(waits);
  EXPECT_EQ(GroupStateName(Create(Gang(1, 2, Topology::kNode)).group.state), "running")
      << "2 of 8 are not held";
}

TEST_F(GroupsTest, AReservedGangClaimsAUnitAMemberAndRestartsOnTheSameUnits) {
  Join("n1", 8, OneIsland(8));
  ReserveH100s(3);
  GroupRequest req = Gang(4, 1, Topology::kNode);
  req.member.billing = Billing::kReserved;
  // Four members and three units: refused whole, nothing made.
  state_->BeginRound();
  auto refused = state_->groups().Create(Acme(), req, batch_);
  state_->EndRound(batch_);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), "no_reservation");
  EXPECT_NE(refused.status().message().find("needs 4 free units"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(state_->instances().table().size(), 0u);
  EXPECT_TRUE(state_->groups().List(Acme()).empty());
  req.size = req.min_available = 3;
  const GroupStatus g = Create(req);
  ASSERT_EQ(GroupStateName(g.group.state), "running") << Dump(g);
  const std::string id = g.group.id;
  for (int rank = 0; rank < 3; ++rank) EXPECT_FALSE(Member(g, rank).reservation.empty());
  EXPECT_EQ(state_->accounts().ReservationUnitsUsed(Member(g, 0).reservation), 3);
  // No unit for a fourth: the scale-out is refused, and the group keeps its three.
  state_->BeginRound();
  auto grown = state_->groups().Scale(Acme(), id, 4, batch_);
  state_->EndRound(batch_);
  EXPECT_EQ(grown.status().reason(), "no_reservation");
  EXPECT_EQ(Get(id).members.size(), 3u);
  const Instance r0 = Member(g, 0), r1 = Member(g, 1), r2 = Member(g, 2);
  AgentReport started = Report(r0, InstanceState::kRunning);
  started.port = 29500;
  Sync("n1", {started, Report(r1, InstanceState::kRunning), Report(r2, InstanceState::kRunning)});
  // Rank 2 fails: the next attempt waits for the others to give their units back.
  Sync("n1", {Report(r2, InstanceState::kFailed, 1)});
  GroupStatus after = Get(id);
  EXPECT_EQ(GroupStateName(after.group.state), "waiting");
  EXPECT_EQ(after.group.restarts, 1);
  EXPECT_TRUE(after.members.empty()) << Dump(after);
  EXPECT_EQ(after.group.draining.size(), 2u) << Dump(after);
  EXPECT_NE(after.group.reason.find("reservation units"), std::string::npos);
  Sync("n1", {Report(r0, InstanceState::kTerminated, 0)});
  EXPECT_TRUE(Get(id).members.empty());
  // A restart of the server in between loses nothing.
  Restart();
  Sync("n1", {Report(r1, InstanceState::kTerminated, 0)});
  after = Get(id);
  EXPECT_EQ(GroupStateName(after.group.state), "running") << Dump(after);
  EXPECT_EQ(after.placed, 3);
  EXPECT_TRUE(after.group.draining.empty());
  EXPECT_EQ(state_->accounts().ReservationUnitsUsed(r0.reservation), 3);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(Member(after, rank).reservation, r0.reservation);
    EXPECT_NE(Member(after, rank).id, Member(g, rank).id) << "the new attempt is new instances";
  }
}

}  // namespace
}  // namespace tessera::core
