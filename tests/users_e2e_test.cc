// Users, roles and tokens through a real server (docs/users.md): a table test over every route
// and role, read-only and expired tokens, a disabled user, the last owner, per-user quotas, and
// usage, invoices and the audit log naming the user who acted.
#include <fmt/format.h>

#include <chrono>
#include <regex>
#include <set>
#include <thread>

#include "server_test_util.h"

namespace tessera {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class UsersTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    owner_ = NewTenant("acme", 8);
    tenant_ = Get("/v1/whoami", owner_).body["tenant"].value("id", "");
    ASSERT_FALSE(tenant_.empty());
  }

  // Makes user `name` with `role` and returns a token of its (read-only when asked).
  std::string User(const std::string& name, const std::string& role, bool read_only = false,
                   const json& extra = json::object()) {
    json body = {{"name", name}, {"role", role}};
    body.update(extra);
    auto u = Post("/v1/tenants/" + tenant_ + "/users", owner_, body);
    EXPECT_EQ(u.status, 201) << u.raw;
    auto t = Post("/v1/tenants/" + tenant_ + "/users/" + name + "/tokens", owner_,
                  {{"read_only", read_only}, {"name", name + "-token"}});
    EXPECT_EQ(t.status, 201) << t.raw;
    return t.body.value("token", "");
  }

  std::string owner_, tenant_;
};

// Every route a tenant's token may call, with each role and a read-only owner token: a role below
// the route's is refused 403 naming the role needed, a read-only token is refused on every write,
// and anything else gets past the role check (whatever it then answers: 404 for the made-up ids).
TEST_F(UsersTest, EveryRouteAllowsEachRoleExactlyWhatItShould) {
  const std::map<std::string, std::string> tokens = {{"viewer", User("vera", "viewer")},
                                                     {"member", User("mia", "member")},
                                                     {"owner", User("otto", "owner")}};
  const std::string read_only = User("rob", "owner", /*read_only=*/true);
  const json routes = Get("/v1/routes", owner_).body["routes"];
  ASSERT_GT(routes.size(), 40u) << routes.dump();
  const std::map<std::string, int> rank = {{"viewer", 0}, {"member", 1}, {"owner", 2}};
  int checked = 0;
  std::set<std::string> owner_routes;
  for (const json& r : routes) {
    if (!r.contains("role")) continue;  // The admin's, the agents' and public routes.
    const std::string method = r["method"], pattern = r["pattern"], need = r["role"];
    if (need == "owner") owner_routes.insert(method + " " + pattern);
    // Placeholders get made-up values; the tenant's own id where a tenant is named.
    std::string path = std::regex_replace(pattern, std::regex(R"(\{id\})"), "x-none");
    if (pattern.starts_with("/v1/tenants/{id}")) {
      path = "/v1/tenants/" + tenant_ + pattern.substr(std::string("/v1/tenants/{id}").size());
    }
    path = std::regex_replace(path, std::regex(R"(\{[a-z_*]+\})"), "x-none");
    const json body = json::object();
    for (const auto& [role, token] : tokens) {
      auto reply = Call(method, path, token, method == "GET" ? nullptr : &body);
      const bool refused = reply.status == 403 && reply.raw.find("needs role") != std::string::npos;
      const bool allowed = rank.at(role) >= rank.at(need);
      EXPECT_EQ(refused, !allowed) << method << " " << path << " as " << role << " (needs " << need
                                   << "): " << reply.status << " " << reply.raw;
      if (refused) {
        EXPECT_NE(reply.raw.find("this needs role " + need), std::string::npos) << reply.raw;
      }
      ++checked;
    }
    auto reply = Call(method, path, read_only, method == "GET" ? nullptr : &body);
    const bool write = r["write"];
    const bool refused = reply.status == 403 && reply.raw.find("read-only") != std::string::npos;
    EXPECT_EQ(refused, write) << method << " " << path << " with a read-only token: " << reply.raw;
  }
  EXPECT_GT(checked, 100);
  for (const char* expected :
       {"POST /v1/tenants/{id}/users", "PATCH /v1/tenants/{id}/users/{user}",
        "DELETE /v1/tenants/{id}/users/{user}", "POST /v1/secrets", "PUT /v1/secrets/{name}",
        "DELETE /v1/secrets/{name}", "PUT /v1/tenants/{id}/budget", "POST /v1/reservations",
        "POST /v1/tenants/{id}/tokens"}) {
    EXPECT_TRUE(owner_routes.contains(expected)) << expected << " is not an owner's";
  }
}

