#include "api/exec.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>

namespace tessera::api {
namespace {

using namespace std::chrono_literals;

// A responder whose answer lands in a future.
struct Answer {
  std::shared_ptr<std::promise<HttpResponse>> promise =
      std::make_shared<std::promise<HttpResponse>>();
  std::future<HttpResponse> future = promise->get_future();
  Responder responder =
      Responder::Local([p = promise](HttpResponse r) { p->set_value(std::move(r)); });
};

TEST(ExecBrokerTest, OnlyTheSessionsNodeTakesItsClientAndOnlyOnce) {
  ExecBroker broker;
  Answer client;
  broker.Wait("exec-1", "gpu-1", "tenant-1", client.responder, 10s);
  EXPECT_FALSE(broker.Take("exec-1", "gpu-2").has_value()) << "another node's agent";
  EXPECT_FALSE(broker.Take("exec-2", "gpu-1").has_value()) << "an unknown session";
  auto taken = broker.Take("exec-1", "gpu-1");
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(taken->second, "tenant-1");
  EXPECT_FALSE(broker.Take("exec-1", "gpu-1").has_value()) << "taken already";
  taken->first.Send(ErrorResponse(502, "bad_gateway", "in process"));
  EXPECT_EQ(client.future.get().status, 502);
}

TEST(ExecBrokerTest, AClientNoAgentConnectsForIsAnswered504AndAStoppingServer503) {
  ExecBroker broker;
  Answer late, waiting;
  broker.Wait("exec-1", "gpu-1", "tenant-1", late.responder, 50ms);
  broker.Wait("exec-2", "gpu-1", "tenant-1", waiting.responder, 60s);
  ASSERT_EQ(late.future.wait_for(5s), std::future_status::ready);
  const HttpResponse r = late.future.get();
  EXPECT_EQ(r.status, 504);
  EXPECT_NE(r.body.find("gpu-1"), std::string::npos) << r.body;
  EXPECT_FALSE(broker.Take("exec-1", "gpu-1").has_value());
  broker.Stop();
  ASSERT_EQ(waiting.future.wait_for(1s), std::future_status::ready);
  EXPECT_EQ(waiting.future.get().status, 503);
}

TEST(ExecBrokerTest, OpenSessionsAreCountedPerTenant) {
  ExecBroker broker;
  broker.Joined("tenant-1");
  broker.Joined("tenant-1");
  broker.Joined("tenant-2");
  EXPECT_EQ(broker.OpenOf("tenant-1"), 2);
  broker.Ended("tenant-1");
  EXPECT_EQ(broker.OpenOf("tenant-1"), 1);
  EXPECT_EQ(broker.OpenOf("tenant-2"), 1);
  EXPECT_EQ(broker.OpenOf("tenant-3"), 0);
}

}  // namespace
}  // namespace tessera::api
