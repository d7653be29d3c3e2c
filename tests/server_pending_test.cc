// The cap on a tenant's pending work through the real server (issue 26, docs/api.md): 429
// too_many_pending naming the cap on an instance and on a group that would pass it, another tenant
// untouched, room again once work was deleted or placed, the tenant's view of its cap and count,
// and both across a restart.
#include <fmt/format.h>

#include <csignal>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;

class PendingCapTest : public ServerTest {
 protected:
  void SetUp() override {
    fleet_path_ = dir_.Write("fleet.json", kSmallFleet);
    StartServer({"--sim-agents", "--max-pending-per-tenant", "3"});
  }

  // A gang of `size` one-H100 members.
  static json Gang(int size) { return {{"size", size}, {"template", H100(1, "on_demand")}}; }

  std::string Refusal(const std::string& tenant, int pending, int cap, int ask) {
    return fmt::format(
        "too many pending instances: tenant '{}' has {} waiting to be placed (members of waiting "
        "groups included) and a cap of {}; this asks for {} more. Delete pending instances or "
        "groups, or wait for some to be placed; an operator may raise quota.max_pending",
        tenant, pending, cap, ask);
  }

  json Me(const std::string& token) { return Get("/v1/whoami", token).body["tenant"]; }
};

TEST_F(PendingCapTest, AtItsCapATenantGets429NamingItAndAnotherTenantDoesNot) {
  const std::string acme = NewTenant("acme", 100), beta = NewTenant("beta", 100);
  // Both H100s run acme's first instance: what follows waits.
  auto big = Post("/v1/instances", acme, H100(2, "on_demand"));
  ASSERT_EQ(big.status, 201) << big.raw;
  std::vector<std::string> waiting;
  for (int i = 0; i < 3; ++i) {
    auto r = Post("/v1/instances", acme, H100(1, "on_demand"));
    ASSERT_EQ(r.status, 201) << r.raw;
    EXPECT_EQ(r.body["state"], "pending");
    waiting.push_back(r.body["id"]);
  }
  EXPECT_EQ(Me(acme)["quota"]["max_pending"], 3);
  EXPECT_EQ(Me(acme)["usage"]["pending"], 3);

  auto refused = Post("/v1/instances", acme, H100(1, "on_demand"));
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(refused.body["error"]["code"], "too_many_pending");
  EXPECT_EQ(refused.body["error"]["message"], Refusal("acme", 3, 3, 1));
  auto group = Post("/v1/groups", acme, Gang(2));
  EXPECT_EQ(group.status, 429);
  EXPECT_EQ(group.body["error"]["message"], Refusal("acme", 3, 3, 2));

  // Another tenant is untouched.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Post("/v1/instances", beta, H100(1, "spot")).status, 201);
  EXPECT_EQ(Me(beta)["usage"]["pending"], 3);

  // Deleted while pending: room for a gang's members, counted whole.
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(Call("DELETE", "/v1/instances/" + waiting[static_cast<size_t>(i)], acme).status, 200);
  }
  EXPECT_EQ(Post("/v1/groups", acme, Gang(3)).body["error"]["message"], Refusal("acme", 1, 3, 3));
  auto gang = Post("/v1/groups", acme, Gang(2));
  ASSERT_EQ(gang.status, 201) << gang.raw;
  EXPECT_EQ(Me(acme)["usage"]["pending"], 3);
  EXPECT_EQ(Post("/v1/instances", acme, H100(1, "on_demand")).status, 429);

  // Placed: the big one ends and its GPUs take the gang, which goes before single instances.
  ASSERT_EQ(Call("DELETE", "/v1/instances/" + big.body["id"].get<std::string>(), acme).status, 200);
  ASSERT_TRUE(WaitFor([&] { return Me(acme)["usage"]["pending"] == 1; }, std::chrono::seconds(10)))
      << Me(acme).dump();
  EXPECT_EQ(Post("/v1/instances", acme, H100(1, "on_demand")).status, 201);
  EXPECT_EQ(Post("/v1/instances", acme, H100(1, "on_demand")).status, 201);
  EXPECT_EQ(Post("/v1/instances", acme, H100(1, "on_demand")).status, 429);
}

TEST_F(PendingCapTest, TheCountAndATenantsOwnCapSurviveARestart) {
  const std::string acme = NewTenant("acme", 100);
  auto beta = Post("/v1/tenants", kAdminToken,
                   {{"name", "beta"}, {"quota", {{"gpus", 100}, {"max_pending", 1}}}});
  ASSERT_EQ(beta.status, 201) << beta.raw;
  EXPECT_EQ(beta.body["quota"]["max_pending"], 1);
  ASSERT_EQ(Post("/v1/instances", acme, H100(2, "on_demand")).status, 201);
  ASSERT_EQ(Post("/v1/instances", acme, H100(1, "on_demand")).status, 201);
  ASSERT_EQ(Post("/v1/groups", acme, Gang(2)).status, 201);
  EXPECT_EQ(Post("/v1/instances", acme, H100(1, "on_demand")).status, 429);
  // An operator raises acme's cap to 4, then the server restarts.
  auto patched = Patch("/v1/tenants/" + Me(acme)["id"].get<std::string>(), kAdminToken,
                       {{"quota", {{"max_pending", 4}}}});
  ASSERT_EQ(patched.status, 200) << patched.raw;
  EXPECT_EQ(patched.body["quota"]["gpus"], 100.0) << "max_pending alone leaves the GPUs";
  ASSERT_EQ(server_->Stop(SIGTERM), 0);
  StartServer({"--sim-agents", "--max-pending-per-tenant", "3"});

  EXPECT_EQ(Me(acme)["quota"]["max_pending"], 4);
  EXPECT_EQ(Me(acme)["usage"]["pending"], 3);
  EXPECT_EQ(Post("/v1/instances", acme, H100(1, "on_demand")).status, 201);
  auto refused = Post("/v1/instances", acme, H100(1, "on_demand"));
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(refused.body["error"]["message"], Refusal("acme", 4, 4, 1));
  const std::string beta_token = beta.body["token"];
  EXPECT_EQ(Me(beta_token)["quota"]["max_pending"], 1);
  EXPECT_EQ(Post("/v1/instances", beta_token, H100(1, "spot")).status, 201);
  EXPECT_EQ(Post("/v1/instances", beta_token, H100(1, "spot")).status, 429);
}

TEST_F(PendingCapTest, AQuotasCapIsCheckedAsAnInteger) {
  const auto bad = Post("/v1/tenants", kAdminToken,
                        {{"name", "acme"}, {"quota", {{"gpus", 1}, {"max_pending", -1}}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body["error"]["message"].get<std::string>().find("quota.max_pending"),
            std::string::npos)
      << bad.raw;
  EXPECT_EQ(Post("/v1/tenants", kAdminToken,
                 {{"name", "acme"}, {"quota", {{"gpus", 1}, {"max_pending", 2.5}}}})
                .status,
            400);
}

}  // namespace
}  // namespace tessera