// The roles at work: a viewer reads and cannot create; a member creates and deletes work but
// cannot manage users or secrets; an owner can. The tenant's own token acts as its first owner.
TEST_F(UsersTest, RolesDecideWhatEachUserMayDo) {
  const std::string vera = User("vera", "viewer"), mia = User("mia", "member");
  auto refused = Post("/v1/instances", vera, H100(1, "on_demand"));
  EXPECT_EQ(refused.status, 403);
  EXPECT_NE(refused.raw.find("this needs role member; user 'vera' has role viewer"),
            std::string::npos)
      << refused.raw;
  auto made = Post("/v1/instances", mia, H100(1, "on_demand"));
  ASSERT_EQ(made.status, 201) << made.raw;
  EXPECT_EQ(Get("/v1/instances/" + made.body["id"].get<std::string>(), vera).status, 200)
      << "a viewer reads the tenant's work";
  auto no_users = Post("/v1/tenants/" + tenant_ + "/users", mia, {{"name", "eve"}});
  EXPECT_EQ(no_users.status, 403);
  EXPECT_NE(no_users.raw.find("this needs role owner"), std::string::npos) << no_users.raw;
  EXPECT_EQ(Call("DELETE", "/v1/instances/" + made.body["id"].get<std::string>(), mia).status, 200);
  const json me = Get("/v1/whoami", owner_).body;
  EXPECT_EQ(me["user"]["name"], "owner");
  EXPECT_EQ(me["user"]["role"], "owner");
  // Promotion takes effect at once, on the tokens the user holds.
  ASSERT_EQ(Patch("/v1/tenants/" + tenant_ + "/users/vera", owner_, {{"role", "member"}}).status,
            200);
  EXPECT_EQ(Post("/v1/instances", vera, H100(1, "on_demand")).status, 201);
}

TEST_F(UsersTest, ADisabledUsersTokensStopAtOnceAndExpiredOnesAre401) {
  const std::string mia = User("mia", "member");
  EXPECT_EQ(Get("/v1/instances", mia).status, 200);
  ASSERT_EQ(Patch("/v1/tenants/" + tenant_ + "/users/mia", owner_, {{"disabled", true}}).status,
            200);
  auto stopped = Get("/v1/instances", mia);
  EXPECT_EQ(stopped.status, 403);
  EXPECT_NE(stopped.raw.find("user 'mia' of tenant '" + tenant_ + "' is disabled"),
            std::string::npos)
      << stopped.raw;
  ASSERT_EQ(Patch("/v1/tenants/" + tenant_ + "/users/mia", owner_, {{"disabled", false}}).status,
            200);
  EXPECT_EQ(Get("/v1/instances", mia).status, 200);

  auto brief = Post("/v1/tenants/" + tenant_ + "/users/mia/tokens", owner_,
                    {{"expires_in_seconds", 1}, {"name", "brief"}});
  ASSERT_EQ(brief.status, 201) << brief.raw;
  const std::string token = brief.body["token"];
  EXPECT_EQ(Get("/v1/instances", token).status, 200);
  ASSERT_TRUE(WaitFor([&] { return Get("/v1/instances", token).status == 401; }, 5s));
  EXPECT_NE(Get("/v1/instances", token).raw.find("this token expired at"), std::string::npos);
  // Tokens are listed by id, label and times, never shown again.
  const json list = Get("/v1/tenants/" + tenant_ + "/users/mia/tokens", mia).body["tokens"];
  ASSERT_GE(list.size(), 1u);
  EXPECT_EQ(list.dump().find("tsr_"), std::string::npos) << list.dump();
  // A revoked token stops at once.
  const std::string id = list[0]["id"];
  EXPECT_EQ(Call("DELETE", "/v1/tenants/" + tenant_ + "/users/mia/tokens/" + id, mia).status, 200);
  EXPECT_EQ(Get("/v1/instances", mia).status, 401);
}

TEST_F(UsersTest, TheLastEnabledOwnerStaysAndTheFirstOwnerIsNotDeleted) {
  auto demote = Patch("/v1/tenants/" + tenant_ + "/users/owner", owner_, {{"role", "member"}});
  EXPECT_EQ(demote.status, 409);
  EXPECT_NE(demote.raw.find("last enabled owner"), std::string::npos) << demote.raw;
  auto del = Call("DELETE", "/v1/tenants/" + tenant_ + "/users/owner", owner_);
  EXPECT_EQ(del.status, 409);
  EXPECT_NE(del.raw.find("first owner"), std::string::npos) << del.raw;
  User("otto", "owner");
  EXPECT_EQ(Patch("/v1/tenants/" + tenant_ + "/users/owner", owner_, {{"role", "member"}}).status,
            200);
  // The tenant's own token now acts as a member.
  EXPECT_EQ(Post("/v1/tenants/" + tenant_ + "/users", owner_, {{"name", "eve"}}).status, 403);
}

