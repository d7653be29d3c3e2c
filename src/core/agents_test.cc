#include "core/agents.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

Instance On(int n, InstanceState state, const std::string& node) {
  Instance i;
  i.id = InstanceId::FromNumber(n);
  i.state = state;
  i.node = node;
  return i;
}

TEST(AgentSupervisorTest, SimulatedAgentsStartWhatIsScheduledAndStopWhatIsStopping) {
  AgentSupervisor agents(/*simulated=*/true);
  EXPECT_TRUE(agents.Serves("n1"));
  const Instance a = On(1, InstanceState::kScheduled, "n1");
  const Instance b = On(2, InstanceState::kStopping, "n1");
  const Instance c = On(3, InstanceState::kPending, "");  // Nothing to tell an agent.
  for (const Instance* i : {&a, &b, &c}) agents.Notify(*i, i->node);
  const auto reports = agents.Collect();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].instance, "inst-000001");
  EXPECT_EQ(reports[0].state, InstanceState::kRunning);
  EXPECT_EQ(reports[1].state, InstanceState::kTerminated);
  EXPECT_EQ(reports[1].reason, "stopped by its agent");
  EXPECT_TRUE(agents.Collect().empty()) << "each report is collected once";
  AgentSupervisor none(/*simulated=*/false);
  EXPECT_FALSE(none.Serves("n1"));
  none.Notify(a, "n1");
  EXPECT_TRUE(none.Collect().empty());
}

TEST(AgentSupervisorTest, AJoinedNodeIsServedOnceRegisteredAndWakesItsLongPollOnChange) {
  AgentSupervisor agents(/*simulated=*/true);
  AgentNode node;
  node.name = "gpu-07";
  agents.nodes().emplace("gpu-07", node);
  EXPECT_FALSE(agents.Serves("gpu-07")) << "not registered: no agent serves it yet";
  agents.Find("gpu-07")->inventory = nlohmann::json::object();
  EXPECT_TRUE(agents.Serves("gpu-07"));

  const Time t0 = Time(std::chrono::seconds(1000));
  int answered = 0;
  const uint64_t gen = agents.Find("gpu-07")->generation;
  agents.Park("gpu-07", {gen, t0 + std::chrono::seconds(2), [&] { ++answered; }});
  agents.AnswerWaiters(t0);
  EXPECT_EQ(answered, 0) << "nothing changed and the wait has not ended";
  const Instance a = On(1, InstanceState::kScheduled, "gpu-07");
  agents.Notify(a, "gpu-07");
  EXPECT_TRUE(agents.Collect().empty()) << "a joined node's agent reports for itself";
  EXPECT_EQ(agents.Find("gpu-07")->assigned.count("inst-000001"), 1u);
  agents.AnswerWaiters(t0 + std::chrono::milliseconds(1));
  EXPECT_EQ(answered, 1) << "new work reaches the waiting agent at once";

  agents.Park("gpu-07", {agents.Find("gpu-07")->generation, t0 + std::chrono::seconds(2),
                         [&] { ++answered; }});
  agents.AnswerWaiters(t0 + std::chrono::seconds(1));
  EXPECT_EQ(answered, 1);
  agents.AnswerWaiters(t0 + std::chrono::seconds(3));
  EXPECT_EQ(answered, 2) << "the wait ended: answered with the same state";
  EXPECT_EQ(agents.waiting(), 0u);

  const Instance gone = On(1, InstanceState::kScheduled, "");
  agents.Notify(gone, "gpu-07");
  EXPECT_EQ(agents.Find("gpu-07")->assigned.count("inst-000001"), 0u)
      << "work that left the node leaves its desired state";
}

TEST(AgentSupervisorTest, FaultsAndExecSessionsWaitForTheAgentBounded) {
  AgentSupervisor agents(/*simulated=*/false);
  AgentNode node;
  node.name = "gpu-07";
  agents.nodes().emplace("gpu-07", node);
  EXPECT_EQ(agents.InjectFault("gpu-07", "xid:0:79").status().code(), StatusCode::kNotFound)
      << "no agent registered: nothing would inject it";
  EXPECT_EQ(agents.InjectFault("gpu-99", "xid:0:79").status().message(),
            "node 'gpu-99' has no agent");
  AgentNode& n = *agents.Find("gpu-07");
  n.inventory = nlohmann::json::object();
  const uint64_t gen = n.generation;
  for (size_t i = 0; i < AgentSupervisor::kMaxFaults + 2; ++i) {
    ASSERT_EQ(*agents.InjectFault("gpu-07", "xid:0:" + std::to_string(i)), int64_t(i) + 1);
  }
  EXPECT_GT(n.generation, gen) << "the agent hears of it";
  ASSERT_EQ(n.faults.size(), AgentSupervisor::kMaxFaults) << "the newest are kept";
  EXPECT_EQ(n.faults.front().id, 3);

  const Time t0 = Time(std::chrono::seconds(1000));
  ExecSession e;
  e.expires = t0 + std::chrono::seconds(10);
  for (size_t i = 0; i < AgentSupervisor::kMaxWaitingExec; ++i) {
    e.id = "exec-" + std::to_string(i);
    ASSERT_TRUE(agents.QueueExec(n, e, t0).ok());
  }
  e.id = "exec-over";
  const Status full = agents.QueueExec(n, e, t0);
  EXPECT_EQ(full.code(), StatusCode::kUnavailable);
  EXPECT_EQ(full.message(),
            "node 'gpu-07' has 32 exec sessions waiting for its agent already; try again in a few "
            "seconds");
  agents.CloseExec("gpu-07", "exec-0");
  EXPECT_TRUE(agents.QueueExec(n, e, t0).ok()) << "a session its agent took makes room";
  e.id = "exec-later";
  EXPECT_TRUE(agents.QueueExec(n, e, t0 + std::chrono::seconds(11)).ok());
  ASSERT_EQ(n.exec.size(), 1u) << "sessions past their deadline were dropped";
  EXPECT_EQ(n.exec[0].id, "exec-later");
}

TEST(AgentSupervisorTest, ANodeRecordRoundTripsAndAMalformedOneNamesItsKey) {
  AgentNode n;
  n.name = "gpu-07";
  n.labels = {{"rack", "r1"}};
  n.sharing = catalog::SharingMode::kShared;
  n.token_hash = std::string(64, 'a');
  n.created_at = Time(std::chrono::seconds(1'767'225'600));
  n.drained = true;
  n.inventory = {{"cpu_milli", 1000}};
  const auto [key, value] = AgentSupervisor::Record(n);
  EXPECT_EQ(key, "agent_node/gpu-07");
  auto back = AgentSupervisor::FromRecord(key, value);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->labels, n.labels);
  EXPECT_EQ(back->sharing, catalog::SharingMode::kShared);
  EXPECT_TRUE(back->drained);
  EXPECT_TRUE(back->registered());
  auto bad = AgentSupervisor::FromRecord("agent_node/x", "{\"name\": 3}");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("agent_node/x"), std::string::npos);
}

}  // namespace
}  // namespace tessera::core
