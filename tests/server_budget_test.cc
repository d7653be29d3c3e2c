// No input makes a core round cost more than its budget: a tenant flooding the server with
// requests the fleet can never host, and with requests that queue and make preemption worth a
// search, does not slow another tenant's creates.
#include <atomic>
#include <iostream>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

TEST_F(ServerTest, AFloodOfUnplaceableAndPreemptionHeavyWorkDoesNotSlowAnotherTenant) {
  const std::string flood = NewTenant("flood", 100000);
  const std::string calm = NewTenant("calm", 100);
  // Spot work on both H100s, so each on-demand H100 request first looks for victims.
  for (int i = 0; i < 2; ++i) ASSERT_EQ(Post("/v1/instances", flood, H100(1, "spot")).status, 201);
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, queued{0};
  std::thread flooder([&] {
    httplib::Client client(server_->url());
    const httplib::Headers auth = {{"Authorization", "Bearer " + flood}};
    for (int i = 0; !stop && i < 3000; ++i) {
      json body = H100(i % 3 == 0 ? 3 : 1, "on_demand");  // 3 GPUs: no node has them.
      body["vcpus"] = 1 + i % 60;                         // Many distinct shapes to queue.
      body["memory_mib"] = 1024 + i;
      auto r = client.Post("/v1/instances", auth, body.dump(), "application/json");
      if (!r) continue;
      if (r->status == 400) ++refused;
      if (r->status == 201) ++queued;
    }
  });
  // Meanwhile the calm tenant creates and deletes a share, again and again.
  httplib::Client client(server_->url());
  const httplib::Headers auth = {{"Authorization", "Bearer " + calm}};
  const std::string share = R"({"billing":"spot","instance_type":"shared.l40s.half"})";
  std::vector<double> ms;
  while (queued < 500) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (int i = 0; i < 40; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto r = client.Post("/v1/instances", auth, share, "application/json");
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
    auto del =
        client.Delete("/v1/instances/" + json::parse(r->body)["id"].get<std::string>(), auth);
    ASSERT_TRUE(del && del->status == 200);
  }
  stop = true;
  flooder.join();
  std::sort(ms.begin(), ms.end());
  std::cout << "calm tenant's creates during the flood: median " << ms[ms.size() / 2] << " ms, max "
            << ms.back() << " ms (" << queued << " queued, " << refused << " refused)\n";
  EXPECT_GT(refused, 100) << "shapes no node can host are refused, not queued";
  EXPECT_LT(ms[ms.size() / 2], 20.0);
  EXPECT_LT(ms.back(), 100.0);
  // The flood's work is queued in groups and says why it waits.
  auto list = Get("/v1/instances?state=pending&limit=1", flood);
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body["instances"].size(), 1u);
  EXPECT_TRUE(list.body.contains("next_page_token"));
  EXPECT_NE(list.body["instances"][0]["reason"].get<std::string>().find("waiting for"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera
