#include "core/agents.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

TEST(AgentSupervisorTest, SimulatedAgentsStartWhatIsScheduledAndStopWhatIsStopping) {
  AgentSupervisor agents(/*simulated=*/true);
  EXPECT_TRUE(agents.serves_nodes());
  Instance a, b, c;
  a.id = InstanceId::FromNumber(1);
  a.state = InstanceState::kScheduled;
  b.id = InstanceId::FromNumber(2);
  b.state = InstanceState::kStopping;
  c.id = InstanceId::FromNumber(3);
  c.state = InstanceState::kPending;  // Nothing to tell an agent.
  for (const Instance* i : {&a, &b, &c}) agents.Notify(*i);
  const auto reports = agents.Collect();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].instance, "inst-000001");
  EXPECT_EQ(reports[0].state, InstanceState::kRunning);
  EXPECT_EQ(reports[1].state, InstanceState::kTerminated);
  EXPECT_EQ(reports[1].reason, "stopped by its agent");
  EXPECT_TRUE(agents.Collect().empty()) << "each report is collected once";
  AgentSupervisor none(/*simulated=*/false);
  EXPECT_FALSE(none.serves_nodes());
  none.Notify(a);
  EXPECT_TRUE(none.Collect().empty());
}

}  // namespace
}  // namespace tessera::core