// A user's own quota binds inside the tenant's.
TEST_F(UsersTest, AUsersQuotaBindsInsideTheTenants) {
  const std::string mia = User("mia", "member", false, {{"quota", {{"gpus", 1}}}});
  ASSERT_EQ(Post("/v1/instances", mia, H100(1, "on_demand")).status, 201);
  auto over = Post("/v1/instances", mia, H100(1, "on_demand"));
  EXPECT_EQ(over.status, 403) << over.raw;
  EXPECT_NE(over.raw.find("user 'mia' has a quota of 1 GPUs, uses 1"), std::string::npos)
      << over.raw;
  EXPECT_EQ(Post("/v1/instances", owner_, H100(1, "on_demand")).status, 201)
      << "the tenant's other users are not held to mia's quota";
  const json u = Get("/v1/tenants/" + tenant_ + "/users/mia", owner_).body;
  EXPECT_EQ(u["usage"]["gpus"], 1.0) << u.dump();
}

// Every instance, ledger line and audit row names the user who acted: usage groups by user, the
// invoice's CSV has a user column, and the audit log names the user.
TEST_F(UsersTest, UsageInvoicesAndTheAuditLogNameTheUser) {
  const std::string mia = User("mia", "member"), max = User("max", "member");
  std::map<std::string, std::string> made;  // Instance -> user name.
  for (const auto& [name, token] : {std::pair{"mia", mia}, {"max", max}}) {
    auto r = Post("/v1/instances", token, H100(1, "on_demand"));
    ASSERT_EQ(r.status, 201) << r.raw;
    made[r.body["id"]] = name;
    ASSERT_EQ(AwaitState(token, r.body["id"], "running"), "running");
    ASSERT_EQ(Call("DELETE", "/v1/instances/" + r.body["id"].get<std::string>(), token).status,
              200);
    ASSERT_EQ(AwaitState(token, r.body["id"], "terminated"), "terminated");
  }
  std::map<std::string, std::string> ids;  // User name -> id.
  const json all = Get("/v1/tenants/" + tenant_ + "/users", owner_).body["users"];
  for (const json& u : all) {
    ids[u["name"].get<std::string>()] = u["id"].get<std::string>();
  }
  for (const auto& [inst, name] : made) {
    EXPECT_EQ(Get("/v1/instances/" + inst, owner_).body["created_by"], ids[name]);
  }
  const json usage = Get("/v1/usage?group_by=user", owner_).body;
  std::set<std::string> users;
  for (const json& i : usage["items"]) users.insert(i["user"]);
  EXPECT_EQ(users, (std::set<std::string>{ids["mia"], ids["max"]})) << usage.dump();
  httplib::Client client(server_->url());
  auto csv = client.Get("/v1/invoices/" + usage.value("from", "").substr(0, 7),
                        {{"Authorization", "Bearer " + owner_}, {"Accept", "text/csv"}});
  ASSERT_TRUE(csv);
  EXPECT_NE(csv->body.find("instance,instance_type,billing,reservation,user,"), std::string::npos)
      << csv->body;
  EXPECT_NE(csv->body.find(ids["mia"]), std::string::npos) << csv->body;
  bool named = false;
  const json audit = Get("/v1/audit?limit=1000", kAdminToken).body["entries"];
  for (const json& e : audit) {
    if (e["action"] == "POST /v1/instances" && e["user"] == ids["mia"]) {
      named = e.value("user_name", "") == "mia";
    }
  }
  EXPECT_TRUE(named) << "the audit row names mia";
}

// A tenant from a store written before users existed gets its first owner at the next start,
// and its token keeps working as that owner.
TEST_F(UsersTest, TheTenantTokenKeepsWorkingAcrossARestart) {
  User("mia", "member");
  ASSERT_EQ(server_->Stop(SIGTERM), 0) << server_->output();
  StartServer();
  const json me = Get("/v1/whoami", owner_).body;
  EXPECT_EQ(me["user"]["role"], "owner") << me.dump();
  const json users = Get("/v1/tenants/" + tenant_ + "/users", owner_).body["users"];
  EXPECT_EQ(users.size(), 2u) << users.dump();
}

}  // namespace
}  // namespace tessera
