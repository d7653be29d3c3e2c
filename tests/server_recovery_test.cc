// Durability: a real `kill -9` in the middle of a stream of requests loses nothing that was
// acknowledged, books nothing twice, and keeps pending work queued.
#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

TEST_F(ServerTest, Kill9MidStreamLosesNothingAcknowledged) {
  const std::string token = NewTenant("acme", 1000);
  std::mutex mu;
  std::map<std::string, json> acked;  // id -> the 201's body.
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client(server_->url());
      const httplib::Headers headers = {{"Authorization", "Bearer " + token}};
      for (int i = 0; !stop && i < 500; ++i) {
        // Alternate shapes so some run and many wait in the queue.
        const json body = (i + c) % 2
                              ? json{{"billing", "spot"}, {"instance_type", "shared.l40s.half"}}
                              : H100(1, "on_demand");
        auto r = client.Post("/v1/instances", headers, body.dump(), "application/json");
        if (!r) return;  // The server is gone.
        if (r->status != 201) continue;
        const json j = json::parse(r->body);
        std::lock_guard<std::mutex> lock(mu);
        acked[j["id"]] = j;
      }
    });
  }
  // Let a stream build up, then kill the server without warning.
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (acked.size() >= 60) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(server_->Stop(SIGKILL), 128 + SIGKILL);
  stop = true;
  for (auto& t : clients) t.join();
  ASSERT_GE(acked.size(), 20u);

  StartServer();
  for (const auto& [id, ack] : acked) Settle(token, id);  // Agents start what was scheduled.
  // Every instance in one page (the default page is 100, and a fast server acknowledges more
  // than that before the kill lands).
  auto list = Get("/v1/instances?limit=1000", token);
  ASSERT_EQ(list.status, 200);
  ASSERT_TRUE(list.body["next_page_token"].is_null()) << "more than one page";
  std::map<std::string, json> after;
  for (const auto& i : list.body["instances"]) after[i["id"]] = i;
  for (const auto& [id, ack] : acked) {
    ASSERT_TRUE(after.count(id)) << id << " was acknowledged with 201 but is gone";
    const json& now = after[id];
    // Nothing was deleted and spot L40S shares cannot make room for H100s, so an acknowledged
    // instance is as it was answered, except that its agent has started a scheduled one in the
    // same durable round. It holds the very GPUs it was answered with.
    const std::string want = ack["state"] == "scheduled" ? "running" : ack["state"];
    EXPECT_EQ(now["state"], want) << id;
    EXPECT_EQ(now["node"], ack["node"]) << id;
    EXPECT_EQ(now["gpus"], ack["gpus"]) << id;
    EXPECT_EQ(now["shape"], ack["shape"]) << id;
    EXPECT_EQ(now["price_per_hour_usd"], ack["price_per_hour_usd"]) << id;
  }
  // Nothing booked twice: every (node, GPU) of an exclusive H100 is held by at most one
  // instance, and every L40S share adds up to at most one GPU.
  std::map<std::pair<std::string, int>, int> whole;
  std::map<std::pair<std::string, int>, int> milli;
  int pending = 0;
  for (const auto& [id, i] : after) {
    if (i["state"] == "pending") ++pending;
    for (const auto& g : i["gpus"]) {
      const auto key = std::pair{i["node"].get<std::string>(), g["index"].get<int>()};
      if (g.contains("milli_gpu")) {
        milli[key] += g["milli_gpu"].get<int>();
      } else {
        ++whole[key];
      }
    }
  }
  for (const auto& [k, n] : whole) EXPECT_EQ(n, 1) << k.first << " GPU " << k.second;
  for (const auto& [k, m] : milli) EXPECT_LE(m, 1000) << k.first << " GPU " << k.second;
  ASSERT_GT(pending, 0) << "the stream was meant to overflow the fleet";
  // The fleet's own view agrees with the instances.
  auto nodes = Get("/v1/nodes", kAdminToken);
  int held = 0;
  for (const auto& n : nodes.body["nodes"]) held += n["workloads"].get<int>();
  int placed = 0;
  for (const auto& [id, i] : after) placed += i["gpus"].empty() ? 0 : 1;
  EXPECT_EQ(held, placed);
  // Pending work is still queued: free a GPU and the oldest waiting H100 request runs.
  std::string running_h100;
  for (const auto& [id, i] : after) {
    if (i["node"] == "node-h100-01" && i["state"] == "running") running_h100 = id;
  }
  ASSERT_FALSE(running_h100.empty());
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + running_h100, token).status, 200);
  // The capacity frees once its agent reports the stop.
  size_t pending_after = 0;
  for (int i = 0; i < 500; ++i) {
    pending_after = Get("/v1/instances?state=pending&limit=1000", token).body["instances"].size();
    if (pending_after == static_cast<size_t>(pending - 1)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(pending_after, static_cast<size_t>(pending - 1));
}

TEST_F(ServerTest, RestartKeepsTenantsTokensAndNodeStates) {
  const std::string token = NewTenant("acme", 4);
  ASSERT_EQ(Post("/v1/nodes/node-l40s-01/drain", kAdminToken, json::object()).status, 200);
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  StartServer();
  EXPECT_EQ(Get("/v1/instances", token).status, 200) << "the tenant's token still works";
  auto nodes = Get("/v1/nodes", kAdminToken).body["nodes"];
  for (const auto& n : nodes) {
    EXPECT_EQ(n["state"], n["id"] == "node-l40s-01" ? "draining" : "ready") << n["id"];
  }
}

}  // namespace
}  // namespace tessera
